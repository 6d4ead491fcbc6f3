import BeaconCore
import BeaconStorage
import GRDB

/// Looking up one message, and recalling it.
extension SQLiteStore {
    public func message(_ id: UInt64, app: Int64) async throws -> Message? {
        guard let stored = id.storedID else { return nil }
        return try await read { db in
            guard let row = try Row.fetchOne(db, sql: "SELECT * FROM messages WHERE app_id = ? AND id = ?", arguments: [app, stored])
            else { return nil }
            return try Self.message(from: row, Columns(of: row))
        }
    }

    public func recall(_ recall: MessageRecall, app: Int64) async throws -> RecallResult? {
        guard let id = recall.messageID.storedID else { return nil }
        let encoded = try StoredForm.encode([NewMessage(message: recall.notice, deliveries: [])])
        let now = recall.now
        return try await write { db in
            guard
                try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM messages WHERE app_id = ? AND id = ?)", arguments: [app, id])
                    == true
            else { return nil }
            let holders = try String.fetchAll(
                db, sql: "SELECT DISTINCT username FROM inbox WHERE app_id = ? AND message_id = ? ORDER BY username", arguments: [app, id])
            // Sent, taken by a worker (which may be sending it now), or tried before (an answer that never came may have
            // been a delivery): those devices may show it.
            let pushed = try Self.pushJobs(
                from: try Row.fetchAll(
                    db,
                    sql: """
                        SELECT * FROM push_jobs WHERE app_id = ? AND message_id = ? AND push_type = 'alert'
                            AND (status = 'sent' OR (status = 'pending' AND (claimed_until > ? OR attempts > 0))) ORDER BY id
                        """,
                    arguments: [app, id, now]), db: db)
            // Every alert still pending ends, taken ones too: a worker that has not sent one yet finds it no longer pending.
            // (A read's withdrawal stored under this message's id is no push of it, and stays.)
            try db.execute(
                sql: """
                    UPDATE push_jobs SET status = 'skipped', last_reason = \(StoredJobReason.recalled.sqlLiteral), updated_at = ?,
                        claimed_until = 0
                    WHERE app_id = ? AND message_id = ? AND push_type != 'background'
                        AND (status = 'pending' OR (status = 'skipped' AND last_reason = \(StoredJobReason.online.sqlLiteral)))
                    """,
                arguments: [now, app, id])
            // A badge the client reported that counted the message, unread, no longer does (as a read would take it out).
            try db.execute(
                sql: """
                    UPDATE users SET badge = MAX(badge, 1) - 1 WHERE app_id = ? AND username IN (
                        SELECT i.username FROM inbox i JOIN users u ON u.app_id = i.app_id AND u.username = i.username
                        WHERE i.app_id = ? AND i.message_id = ? AND i.counts = 1 AND i.seq <= u.badge_seq
                            AND i.seq > COALESCE((SELECT r.read_seq FROM conversation_reads r WHERE r.app_id = i.app_id
                                AND r.username = i.username AND r.conversation = i.conversation), 0))
                    """,
                arguments: [app, app, id])
            try db.execute(sql: "DELETE FROM pending_routes WHERE app_id = ? AND message_id = ?", arguments: [app, id])
            try db.execute(sql: "DELETE FROM inbox WHERE app_id = ? AND message_id = ?", arguments: [app, id])
            try db.execute(sql: "DELETE FROM messages WHERE app_id = ? AND id = ?", arguments: [app, id])
            var notice = encoded
            notice[0].new.deliveries = holders.map { Delivery(username: $0, originDevice: Delivery.noticeOrigin) }
            let entries = try Self.insert(notice, app: app, db: db).entries
            // After the deletion: each withdrawal carries its receiver's badge without the recalled message.
            let withdrawals = pushed.map { recall.withdrawal($0.job) }
            try Self.insertJobs(
                PushRoute(messageID: recall.messageID, replacing: .nothing, jobs: withdrawals, now: now), messageID: id, app: app, db: db)
            // After any read's withdrawal still waiting for the device: that one's badge may still count the message.
            try db.execute(
                sql: """
                    UPDATE push_jobs SET next_attempt_at = MAX(next_attempt_at, COALESCE((
                        SELECT MAX(MIN(p.next_attempt_at, 9223372036854775806)) + 1 FROM push_jobs p WHERE p.app_id = push_jobs.app_id
                            AND p.username = push_jobs.username AND p.device_id = push_jobs.device_id AND p.notifier = push_jobs.notifier
                            AND p.push_type = 'background' AND p.status = 'pending' AND p.read_version > 0), 0))
                    WHERE app_id = ? AND message_id = ? AND push_type = 'background' AND status = 'pending' AND read_version = 0
                    """,
                arguments: [app, id])
            return RecallResult(notices: entries, withdrawals: withdrawals.count)
        }
    }
}
