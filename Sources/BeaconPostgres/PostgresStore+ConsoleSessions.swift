import BeaconCore
import BeaconStorage
import PostgresNIO

/// Console sessions (`v6-console-sessions`).
extension PostgresStore {
    public func createConsoleSession(_ session: ConsoleSession, now: Int64) async throws {
        _ = try await createConsoleSession(session, now: now, secretHash: nil)
    }

    public func createConsoleSession(_ session: ConsoleSession, now: Int64, secretHash: String) async throws -> Bool {
        try await createConsoleSession(session, now: now, secretHash: Optional(secretHash))
    }

    private func createConsoleSession(_ session: ConsoleSession, now: Int64, secretHash: String?) async throws -> Bool {
        try await transaction { connection in
            if let secretHash {
                // Share-locked: a rotation (which updates the row) waits for this session, then deletes it; or it went
                // first, and the hash no longer matches.
                let current = try await connection.query(
                    "SELECT 1 FROM apps WHERE id = \(session.app) AND client_secret_hash = \(secretHash) FOR SHARE", logger: logger
                ).collect().count
                guard current > 0 else { return false }
            }
            try await connection.query("DELETE FROM console_sessions WHERE expires_at < \(now)", logger: logger)
            try await connection.query(
                """
                INSERT INTO console_sessions (digest, app_id, created_at, expires_at)
                VALUES (\(session.digest), \(session.app), \(session.createdAt), \(session.expiresAt))
                """, logger: logger)
            return true
        }
    }

    public func consoleSession(digest: String, now: Int64) async throws -> ConsoleSession? {
        guard
            let row = try await rows(
                "SELECT app_id, created_at, expires_at FROM console_sessions WHERE digest = \(digest) AND expires_at >= \(now)"
            ).first
        else { return nil }
        return ConsoleSession(
            digest: digest, app: try row["app_id"].decode(Int64.self), createdAt: try row["created_at"].decode(Int64.self),
            expiresAt: try row["expires_at"].decode(Int64.self))
    }

    public func deleteConsoleSession(digest: String) async throws -> Bool {
        try await execute("DELETE FROM console_sessions WHERE digest = \(digest) RETURNING 1") > 0
    }

    public func deleteAllConsoleSessions() async throws -> Int {
        try await execute("DELETE FROM console_sessions RETURNING 1")
    }

    public func activity(app: Int64, since: Int64) async throws -> AppActivity {
        let users = try await rows("SELECT COUNT(*) AS n FROM users WHERE app_id = \(app)").first?["n"].decode(Int64.self) ?? 0
        // By id, a range of the primary key: ids are time-ordered.
        let firstID = Int64(bitPattern: MessageIDGenerator.firstID(atOrAfter: since))
        let messages =
            try await rows("SELECT COUNT(*) AS n FROM messages WHERE app_id = \(app) AND id >= \(firstID)").first?["n"].decode(Int64.self)
            ?? 0
        let pushes = try await rows(
            """
            SELECT status, COALESCE(last_reason, '') AS reason, COUNT(*) AS n FROM push_jobs
            WHERE app_id = \(app) AND updated_at >= \(since) GROUP BY 1, 2
            ORDER BY status COLLATE "C", COALESCE(last_reason, '') COLLATE "C"
            """
        ).map { row in
            AppActivity.Outcome(
                status: try row["status"].decode(String.self), reason: try row["reason"].decode(String.self),
                count: Int(try row["n"].decode(Int64.self)))
        }
        return AppActivity(users: Int(users), messages: Int(messages), pushes: pushes)
    }
}
