import BeaconCore
import BeaconStorage
import PostgresNIO

/// Looking up one message, and recalling it.
extension PostgresStore {
    public func message(_ id: UInt64, app: Int64) async throws -> Message? {
        guard let stored = id.storedID else { return nil }
        return try await rows("SELECT \(unescaped: Self.messageColumns("m")) FROM messages m WHERE m.app_id = \(app) AND m.id = \(stored)")
            .first.map(Self.message(from:))
    }

    public func recall(_ recall: MessageRecall, app: Int64) async throws -> RecallResult? {
        guard let id = recall.messageID.storedID else { return nil }
        let encoded = try StoredForm.encode([NewMessage(message: recall.notice, deliveries: [])])
        let now = recall.now
        return try await transaction { connection -> RecallResult? in
            // The message's row is the lock: a second recall of it waits here, then finds nothing.
            let found = try await connection.query(
                "SELECT 1 FROM messages WHERE app_id = \(app) AND id = \(id) FOR UPDATE", logger: logger
            ).collect().count
            guard found > 0 else { return nil }
            let holders = try await connection.query(
                "SELECT DISTINCT username FROM inbox WHERE app_id = \(app) AND message_id = \(id) ORDER BY username", logger: logger
            ).collect().map { try $0.decode(String.self) }
            // Sent, or taken by a worker (which may be sending it now): those devices may show it.
            let pushed = try await connection.query(
                """
                SELECT \(unescaped: Self.jobColumns) FROM push_jobs WHERE app_id = \(app) AND message_id = \(id) AND push_type = 'alert'
                    AND (status = 'sent' OR (status = 'pending' AND claimed_until > \(now))) ORDER BY id
                """, logger: logger
            ).collect().map { try Self.pushJob(from: $0.makeRandomAccess()) }
            // The notice first: its inbox sequence numbers lock the holders' rows in username order, as every send does.
            var notice = encoded
            notice[0].new.deliveries = holders.map { Delivery(username: $0, originDevice: Delivery.noticeOrigin) }
            let entries = try await insert(notice, app: app, connection: connection)
            // Every push still pending ends, taken ones too: a worker that has not sent one yet finds it no longer pending.
            try await connection.query(
                """
                UPDATE push_jobs SET status = 'skipped', last_reason = \(unescaped: StoredJobReason.recalled.sqlLiteral),
                    updated_at = \(now), claimed_until = 0
                WHERE app_id = \(app) AND message_id = \(id)
                    AND (status = 'pending' OR (status = 'skipped' AND last_reason = \(unescaped: StoredJobReason.online.sqlLiteral)))
                """, logger: logger)
            try await connection.query("DELETE FROM pending_routes WHERE app_id = \(app) AND message_id = \(id)", logger: logger)
            try await connection.query("DELETE FROM inbox WHERE app_id = \(app) AND message_id = \(id)", logger: logger)
            try await connection.query("DELETE FROM messages WHERE app_id = \(app) AND id = \(id)", logger: logger)
            // After the deletion: each withdrawal carries its receiver's badge without the recalled message.
            let withdrawals = pushed.map { recall.withdrawal($0.job) }
            try await insertJobs(
                PushRoute(messageID: recall.messageID, replacing: .nothing, jobs: withdrawals, now: now), messageID: id, app: app,
                connection: connection)
            return RecallResult(notices: entries, withdrawals: withdrawals.count)
        }
    }
}
