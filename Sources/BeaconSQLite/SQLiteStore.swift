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

    // MARK: Settings

    public func setting(_ name: String, orInsert makeValue: @Sendable () -> String) async throws -> String {
        try await write { db in
            try db.execute(
                sql: "INSERT INTO settings (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING", arguments: [name, makeValue()])
            guard let value = try String.fetchOne(db, sql: "SELECT value FROM settings WHERE name = ?", arguments: [name]) else {
                throw BeaconError(.internalError, "setting \(name) vanished while it was written")
            }
            return value
        }
    }

    // MARK: Apps

    public func createApp(_ key: AppKey, clientID: String, clientSecretHash: String, limits: OfflineLimits, now: Int64) async throws
        -> AppRecord
    {
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
            id: try row.decode(forColumn: "id"),
            key: AppKey(org: try row.decode(forColumn: "org"), name: try row.decode(forColumn: "name")),
            clientID: try row.decode(forColumn: "client_id"), clientSecretHash: try row.decode(forColumn: "client_secret_hash"),
            limits: OfflineLimits(
                perChat: try row.decode(forColumn: "per_chat"), perGroup: try row.decode(forColumn: "per_group"),
                maxAgeSeconds: try row.decode(forColumn: "max_age_seconds")),
            createdAt: try row.decode(forColumn: "created_at"), tokensValidAfter: try row.decode(forColumn: "tokens_valid_after"),
            tencent: try Self.tencentIdentity(
                appID: row.decode(forColumn: "tencent_app_id"), sealedKey: row.decode(forColumn: "tencent_sealed_key"),
                admin: row.decode(forColumn: "tencent_admin")))
    }

    /// The Tencent identity of an app row: all three columns, or none.
    private static func tencentIdentity(appID: Int64?, sealedKey: Data?, admin: String?) throws -> TencentIdentity? {
        guard let appID, let sealedKey, let admin else { return nil }
        return TencentIdentity(sdkAppID: appID, sealedKey: [UInt8](sealedKey), adminIdentifier: admin)
    }

    public func setTencentIdentity(_ identity: TencentIdentity, app: Int64) async throws -> AppRecord? {
        try await write { db in
            try Self.mapConstraint("SDKAppID \(identity.sdkAppID) belongs to another app") {
                try db.execute(
                    sql: "UPDATE apps SET tencent_app_id = ?, tencent_sealed_key = ?, tencent_admin = ? WHERE id = ?",
                    arguments: [identity.sdkAppID, Data(identity.sealedKey), identity.adminIdentifier, app])
            }
            guard db.changesCount > 0 else { return nil }
            return try Row.fetchOne(db, sql: "SELECT * FROM apps WHERE id = ?", arguments: [app]).map(Self.app(from:))
        }
    }

    public func app(tencentAppID sdkAppID: Int64) async throws -> AppRecord? {
        try await read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM apps WHERE tencent_app_id = ?", arguments: [sdkAppID]).map(Self.app(from:))
        }
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
            appID: try row.decode(forColumn: "app_id"), username: try row.decode(forColumn: "username"),
            uuid: try row.decode(forColumn: "uuid"),
            passwordHash: try row.decode(forColumn: "password_hash"), nickname: try row.decode(forColumn: "nickname"),
            timezone: try row.decode(forColumn: "timezone"), createdAt: try row.decode(forColumn: "created_at"),
            modifiedAt: try row.decode(forColumn: "modified_at"), tokensValidAfter: try row.decode(forColumn: "tokens_valid_after"),
            displayStyle: try row.decode(forColumn: "display_style"))
    }

    public func users(named usernames: [String], app: Int64) async throws -> [UserRecord] {
        guard !usernames.isEmpty else { return [] }
        return try await read { db in
            // Chunked to stay under SQLite's host-parameter limit; a name given twice is read once.
            try Self.chunks(Array(Set(usernames))).flatMap { chunk in
                try Row.fetchAll(
                    db, sql: "SELECT * FROM users WHERE app_id = ? AND username IN (\(Self.marks(chunk.count)))",
                    arguments: StatementArguments([app] + Array(chunk))
                ).map(Self.userRecord)
            }
        }
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
                    UPDATE push_jobs SET status = 'skipped', last_reason = \(StoredJobReason.userDeleted.sqlLiteral), updated_at = ?, claimed_until = 0
                    WHERE app_id = ? AND username = ? AND status = 'pending'
                    """,
                arguments: [now, app, username])
            try db.execute(
                sql: "DELETE FROM push_attempts WHERE job_id IN (SELECT id FROM push_jobs WHERE app_id = ? AND username = ?)",
                arguments: [app, username])
            let contents = try Int64?.fetchAll(
                db, sql: "DELETE FROM push_jobs WHERE app_id = ? AND username = ? RETURNING content_id", arguments: [app, username])
            try Self.deleteUnreferencedContents(contents, app: app, db: db)
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
