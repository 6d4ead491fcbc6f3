import BeaconCore
import BeaconStorage
import Foundation
import PostgresNIO

/// Push configurations, device bindings, receivers' push settings, templates and the app's push policy.
extension PostgresStore {
    public func savePushConfig(_ config: PushConfigRecord) async throws {
        try await execute(
            """
            INSERT INTO push_configs (app_id, name, kind, environment, bundle_id, voip, key_id, team_id, sealed_secret, expires_at, created_at)
            VALUES (\(config.appID), \(config.name), \(config.kind.rawValue), \(config.environment), \(config.bundleID), \(config.voip),
                \(config.keyID), \(config.teamID), \(Data(config.sealedSecret)), \(config.expiresAt), \(config.createdAt))
            ON CONFLICT (app_id, name) DO UPDATE SET kind = excluded.kind, environment = excluded.environment,
                bundle_id = excluded.bundle_id, voip = excluded.voip, key_id = excluded.key_id, team_id = excluded.team_id,
                sealed_secret = excluded.sealed_secret, expires_at = excluded.expires_at, created_at = excluded.created_at
            """)
    }

    public func pushConfig(_ name: String, app: Int64) async throws -> PushConfigRecord? {
        try await rows("SELECT \(unescaped: Self.configColumns) FROM push_configs WHERE app_id = \(app) AND name = \(name)")
            .first.map(Self.pushConfig(from:))
    }

    public func pushConfigs(app: Int64) async throws -> [PushConfigRecord] {
        try await rows("SELECT \(unescaped: Self.configColumns) FROM push_configs WHERE app_id = \(app) ORDER BY name COLLATE \"C\"")
            .map(Self.pushConfig(from:))
    }

    public func deletePushConfig(_ name: String, app: Int64) async throws -> Bool {
        try await execute("DELETE FROM push_configs WHERE app_id = \(app) AND name = \(name) RETURNING 1") > 0
    }

    private static let configColumns =
        "app_id, name, kind, environment, bundle_id, voip, key_id, team_id, sealed_secret, expires_at, created_at"

    private static func pushConfig(from row: PostgresRandomAccessRow) throws -> PushConfigRecord {
        PushConfigRecord(
            appID: try row["app_id"].decode(Int64.self), name: try row["name"].decode(String.self),
            kind: PushConfigRecord.Kind(rawValue: try row["kind"].decode(String.self)) ?? .p8,
            environment: try row["environment"].decode(String.self),
            bundleID: try row["bundle_id"].decode(String.self), voip: try row["voip"].decode(Bool.self),
            keyID: try row["key_id"].decode(String?.self), teamID: try row["team_id"].decode(String?.self),
            sealedSecret: [UInt8](try row["sealed_secret"].decode(Data.self)), expiresAt: try row["expires_at"].decode(Int64?.self),
            createdAt: try row["created_at"].decode(Int64.self))
    }

    public func bind(_ binding: PushBinding, app: Int64, holder: String?) async throws -> Bool {
        let tokens = [binding.deviceToken] + (binding.voipToken.map { [$0] } ?? [])
        let lockKeys = tokens.sorted().map { "\(app)/\($0)" }
        return try await transaction { connection in
            if let holder {
                // Key-share locked: a deletion of the user waits for this bind, or went first and there is no row.
                let holds = try await connection.query(
                    "SELECT 1 FROM users WHERE app_id = \(app) AND username = \(binding.username) AND uuid = \(holder) FOR KEY SHARE",
                    logger: logger
                ).collect().count
                guard holds > 0 else { return false }
            }
            // A token belongs to one user's device at a time: whoever held it (as an alert or a VoIP token) loses it.
            // Binds of the same token take turns (a lock per token, in a fixed order): under READ COMMITTED two binds
            // would not see each other's new row, and both users would keep the token.
            try await connection.query(
                "SELECT pg_advisory_xact_lock(hashtextextended(key, 0)) FROM unnest(\(lockKeys)::text[]) AS key", logger: logger)
            try await connection.query(
                """
                DELETE FROM push_bindings WHERE app_id = \(app) AND device_token = ANY(\(tokens))
                    AND NOT (username = \(binding.username) AND device_id = \(binding.deviceID))
                """, logger: logger)
            try await connection.query(
                """
                UPDATE push_bindings SET voip_token = NULL WHERE app_id = \(app) AND voip_token = ANY(\(tokens))
                    AND NOT (username = \(binding.username) AND device_id = \(binding.deviceID))
                """, logger: logger)
            try await connection.query(
                """
                INSERT INTO push_bindings (app_id, username, device_id, notifier, device_token, voip_token, bound_at)
                VALUES (\(app), \(binding.username), \(binding.deviceID), \(binding.notifier), \(binding.deviceToken), \(binding.voipToken),
                    \(binding.boundAt))
                ON CONFLICT (app_id, username, device_id, notifier)
                DO UPDATE SET device_token = excluded.device_token, voip_token = excluded.voip_token, bound_at = excluded.bound_at
                """, logger: logger)
            return true
        }
    }

