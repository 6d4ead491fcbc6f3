import BeaconCore
import BeaconStorage
import Foundation
import Logging
import PostgresNIO

/// The PostgreSQL store, through postgres-nio's pool: several `beacon serve` nodes share one database (`ClusterStore`).
///
/// What SQLite's single writer gave for free is made explicit here:
/// - A user's inbox sequence is taken with `UPDATE users … RETURNING inbox_seq`, which holds the user's row lock until
///   commit: the next message to the same user waits, so sequences are dense and commit in order (a reader of
///   `seq > n` never skips a row that commits late).
/// - Rows locked in one transaction (users' sequences and badges) are locked in username order, so concurrent group sends
///   to overlapping groups cannot deadlock; a deadlock or serialization failure reported anyway is retried.
///
/// The pool must run while the store is used: `run()` (a `Service`), or `withStore(url:logger:_:)`.
public final class PostgresStore: BeaconStore {
    let client: PostgresClient
    let logger: Logger
    /// The schema Beacon's tables live in, when not the database's default (`?schema=` in the URL).
    let schema: String?
    public let transactionTimings = TransactionTimings()

    /// A store on `client` (which the caller runs), its tables in `schema` (which the client's connections must have as
    /// their `search_path`) or the default one. Call `migrate()` before use.
    public init(client: PostgresClient, schema: String? = nil, logger: Logger) {
        self.client = client
        self.schema = schema
        self.logger = logger
    }

    /// A store for `url`: `postgres://user:password@host:port/database`, with optional `sslmode=disable|prefer|require`,
    /// `pool_size=N` (connections, default 16) and `schema=name` (created if needed; default: the database's own).
    public convenience init(url: String, logger: Logger) throws {
        let (configuration, schema) = try Self.configuration(url: url)
        self.init(client: PostgresClient(configuration: configuration, backgroundLogger: logger), schema: schema, logger: logger)
    }

    /// Runs the connection pool until the task is cancelled.
    public func run() async {
        await client.run()
    }

