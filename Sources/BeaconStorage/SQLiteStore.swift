import BeaconCore
import Foundation
import GRDB

/// The embedded default store: one SQLite file in WAL mode, through GRDB.
///
/// Several processes may open the same file (the CLI creates apps while the server runs): SQLite's own
/// locking serialises their writes, with a busy timeout instead of immediate failures.
public final class SQLiteStore: BeaconStore {
    private let pool: DatabasePool

    /// Opens (creating if needed) the database at `path` and brings its schema up to date.
    public init(path: String) throws {
        var configuration = Configuration()
        configuration.busyMode = .timeout(10)
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
        }
        pool = try DatabasePool(path: path, configuration: configuration)
        try Self.migrator.migrate(pool)
    }

    /// Opens `beacon.sqlite` inside `directory`, creating the directory if needed.
    public convenience init(directory: String) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try self.init(path: (directory as NSString).appendingPathComponent("beacon.sqlite"))
    }

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE settings (name TEXT PRIMARY KEY, value TEXT NOT NULL);
                    CREATE TABLE apps (
                        id INTEGER PRIMARY KEY AUTOINCREMENT, org TEXT NOT NULL, name TEXT NOT NULL,
                        client_id TEXT NOT NULL UNIQUE, client_secret_hash TEXT NOT NULL,
                        per_chat INTEGER NOT NULL, per_group INTEGER NOT NULL, max_age_seconds INTEGER NOT NULL,
                        created_at INTEGER NOT NULL, UNIQUE (org, name));
                    CREATE TABLE users (
                        app_id INTEGER NOT NULL, username TEXT NOT NULL, uuid TEXT NOT NULL, password_hash TEXT NOT NULL,
                        nickname TEXT, timezone TEXT, created_at INTEGER NOT NULL, modified_at INTEGER NOT NULL,
                        tokens_valid_after INTEGER NOT NULL DEFAULT 0, inbox_seq INTEGER NOT NULL DEFAULT 0,
                        PRIMARY KEY (app_id, username));
                    CREATE TABLE chat_groups (
                        app_id INTEGER NOT NULL, id TEXT NOT NULL, name TEXT NOT NULL, description TEXT NOT NULL,
                        owner TEXT NOT NULL, max_users INTEGER NOT NULL, created_at INTEGER NOT NULL,
                        PRIMARY KEY (app_id, id));
                    CREATE TABLE group_members (
                        app_id INTEGER NOT NULL, group_id TEXT NOT NULL, username TEXT NOT NULL, joined_at INTEGER NOT NULL,
                        PRIMARY KEY (app_id, group_id, username));
                    CREATE INDEX group_members_by_user ON group_members (app_id, username);
                    CREATE TABLE messages (
                        app_id INTEGER NOT NULL, id INTEGER NOT NULL, sender TEXT NOT NULL, recipient TEXT NOT NULL,
                        chat_type TEXT NOT NULL, type TEXT NOT NULL, body TEXT NOT NULL, ext TEXT NOT NULL,
                        timestamp INTEGER NOT NULL, PRIMARY KEY (app_id, id));
                    CREATE TABLE inbox (
                        app_id INTEGER NOT NULL, username TEXT NOT NULL, seq INTEGER NOT NULL, message_id INTEGER NOT NULL,
                        conversation TEXT NOT NULL, chat_type TEXT NOT NULL, origin_device TEXT, created_at INTEGER NOT NULL,
                        PRIMARY KEY (app_id, username, seq));
                    CREATE INDEX inbox_by_message ON inbox (app_id, message_id);
                    CREATE INDEX inbox_by_age ON inbox (app_id, created_at);
                    CREATE TABLE device_cursors (
                        app_id INTEGER NOT NULL, username TEXT NOT NULL, device_id TEXT NOT NULL, acked_seq INTEGER NOT NULL,
                        updated_at INTEGER NOT NULL, PRIMARY KEY (app_id, username, device_id));
                    """)
        }
        migrator.registerMigration("v2-push") { db in
            try db.execute(
                sql: """
                    ALTER TABLE users ADD COLUMN badge INTEGER NOT NULL DEFAULT 0;
                    CREATE TABLE push_configs (
                        app_id INTEGER NOT NULL, name TEXT NOT NULL, kind TEXT NOT NULL, environment TEXT NOT NULL,
                        bundle_id TEXT NOT NULL, voip INTEGER NOT NULL, key_id TEXT, team_id TEXT, sealed_secret BLOB NOT NULL,
                        expires_at INTEGER, created_at INTEGER NOT NULL, PRIMARY KEY (app_id, name));
                    CREATE TABLE push_bindings (
                        app_id INTEGER NOT NULL, username TEXT NOT NULL, device_id TEXT NOT NULL, notifier TEXT NOT NULL,
                        device_token TEXT NOT NULL, bound_at INTEGER NOT NULL, PRIMARY KEY (app_id, username, device_id, notifier));
                    CREATE INDEX push_bindings_by_token ON push_bindings (app_id, device_token);
                    CREATE TABLE push_jobs (
                        id INTEGER PRIMARY KEY AUTOINCREMENT, app_id INTEGER NOT NULL, message_id INTEGER NOT NULL,
                        username TEXT NOT NULL, device_id TEXT NOT NULL, notifier TEXT NOT NULL, device_token TEXT NOT NULL,
                        topic TEXT NOT NULL, push_type TEXT NOT NULL, priority INTEGER NOT NULL, expiration INTEGER NOT NULL,
                        collapse_id TEXT, apns_id TEXT NOT NULL, payload TEXT NOT NULL, status TEXT NOT NULL,
                        attempts INTEGER NOT NULL DEFAULT 0, last_status INTEGER, last_reason TEXT, created_at INTEGER NOT NULL,
                        updated_at INTEGER NOT NULL, next_attempt_at INTEGER NOT NULL, claimed_until INTEGER NOT NULL DEFAULT 0);
                    CREATE INDEX push_jobs_due ON push_jobs (status, next_attempt_at);
                    CREATE INDEX push_jobs_by_user ON push_jobs (app_id, username, message_id);
                    CREATE INDEX push_jobs_by_message ON push_jobs (app_id, message_id);
                    CREATE TABLE push_attempts (
                        job_id INTEGER NOT NULL, at INTEGER NOT NULL, http_status INTEGER, reason TEXT, outcome TEXT NOT NULL);
                    CREATE INDEX push_attempts_by_job ON push_attempts (job_id);
                    """)
        }
        migrator.registerMigration("v3-push-settings") { db in
            try db.execute(
                sql: """
                    CREATE TABLE push_settings (
                        app_id INTEGER NOT NULL, username TEXT NOT NULL, scope TEXT NOT NULL, remind_type TEXT, quiet_hours TEXT,
                        silent_until INTEGER, PRIMARY KEY (app_id, username, scope));
                    ALTER TABLE apps ADD COLUMN multi_device TEXT NOT NULL DEFAULT 'all_offline';
                    ALTER TABLE apps ADD COLUMN default_timezone TEXT NOT NULL DEFAULT 'UTC';
                    ALTER TABLE push_jobs ADD COLUMN skip_reason TEXT;
                    """)
        }
        migrator.registerMigration("v4-push-display") { db in
            try db.execute(
                sql: """
                    ALTER TABLE users ADD COLUMN display_style INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE users ADD COLUMN push_language TEXT;
                    ALTER TABLE users ADD COLUMN push_template TEXT;
                    """)
        }
        migrator.registerMigration("v5-push-templates") { db in
            try db.execute(
                sql: """
                    CREATE TABLE push_templates (
                        app_id INTEGER NOT NULL, name TEXT NOT NULL, title_pattern TEXT NOT NULL, content_pattern TEXT NOT NULL,
                        created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, PRIMARY KEY (app_id, name));
                    """)
        }
        migrator.registerMigration("v6-display-strings") { db in
            try db.execute(sql: "ALTER TABLE apps ADD COLUMN display_strings TEXT NOT NULL DEFAULT '{}'")
        }
        return migrator
    }

    // MARK: Settings

    public func setting(_ name: String, orInsert makeValue: @Sendable () -> String) async throws -> String {
        try await pool.write { db in
            try db.execute(sql: "INSERT INTO settings (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING", arguments: [name, makeValue()])
            return try String.fetchOne(db, sql: "SELECT value FROM settings WHERE name = ?", arguments: [name])!
        }
    }

    // MARK: Apps

    public func createApp(_ key: AppKey, clientID: String, clientSecretHash: String, limits: OfflineLimits, now: Int64) async throws -> AppRecord {
        try await pool.write { db in
            try Self.mapConstraint("app \(key) already exists") {
                try db.execute(
                    sql: """
                        INSERT INTO apps (org, name, client_id, client_secret_hash, per_chat, per_group, max_age_seconds, created_at)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                        """,
                    arguments: [key.org, key.name, clientID, clientSecretHash, limits.perChat, limits.perGroup, limits.maxAgeSeconds, now])
            }
            return AppRecord(
                id: db.lastInsertedRowID, key: key, clientID: clientID, clientSecretHash: clientSecretHash, limits: limits, createdAt: now)
        }
    }

    public func app(_ key: AppKey) async throws -> AppRecord? {
        try await pool.read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM apps WHERE org = ? AND name = ?", arguments: [key.org, key.name]).map(Self.app(from:))
        }
    }

    public func app(id: Int64) async throws -> AppRecord? {
        try await pool.read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM apps WHERE id = ?", arguments: [id]).map(Self.app(from:))
        }
    }

    public func allApps() async throws -> [AppRecord] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM apps ORDER BY id").map(Self.app(from:))
        }
    }

    private static func app(from row: Row) -> AppRecord {
        AppRecord(
            id: row["id"], key: AppKey(org: row["org"], name: row["name"]), clientID: row["client_id"],
            clientSecretHash: row["client_secret_hash"],
            limits: OfflineLimits(perChat: row["per_chat"], perGroup: row["per_group"], maxAgeSeconds: row["max_age_seconds"]),
            createdAt: row["created_at"])
    }

    // MARK: Users

    public func createUsers(_ users: [NewUser], app: Int64, now: Int64) async throws -> [UserRecord] {
        try await pool.write { db in
            try users.map { user in
                let record = UserRecord(
                    appID: app, username: user.username, uuid: UUID().uuidString.lowercased(), passwordHash: user.passwordHash,
                    nickname: user.nickname, timezone: nil, createdAt: now, modifiedAt: now, tokensValidAfter: 0)
                try Self.mapConstraint("username \(user.username) already exists") {
                    try db.execute(
                        sql: """
                            INSERT INTO users (app_id, username, uuid, password_hash, nickname, created_at, modified_at)
                            VALUES (?, ?, ?, ?, ?, ?, ?)
                            """,
                        arguments: [app, record.username, record.uuid, record.passwordHash, record.nickname, now, now])
                }
                return record
            }
        }
    }

    public func user(_ username: String, app: Int64) async throws -> UserRecord? {
        try await pool.read { db in try Self.user(username, app: app, db: db) }
    }

    private static func user(_ username: String, app: Int64, db: Database) throws -> UserRecord? {
        try Row.fetchOne(db, sql: "SELECT * FROM users WHERE app_id = ? AND username = ?", arguments: [app, username]).map { row in
            UserRecord(
                appID: row["app_id"], username: row["username"], uuid: row["uuid"], passwordHash: row["password_hash"],
                nickname: row["nickname"], timezone: row["timezone"], createdAt: row["created_at"],
                modifiedAt: row["modified_at"], tokensValidAfter: row["tokens_valid_after"], displayStyle: row["display_style"])
        }
    }

    public func existingUsers(_ usernames: [String], app: Int64) async throws -> Set<String> {
        guard !usernames.isEmpty else { return [] }
        return try await pool.read { db in
            var found = Set<String>()
            // Chunked to stay under SQLite's host-parameter limit.
            for chunk in stride(from: 0, to: usernames.count, by: 500).map({ Array(usernames[$0..<min($0 + 500, usernames.count)]) }) {
                let marks = Array(repeating: "?", count: chunk.count).joined(separator: ",")
                let names = try String.fetchAll(
                    db, sql: "SELECT username FROM users WHERE app_id = ? AND username IN (\(marks))",
                    arguments: StatementArguments([app] + chunk))
                found.formUnion(names)
            }
            return found
        }
    }

    public func updateUser(_ username: String, app: Int64, changes: UserChanges, now: Int64) async throws -> UserRecord? {
        try await pool.write { db in
            try db.execute(
                sql: """
                    UPDATE users SET nickname = COALESCE(?, nickname), timezone = COALESCE(?, timezone),
                        display_style = COALESCE(?, display_style), modified_at = ?
                    WHERE app_id = ? AND username = ?
                    """,
                arguments: [changes.nickname, changes.timezone, changes.displayStyle, now, app, username])
            return try Self.user(username, app: app, db: db)
        }
    }

    public func revokeTokens(of username: String, app: Int64, before instant: Int64) async throws {
        try await pool.write { db in
            try db.execute(
                sql: "UPDATE users SET tokens_valid_after = MAX(tokens_valid_after, ?) WHERE app_id = ? AND username = ?",
                arguments: [instant, app, username])
        }
    }

    public func deleteUser(_ username: String, app: Int64) async throws -> Bool {
        try await pool.write { db in
            for table in ["inbox", "device_cursors", "group_members", "push_bindings", "push_settings"] {
                try db.execute(sql: "DELETE FROM \(table) WHERE app_id = ? AND username = ?", arguments: [app, username])
            }
            try db.execute(sql: "DELETE FROM users WHERE app_id = ? AND username = ?", arguments: [app, username])
            return db.changesCount > 0
        }
    }

    // MARK: Groups

    public func createGroup(_ group: GroupRecord, members: [String]) async throws {
        try await pool.write { db in
            try Self.mapConstraint("group \(group.id) already exists") {
                try db.execute(
                    sql: """
                        INSERT INTO chat_groups (app_id, id, name, description, owner, max_users, created_at)
                        VALUES (?, ?, ?, ?, ?, ?, ?)
                        """,
                    arguments: [group.appID, group.id, group.name, group.description, group.owner, group.maxUsers, group.createdAt])
            }
            let insert = try db.cachedStatement(
                sql: "INSERT INTO group_members (app_id, group_id, username, joined_at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING")
            for member in Set(members + [group.owner]) {
                try insert.execute(arguments: [group.appID, group.id, member, group.createdAt])
            }
        }
    }

    public func group(_ id: String, app: Int64) async throws -> GroupRecord? {
        try await pool.read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM chat_groups WHERE app_id = ? AND id = ?", arguments: [app, id]).map { row in
                GroupRecord(
                    appID: row["app_id"], id: row["id"], name: row["name"], description: row["description"], owner: row["owner"],
                    maxUsers: row["max_users"], createdAt: row["created_at"])
            }
        }
    }

    public func groupMembers(_ id: String, app: Int64) async throws -> [String] {
        try await pool.read { db in
            try String.fetchAll(
                db, sql: "SELECT username FROM group_members WHERE app_id = ? AND group_id = ? ORDER BY username", arguments: [app, id])
        }
    }

    public func addGroupMember(_ username: String, group: String, app: Int64, now: Int64) async throws -> Bool {
        try await pool.write { db in
            try db.execute(
                sql: "INSERT INTO group_members (app_id, group_id, username, joined_at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                arguments: [app, group, username, now])
            return db.changesCount > 0
        }
    }

    public func removeGroupMember(_ username: String, group: String, app: Int64) async throws -> Bool {
        try await pool.write { db in
            try db.execute(
                sql: "DELETE FROM group_members WHERE app_id = ? AND group_id = ? AND username = ?", arguments: [app, group, username])
            return db.changesCount > 0
        }
    }

    // MARK: Messages

    public func append(_ message: Message, app: Int64, deliveries: [Delivery], pushes: PushPlan?) async throws -> [InboxEntry] {
        let body = try Self.encode(message.body)
        let ext = try Self.encode(.object(message.ext))
        return try await pool.write { db in
            try db.execute(
                sql: """
                    INSERT INTO messages (app_id, id, sender, recipient, chat_type, type, body, ext, timestamp)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """,
                arguments: [
                    app, Int64(message.id), message.from, message.to, message.chatType.rawValue, message.type.rawValue, body, ext,
                    message.timestamp,
                ])
            let nextSeq = try db.cachedStatement(
                sql: "UPDATE users SET inbox_seq = inbox_seq + 1 WHERE app_id = ? AND username = ? RETURNING inbox_seq")
            let insert = try db.cachedStatement(
                sql: """
                    INSERT INTO inbox (app_id, username, seq, message_id, conversation, chat_type, origin_device, created_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                    """)
            var entries: [InboxEntry] = []
            entries.reserveCapacity(deliveries.count)
            for delivery in deliveries {
                guard let seq = try Int64.fetchOne(nextSeq, arguments: [app, delivery.username]) else { continue }
                let conversation = message.conversation(for: delivery.username)
                try insert.execute(arguments: [
                    app, delivery.username, seq, Int64(message.id), conversation.description, message.chatType.rawValue,
                    delivery.originDevice, message.timestamp,
                ])
                entries.append(InboxEntry(username: delivery.username, seq: seq, message: message, originDevice: delivery.originDevice))
            }
            if let pushes {
                try Self.storePushJobs(pushes, message: message, app: app, db: db)
            }
            return entries
        }
    }

    private static func storePushJobs(_ plan: PushPlan, message: Message, app: Int64, db: Database) throws {
        var bindings: [String: [PushBinding]] = [:]
        for chunk in stride(from: 0, to: plan.recipients.count, by: 500).map({ Array(plan.recipients[$0..<min($0 + 500, plan.recipients.count)]) }) {
            let marks = Array(repeating: "?", count: chunk.count).joined(separator: ",")
            for row in try Row.fetchAll(
                db, sql: "SELECT * FROM push_bindings WHERE app_id = ? AND username IN (\(marks)) ORDER BY username, device_id, notifier",
                arguments: StatementArguments([app] + chunk))
            {
                let binding = Self.binding(from: row)
                bindings[binding.username, default: []].append(binding)
            }
        }
        let badge = try db.cachedStatement(
            sql: "UPDATE users SET badge = badge + 1 WHERE app_id = ? AND username = ? RETURNING badge")
        let currentBadge = try db.cachedStatement(sql: "SELECT badge FROM users WHERE app_id = ? AND username = ?")
        let insert = try db.cachedStatement(
            sql: """
                INSERT INTO push_jobs (app_id, message_id, username, device_id, notifier, device_token, topic, push_type, priority,
                    expiration, collapse_id, apns_id, payload, status, last_reason, created_at, updated_at, next_attempt_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """)
        for username in plan.recipients {
            let bound = bindings[username] ?? []
            var count = 0
            if !bound.isEmpty {
                let raise = plan.raisesBadge?.contains(username) ?? true
                guard let value = try Int.fetchOne(raise ? badge : currentBadge, arguments: [app, username]) else { continue }
                count = value
            }
            for job in plan.render(username, count, bound) {
                try insert.execute(arguments: [
                    app, Int64(message.id), job.username, job.deviceID, job.notifier, job.deviceToken, job.topic, job.pushType, job.priority,
                    job.expiration, job.collapseID, job.apnsID, job.payload, job.skipReason == nil ? "pending" : "skipped", job.skipReason,
                    message.timestamp, message.timestamp, message.timestamp,
                ])
            }
        }
    }

    public func inbox(of username: String, app: Int64, after seq: Int64, limit: Int) async throws -> [InboxEntry] {
        try await pool.read { db in
            let rows = try Row.fetchAll(
                db,
                sql: """
                    SELECT i.seq, i.origin_device, m.* FROM inbox i
                    JOIN messages m ON m.app_id = i.app_id AND m.id = i.message_id
                    WHERE i.app_id = ? AND i.username = ? AND i.seq > ? ORDER BY i.seq LIMIT ?
                    """,
                arguments: [app, username, seq, limit])
            return try rows.map { row in
                InboxEntry(username: username, seq: row["seq"], message: try Self.message(from: row), originDevice: row["origin_device"])
            }
        }
    }

    public func cursor(of username: String, device: String, app: Int64) async throws -> Int64 {
        try await pool.read { db in
            try Int64.fetchOne(
                db, sql: "SELECT acked_seq FROM device_cursors WHERE app_id = ? AND username = ? AND device_id = ?",
                arguments: [app, username, device]) ?? 0
        }
    }

    public func acknowledge(_ cursors: [DeviceCursor], now: Int64) async throws {
        guard !cursors.isEmpty else { return }
        try await pool.write { db in
            let top = try db.cachedStatement(sql: "SELECT inbox_seq FROM users WHERE app_id = ? AND username = ?")
            let upsert = try db.cachedStatement(
                sql: """
                    INSERT INTO device_cursors (app_id, username, device_id, acked_seq, updated_at) VALUES (?, ?, ?, ?, ?)
                    ON CONFLICT (app_id, username, device_id)
                    DO UPDATE SET acked_seq = MAX(acked_seq, excluded.acked_seq), updated_at = excluded.updated_at
                    """)
            for cursor in cursors {
                guard let highest = try Int64.fetchOne(top, arguments: [cursor.app, cursor.username]) else { continue }
                try upsert.execute(arguments: [cursor.app, cursor.username, cursor.device, min(max(cursor.seq, 0), highest), now])
            }
        }
    }

    public func offlineCount(of username: String, app: Int64) async throws -> Int {
        try await pool.read { db in
            try Int.fetchOne(
                db,
                sql: """
                    SELECT COUNT(*) FROM inbox WHERE app_id = ? AND username = ? AND origin_device IS NULL AND seq > COALESCE(
                        (SELECT MAX(acked_seq) FROM device_cursors WHERE app_id = ? AND username = ?), 0)
                    """,
                arguments: [app, username, app, username]) ?? 0
        }
    }

    public func offlineStatus(of messageID: UInt64, for username: String, app: Int64) async throws -> OfflineStatus? {
        try await pool.read { db in
            guard let seq = try Int64.fetchOne(
                db, sql: "SELECT seq FROM inbox WHERE app_id = ? AND message_id = ? AND username = ?",
                arguments: [app, Int64(messageID), username])
            else { return nil }
            let acked = try Int64.fetchOne(
                db, sql: "SELECT MAX(acked_seq) FROM device_cursors WHERE app_id = ? AND username = ?", arguments: [app, username]) ?? 0
            return acked >= seq ? .delivered : .undelivered
        }
    }

    public func setBadge(of username: String, app: Int64, to value: Int) async throws {
        try await pool.write { db in
            try db.execute(sql: "UPDATE users SET badge = ? WHERE app_id = ? AND username = ?", arguments: [max(0, value), app, username])
        }
    }

    // MARK: Push configurations and bindings

    public func savePushConfig(_ config: PushConfigRecord) async throws {
        try await pool.write { db in
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
        try await pool.read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM push_configs WHERE app_id = ? AND name = ?", arguments: [app, name]).map(Self.pushConfig(from:))
        }
    }

    public func pushConfigs(app: Int64) async throws -> [PushConfigRecord] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM push_configs WHERE app_id = ? ORDER BY name", arguments: [app]).map(Self.pushConfig(from:))
        }
    }

    public func deletePushConfig(_ name: String, app: Int64) async throws -> Bool {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM push_configs WHERE app_id = ? AND name = ?", arguments: [app, name])
            return db.changesCount > 0
        }
    }

    private static func pushConfig(from row: Row) -> PushConfigRecord {
        PushConfigRecord(
            appID: row["app_id"], name: row["name"], kind: PushConfigRecord.Kind(rawValue: row["kind"]) ?? .p8, environment: row["environment"],
            bundleID: row["bundle_id"], voip: row["voip"], keyID: row["key_id"], teamID: row["team_id"],
            sealedSecret: [UInt8](row["sealed_secret"] as Data), expiresAt: row["expires_at"], createdAt: row["created_at"])
    }

    public func bind(_ binding: PushBinding, app: Int64) async throws {
        try await pool.write { db in
            try db.execute(
                sql: "DELETE FROM push_bindings WHERE app_id = ? AND device_token = ? AND NOT (username = ? AND device_id = ?)",
                arguments: [app, binding.deviceToken, binding.username, binding.deviceID])
            try db.execute(
                sql: """
                    INSERT INTO push_bindings (app_id, username, device_id, notifier, device_token, bound_at) VALUES (?, ?, ?, ?, ?, ?)
                    ON CONFLICT (app_id, username, device_id, notifier)
                    DO UPDATE SET device_token = excluded.device_token, bound_at = excluded.bound_at
                    """,
                arguments: [app, binding.username, binding.deviceID, binding.notifier, binding.deviceToken, binding.boundAt])
        }
    }

    public func unbind(username: String, deviceID: String, notifier: String?, app: Int64) async throws {
        try await pool.write { db in
            try db.execute(
                sql: "DELETE FROM push_bindings WHERE app_id = ? AND username = ? AND device_id = ? AND (? IS NULL OR notifier = ?)",
                arguments: [app, username, deviceID, notifier, notifier])
        }
    }

    public func unbindAll(username: String, app: Int64) async throws {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM push_bindings WHERE app_id = ? AND username = ?", arguments: [app, username])
        }
    }

    public func removeBinding(deviceToken: String, notifier: String, app: Int64, unlessBoundSince: Int64?) async throws -> Bool {
        try await pool.write { db in
            try db.execute(
                sql: "DELETE FROM push_bindings WHERE app_id = ? AND device_token = ? AND notifier = ? AND (? IS NULL OR bound_at < ?)",
                arguments: [app, deviceToken, notifier, unlessBoundSince, unlessBoundSince])
            return db.changesCount > 0
        }
    }

    public func bindings(of username: String, app: Int64) async throws -> [PushBinding] {
        try await pool.read { db in
            try Row.fetchAll(
                db, sql: "SELECT * FROM push_bindings WHERE app_id = ? AND username = ? ORDER BY device_id, notifier", arguments: [app, username]
            ).map(Self.binding(from:))
        }
    }

    private static func binding(from row: Row) -> PushBinding {
        PushBinding(
            username: row["username"], deviceID: row["device_id"], notifier: row["notifier"], deviceToken: row["device_token"],
            boundAt: row["bound_at"])
    }

    // MARK: Push settings

    public func savePushSettings(_ settings: PushSettingsRecord, app: Int64) async throws {
        try await pool.write { db in
            if settings.remindType == nil && settings.quietHours == nil && settings.silentUntil == nil {
                try db.execute(
                    sql: "DELETE FROM push_settings WHERE app_id = ? AND username = ? AND scope = ?", arguments: [app, settings.username, settings.scope])
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

    public func pushSettings(of username: String, scopes: [String], app: Int64) async throws -> [String: PushSettingsRecord] {
        let found = try await pushSettings(of: [username], scopes: scopes, app: app).settings
        return Dictionary(found.map { ($0.scope, $0) }, uniquingKeysWith: { first, _ in first })
    }

    public func pushSettings(of usernames: [String], scopes: [String], app: Int64) async throws
        -> (settings: [PushSettingsRecord], profiles: [String: PushProfile])
    {
        guard !usernames.isEmpty, !scopes.isEmpty else { return ([], [:]) }
        return try await pool.read { db in
            var settings: [PushSettingsRecord] = []
            var profiles: [String: PushProfile] = [:]
            let scopeMarks = Array(repeating: "?", count: scopes.count).joined(separator: ",")
            for chunk in stride(from: 0, to: usernames.count, by: 400).map({ Array(usernames[$0..<min($0 + 400, usernames.count)]) }) {
                let marks = Array(repeating: "?", count: chunk.count).joined(separator: ",")
                for row in try Row.fetchAll(
                    db, sql: "SELECT * FROM push_settings WHERE app_id = ? AND username IN (\(marks)) AND scope IN (\(scopeMarks))",
                    arguments: StatementArguments([app] + chunk + scopes))
                {
                    settings.append(
                        PushSettingsRecord(
                            username: row["username"], scope: row["scope"], remindType: row["remind_type"], quietHours: row["quiet_hours"],
                            silentUntil: row["silent_until"]))
                }
                for row in try Row.fetchAll(
                    db,
                    sql: """
                        SELECT username, timezone, display_style, push_language, push_template, nickname FROM users
                        WHERE app_id = ? AND username IN (\(marks))
                        """,
                    arguments: StatementArguments([app] + chunk))
                {
                    profiles[row["username"]] = PushProfile(
                        timeZone: row["timezone"], displayStyle: row["display_style"], language: row["push_language"],
                        template: row["push_template"], nickname: row["nickname"])
                }
            }
            return (settings, profiles)
        }
    }

    public func setPushPreferences(of username: String, app: Int64, language: String??, template: String??) async throws {
        try await pool.write { db in
            if let language {
                try db.execute(sql: "UPDATE users SET push_language = ? WHERE app_id = ? AND username = ?", arguments: [language, app, username])
            }
            if let template {
                try db.execute(sql: "UPDATE users SET push_template = ? WHERE app_id = ? AND username = ?", arguments: [template, app, username])
            }
        }
    }

    public func saveTemplate(_ template: PushTemplateRecord, app: Int64, replace: Bool) async throws -> Bool {
        try await pool.write { db in
            if replace {
                try db.execute(
                    sql: "UPDATE push_templates SET title_pattern = ?, content_pattern = ?, updated_at = ? WHERE app_id = ? AND name = ?",
                    arguments: [template.titlePattern, template.contentPattern, template.updatedAt, app, template.name])
                return db.changesCount > 0
            }
            try Self.mapConstraint("template \(template.name) already exists") {
                try db.execute(
                    sql: "INSERT INTO push_templates (app_id, name, title_pattern, content_pattern, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
                    arguments: [app, template.name, template.titlePattern, template.contentPattern, template.createdAt, template.updatedAt])
            }
            return true
        }
    }

    public func templates(app: Int64) async throws -> [PushTemplateRecord] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM push_templates WHERE app_id = ? ORDER BY name", arguments: [app]).map { row in
                PushTemplateRecord(
                    name: row["name"], titlePattern: row["title_pattern"], contentPattern: row["content_pattern"], createdAt: row["created_at"],
                    updatedAt: row["updated_at"])
            }
        }
    }

    public func deleteTemplate(_ name: String, app: Int64) async throws -> Bool {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM push_templates WHERE app_id = ? AND name = ?", arguments: [app, name])
            return db.changesCount > 0
        }
    }

    public func pushPolicy(app: Int64) async throws -> PushPolicyRecord {
        try await pool.read { db in
            let row = try Row.fetchOne(db, sql: "SELECT multi_device, default_timezone, display_strings FROM apps WHERE id = ?", arguments: [app])
            let strings = (row?["display_strings"] as String?).flatMap { try? JSONDecoder().decode([String: String].self, from: Data($0.utf8)) }
            return PushPolicyRecord(
                multiDevice: row?["multi_device"] ?? "all_offline", timezone: row?["default_timezone"] ?? "UTC", displayStrings: strings ?? [:])
        }
    }

    public func savePushPolicy(_ policy: PushPolicyRecord, app: Int64) async throws {
        try await pool.write { db in
            try db.execute(
                sql: "UPDATE apps SET multi_device = ?, default_timezone = ?, display_strings = ? WHERE id = ?",
                arguments: [
                    policy.multiDevice, policy.timezone, String(decoding: try JSONEncoder().encode(policy.displayStrings), as: UTF8.self), app,
                ])
        }
    }

    // MARK: Push jobs

    public func claimPushJobs(now: Int64, lease: Int64, limit: Int) async throws -> [PushJob] {
        try await pool.write { db in
            try Row.fetchAll(
                db,
                sql: """
                    UPDATE push_jobs SET claimed_until = ?, attempts = attempts + 1 WHERE id IN (
                        SELECT id FROM push_jobs WHERE status = 'pending' AND next_attempt_at <= ? AND claimed_until <= ?
                        ORDER BY next_attempt_at, id LIMIT ?)
                    RETURNING *
                    """,
                arguments: [now + lease, now, now, limit]
            ).map(Self.pushJob(from:)).sorted { $0.id < $1.id }
        }
    }

    public func recordPushAttempts(_ outcomes: [PushAttemptOutcome], now: Int64) async throws {
        guard !outcomes.isEmpty else { return }
        try await pool.write { db in
            let update = try db.cachedStatement(
                sql: """
                    UPDATE push_jobs SET status = ?, last_status = ?, last_reason = ?, updated_at = ?,
                        next_attempt_at = COALESCE(?, next_attempt_at), claimed_until = 0 WHERE id = ?
                    """)
            let log = try db.cachedStatement(sql: "INSERT INTO push_attempts (job_id, at, http_status, reason, outcome) VALUES (?, ?, ?, ?, ?)")
            for outcome in outcomes {
                try update.execute(arguments: [
                    outcome.status.rawValue, outcome.httpStatus, outcome.reason, now, outcome.nextAttemptAt, outcome.jobID,
                ])
                try log.execute(arguments: [outcome.jobID, now, outcome.httpStatus, outcome.reason, outcome.status.rawValue])
            }
        }
    }

    public func pushJobs(app: Int64, username: String?, messageID: UInt64?, limit: Int) async throws -> [PushJob] {
        try await pool.read { db in
            let rows = try Row.fetchAll(
                db,
                sql: """
                    SELECT * FROM push_jobs WHERE app_id = ? AND (? IS NULL OR username = ?) AND (? IS NULL OR message_id = ?)
                    ORDER BY id DESC LIMIT ?
                    """,
                arguments: [app, username, username, messageID.map { Int64($0) }, messageID.map { Int64($0) }, limit])
            let history = try db.cachedStatement(sql: "SELECT * FROM push_attempts WHERE job_id = ? ORDER BY rowid")
            return try rows.map { row in
                var job = Self.pushJob(from: row)
                job.history = try Row.fetchAll(history, arguments: [job.id]).map { attempt in
                    PushAttempt(
                        at: attempt["at"], httpStatus: attempt["http_status"], reason: attempt["reason"],
                        outcome: PushJobStatus(rawValue: attempt["outcome"]) ?? .pending)
                }
                return job
            }
        }
    }

    public func nextPushJobDue() async throws -> Int64? {
        try await pool.read { db in
            try Int64.fetchOne(db, sql: "SELECT MIN(MAX(next_attempt_at, claimed_until)) FROM push_jobs WHERE status = 'pending'")
        }
    }

    private static func pushJob(from row: Row) -> PushJob {
        PushJob(
            id: row["id"], appID: row["app_id"], messageID: UInt64(row["message_id"] as Int64),
            job: NewPushJob(
                username: row["username"], deviceID: row["device_id"], notifier: row["notifier"], deviceToken: row["device_token"],
                topic: row["topic"], pushType: row["push_type"], priority: row["priority"], expiration: row["expiration"],
                collapseID: row["collapse_id"], apnsID: row["apns_id"], payload: row["payload"]),
            status: PushJobStatus(rawValue: row["status"]) ?? .pending, attempts: row["attempts"], lastStatus: row["last_status"],
            lastReason: row["last_reason"], createdAt: row["created_at"], updatedAt: row["updated_at"], nextAttemptAt: row["next_attempt_at"])
    }

    // MARK: Retention

    public func enforceRetention(_ app: AppRecord, now: Int64) async throws -> Int {
        try await pool.write { db in
            try db.execute(
                sql: "DELETE FROM inbox WHERE app_id = ? AND created_at < ?",
                arguments: [app.id, now - app.limits.maxAgeSeconds * 1000])
            var removed = db.changesCount
            try db.execute(
                sql: """
                    DELETE FROM inbox WHERE app_id = ? AND (username, seq) IN (
                        SELECT username, seq FROM (
                            SELECT username, seq, chat_type,
                                   ROW_NUMBER() OVER (PARTITION BY username, conversation ORDER BY seq DESC) AS newest
                            FROM inbox WHERE app_id = ?) ranked
                        WHERE (chat_type = 'chat' AND newest > ?) OR (chat_type = 'groupchat' AND newest > ?))
                    """,
                arguments: [app.id, app.id, app.limits.perChat, app.limits.perGroup])
            removed += db.changesCount
            try db.execute(
                sql: """
                    DELETE FROM messages WHERE app_id = ? AND NOT EXISTS (
                        SELECT 1 FROM inbox WHERE inbox.app_id = messages.app_id AND inbox.message_id = messages.id)
                    """,
                arguments: [app.id])
            // Finished push records are kept as long as messages are.
            let cutoff = now - app.limits.maxAgeSeconds * 1000
            try db.execute(
                sql: """
                    DELETE FROM push_attempts WHERE job_id IN (
                        SELECT id FROM push_jobs WHERE app_id = ? AND status != 'pending' AND updated_at < ?)
                    """,
                arguments: [app.id, cutoff])
            try db.execute(
                sql: "DELETE FROM push_jobs WHERE app_id = ? AND status != 'pending' AND updated_at < ?", arguments: [app.id, cutoff])
            return removed
        }
    }

    // MARK: Helpers

    private static func encode(_ value: JSONValue) throws -> String {
        String(decoding: try JSONEncoder().encode(value), as: UTF8.self)
    }

    private static func message(from row: Row) throws -> Message {
        let decoder = JSONDecoder()
        let body = try decoder.decode(JSONValue.self, from: Data((row["body"] as String).utf8))
        let ext = try decoder.decode([String: JSONValue].self, from: Data((row["ext"] as String).utf8))
        return Message(
            id: UInt64(row["id"] as Int64), from: row["sender"], to: row["recipient"],
            chatType: ChatType(rawValue: row["chat_type"]) ?? .chat, type: MessageType(rawValue: row["type"]) ?? .custom,
            body: body, ext: ext, timestamp: row["timestamp"])
    }

    private static func mapConstraint<T>(_ description: String, _ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
            throw BeaconError(.duplicate, description)
        }
    }
}