    public func unbind(username: String, deviceID: String, notifier: String?, app: Int64) async throws {
        try await execute(
            """
            DELETE FROM push_bindings WHERE app_id = \(app) AND username = \(username) AND device_id = \(deviceID)
                AND (\(notifier)::text IS NULL OR notifier = \(notifier))
            """)
    }

    public func unbindAll(username: String, app: Int64) async throws {
        try await execute("DELETE FROM push_bindings WHERE app_id = \(app) AND username = \(username)")
    }

    public func removeBinding(deviceToken: String, notifier: String, app: Int64, unlessBoundSince: Int64?, now: Int64) async throws -> Bool
    {
        try await transaction { connection in
            // A dead VoIP token takes only itself away; a dead alert token, the binding. Each statement records a
            // `binding_removed` event for exactly the rows it changed (the webhook row is key-share locked, so a concurrent
            // webhook deletion waits and then removes these events too).
            let cleared = try await connection.query(
                """
                WITH cleared AS (
                    UPDATE push_bindings SET voip_token = NULL
                    WHERE app_id = \(app) AND voip_token = \(deviceToken) AND notifier = \(notifier)
                        AND (\(unlessBoundSince)::bigint IS NULL OR bound_at < \(unlessBoundSince))
                    RETURNING app_id, username, device_id, notifier
                ), recorded AS (
                    INSERT INTO webhook_events (app_id, kind, at, username, device_id, notifier, reason)
                    SELECT app_id, 'binding_removed', \(now), username, device_id, notifier, 'voip_token' FROM cleared
                    WHERE EXISTS (SELECT 1 FROM webhooks w WHERE w.app_id = \(app) AND w.enabled FOR KEY SHARE)
                )
                SELECT 1 FROM cleared
                """, logger: logger
            ).collect().count
            let removed = try await connection.query(
                """
                WITH removed AS (
                    DELETE FROM push_bindings
                    WHERE app_id = \(app) AND device_token = \(deviceToken) AND notifier = \(notifier)
                        AND (\(unlessBoundSince)::bigint IS NULL OR bound_at < \(unlessBoundSince))
                    RETURNING app_id, username, device_id, notifier
                ), recorded AS (
                    INSERT INTO webhook_events (app_id, kind, at, username, device_id, notifier, reason)
                    SELECT app_id, 'binding_removed', \(now), username, device_id, notifier, 'token' FROM removed
                    WHERE EXISTS (SELECT 1 FROM webhooks w WHERE w.app_id = \(app) AND w.enabled FOR KEY SHARE)
                )
                SELECT 1 FROM removed
                """, logger: logger
            ).collect().count
            return cleared + removed > 0
        }
    }

    public func bindings(of usernames: [String], app: Int64) async throws -> [String: [PushBinding]] {
        guard !usernames.isEmpty else { return [:] }
        var found: [String: [PushBinding]] = [:]
        for row in try await rows(
            """
            SELECT username, device_id, notifier, device_token, voip_token, bound_at FROM push_bindings
            WHERE app_id = \(app) AND username = ANY(\(usernames))
            ORDER BY username COLLATE "C", device_id COLLATE "C", notifier COLLATE "C"
            """)
        {
            let binding = try Self.binding(from: row)
            found[binding.username, default: []].append(binding)
        }
        return found
    }

    public func bindings(holding deviceToken: String, app: Int64) async throws -> [PushBinding] {
        try await rows(
            """
            SELECT username, device_id, notifier, device_token, voip_token, bound_at FROM push_bindings
            WHERE app_id = \(app) AND device_token = \(deviceToken)
            ORDER BY username COLLATE "C", device_id COLLATE "C", notifier COLLATE "C"
            """
        ).map(Self.binding(from:))
    }

    private static func binding(from row: PostgresRandomAccessRow) throws -> PushBinding {
        PushBinding(
            username: try row["username"].decode(String.self), deviceID: try row["device_id"].decode(String.self),
            notifier: try row["notifier"].decode(String.self), deviceToken: try row["device_token"].decode(String.self),
            voipToken: try row["voip_token"].decode(String?.self), boundAt: try row["bound_at"].decode(Int64.self))
    }

    // MARK: Push settings

    public func savePushSettings(_ settings: PushSettingsRecord, app: Int64) async throws {
        if settings.remindType == nil && settings.quietHours == nil && settings.silentUntil == nil {
            try await execute(
                "DELETE FROM push_settings WHERE app_id = \(app) AND username = \(settings.username) AND scope = \(settings.scope)")
            return
        }
        try await execute(
            """
            INSERT INTO push_settings (app_id, username, scope, remind_type, quiet_hours, silent_until)
            VALUES (\(app), \(settings.username), \(settings.scope), \(settings.remindType), \(settings.quietHours), \(settings.silentUntil))
            ON CONFLICT (app_id, username, scope) DO UPDATE SET remind_type = excluded.remind_type,
                quiet_hours = excluded.quiet_hours, silent_until = excluded.silent_until
            """)
    }

