import BeaconStorage
import Logging
import PostgresNIO

// The statements every message runs, prepared: PostgreSQL parses and plans each once per connection, then only binds
// and runs it (unprepared, every message paid for parsing and planning them again: most of PostgreSQL's CPU in the
// cluster benchmark). Their text is fixed; every value is a binding.

extension PostgresStore {
    /// Rows of a prepared statement on the pool (a read, or a single statement that commits on its own).
    func rows<Statement: PostgresPreparedStatement>(_ statement: Statement) async throws -> [Statement.Row] {
        try await transactionTimings.time(.statement) {
            try await client.execute(statement, logger: logger).reduce(into: []) { $0.append($1) }
        }
    }

    /// The send receipt, unless its reference was stored before (then no row).
    struct InsertReceipt: PostgresPreparedStatement {
        static let sql = """
            INSERT INTO send_receipts (app_id, scope, reference, message_ids, created_at) VALUES ($1, $2, $3, $4, $5)
            ON CONFLICT DO NOTHING RETURNING 1
            """
        typealias Row = Int32
        var app: Int64
        var scope: String
        var reference: String
        var messageIDs: String
        var now: Int64

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 5)
            bindings.append(app)
            bindings.append(scope)
            bindings.append(reference)
            bindings.append(messageIDs)
            bindings.append(now)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }

    /// Reserves `amounts` sequence numbers in each receiver's inbox, row locks taken in username order; the users that
    /// exist, each with its sequence before.
    struct ReserveSequences: PostgresPreparedStatement {
        static let sql = """
            WITH wanted AS (SELECT * FROM unnest($2::text[], $3::bigint[]) AS w(username, amount)),
            locked AS (
                SELECT u.username FROM users u JOIN wanted w ON w.username = u.username
                WHERE u.app_id = $1 ORDER BY u.username FOR NO KEY UPDATE OF u)
            UPDATE users u SET inbox_seq = u.inbox_seq + w.amount FROM wanted w, locked l
            WHERE u.app_id = $1 AND u.username = w.username AND l.username = w.username
            RETURNING u.username, u.inbox_seq - w.amount AS before
            """
        typealias Row = (String, Int64)
        var app: Int64
        var usernames: [String]
        var amounts: [Int64]

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 3)
            bindings.append(app)
            bindings.append(usernames)
            bindings.append(amounts)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }

    struct InsertMessages: PostgresPreparedStatement {
        static let sql = """
            INSERT INTO messages (app_id, id, sender, recipient, chat_type, type, body, ext, timestamp)
            SELECT $1, * FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::bigint[])
            """
        typealias Row = Void
        var app: Int64
        var ids: [Int64]
        var senders: [String]
        var recipients: [String]
        var chatTypes: [String]
        var types: [String]
        var bodies: [String]
        var exts: [String]
        var timestamps: [Int64]

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 9)
            bindings.append(app)
            bindings.append(ids)
            bindings.append(senders)
            bindings.append(recipients)
            bindings.append(chatTypes)
            bindings.append(types)
            bindings.append(bodies)
            bindings.append(exts)
            bindings.append(timestamps)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row {}
    }

    /// Inbox entries; an origin device of "" is none (postgres-nio binds arrays without NULL elements).
    struct InsertInboxEntries: PostgresPreparedStatement {
        static let sql = """
            INSERT INTO inbox (app_id, username, seq, message_id, conversation, chat_type, origin_device, created_at, counts)
            SELECT $1, u, s, i, c, t, NULLIF(o, ''), a, n FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::text[], $6::text[],
                $7::text[], $8::bigint[], $9::boolean[]) AS r(u, s, i, c, t, o, a, n)
            """
        typealias Row = Void
        var app: Int64
        var usernames: [String]
        var seqs: [Int64]
        var ids: [Int64]
        var conversations: [String]
        var chatTypes: [String]
        var origins: [String]
        var created: [Int64]
        var counts: [Bool]

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 9)
            bindings.append(app)
            bindings.append(usernames)
            bindings.append(seqs)
            bindings.append(ids)
            bindings.append(conversations)
            bindings.append(chatTypes)
            bindings.append(origins)
            bindings.append(created)
            bindings.append(counts)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row {}
    }

    /// Pending routes, when the app has a push configuration (every one or none: the condition is the app's).
    struct InsertPendingRoutes: PostgresPreparedStatement {
        static let sql = """
            INSERT INTO pending_routes (app_id, message_id, created_at)
            SELECT $1, r.id, r.created FROM unnest($2::bigint[], $3::bigint[]) AS r(id, created)
            WHERE EXISTS (SELECT 1 FROM push_configs WHERE app_id = $1)
            RETURNING 1
            """
        typealias Row = Int32
        var app: Int64
        var ids: [Int64]
        var created: [Int64]

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 3)
            bindings.append(app)
            bindings.append(ids)
            bindings.append(created)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }

    /// A user by name (a device session re-reads its own user's row when the sessions' audit has not checked it lately).
    struct UserByName: PostgresPreparedStatement {
        static let sql = "SELECT \(columns) FROM users WHERE app_id = $1 AND username = $2"
        /// The columns `user(from:)` decodes, in its order.
        static let columns =
            "app_id, username, uuid, password_hash, nickname, timezone, created_at, modified_at, tokens_valid_after, display_style"
        typealias Row = UserRecord
        var app: Int64
        var username: String

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 2)
            bindings.append(app)
            bindings.append(username)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try Self.user(from: row) }

        /// A row of `users`, its columns `columns`.
        static func user(from row: PostgresRow) throws -> UserRecord {
            let (app, username, uuid, passwordHash, nickname, timezone, created, modified, tokensValidAfter, displayStyle) =
                try row.decode((Int64, String, String, String, String?, String?, Int64, Int64, Int64, Int).self)
            return UserRecord(
                appID: app, username: username, uuid: uuid, passwordHash: passwordHash, nickname: nickname, timezone: timezone,
                createdAt: created, modifiedAt: modified, tokensValidAfter: tokensValidAfter, displayStyle: displayStyle)
        }
    }

    /// Users by name (the sessions' audit reads the users of an app's active sessions together).
    struct UsersByName: PostgresPreparedStatement {
        static let sql = "SELECT \(UserByName.columns) FROM users WHERE app_id = $1 AND username = ANY($2::text[])"
        typealias Row = UserRecord
        var app: Int64
        var usernames: [String]

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 2)
            bindings.append(app)
            bindings.append(usernames)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try UserByName.user(from: row) }
    }

    /// The connected devices of some users.
    struct Connections: PostgresPreparedStatement {
        static let sql = """
            SELECT username, device_id, node_epoch, connection_id, connected_at FROM device_presence
            WHERE app_id = $1 AND username = ANY($2::text[])
            """
        typealias Row = (String, String, Int64, Int64, Int64)
        var app: Int64
        var usernames: [String]

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 2)
            bindings.append(app)
            bindings.append(usernames)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }
}

extension PostgresConnection {
    /// Rows of a prepared statement in a transaction.
    func rows<Statement: PostgresPreparedStatement>(_ statement: Statement, logger: Logger) async throws -> [Statement.Row] {
        try await execute(statement, logger: logger).reduce(into: []) { $0.append($1) }
    }
}
