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

    /// Locks are taken in this order, which no other transaction reverses: the message (a decision on its `online`
    /// skips shares it); the user rows of its holders and of those it was pushed to (username order, as sends take them;
    /// a deletion of one of them waits, or has gone); its pending route (a decision being recorded finishes first, or
    /// finds it gone); its pushes (a claim or an attempt being recorded finishes first, or finds the push ended). What the
    /// later statements read is then all there is.
    public func recall(_ recall: MessageRecall, app: Int64) async throws -> RecallResult? {
        guard let id = recall.messageID.storedID else { return nil }
        let encoded = try StoredForm.encode([NewMessage(message: recall.notice, deliveries: [])])
        let now = recall.now
        return try await transaction { connection -> RecallResult? in
            // The message's row: a second recall of it waits here, then finds nothing.
            let found = try await connection.query(
                "SELECT 1 FROM messages WHERE app_id = \(app) AND id = \(id) FOR UPDATE", logger: logger
            ).collect().count
            guard found > 0 else { return nil }
            // Its holders and those it was pushed to (an inbox entry may have gone with retention).
            try await connection.query(
                """
                SELECT 1 FROM users u WHERE u.app_id = \(app) AND u.username IN (
                    SELECT username FROM inbox WHERE app_id = \(app) AND message_id = \(id)
                    UNION SELECT username FROM push_jobs WHERE app_id = \(app) AND message_id = \(id) AND push_type != 'background')
                ORDER BY u.username FOR NO KEY UPDATE
                """, logger: logger
            ).collect()
            let holders = try await connection.query(
                "SELECT DISTINCT username FROM inbox WHERE app_id = \(app) AND message_id = \(id) ORDER BY username", logger: logger
            ).collect().map { try $0.decode(String.self) }
            try await connection.query("DELETE FROM pending_routes WHERE app_id = \(app) AND message_id = \(id)", logger: logger)
            try await connection.query(
                "SELECT 1 FROM push_jobs WHERE app_id = \(app) AND message_id = \(id) AND push_type != 'background' ORDER BY id FOR UPDATE",
                logger: logger)
            // Sent, taken by a worker (which may be sending it now), or tried before (an answer that never came may have
            // been a delivery): those devices may show it.
            let pushed = try await connection.query(
                """
                SELECT \(unescaped: Self.jobColumns), \(unescaped: Self.contentColumns(of: "push_jobs")) FROM push_jobs WHERE app_id = \(app) AND message_id = \(id) AND push_type = 'alert'
                    AND (status = 'sent' OR (status = 'pending' AND (claimed_until > \(now) OR attempts > 0))) ORDER BY id
                """, logger: logger
            ).collect().map { try Self.pushJob(from: $0.makeRandomAccess()) }
            // Every alert still pending ends, taken ones too: a worker that has not sent one yet finds it no longer pending.
            // (A read's withdrawal stored under this message's id is no push of it, and stays.)
            try await connection.query(
                """
                UPDATE push_jobs SET status = 'skipped', last_reason = \(unescaped: StoredJobReason.recalled.sqlLiteral),
                    updated_at = \(now), claimed_until = 0
                WHERE app_id = \(app) AND message_id = \(id) AND push_type != 'background'
                    AND (status = 'pending' OR (status = 'skipped' AND last_reason = \(unescaped: StoredJobReason.online.sqlLiteral)))
                """, logger: logger)
            // A badge the client reported that counted the message, unread, no longer does (as a read would take it out).
            try await connection.query(
                """
                UPDATE users u SET badge = GREATEST(u.badge, 1) - 1 FROM inbox i
                WHERE u.app_id = \(app) AND i.app_id = u.app_id AND i.username = u.username AND i.message_id = \(id) AND i.counts
                    AND i.seq <= u.badge_seq AND i.seq > COALESCE((SELECT r.read_seq FROM conversation_reads r
                        WHERE r.app_id = i.app_id AND r.username = i.username AND r.conversation = i.conversation), 0)
                """, logger: logger)
            var notice = encoded
            notice[0].new.deliveries = holders.map { Delivery(username: $0, originDevice: Delivery.noticeOrigin) }
            guard
                case (.stored(let entries, _, _), _) = try await append(
                    notice, app: app, receipt: nil, resultsText: "{}", readingInputs: nil, on: connection)
            else { throw BeaconError(.internalError, "a recall's notice was not stored") }
            try await connection.query("DELETE FROM inbox WHERE app_id = \(app) AND message_id = \(id)", logger: logger)
            try await connection.query("DELETE FROM messages WHERE app_id = \(app) AND id = \(id)", logger: logger)
            // After the deletion: each withdrawal carries its receiver's badge without the recalled message.
            let withdrawals = pushed.map { recall.withdrawal($0.job) }
            try await insertJobs(
                PushRoute(messageID: recall.messageID, replacing: .nothing, jobs: withdrawals, now: now), messageID: id, app: app,
                connection: connection)
            // After any read's withdrawal still waiting for the device: that one's badge may still count the message.
            try await connection.query(
                """
                UPDATE push_jobs j SET next_attempt_at = GREATEST(j.next_attempt_at, COALESCE((
                    SELECT MAX(LEAST(p.next_attempt_at, 9223372036854775806)) + 1 FROM push_jobs p WHERE p.app_id = j.app_id AND p.username = j.username
                        AND p.device_id = j.device_id AND p.notifier = j.notifier AND p.push_type = 'background' AND p.status = 'pending'
                        AND p.read_version > 0), 0))
                WHERE j.app_id = \(app) AND j.message_id = \(id) AND j.push_type = 'background' AND j.status = 'pending'
                    AND j.read_version = 0
                """, logger: logger)
            return RecallResult(notices: entries, withdrawals: withdrawals.count)
        }
    }
}
