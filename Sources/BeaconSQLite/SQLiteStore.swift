import BeaconCore
import BeaconStorage
import Foundation
import GRDB

/// The embedded default store: one SQLite file in WAL mode, through GRDB.
///
/// Several processes may open the same file (the CLI creates apps while the server runs): SQLite's own
/// locking serialises their writes, with a busy timeout instead of immediate failures. Only one of them pushes.
public final class SQLiteStore: BeaconStore {
    /// How far a committed transaction survives (SQLite's `synchronous` in WAL mode).
    public enum Durability: String, Sendable, CaseIterable {
        /// Every commit is on disk before it returns (`FULL`): an acknowledged message survives a power loss.
        case full
        /// Commits reach the disk at checkpoints (`NORMAL`): they survive a crash of Beacon, but a power loss or an
        /// operating-system crash may roll back the last ones.
        case normal
    }

    let pool: DatabasePool
    public let transactionTimings = TransactionTimings()
    /// The database file.
    public var path: String { pool.path }

    /// Opens (creating if needed) the database at `path` and brings its schema up to date. A new file is created
    /// readable by its owner only (0600); SQLite gives its WAL and shared-memory files the same mode.
    public init(path: String, durability: Durability = .full) throws {
        try Self.restrictPermissions(of: path)
        var configuration = Configuration()
        configuration.busyMode = .timeout(10)
        let synchronous = durability == .full ? "FULL" : "NORMAL"
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = \(synchronous)")
        }
        pool = try DatabasePool(path: path, configuration: configuration)
        try Self.migrator.migrate(pool)
    }

    public func pendingMigrations() async throws -> [String] {
        try await read { db in
            let applied = try Self.migrator.appliedIdentifiers(db)
            return Self.migrator.migrations.filter { !applied.contains($0) }
        }
    }

    /// A snapshot read on the pool, timed.
    func read<T: Sendable>(_ body: @Sendable (Database) throws -> T) async throws -> T {
        try await transactionTimings.time(.read) { try await pool.read(body) }
    }

    /// A transaction on the single writer, timed (the wait for the writer included).
    func write<T: Sendable>(_ body: @Sendable (Database) throws -> T) async throws -> T {
        try await transactionTimings.time(.write) { try await pool.write(body) }
    }

    /// Opens `beacon.sqlite` inside `directory`, creating the directory (0700) if needed.
    public convenience init(directory: String, durability: Durability = .full) throws {
        try PrivateDirectory.create(directory)
        try self.init(path: Self.databasePath(inDirectory: directory), durability: durability)
    }

    /// The database file of a data directory.
    public static func databasePath(inDirectory directory: String) -> String {
        (directory as NSString).appendingPathComponent("beacon.sqlite")
    }

    /// Creates the database file 0600 before SQLite opens it (its WAL and shm files follow its mode), and tightens the
    /// mode of files an earlier version created.
    private static func restrictPermissions(of path: String) throws {
        let manager = FileManager.default
        if !manager.fileExists(atPath: path) {
            guard manager.createFile(atPath: path, contents: nil, attributes: [.posixPermissions: 0o600]) else {
                throw CocoaError(.fileWriteNoPermission, userInfo: [NSFilePathErrorKey: path])
            }
        }
        for file in [path, path + "-wal", path + "-shm"] where manager.fileExists(atPath: file) {
            try manager.setAttributes([.posixPermissions: 0o600], ofItemAtPath: file)
        }
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
        migrator.registerMigration("v7-hardening") { db in
            try db.execute(
                sql: """
                    ALTER TABLE push_bindings ADD COLUMN voip_token TEXT;
                    CREATE INDEX push_bindings_by_voip_token ON push_bindings (app_id, voip_token);
                    ALTER TABLE push_jobs ADD COLUMN claim_token INTEGER NOT NULL DEFAULT 0;
                    CREATE INDEX push_jobs_by_status ON push_jobs (app_id, username, status);
                    CREATE TABLE pending_routes (
                        app_id INTEGER NOT NULL, message_id INTEGER NOT NULL, created_at INTEGER NOT NULL,
                        PRIMARY KEY (app_id, message_id));
                    CREATE INDEX pending_routes_by_age ON pending_routes (created_at);
                    CREATE TABLE send_receipts (
                        app_id INTEGER NOT NULL, scope TEXT NOT NULL, reference TEXT NOT NULL, message_ids TEXT NOT NULL,
                        created_at INTEGER NOT NULL, PRIMARY KEY (app_id, scope, reference));
                    CREATE INDEX send_receipts_by_age ON send_receipts (app_id, created_at);
                    CREATE INDEX device_cursors_by_age ON device_cursors (app_id, updated_at);
                    DELETE FROM settings WHERE name = 'token_signing_key';
                    """)
        }
        migrator.registerMigration("v8-read-state") { db in
            // The badge becomes the unread count: `badge` is now only the total a client reported (at inbox position
            // `badge_seq`), so the old "since last online" counters are cleared. Entries stored before this migration
            // count as unread when they were received and not `cmd` (their ext flags are not looked at), and what a device
            // of the user received (acknowledged) counts as read: each conversation gets a marker (version 0) there.
            try db.execute(
                sql: """
                    ALTER TABLE inbox ADD COLUMN counts INTEGER NOT NULL DEFAULT 0;
                    UPDATE inbox SET counts = 1 WHERE EXISTS (SELECT 1 FROM messages m WHERE m.app_id = inbox.app_id
                        AND m.id = inbox.message_id AND m.sender != inbox.username AND m.type != 'cmd');
                    UPDATE users SET badge = 0;
                    ALTER TABLE users ADD COLUMN badge_seq INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE users ADD COLUMN read_version INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE apps ADD COLUMN badge_counts_muted INTEGER NOT NULL DEFAULT 0;
                    CREATE TABLE conversation_reads (
                        app_id INTEGER NOT NULL, username TEXT NOT NULL, conversation TEXT NOT NULL, read_seq INTEGER NOT NULL,
                        up_to INTEGER NOT NULL, version INTEGER NOT NULL, updated_at INTEGER NOT NULL,
                        PRIMARY KEY (app_id, username, conversation));
                    CREATE INDEX conversation_reads_by_version ON conversation_reads (app_id, username, version);
                    INSERT INTO conversation_reads (app_id, username, conversation, read_seq, up_to, version, updated_at)
                    SELECT i.app_id, i.username, i.conversation, MAX(i.seq), 0, 0, 0 FROM inbox i
                    JOIN (SELECT app_id, username, MAX(acked_seq) AS acked FROM device_cursors GROUP BY app_id, username) c
                        ON c.app_id = i.app_id AND c.username = i.username
                    WHERE i.seq <= c.acked GROUP BY i.app_id, i.username, i.conversation;
                    UPDATE conversation_reads SET up_to = (SELECT message_id FROM inbox i WHERE i.app_id = conversation_reads.app_id
                        AND i.username = conversation_reads.username AND i.seq = conversation_reads.read_seq);
                    ALTER TABLE push_jobs ADD COLUMN read_version INTEGER NOT NULL DEFAULT 0;
                    """)
        }
        migrator.registerMigration("v9-webhooks") { db in
            // The push-result webhook's outbox is filled by triggers, so that every path that decides a push job (recorded
            // skips, APNs' answers, expiry, superseded withdrawals, reads, deleted users, changed bindings) records its
            // event in the same transaction, and none can forget to.
            try db.execute(
                sql: """
                    CREATE TABLE webhooks (
                        app_id INTEGER PRIMARY KEY, url TEXT NOT NULL, sealed_secret BLOB NOT NULL, enabled INTEGER NOT NULL,
                        failures INTEGER NOT NULL DEFAULT 0, next_attempt_at INTEGER NOT NULL DEFAULT 0, last_error TEXT,
                        dropped_events INTEGER NOT NULL DEFAULT 0, claimed_until INTEGER NOT NULL DEFAULT 0,
                        claim_token INTEGER NOT NULL DEFAULT 0, updated_at INTEGER NOT NULL);
                    CREATE TABLE webhook_events (
                        id INTEGER PRIMARY KEY AUTOINCREMENT, app_id INTEGER NOT NULL, kind TEXT NOT NULL, at INTEGER NOT NULL,
                        username TEXT NOT NULL, device_id TEXT NOT NULL, notifier TEXT NOT NULL, message_id INTEGER, push_type TEXT,
                        outcome TEXT, reason TEXT, apns_status INTEGER, apns_id TEXT, attempts INTEGER);
                    CREATE INDEX webhook_events_by_app ON webhook_events (app_id, id);
                    CREATE TRIGGER push_jobs_decided_webhook AFTER INSERT ON push_jobs WHEN NEW.status != 'pending' BEGIN
                        INSERT INTO webhook_events (app_id, kind, at, username, device_id, notifier, message_id, push_type, outcome,
                            reason, apns_status, apns_id, attempts)
                        SELECT NEW.app_id, 'push', NEW.updated_at, NEW.username, NEW.device_id, NEW.notifier, NEW.message_id,
                            NEW.push_type, NEW.status, NEW.last_reason, NEW.last_status, NEW.apns_id, NEW.attempts
                        WHERE EXISTS (SELECT 1 FROM webhooks w WHERE w.app_id = NEW.app_id AND w.enabled = 1);
                    END;
                    CREATE TRIGGER push_jobs_finished_webhook AFTER UPDATE OF status ON push_jobs
                    WHEN NEW.status != 'pending' AND NEW.status != OLD.status BEGIN
                        INSERT INTO webhook_events (app_id, kind, at, username, device_id, notifier, message_id, push_type, outcome,
                            reason, apns_status, apns_id, attempts)
                        SELECT NEW.app_id, 'push', NEW.updated_at, NEW.username, NEW.device_id, NEW.notifier, NEW.message_id,
                            NEW.push_type, NEW.status, NEW.last_reason, NEW.last_status, NEW.apns_id, NEW.attempts
                        WHERE EXISTS (SELECT 1 FROM webhooks w WHERE w.app_id = NEW.app_id AND w.enabled = 1);
                    END;
                    """)
        }
        migrator.registerMigration("v10-console-sessions") { db in
            try db.execute(
                sql: """
                    CREATE TABLE console_sessions (
                        digest TEXT PRIMARY KEY, app_id INTEGER NOT NULL, created_at INTEGER NOT NULL, expires_at INTEGER NOT NULL);
                    CREATE INDEX console_sessions_by_expiry ON console_sessions (expires_at);
                    """)
        }
        migrator.registerMigration("v11-app-credentials") { db in
            // App tokens issued before a rotation of the client secret are refused (`rotateClientSecret`).
            try db.execute(
                sql: """
                    ALTER TABLE apps ADD COLUMN tokens_valid_after INTEGER NOT NULL DEFAULT 0;
                    CREATE INDEX console_sessions_by_app ON console_sessions (app_id);
                    """)
        }
        migrator.registerMigration("v12-schema-as-postgres") { db in
            // `skip_reason` (v3) was never written or read: a skip's reason is `last_reason`, as on PostgreSQL. The schema
            // conformance test keeps the two engines' schemas alike.
            try db.execute(sql: "ALTER TABLE push_jobs DROP COLUMN skip_reason")
        }
        return migrator
    }

    // MARK: Backup

    /// Writes a consistent, compacted copy of the database file `database` to `path` (`VACUUM INTO`) while a server
    /// keeps using it: one snapshot read on a connection of its own, so writers never wait for it. The database is
    /// opened read-only — nothing is created, migrated or written there, whichever version the running server is — and
    /// must exist. Fails if `path` exists.
    public static func backup(database: String, to path: String) async throws {
        guard FileManager.default.fileExists(atPath: database) else {
            throw BeaconError(.illegalArgument, "there is no database at \(database) (check --data-dir or --database)")
        }
        var configuration = Configuration()
        configuration.readonly = true
        configuration.busyMode = .timeout(10)
        let source = try DatabaseQueue(path: database, configuration: configuration)
        defer { try? source.close() }
        guard try await source.read({ db in try db.tableExists("grdb_migrations") && db.tableExists("apps") }) else {
            throw BeaconError(.illegalArgument, "\(database) is not a Beacon database")
        }
        // Created empty first, exclusively and private (0600): the copy holds password hashes and sealed credentials.
        let descriptor = open(path, O_CREAT | O_EXCL | O_WRONLY, 0o600)
        guard descriptor >= 0 else {
            throw BeaconError(.illegalArgument, "cannot create \(path) (a backup never overwrites a file): \(String(cString: strerror(errno)))")
        }
        close(descriptor)
        do {
            // Outside a transaction: SQLite runs VACUUM in its own.
            try source.inDatabase { db in try db.execute(sql: "VACUUM INTO ?", arguments: [path]) }
        } catch {
            try? FileManager.default.removeItem(atPath: path)
            throw error
        }
    }

    // MARK: Settings

    public func setting(_ name: String, orInsert makeValue: @Sendable () -> String) async throws -> String {
        try await write { db in
            try db.execute(sql: "INSERT INTO settings (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING", arguments: [name, makeValue()])
            guard let value = try String.fetchOne(db, sql: "SELECT value FROM settings WHERE name = ?", arguments: [name]) else {
                throw BeaconError(.internalError, "setting \(name) vanished while it was written")
            }
            return value
        }
    }

    // MARK: Apps

    public func createApp(_ key: AppKey, clientID: String, clientSecretHash: String, limits: OfflineLimits, now: Int64) async throws -> AppRecord {
        try await write { db in
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
        try await read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM apps WHERE org = ? AND name = ?", arguments: [key.org, key.name]).map(Self.app(from:))
        }
    }

    public func app(id: Int64) async throws -> AppRecord? {
        try await read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM apps WHERE id = ?", arguments: [id]).map(Self.app(from:))
        }
    }

    public func allApps() async throws -> [AppRecord] {
        try await read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM apps ORDER BY id").map(Self.app(from:))
        }
    }

    /// Rows are decoded with errors, not GRDB's trapping subscripts: a damaged stored app fails the read, not the server.
    private static func app(from row: Row) throws -> AppRecord {
        AppRecord(
            id: try row.decode(forColumn: "id"), key: AppKey(org: try row.decode(forColumn: "org"), name: try row.decode(forColumn: "name")),
            clientID: try row.decode(forColumn: "client_id"), clientSecretHash: try row.decode(forColumn: "client_secret_hash"),
            limits: OfflineLimits(
                perChat: try row.decode(forColumn: "per_chat"), perGroup: try row.decode(forColumn: "per_group"),
                maxAgeSeconds: try row.decode(forColumn: "max_age_seconds")),
            createdAt: try row.decode(forColumn: "created_at"), tokensValidAfter: try row.decode(forColumn: "tokens_valid_after"))
    }

    public func rotateClientSecret(app: Int64, newSecretHash: String, now: Int64) async throws -> AppRecord? {
        try await write { db in
            try db.execute(
                sql: "UPDATE apps SET client_secret_hash = ?, tokens_valid_after = MAX(tokens_valid_after, ?) WHERE id = ?",
                arguments: [newSecretHash, now, app])
            guard db.changesCount > 0 else { return nil }
            try db.execute(sql: "DELETE FROM console_sessions WHERE app_id = ?", arguments: [app])
            return try Row.fetchOne(db, sql: "SELECT * FROM apps WHERE id = ?", arguments: [app]).map(Self.app(from:))
        }
    }

    // MARK: Users

    public func createUsers(_ users: [NewUser], app: Int64, now: Int64) async throws -> [UserRecord] {
        try await write { db in
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
        try await read { db in try Self.user(username, app: app, db: db) }
    }

    private static func user(_ username: String, app: Int64, db: Database) throws -> UserRecord? {
        try Row.fetchOne(db, sql: "SELECT * FROM users WHERE app_id = ? AND username = ?", arguments: [app, username]).map(userRecord)
    }

    public func users(app: Int64, after: String?, prefix: String?, limit: Int) async throws -> [UserRecord] {
        try await read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT * FROM users WHERE app_id = ? AND (? IS NULL OR username > ?)
                        AND (? IS NULL OR substr(username, 1, length(?)) = ?)
                    ORDER BY username LIMIT ?
                    """,
                arguments: [app, after, after, prefix, prefix, prefix, max(limit, 0)]
            ).map(Self.userRecord)
        }
    }

    /// A `users` row (a damaged one throws instead of trapping).
    private static func userRecord(_ row: Row) throws -> UserRecord {
        UserRecord(
            appID: try row.decode(forColumn: "app_id"), username: try row.decode(forColumn: "username"), uuid: try row.decode(forColumn: "uuid"),
            passwordHash: try row.decode(forColumn: "password_hash"), nickname: try row.decode(forColumn: "nickname"),
            timezone: try row.decode(forColumn: "timezone"), createdAt: try row.decode(forColumn: "created_at"),
            modifiedAt: try row.decode(forColumn: "modified_at"), tokensValidAfter: try row.decode(forColumn: "tokens_valid_after"),
            displayStyle: try row.decode(forColumn: "display_style"))
    }

    public func existingUsers(_ usernames: [String], app: Int64) async throws -> Set<String> {
        guard !usernames.isEmpty else { return [] }
        return try await read { db in
            var found = Set<String>()
            // Chunked to stay under SQLite's host-parameter limit.
            for chunk in Self.chunks(usernames) {
                let names = try String.fetchAll(
                    db, sql: "SELECT username FROM users WHERE app_id = ? AND username IN (\(Self.marks(chunk.count)))",
                    arguments: StatementArguments([app] + Array(chunk)))
                found.formUnion(names)
            }
            return found
        }
    }

    public func updateUser(_ username: String, app: Int64, changes: UserChanges, now: Int64) async throws -> UserRecord? {
        try await write { db in
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
        try await write { db in
            try db.execute(
                sql: "UPDATE users SET tokens_valid_after = MAX(tokens_valid_after, ?) WHERE app_id = ? AND username = ?",
                arguments: [instant, app, username])
        }
    }

    public func deleteUser(_ username: String, app: Int64, now: Int64) async throws -> Bool {
        try await write { db in
            for table in ["inbox", "device_cursors", "group_members", "push_bindings", "push_settings", "conversation_reads"] {
                try db.execute(sql: "DELETE FROM \(table) WHERE app_id = ? AND username = ?", arguments: [app, username])
            }
            // Pending jobs end `skipped` first, so that the webhook's triggers report them, then every record of the user's
            // pushes goes: a user created again under the name must not read them.
            try db.execute(
                sql: """
                    UPDATE push_jobs SET status = 'skipped', last_reason = 'user_deleted', updated_at = ?, claimed_until = 0
                    WHERE app_id = ? AND username = ? AND status = 'pending'
                    """,
                arguments: [now, app, username])
            try db.execute(
                sql: "DELETE FROM push_attempts WHERE job_id IN (SELECT id FROM push_jobs WHERE app_id = ? AND username = ?)",
                arguments: [app, username])
            try db.execute(sql: "DELETE FROM push_jobs WHERE app_id = ? AND username = ?", arguments: [app, username])
            let devicePrefix = SendReceipt.deviceScope(user: username, device: "")
            try db.execute(
                sql: "DELETE FROM send_receipts WHERE app_id = ? AND (scope = ? OR substr(scope, 1, ?) = ?)",
                arguments: [app, SendReceipt.senderScope(username), devicePrefix.utf8.count, devicePrefix])
            try Self.handOverGroups(of: username, app: app, db: db)
            try db.execute(sql: "DELETE FROM users WHERE app_id = ? AND username = ?", arguments: [app, username])
            return db.changesCount > 0
        }
    }

    /// Each group the user owned goes to its longest-standing member (earliest joined, then by name), or is dissolved
    /// when no member is left. Called once the user's memberships are gone.
    private static func handOverGroups(of username: String, app: Int64, db: Database) throws {
        let owned = try String.fetchAll(db, sql: "SELECT id FROM chat_groups WHERE app_id = ? AND owner = ?", arguments: [app, username])
        for group in owned {
            let heir = try String.fetchOne(
                db,
                sql: "SELECT username FROM group_members WHERE app_id = ? AND group_id = ? ORDER BY joined_at, username LIMIT 1",
                arguments: [app, group])
            if let heir {
                try db.execute(sql: "UPDATE chat_groups SET owner = ? WHERE app_id = ? AND id = ?", arguments: [heir, app, group])
            } else {
                try db.execute(sql: "DELETE FROM chat_groups WHERE app_id = ? AND id = ?", arguments: [app, group])
            }
        }
    }

    // MARK: Groups

    public func createGroup(_ group: GroupRecord, members: [String]) async throws {
        try await write { db in
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
        try await read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM chat_groups WHERE app_id = ? AND id = ?", arguments: [app, id]).map { row in
                GroupRecord(
                    appID: try row.decode(forColumn: "app_id"), id: try row.decode(forColumn: "id"), name: try row.decode(forColumn: "name"),
                    description: try row.decode(forColumn: "description"), owner: try row.decode(forColumn: "owner"),
                    maxUsers: try row.decode(forColumn: "max_users"), createdAt: try row.decode(forColumn: "created_at"))
            }
        }
    }

    public func groupMembers(_ id: String, app: Int64) async throws -> [String] {
        try await read { db in
            try String.fetchAll(
                db, sql: "SELECT username FROM group_members WHERE app_id = ? AND group_id = ? ORDER BY username", arguments: [app, id])
        }
    }

    public func addGroupMember(_ username: String, group: String, app: Int64, now: Int64) async throws -> Bool {
        try await write { db in
            try db.execute(
                sql: "INSERT INTO group_members (app_id, group_id, username, joined_at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                arguments: [app, group, username, now])
            return db.changesCount > 0
        }
    }

    public func removeGroupMember(_ username: String, group: String, app: Int64) async throws -> Bool {
        try await write { db in
            try db.execute(
                sql: "DELETE FROM group_members WHERE app_id = ? AND group_id = ? AND username = ?", arguments: [app, group, username])
            return db.changesCount > 0
        }
    }

    // MARK: Helpers

    static func message(from row: Row, _ columns: Columns) throws -> Message {
        try StoredForm.message(
            id: try columns.decode("id", in: row), sender: try columns.decode("sender", in: row),
            recipient: try columns.decode("recipient", in: row), chatType: try columns.decode("chat_type", in: row),
            type: try columns.decode("type", in: row), body: try columns.decode("body", in: row), ext: try columns.decode("ext", in: row),
            timestamp: try columns.decode("timestamp", in: row))
    }

    static func mapConstraint<T>(_ description: String, _ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
            throw BeaconError(.duplicate, description)
        }
    }
}

extension SQLiteStore {
    /// `?,?,…` for `count` SQL arguments.
    static func marks(_ count: Int) -> String {
        Array(repeating: "?", count: count).joined(separator: ",")
    }

    /// `items` in chunks that stay under SQLite's host-parameter limit.
    static func chunks<T>(_ items: [T], of size: Int = 500) -> [ArraySlice<T>] {
        stride(from: 0, to: items.count, by: size).map { items[$0..<min($0 + size, items.count)] }
    }
}

