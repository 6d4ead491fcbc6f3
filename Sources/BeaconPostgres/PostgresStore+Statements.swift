import BeaconStorage
import Logging
import PostgresNIO

// Statements the message path runs, prepared: PostgreSQL parses and plans each once per connection, then only binds
// and runs it (unprepared, every message paid for parsing and planning them again: most of PostgreSQL's CPU in the
// cluster benchmark). Their text is fixed; every value is a binding. The append's own is in PostgresStore+AppendStatement.

extension PostgresStore {
    /// Rows of a prepared statement on the pool (a read, or a single statement that commits on its own).
    func rows<Statement: PostgresPreparedStatement>(_ statement: Statement) async throws -> [Statement.Row] {
        try await transactionTimings.time(.statement) {
            try await client.execute(statement, logger: logger).reduce(into: []) { $0.append($1) }
        }
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
