import BeaconCore
import BeaconStorage
import Foundation
import GRDB

/// Push configurations, device bindings, receivers' push settings, templates and the app's push policy.
extension SQLiteStore {
    public func savePushConfig(_ config: PushConfigRecord) async throws {
        try await write { db in
            try db.execute(
                sql: """
                    INSERT INTO push_configs (app_id, name, kind, environment, bundle_id, voip, key_id, team_id, sealed_secret, expires_at, created_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (app_id, name) DO UPDATE SET kind = excluded.kind, environment = excluded.environment,
                        bundle_id = excluded.bundle_id, voip = excluded.voip, key_id = excluded.key_id, team_id = excluded.team_id,
                        sealed_secret = excluded.sealed_secret, expires_at = excluded.expires_at, created_at = excluded.created_at
                    """,
                arguments: [
                    config.appID, config.name, config.kind.rawValue, config.environment, config.bundleID, config.voip, config.keyID,
                    config.teamID, Data(config.sealedSecret), config.expiresAt, config.createdAt,
                ])
        }
    }

    public func pushConfig(_ name: String, app: Int64) async throws -> PushConfigRecord? {
        try await read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM push_configs WHERE app_id = ? AND name = ?", arguments: [app, name]).map(
                Self.pushConfig(from:))
        }
    }

    public func pushConfigs(app: Int64) async throws -> [PushConfigRecord] {
        try await read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM push_configs WHERE app_id = ? ORDER BY name", arguments: [app]).map(
                Self.pushConfig(from:))
        }
    }

    public func deletePushConfig(_ name: String, app: Int64) async throws -> Bool {
        try await write { db in
            try db.execute(sql: "DELETE FROM push_configs WHERE app_id = ? AND name = ?", arguments: [app, name])
            return db.changesCount > 0
        }
    }

    private static func pushConfig(from row: Row) throws -> PushConfigRecord {
        PushConfigRecord(
            appID: try row.decode(forColumn: "app_id"), name: try row.decode(forColumn: "name"),
            kind: PushConfigRecord.Kind(rawValue: try row.decode(forColumn: "kind")) ?? .p8,
            environment: try row.decode(forColumn: "environment"),
            bundleID: try row.decode(forColumn: "bundle_id"), voip: try row.decode(forColumn: "voip"),
            keyID: try row.decode(forColumn: "key_id"),
            teamID: try row.decode(forColumn: "team_id"), sealedSecret: [UInt8](try row.decode(Data.self, forColumn: "sealed_secret")),
            expiresAt: try row.decode(forColumn: "expires_at"), createdAt: try row.decode(forColumn: "created_at"))
    }

    public func bind(_ binding: PushBinding, app: Int64, holder: String?) async throws -> Bool {
        try await write { db in
            if let holder {
                let holds = try Bool.fetchOne(
                    db, sql: "SELECT EXISTS (SELECT 1 FROM users WHERE app_id = ? AND username = ? AND uuid = ?)",
                    arguments: [app, binding.username, holder])
                guard holds == true else { return false }
            }
            // A token belongs to one user's device at a time: whoever held it (as an alert or a VoIP token) loses it.
            for token in [binding.deviceToken] + (binding.voipToken.map { [$0] } ?? []) {
                try db.execute(
                    sql: "DELETE FROM push_bindings WHERE app_id = ? AND device_token = ? AND NOT (username = ? AND device_id = ?)",
                    arguments: [app, token, binding.username, binding.deviceID])
                try db.execute(
                    sql:
                        "UPDATE push_bindings SET voip_token = NULL WHERE app_id = ? AND voip_token = ? AND NOT (username = ? AND device_id = ?)",
                    arguments: [app, token, binding.username, binding.deviceID])
            }
            try db.execute(
                sql: """
                    INSERT INTO push_bindings (app_id, username, device_id, notifier, device_token, voip_token, bound_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (app_id, username, device_id, notifier)
                    DO UPDATE SET device_token = excluded.device_token, voip_token = excluded.voip_token, bound_at = excluded.bound_at
                    """,
                arguments: [
                    app, binding.username, binding.deviceID, binding.notifier, binding.deviceToken, binding.voipToken, binding.boundAt,
                ])
            return true
        }
    }

    public func unbind(username: String, deviceID: String, notifier: String?, app: Int64) async throws {
        try await write { db in
            try db.execute(
                sql: "DELETE FROM push_bindings WHERE app_id = ? AND username = ? AND device_id = ? AND (? IS NULL OR notifier = ?)",
                arguments: [app, username, deviceID, notifier, notifier])
        }
    }

    public func unbindAll(username: String, app: Int64) async throws {
        try await write { db in
            try db.execute(sql: "DELETE FROM push_bindings WHERE app_id = ? AND username = ?", arguments: [app, username])
        }
    }

    public func removeBinding(deviceToken: String, notifier: String, app: Int64, unlessBoundSince: Int64?, now: Int64) async throws -> Bool
    {
        try await write { db in
            // A dead VoIP token takes only itself away; a dead alert token, the binding.
            let unbound: StatementArguments = [notifier, unlessBoundSince, unlessBoundSince]
            try Self.recordBindingsRemoved(
                where: "b.voip_token = ? AND b.notifier = ? AND (? IS NULL OR b.bound_at < ?)", reason: "voip_token",
                arguments: [deviceToken] + unbound, app: app, now: now, db: db)
            try Self.recordBindingsRemoved(
                where: "b.device_token = ? AND b.notifier = ? AND (? IS NULL OR b.bound_at < ?)", reason: "token",
                arguments: [deviceToken] + unbound, app: app, now: now, db: db)
            try db.execute(
                sql:
                    "UPDATE push_bindings SET voip_token = NULL WHERE app_id = ? AND voip_token = ? AND notifier = ? AND (? IS NULL OR bound_at < ?)",
                arguments: [app, deviceToken, notifier, unlessBoundSince, unlessBoundSince])
            var removed = db.changesCount
            try db.execute(
                sql: "DELETE FROM push_bindings WHERE app_id = ? AND device_token = ? AND notifier = ? AND (? IS NULL OR bound_at < ?)",
                arguments: [app, deviceToken, notifier, unlessBoundSince, unlessBoundSince])
            removed += db.changesCount
            return removed > 0
        }
    }

    public func bindings(of usernames: [String], app: Int64) async throws -> [String: [PushBinding]] {
        guard !usernames.isEmpty else { return [:] }
        return try await read { db in
            var found: [String: [PushBinding]] = [:]
            for chunk in Self.chunks(usernames) {
                for row in try Row.fetchAll(
                    db,
                    sql:
                        "SELECT * FROM push_bindings WHERE app_id = ? AND username IN (\(Self.marks(chunk.count))) ORDER BY username, device_id, notifier",
                    arguments: StatementArguments([app] + Array(chunk)))
                {
                    let binding = try Self.binding(from: row)
                    found[binding.username, default: []].append(binding)
                }
            }
            return found
        }
    }

    public func bindings(holding deviceToken: String, app: Int64) async throws -> [PushBinding] {
        try await read { db in
            try Row.fetchAll(
                db, sql: "SELECT * FROM push_bindings WHERE app_id = ? AND device_token = ? ORDER BY username, device_id, notifier",
                arguments: [app, deviceToken]
            ).map(Self.binding(from:))
        }
    }

    static func binding(from row: Row) throws -> PushBinding {
        PushBinding(
            username: try row.decode(forColumn: "username"), deviceID: try row.decode(forColumn: "device_id"),
            notifier: try row.decode(forColumn: "notifier"), deviceToken: try row.decode(forColumn: "device_token"),
            voipToken: try row.decode(forColumn: "voip_token"), boundAt: try row.decode(forColumn: "bound_at"))
    }

    // MARK: Push settings

    public func savePushSettings(_ settings: PushSettingsRecord, app: Int64) async throws {
        try await write { db in
            if settings.remindType == nil && settings.quietHours == nil && settings.silentUntil == nil {
                try db.execute(
                    sql: "DELETE FROM push_settings WHERE app_id = ? AND username = ? AND scope = ?",
                    arguments: [app, settings.username, settings.scope])
                return
            }
            try db.execute(
                sql: """
                    INSERT INTO push_settings (app_id, username, scope, remind_type, quiet_hours, silent_until) VALUES (?, ?, ?, ?, ?, ?)
                    ON CONFLICT (app_id, username, scope) DO UPDATE SET remind_type = excluded.remind_type,
                        quiet_hours = excluded.quiet_hours, silent_until = excluded.silent_until
                    """,
                arguments: [app, settings.username, settings.scope, settings.remindType, settings.quietHours, settings.silentUntil])
        }
    }

    public func pushSettings(of usernames: [String], scopes: [String], app: Int64) async throws
        -> (settings: [PushSettingsRecord], profiles: [String: PushProfile])
    {
        guard !usernames.isEmpty, !scopes.isEmpty else { return ([], [:]) }
        return try await read { db in
            var settings: [PushSettingsRecord] = []
            var profiles: [String: PushProfile] = [:]
            let scopeMarks = Self.marks(scopes.count)
            for slice in Self.chunks(usernames, of: 400) {
                let chunk = Array(slice)
                let marks = Self.marks(chunk.count)
                for row in try Row.fetchAll(
                    db, sql: "SELECT * FROM push_settings WHERE app_id = ? AND username IN (\(marks)) AND scope IN (\(scopeMarks))",
                    arguments: StatementArguments([app] + chunk + scopes))
                {
                    settings.append(
                        PushSettingsRecord(
                            username: try row.decode(forColumn: "username"), scope: try row.decode(forColumn: "scope"),
                            remindType: try row.decode(forColumn: "remind_type"), quietHours: try row.decode(forColumn: "quiet_hours"),
                            silentUntil: try row.decode(forColumn: "silent_until")))
                }
                for row in try Row.fetchAll(
                    db,
                    sql: """
                        SELECT username, timezone, display_style, push_language, push_template, nickname FROM users
                        WHERE app_id = ? AND username IN (\(marks))
                        """,
                    arguments: StatementArguments([app] + chunk))
                {
                    let username: String = try row.decode(forColumn: "username")
                    profiles[username] = PushProfile(
                        timeZone: try row.decode(forColumn: "timezone"), displayStyle: try row.decode(forColumn: "display_style"),
                        language: try row.decode(forColumn: "push_language"), template: try row.decode(forColumn: "push_template"),
                        nickname: try row.decode(forColumn: "nickname"))
                }
            }
            return (settings, profiles)
        }
    }

    public func setPushPreferences(of username: String, app: Int64, language: String??, template: String??) async throws {
        try await write { db in
            if let language {
                try db.execute(
                    sql: "UPDATE users SET push_language = ? WHERE app_id = ? AND username = ?", arguments: [language, app, username])
            }
            if let template {
                try db.execute(
                    sql: "UPDATE users SET push_template = ? WHERE app_id = ? AND username = ?", arguments: [template, app, username])
            }
        }
    }

    public func saveTemplate(_ template: PushTemplateRecord, app: Int64, replace: Bool) async throws -> Bool {
        try await write { db in
            if replace {
                try db.execute(
                    sql: "UPDATE push_templates SET title_pattern = ?, content_pattern = ?, updated_at = ? WHERE app_id = ? AND name = ?",
                    arguments: [template.titlePattern, template.contentPattern, template.updatedAt, app, template.name])
                return db.changesCount > 0
            }
            try Self.mapConstraint("template \(template.name) already exists") {
                try db.execute(
                    sql:
                        "INSERT INTO push_templates (app_id, name, title_pattern, content_pattern, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
                    arguments: [app, template.name, template.titlePattern, template.contentPattern, template.createdAt, template.updatedAt])
            }
            return true
        }
    }

    public func templates(app: Int64) async throws -> [PushTemplateRecord] {
        try await read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM push_templates WHERE app_id = ? ORDER BY name", arguments: [app]).map { row in
                PushTemplateRecord(
                    name: try row.decode(forColumn: "name"), titlePattern: try row.decode(forColumn: "title_pattern"),
                    contentPattern: try row.decode(forColumn: "content_pattern"), createdAt: try row.decode(forColumn: "created_at"),
                    updatedAt: try row.decode(forColumn: "updated_at"))
            }
        }
    }

    public func deleteTemplate(_ name: String, app: Int64) async throws -> Bool {
        try await write { db in
            try db.execute(sql: "DELETE FROM push_templates WHERE app_id = ? AND name = ?", arguments: [app, name])
            return db.changesCount > 0
        }
    }

    public func pushPolicy(app: Int64) async throws -> PushPolicyRecord {
        try await read { db in
            let row = try Row.fetchOne(
                db,
                sql:
                    "SELECT multi_device, default_timezone, display_strings, badge_counts_muted, recall_limit_seconds FROM apps WHERE id = ?",
                arguments: [app])
            let stored: String? = try row?.decode(String?.self, forColumn: "display_strings") ?? nil
            let strings = stored.flatMap { try? JSONDecoder().decode([String: String].self, from: Data($0.utf8)) }
            return PushPolicyRecord(
                multiDevice: try row?.decode(String.self, forColumn: "multi_device") ?? "all_offline",
                timezone: try row?.decode(String.self, forColumn: "default_timezone") ?? "UTC", displayStrings: strings ?? [:],
                badgeCountsMuted: try row?.decode(Bool.self, forColumn: "badge_counts_muted") ?? false,
                recallLimitSeconds: try row?.decode(Int64.self, forColumn: "recall_limit_seconds")
                    ?? PushPolicyRecord.defaultRecallLimitSeconds)
        }
    }

    public func savePushPolicy(_ policy: PushPolicyRecord, app: Int64) async throws {
        try await write { db in
            try db.execute(
                sql: """
                    UPDATE apps SET multi_device = ?, default_timezone = ?, display_strings = ?, badge_counts_muted = ?,
                        recall_limit_seconds = ? WHERE id = ?
                    """,
                arguments: [
                    policy.multiDevice, policy.timezone, String(decoding: try JSONEncoder().encode(policy.displayStrings), as: UTF8.self),
                    policy.badgeCountsMuted, policy.recallLimitSeconds, app,
                ])
        }
    }

}
