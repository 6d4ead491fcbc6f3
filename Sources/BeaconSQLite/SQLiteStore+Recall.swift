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
            // Sent, or taken by a worker (which may be sending it now): those devices may show it.
            let pushed = try Self.pushJobs(
                from: try Row.fetchAll(
                    db,
                    sql: """
                        SELECT * FROM push_jobs WHERE app_id = ? AND message_id = ? AND push_type = 'alert'
                            AND (status = 'sent' OR (status = 'pending' AND claimed_until > ?)) ORDER BY id
                        """,
                    arguments: [app, id, now]))
            // Every push still pending ends, taken ones too: a worker that has not sent one yet finds it no longer pending.
            try db.execute(
                sql: """
                    UPDATE push_jobs SET status = 'skipped', last_reason = \(StoredJobReason.recalled.sqlLiteral), updated_at = ?,
                        claimed_until = 0
                    WHERE app_id = ? AND message_id = ?
                        AND (status = 'pending' OR (status = 'skipped' AND last_reason = \(StoredJobReason.online.sqlLiteral)))
                    """,
                arguments: [now, app, id])
            try db.execute(sql: "DELETE FROM pending_routes WHERE app_id = ? AND message_id = ?", arguments: [app, id])
            try db.execute(sql: "DELETE FROM inbox WHERE app_id = ? AND message_id = ?", arguments: [app, id])
            try db.execute(sql: "DELETE FROM messages WHERE app_id = ? AND id = ?", arguments: [app, id])
            var notice = encoded
            notice[0].new.deliveries = holders.map { Delivery(username: $0, originDevice: Delivery.noticeOrigin) }
            let entries = try Self.insert(notice, app: app, db: db)
            // After the deletion: each withdrawal carries its receiver's badge without the recalled message.
            let withdrawals = pushed.map { recall.withdrawal($0.job) }
            try Self.insertJobs(
                PushRoute(messageID: recall.messageID, replacing: .nothing, jobs: withdrawals, now: now), messageID: id, app: app, db: db)
            return RecallResult(notices: entries, withdrawals: withdrawals.count)
        }
    }
}