    /// Opens a store on `url`, brings its schema up to date, runs `body` with it, and closes the pool afterwards.
    public static func withStore<T: Sendable>(
        url: String, logger: Logger, _ body: @Sendable (PostgresStore) async throws -> T
    ) async throws -> T {
        let store = try PostgresStore(url: url, logger: logger)
        return try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask {
                await store.run()
                return nil
            }
            defer { group.cancelAll() }
            try await store.migrate()
            return try await body(store)
        }
    }

    /// The pool's configuration for a `postgres://` or `postgresql://` URL, and the schema it names.
    static func configuration(url: String) throws -> (PostgresClient.Configuration, schema: String?) {
        guard let components = URLComponents(string: url), ["postgres", "postgresql"].contains(components.scheme ?? ""),
            let host = components.host, !host.isEmpty
        else {
            throw BeaconError(.illegalArgument, "database URL must look like postgres://user:password@host:5432/database")
        }
        let query = Dictionary((components.queryItems ?? []).map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { $1 })
        let tls: PostgresClient.Configuration.TLS
        switch query["sslmode"] ?? "disable" {
        case "disable": tls = .disable
        case "prefer": tls = .prefer(.makeClientConfiguration())
        case "require": tls = .require(.makeClientConfiguration())
        case let mode: throw BeaconError(.illegalArgument, "sslmode \(mode) is not supported (disable, prefer, require)")
        }
        let database = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        var configuration = PostgresClient.Configuration(
            host: host, port: components.port ?? 5432, username: components.user ?? "postgres", password: components.password,
            database: database.isEmpty ? nil : database, tls: tls)
        // Three at least: a node keeps one for its wake-ups, and its heartbeat must not wait behind everything else.
        configuration.options.maximumConnections = max(3, Int(query["pool_size"] ?? "") ?? 16)
        let schema = query["schema"]
        if let schema {
            guard !schema.isEmpty, schema.utf8.count <= 63,
                schema.allSatisfy({ $0.isASCII && ($0.isLowercase || $0.isNumber || $0 == "_") })
            else {
                throw BeaconError(.illegalArgument, "schema must be 1-63 characters of a-z, 0-9 and _")
            }
            configuration.options.additionalStartupParameters = [("search_path", schema)]
        }
        // Beacon never leaves a transaction idle (no network I/O inside one): a session idle in one for this long belongs to
        // a node that is partitioned away or frozen, and holds locks others need (a device's presence, a node's row).
        configuration.options.additionalStartupParameters.append(("idle_in_transaction_session_timeout", "15s"))
        // A client gone without closing (a node's host lost, a connection dropped by a middlebox) is found out by the server
        // in a minute or two, rather than the system's two hours (keepalives when nothing is in flight) or ~15 minutes
        // (retransmissions, `tcp_user_timeout`): a node's notification connection then stops holding back PostgreSQL's
        // notification queue. A node frozen on a live host still acknowledges; only ending it frees the queue.
        configuration.options.additionalStartupParameters += [
            ("tcp_keepalives_idle", "30"), ("tcp_keepalives_interval", "10"), ("tcp_keepalives_count", "3"),
            ("tcp_user_timeout", "60000"),
        ]
        return (configuration, schema)
    }

    // MARK: Transactions

    /// Runs `body` in a transaction, again (up to 5 times) when PostgreSQL aborts it for a deadlock or a serialization
    /// failure: both mean "try again", and nothing of the failed attempt was kept. An error `body` throws is rethrown as
    /// it was (after the rollback).
    func transaction<T: Sendable>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        try await transactionTimings.time(.write) {
            var attempt = 0
            while true {
                attempt += 1
                do {
                    return try await client.withTransaction(logger: logger) { connection in try await body(connection) }
                } catch let error as PostgresTransactionError {
                    if attempt < 5, Self.isRetryable(error.closureError ?? error.commitError) {
                        logger.debug("transaction retried", metadata: ["error": "\(String(reflecting: error))"])
                        continue
                    }
                    if let closureError = error.closureError, error.rollbackError == nil { throw closureError }
                    throw error
                }
            }
        }
    }

    private static func isRetryable(_ error: (any Error)?) -> Bool {
        guard let failure = error as? PSQLError, let state = failure.serverInfo?[.sqlState] else { return false }
        return state == "40P01" || state == "40001"
    }

    /// Rows of a query on the pool (a read, or a single statement that commits on its own).
    func rows(_ query: PostgresQuery) async throws -> [PostgresRandomAccessRow] {
        try await transactionTimings.time(.statement) {
            try await client.query(query, logger: logger).collect().map { $0.makeRandomAccess() }
        }
    }

    /// Runs a statement on the pool; the number of rows it returned (use `RETURNING 1` to count the rows changed).
    @discardableResult
    func execute(_ query: PostgresQuery) async throws -> Int {
        try await transactionTimings.time(.statement) { try await client.query(query, logger: logger).collect().count }
    }

    /// Maps a unique violation to `duplicate`.
    static func mapConstraint<T>(_ description: String, _ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let error as PSQLError where error.serverInfo?[.sqlState] == "23505" {
            throw BeaconError(.duplicate, description)
        }
    }

    // MARK: Settings

    public func setting(_ name: String, orInsert makeValue: @Sendable () -> String) async throws -> String {
        try await execute("INSERT INTO settings (name, value) VALUES (\(name), \(makeValue())) ON CONFLICT (name) DO NOTHING")
        guard let row = try await rows("SELECT value FROM settings WHERE name = \(name)").first else {
            throw BeaconError(.internalError, "setting \(name) vanished while it was written")
        }
        return try row["value"].decode(String.self)
    }

    // MARK: Apps

    public func createApp(_ key: AppKey, clientID: String, clientSecretHash: String, limits: OfflineLimits, now: Int64) async throws
        -> AppRecord
    {
        try await Self.mapConstraint("app \(key) already exists") {
            let inserted = try await rows(
                """
                INSERT INTO apps (org, name, client_id, client_secret_hash, per_chat, per_group, max_age_seconds, created_at)
                VALUES (\(key.org), \(key.name), \(clientID), \(clientSecretHash), \(limits.perChat), \(limits.perGroup),
                    \(limits.maxAgeSeconds), \(now))
                RETURNING id
                """)
            guard let id = try inserted.first?["id"].decode(Int64.self) else {
                throw BeaconError(.internalError, "app insert returned no id")
            }
            return AppRecord(id: id, key: key, clientID: clientID, clientSecretHash: clientSecretHash, limits: limits, createdAt: now)
        }
    }

    public func app(_ key: AppKey) async throws -> AppRecord? {
        try await rows("SELECT \(unescaped: Self.appColumns) FROM apps WHERE org = \(key.org) AND name = \(key.name)").first.map(
            Self.app(from:))
    }

    public func app(id: Int64) async throws -> AppRecord? {
        try await rows("SELECT \(unescaped: Self.appColumns) FROM apps WHERE id = \(id)").first.map(Self.app(from:))
    }

    public func allApps() async throws -> [AppRecord] {
        try await rows("SELECT \(unescaped: Self.appColumns) FROM apps ORDER BY id").map(Self.app(from:))
    }

    public func rotateClientSecret(app: Int64, newSecretHash: String, now: Int64) async throws -> AppRecord? {
        try await transaction { connection in
            let updated = try await connection.query(
                """
                UPDATE apps SET client_secret_hash = \(newSecretHash), tokens_valid_after = GREATEST(tokens_valid_after, \(now))
                WHERE id = \(app) RETURNING \(unescaped: Self.appColumns)
                """, logger: logger
            ).collect().map { $0.makeRandomAccess() }
            guard let row = updated.first else { return nil }
            try await connection.query("DELETE FROM console_sessions WHERE app_id = \(app)", logger: logger)
            return try Self.app(from: row)
        }
    }

    public func setTencentIdentity(_ identity: TencentIdentity, app: Int64) async throws -> AppRecord? {
        try await Self.mapConstraint("SDKAppID \(identity.sdkAppID) belongs to another app") {
            try await rows(
                """
                UPDATE apps SET tencent_app_id = \(identity.sdkAppID), tencent_sealed_key = \(Data(identity.sealedKey)),
                    tencent_admin = \(identity.adminIdentifier)
                WHERE id = \(app) RETURNING \(unescaped: Self.appColumns)
                """
            ).first.map(Self.app(from:))
        }
    }

    public func app(tencentAppID sdkAppID: Int64) async throws -> AppRecord? {
        try await rows("SELECT \(unescaped: Self.appColumns) FROM apps WHERE tencent_app_id = \(sdkAppID)").first.map(Self.app(from:))
    }

    private static let appColumns =
        "id, org, name, client_id, client_secret_hash, per_chat, per_group, max_age_seconds, created_at, tokens_valid_after, "
        + "tencent_app_id, tencent_sealed_key, tencent_admin"

    private static func app(from row: PostgresRandomAccessRow) throws -> AppRecord {
        AppRecord(
            id: try row["id"].decode(Int64.self),
            key: AppKey(org: try row["org"].decode(String.self), name: try row["name"].decode(String.self)),
            clientID: try row["client_id"].decode(String.self), clientSecretHash: try row["client_secret_hash"].decode(String.self),
            limits: OfflineLimits(
                perChat: try row["per_chat"].decode(Int.self), perGroup: try row["per_group"].decode(Int.self),
                maxAgeSeconds: try row["max_age_seconds"].decode(Int64.self)),
            createdAt: try row["created_at"].decode(Int64.self), tokensValidAfter: try row["tokens_valid_after"].decode(Int64.self),
            tencent: try Self.tencentIdentity(
                appID: row["tencent_app_id"].decode(Int64?.self),
                sealedKey: row["tencent_sealed_key"].decode(Data?.self).map { [UInt8]($0) },
                admin: row["tencent_admin"].decode(String?.self)))
    }

    /// The Tencent identity of an app row: all three columns, or none.
    private static func tencentIdentity(appID: Int64?, sealedKey: [UInt8]?, admin: String?) -> TencentIdentity? {
        guard let appID, let sealedKey, let admin else { return nil }
        return TencentIdentity(sdkAppID: appID, sealedKey: sealedKey, adminIdentifier: admin)
    }

    // MARK: Users

    public func createUsers(_ users: [NewUser], app: Int64, now: Int64) async throws -> [UserRecord] {
        let records = users.map { user in
            UserRecord(
                appID: app, username: user.username, uuid: UUID().uuidString.lowercased(), passwordHash: user.passwordHash,
                nickname: user.nickname, timezone: nil, createdAt: now, modifiedAt: now, tokensValidAfter: 0)
        }
        try await transaction { connection in
            for record in records {
                try await Self.mapConstraint("username \(record.username) already exists") {
                    try await connection.query(
                        """
                        INSERT INTO users (app_id, username, uuid, password_hash, nickname, created_at, modified_at)
                        VALUES (\(app), \(record.username), \(record.uuid), \(record.passwordHash), \(record.nickname), \(now), \(now))
                        """, logger: logger)
                }
            }
        }
        return records
    }

    public func user(_ username: String, app: Int64) async throws -> UserRecord? {
        try await rows(UserByName(app: app, username: username)).first
    }

    public func users(app: Int64, after: String?, prefix: String?, limit: Int) async throws -> [UserRecord] {
        try await rows(
            """
            SELECT \(unescaped: UserByName.columns) FROM users
            WHERE app_id = \(app) AND (\(after)::text IS NULL OR username COLLATE "C" > \(after)::text)
                AND (\(prefix)::text IS NULL OR starts_with(username, \(prefix)::text))
            ORDER BY username COLLATE "C" LIMIT \(max(limit, 0))
            """
        ).map(Self.userRecord)
    }

    private static func userRecord(_ row: PostgresRandomAccessRow) throws -> UserRecord {
        UserRecord(
            appID: try row["app_id"].decode(Int64.self), username: try row["username"].decode(String.self),
            uuid: try row["uuid"].decode(String.self), passwordHash: try row["password_hash"].decode(String.self),
            nickname: try row["nickname"].decode(String?.self), timezone: try row["timezone"].decode(String?.self),
            createdAt: try row["created_at"].decode(Int64.self), modifiedAt: try row["modified_at"].decode(Int64.self),
            tokensValidAfter: try row["tokens_valid_after"].decode(Int64.self), displayStyle: try row["display_style"].decode(Int.self))
    }

    public func users(named usernames: [String], app: Int64) async throws -> [UserRecord] {
        guard !usernames.isEmpty else { return [] }
        return try await rows(UsersByName(app: app, usernames: usernames))
    }

    public func existingUsers(_ usernames: [String], app: Int64) async throws -> Set<String> {
        guard !usernames.isEmpty else { return [] }
        return Set(
            try await rows("SELECT username FROM users WHERE app_id = \(app) AND username = ANY(\(usernames))").map {
                try $0["username"].decode(String.self)
            })
    }

    public func updateUser(_ username: String, app: Int64, changes: UserChanges, now: Int64) async throws -> UserRecord? {
        try await execute(
            """
            UPDATE users SET nickname = COALESCE(\(changes.nickname), nickname), timezone = COALESCE(\(changes.timezone), timezone),
                display_style = COALESCE(\(changes.displayStyle), display_style), modified_at = \(now)
            WHERE app_id = \(app) AND username = \(username)
            """)
        return try await user(username, app: app)
    }

    public func revokeTokens(of username: String, app: Int64, before instant: Int64) async throws {
        try await execute(
            "UPDATE users SET tokens_valid_after = GREATEST(tokens_valid_after, \(instant)) WHERE app_id = \(app) AND username = \(username)"
        )
    }

    public func deleteUser(_ username: String, app: Int64, now: Int64) async throws -> Bool {
        let devicePrefix = SendReceipt.deviceScope(user: username, device: "")
        return try await transaction { connection in
            // The user's row first: a concurrent send to them waits here, then finds no user.
            let deleted = try await connection.query(
                "DELETE FROM users WHERE app_id = \(app) AND username = \(username) RETURNING 1", logger: logger
            ).collect().count
            for table in ["inbox", "device_cursors", "group_members", "push_bindings", "push_settings", "conversation_reads"] {
                try await connection.query(
                    PostgresQuery(unsafeSQL: "DELETE FROM \(table) WHERE app_id = $1 AND username = $2", binds: Self.binds(app, username)),
                    logger: logger)
            }
            // Pending jobs end `skipped` first, so that the webhook's trigger reports them, then every record of the user's
            // pushes goes: a user created again under the name must not read them.
            try await connection.query(
                """
                UPDATE push_jobs SET status = 'skipped', last_reason = \(unescaped: StoredJobReason.userDeleted.sqlLiteral), updated_at = \(now), claimed_until = 0
                WHERE app_id = \(app) AND username = \(username) AND status = 'pending'
                """, logger: logger)
            try await connection.query(
                "DELETE FROM push_attempts WHERE job_id IN (SELECT id FROM push_jobs WHERE app_id = \(app) AND username = \(username))",
                logger: logger)
            let contents = try await connection.query(
                "DELETE FROM push_jobs WHERE app_id = \(app) AND username = \(username) RETURNING content_id", logger: logger
            ).collect().compactMap { try $0.decode(Int64?.self) }
            try await Self.deleteUnreferencedContents(Set(contents), app: app, connection: connection, logger: logger)
            // Each group the user owned goes to its longest-standing member (earliest joined, then by name), or is dissolved
            // when no member is left (the memberships are gone already).
            try await connection.query(
                """
                UPDATE chat_groups g SET owner = heir.username
                FROM (SELECT DISTINCT ON (m.group_id) m.group_id, m.username FROM group_members m
                      JOIN chat_groups o ON o.app_id = m.app_id AND o.id = m.group_id AND o.owner = \(username)
                      WHERE m.app_id = \(app) ORDER BY m.group_id, m.joined_at, m.username COLLATE "C") heir
                WHERE g.app_id = \(app) AND g.id = heir.group_id AND g.owner = \(username)
                """, logger: logger)
            try await connection.query("DELETE FROM chat_groups WHERE app_id = \(app) AND owner = \(username)", logger: logger)
            try await connection.query(
                """
                DELETE FROM send_receipts WHERE app_id = \(app)
                    AND (scope = \(SendReceipt.senderScope(username)) OR starts_with(scope, \(devicePrefix)))
                """, logger: logger)
            return deleted > 0
        }
    }

    static func binds(_ app: Int64, _ username: String) -> PostgresBindings {
        var binds = PostgresBindings()
        binds.append(app)
        binds.append(username)
        return binds
    }

    // MARK: Helpers

    /// The columns `message(from:)` reads, prefixed by `alias.`.
    static func messageColumns(_ alias: String) -> String {
        ["id", "sender", "recipient", "chat_type", "type", "body", "ext", "timestamp"].map { "\(alias).\($0)" }.joined(separator: ", ")
    }

    static func message(from row: PostgresRandomAccessRow) throws -> Message {
        try StoredForm.message(
            id: try row["id"].decode(Int64.self), sender: try row["sender"].decode(String.self),
            recipient: try row["recipient"].decode(String.self),
            chatType: try row["chat_type"].decode(String.self), type: try row["type"].decode(String.self),
            body: try row["body"].decode(String.self),
            ext: try row["ext"].decode(String.self), timestamp: try row["timestamp"].decode(Int64.self))
    }
}
