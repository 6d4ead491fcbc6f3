import BeaconCore
import BeaconStorage
import GRDB

/// Console sessions (`v10-console-sessions`).
extension SQLiteStore {
    public func createConsoleSession(_ session: ConsoleSession, now: Int64) async throws {
        _ = try await createConsoleSession(session, now: now, secretHash: nil)
    }

    public func createConsoleSession(_ session: ConsoleSession, now: Int64, secretHash: String) async throws -> Bool {
        try await createConsoleSession(session, now: now, secretHash: Optional(secretHash))
    }

    private func createConsoleSession(_ session: ConsoleSession, now: Int64, secretHash: String?) async throws -> Bool {
        try await write { db in
            if let secretHash {
                let current = try Bool.fetchOne(
                    db, sql: "SELECT EXISTS (SELECT 1 FROM apps WHERE id = ? AND client_secret_hash = ?)",
                    arguments: [session.app, secretHash])
                guard current == true else { return false }
            }
            try db.execute(sql: "DELETE FROM console_sessions WHERE expires_at < ?", arguments: [now])
            try db.execute(
                sql: "INSERT INTO console_sessions (digest, app_id, created_at, expires_at) VALUES (?, ?, ?, ?)",
                arguments: [session.digest, session.app, session.createdAt, session.expiresAt])
            return true
        }
    }

    public func consoleSession(digest: String, now: Int64) async throws -> ConsoleSession? {
        try await read { db in
            guard
                let row = try Row.fetchOne(
                    db, sql: "SELECT * FROM console_sessions WHERE digest = ? AND expires_at >= ?", arguments: [digest, now])
            else { return nil }
            return ConsoleSession(
                digest: digest, app: try row.decode(forColumn: "app_id"), createdAt: try row.decode(forColumn: "created_at"),
                expiresAt: try row.decode(forColumn: "expires_at"))
        }
    }

    public func deleteConsoleSession(digest: String) async throws -> Bool {
        try await write { db in
            try db.execute(sql: "DELETE FROM console_sessions WHERE digest = ?", arguments: [digest])
            return db.changesCount > 0
        }
    }

    public func deleteAllConsoleSessions() async throws -> Int {
        try await write { db in
            try db.execute(sql: "DELETE FROM console_sessions")
            return db.changesCount
        }
    }

    public func activity(app: Int64, since: Int64) async throws -> AppActivity {
        try await read { db in
            let users = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM users WHERE app_id = ?", arguments: [app]) ?? 0
            // By id, a range of the primary key: ids are time-ordered.
            let firstID = Int64(bitPattern: MessageIDGenerator.firstID(atOrAfter: since))
            let messages =
                try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM messages WHERE app_id = ? AND id >= ?", arguments: [app, firstID]) ?? 0
            let pushes = try Row.fetchAll(
                db,
                sql: """
                    SELECT status, COALESCE(last_reason, '') AS reason, COUNT(*) AS n FROM push_jobs
                    WHERE app_id = ? AND updated_at >= ? GROUP BY status, COALESCE(last_reason, '') ORDER BY status, reason
                    """,
                arguments: [app, since]
            ).map { row in
                AppActivity.Outcome(
                    status: try row.decode(forColumn: "status"), reason: try row.decode(forColumn: "reason"),
                    count: try row.decode(forColumn: "n"))
            }
            return AppActivity(users: users, messages: messages, pushes: pushes)
        }
    }
}