    public func pushSettings(of usernames: [String], scopes: [String], app: Int64) async throws
        -> (settings: [PushSettingsRecord], profiles: [String: PushProfile])
    {
        guard !usernames.isEmpty, !scopes.isEmpty else { return ([], [:]) }
        let settings = try await rows(
            """
            SELECT username, scope, remind_type, quiet_hours, silent_until FROM push_settings
            WHERE app_id = \(app) AND username = ANY(\(usernames)) AND scope = ANY(\(scopes))
            """
        ).map { row in
            PushSettingsRecord(
                username: try row["username"].decode(String.self), scope: try row["scope"].decode(String.self),
                remindType: try row["remind_type"].decode(String?.self), quietHours: try row["quiet_hours"].decode(String?.self),
                silentUntil: try row["silent_until"].decode(Int64?.self))
        }
        var profiles: [String: PushProfile] = [:]
        for row in try await rows(
            """
            SELECT username, timezone, display_style, push_language, push_template, nickname FROM users
            WHERE app_id = \(app) AND username = ANY(\(usernames))
            """)
        {
            profiles[try row["username"].decode(String.self)] = PushProfile(
                timeZone: try row["timezone"].decode(String?.self), displayStyle: try row["display_style"].decode(Int.self),
                language: try row["push_language"].decode(String?.self), template: try row["push_template"].decode(String?.self),
                nickname: try row["nickname"].decode(String?.self))
        }
        return (settings, profiles)
    }

    public func setPushPreferences(of username: String, app: Int64, language: String??, template: String??) async throws {
        try await transaction { connection in
            if let language {
                try await connection.query(
                    "UPDATE users SET push_language = \(language) WHERE app_id = \(app) AND username = \(username)", logger: logger)
            }
            if let template {
                try await connection.query(
                    "UPDATE users SET push_template = \(template) WHERE app_id = \(app) AND username = \(username)", logger: logger)
            }
        }
    }

    public func saveTemplate(_ template: PushTemplateRecord, app: Int64, replace: Bool) async throws -> Bool {
        if replace {
            return try await execute(
                """
                UPDATE push_templates SET title_pattern = \(template.titlePattern), content_pattern = \(template.contentPattern),
                    updated_at = \(template.updatedAt)
                WHERE app_id = \(app) AND name = \(template.name) RETURNING 1
                """) > 0
        }
        try await Self.mapConstraint("template \(template.name) already exists") {
            try await execute(
                """
                INSERT INTO push_templates (app_id, name, title_pattern, content_pattern, created_at, updated_at)
                VALUES (\(app), \(template.name), \(template.titlePattern), \(template.contentPattern), \(template.createdAt), \(template.updatedAt))
                """)
        }
        return true
    }

    public func templates(app: Int64) async throws -> [PushTemplateRecord] {
        try await rows(
            """
            SELECT name, title_pattern, content_pattern, created_at, updated_at FROM push_templates WHERE app_id = \(app)
            ORDER BY name COLLATE "C"
            """
        ).map { row in
            PushTemplateRecord(
                name: try row["name"].decode(String.self), titlePattern: try row["title_pattern"].decode(String.self),
                contentPattern: try row["content_pattern"].decode(String.self), createdAt: try row["created_at"].decode(Int64.self),
                updatedAt: try row["updated_at"].decode(Int64.self))
        }
    }

    public func deleteTemplate(_ name: String, app: Int64) async throws -> Bool {
        try await execute("DELETE FROM push_templates WHERE app_id = \(app) AND name = \(name) RETURNING 1") > 0
    }

    public func pushPolicy(app: Int64) async throws -> PushPolicyRecord {
        let row = try await rows(
            "SELECT multi_device, default_timezone, display_strings, badge_counts_muted, recall_limit_seconds FROM apps WHERE id = \(app)"
        ).first
        let strings = try row.flatMap { row in
            try? JSONDecoder().decode([String: String].self, from: Data(try row["display_strings"].decode(String.self).utf8))
        }
        return PushPolicyRecord(
            multiDevice: try row?["multi_device"].decode(String.self) ?? "all_offline",
            timezone: try row?["default_timezone"].decode(String.self) ?? "UTC", displayStrings: strings ?? [:],
            badgeCountsMuted: try row?["badge_counts_muted"].decode(Bool.self) ?? false,
            recallLimitSeconds: try row?["recall_limit_seconds"].decode(Int64.self) ?? PushPolicyRecord.defaultRecallLimitSeconds)
    }

    public func savePushPolicy(_ policy: PushPolicyRecord, app: Int64) async throws {
        let strings = String(decoding: try JSONEncoder().encode(policy.displayStrings), as: UTF8.self)
        try await execute(
            """
            UPDATE apps SET multi_device = \(policy.multiDevice), default_timezone = \(policy.timezone), display_strings = \(strings),
                badge_counts_muted = \(policy.badgeCountsMuted), recall_limit_seconds = \(policy.recallLimitSeconds)
            WHERE id = \(app)
            """)
    }
}
