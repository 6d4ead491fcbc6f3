import BeaconCore
import BeaconStorage
import Foundation
import PostgresNIO

// One message's routing inputs in one prepared statement: seven reads were seven round trips and seven transactions per
// message for an app that pushes. Each area comes back as a JSON array (or object), decoded here into the records the
// one-by-one reads return.

extension PostgresStore {
    public func routingInputs(sender: String, recipients: [String], scopes: [String], app: Int64) async throws -> RoutingInputs {
        guard let row = try await rows(RoutingInputsQuery(app: app, recipients: recipients, scopes: scopes, sender: sender)).first else {
            throw BeaconError(.internalError, "the routing inputs query returned no row")
        }
        return try Self.inputs(from: row)
    }

    /// The routing inputs of a row of `RoutingInputsQuery`'s areas.
    static func inputs(from row: RoutingInputsQuery.Row) throws -> RoutingInputs {
        let decoder = JSONDecoder()
        func decoded<Value: Decodable>(_ json: String?, as type: [Value].Type) throws -> [Value] {
            guard let json else { return [] }  // json_agg of no rows
            return try decoder.decode(type, from: Data(json.utf8))
        }
        let policy = try row.policy.map { try decoder.decode(PolicyRow.self, from: Data($0.utf8)).record } ?? PushPolicyRecord()
        var profiles: [String: PushProfile] = [:]
        for profile in try decoded(row.profiles, as: [ProfileRow].self) {
            profiles[profile.username] = PushProfile(
                timeZone: profile.timeZone, displayStyle: profile.displayStyle, language: profile.language, template: profile.template,
                nickname: profile.nickname)
        }
        return RoutingInputs(
            notifiers: try decoded(row.notifiers, as: [Notifier].self), policy: policy,
            templates: try decoded(row.templates, as: [PushTemplateRecord].self),
            settings: try decoded(row.settings, as: [PushSettingsRecord].self), profiles: profiles, senderNickname: row.senderNickname,
            bindings: Dictionary(grouping: try decoded(row.bindings, as: [PushBinding].self), by: \.username))
    }

    /// The app's policy row; its display strings are stored as JSON text.
    private struct PolicyRow: Decodable {
        var multiDevice: String
        var timezone: String
        var displayStrings: String
        var badgeCountsMuted: Bool
        var recallLimitSeconds: Int64

        var record: PushPolicyRecord {
            PushPolicyRecord(
                multiDevice: multiDevice, timezone: timezone,
                displayStrings: (try? JSONDecoder().decode([String: String].self, from: Data(displayStrings.utf8))) ?? [:],
                badgeCountsMuted: badgeCountsMuted, recallLimitSeconds: recallLimitSeconds)
        }
    }

    private struct ProfileRow: Decodable {
        var username: String
        var timeZone: String?
        var displayStyle: Int
        var language: String?
        var template: String?
        var nickname: String?
    }

    /// Each area as JSON text, with the keys of the records it decodes to; an area without rows is NULL.
    struct RoutingInputsQuery: PostgresPreparedStatement {
        static let sql = "SELECT " + columns
        /// The areas, of `$1` the app, `$2` the recipients, `$3` the settings scopes and `$4` the sender.
        static let columns = """
                (SELECT json_agg(json_build_object('name', name, 'bundleID', bundle_id, 'voip', voip) ORDER BY name COLLATE "C")
                    FROM push_configs WHERE app_id = $1)::text,
                (SELECT json_build_object('multiDevice', multi_device, 'timezone', default_timezone, 'displayStrings', display_strings,
                    'badgeCountsMuted', badge_counts_muted, 'recallLimitSeconds', recall_limit_seconds) FROM apps WHERE id = $1)::text,
                (SELECT json_agg(json_build_object('name', name, 'titlePattern', title_pattern, 'contentPattern', content_pattern,
                    'createdAt', created_at, 'updatedAt', updated_at) ORDER BY name COLLATE "C")
                    FROM push_templates WHERE app_id = $1)::text,
                (SELECT json_agg(json_build_object('username', username, 'scope', scope, 'remindType', remind_type,
                    'quietHours', quiet_hours, 'silentUntil', silent_until))
                    FROM push_settings WHERE app_id = $1 AND username = ANY($2::text[]) AND scope = ANY($3::text[]))::text,
                (SELECT json_agg(json_build_object('username', username, 'timeZone', timezone, 'displayStyle', display_style,
                    'language', push_language, 'template', push_template, 'nickname', nickname))
                    FROM users WHERE app_id = $1 AND username = ANY($2::text[]))::text,
                (SELECT nickname FROM users WHERE app_id = $1 AND username = $4),
                (SELECT json_agg(json_build_object('username', username, 'deviceID', device_id, 'notifier', notifier,
                    'deviceToken', device_token, 'voipToken', voip_token, 'boundAt', bound_at)
                    ORDER BY username COLLATE "C", device_id COLLATE "C", notifier COLLATE "C")
                    FROM push_bindings WHERE app_id = $1 AND username = ANY($2::text[]))::text
            """
        struct Row {
            var notifiers: String?
            var policy: String?
            var templates: String?
            var settings: String?
            var profiles: String?
            var senderNickname: String?
            var bindings: String?
        }
        var app: Int64
        var recipients: [String]
        var scopes: [String]
        var sender: String

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 4)
            bindings.append(app)
            bindings.append(recipients)
            bindings.append(scopes)
            bindings.append(sender)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row {
            let (notifiers, policy, templates, settings, profiles, senderNickname, bindings) =
                try row.decode((String?, String?, String?, String?, String?, String?, String?).self)
            return Row(
                notifiers: notifiers, policy: policy, templates: templates, settings: settings, profiles: profiles,
                senderNickname: senderNickname, bindings: bindings)
        }
    }
}
