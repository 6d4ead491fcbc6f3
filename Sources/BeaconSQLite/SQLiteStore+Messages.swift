import BeaconCore
import BeaconStorage
import Foundation
import GRDB

/// Messages, inboxes, cursors and retention.
extension SQLiteStore {
    public func sentMessages(scope: String, reference: String, app: Int64) async throws -> [String: UInt64]? {
        try await read { db in
            try String.fetchOne(
                db, sql: "SELECT message_ids FROM send_receipts WHERE app_id = ? AND scope = ? AND reference = ?",
                arguments: [app, scope, reference]
            ).map(StoredForm.receiptIDs(from:))
        }
    }

    public func append(_ messages: [NewMessage], app: Int64, receipt: SendReceipt?, readingInputs request: RoutingInputsRequest?)
        async throws -> AppendResult
    {
        // Encoding happens before the write transaction: the writer is held for inserts only.
        let encoded = try StoredForm.encode(messages)
        let resultsText = try StoredForm.receiptIDs(of: messages)
        let appended: AppendResult = try await write { db in
            if let receipt {
                if let earlier = try String.fetchOne(
                    db, sql: "SELECT message_ids FROM send_receipts WHERE app_id = ? AND scope = ? AND reference = ?",
                    arguments: [app, receipt.scope, receipt.reference])
                {
                    return .repeated(StoredForm.receiptIDs(from: earlier))
                }
                try db.execute(
                    sql: "INSERT INTO send_receipts (app_id, scope, reference, message_ids, created_at) VALUES (?, ?, ?, ?, ?)",
                    arguments: [app, receipt.scope, receipt.reference, resultsText, receipt.now])
            }
            let (entries, routed) = try Self.insert(encoded, app: app, db: db)
            return .stored(entries, routed: routed, inputs: nil)
        }
        // Read after the write, outside it: an embedded engine's reads cost no round trip, and the writer is not held. The
        // messages are stored by now: a read that fails leaves the inputs to the router, which reads them itself.
        guard let request, case .stored(let entries, let routed, _) = appended, routed.contains(request.messageID) else { return appended }
        let inputs = try? await routingInputs(sender: request.sender, recipients: request.recipients, scopes: request.scopes, app: app)
        return .stored(entries, routed: routed, inputs: inputs)
    }

    /// Inserts messages with their inbox entries (deliveries to users that do not exist are skipped) and, when the app has
    /// a push configuration, the pending routes of those that route pushes (their ids returned).
    static func insert(_ encoded: [(new: NewMessage, id: Int64, body: String, ext: String)], app: Int64, db: Database) throws
        -> (entries: [InboxEntry], routed: Set<UInt64>)
    {
        let insertMessage = try db.cachedStatement(
            sql: """
                INSERT INTO messages (app_id, id, sender, recipient, chat_type, type, body, ext, timestamp)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                """)
        let nextSeq = try db.cachedStatement(
            sql: "UPDATE users SET inbox_seq = inbox_seq + 1 WHERE app_id = ? AND username = ? RETURNING inbox_seq")
        let insertEntry = try db.cachedStatement(
            sql: """
                INSERT INTO inbox (app_id, username, seq, message_id, conversation, chat_type, origin_device, created_at, counts)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                """)
        let insertRoute = try db.cachedStatement(sql: "INSERT INTO pending_routes (app_id, message_id, created_at) VALUES (?, ?, ?)")
        let routes =
            try encoded.contains { $0.new.routesPushes }
            && Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM push_configs WHERE app_id = ?)", arguments: [app]) == true
        var entries: [InboxEntry] = []
        var routed: Set<UInt64> = []
        for (new, id, body, ext) in encoded {
            let message = new.message
            try insertMessage.execute(arguments: [
                app, id, message.from, message.to, message.chatType.rawValue, message.type.rawValue, body, ext, message.timestamp,
            ])
            let countsAsUnread = message.countsAsUnread
            for delivery in new.deliveries {
                guard let seq = try Int64.fetchOne(nextSeq, arguments: [app, delivery.username]) else {
                    if delivery.required { throw BeaconError(.userNotFound, "user \(delivery.username) does not exist") }
                    continue
                }
                try insertEntry.execute(arguments: [
                    app, delivery.username, seq, id, message.conversation(for: delivery.username).description,
                    message.chatType.rawValue,
                    delivery.originDevice, message.timestamp, countsAsUnread && delivery.username != message.from,
                ])
                entries.append(InboxEntry(username: delivery.username, seq: seq, message: message, originDevice: delivery.originDevice))
            }
            if routes, new.routesPushes {
                try insertRoute.execute(arguments: [app, id, message.timestamp])
                routed.insert(message.id)
            }
        }
        return (entries, routed)
    }

    public func inbox(of username: String, app: Int64, after seq: Int64, limit: Int) async throws -> [InboxEntry] {
        try await read { db in
            let rows = try Row.fetchAll(
                db,
                sql: """
                    SELECT i.seq, i.origin_device, m.* FROM inbox i
                    JOIN messages m ON m.app_id = i.app_id AND m.id = i.message_id
                    WHERE i.app_id = ? AND i.username = ? AND i.seq > ? ORDER BY i.seq LIMIT ?
                    """,
                arguments: [app, username, seq, max(limit, 0)])
            guard let first = rows.first else { return [] }
            let columns = Columns(of: first)
            return try rows.map { row in
                InboxEntry(
                    username: username, seq: try columns.decode("seq", in: row), message: try Self.message(from: row, columns),
                    originDevice: try columns.decode("origin_device", in: row))
            }
        }
    }

    public func cursor(of username: String, device: String, app: Int64) async throws -> Int64 {
        try await read { db in
            try Int64.fetchOne(
                db, sql: "SELECT acked_seq FROM device_cursors WHERE app_id = ? AND username = ? AND device_id = ?",
                arguments: [app, username, device]) ?? 0
        }
    }

    public func acknowledge(_ cursors: [DeviceCursor], now: Int64) async throws {
        guard !cursors.isEmpty else { return }
        try await write { db in
            let top = try db.cachedStatement(
                sql: "SELECT inbox_seq FROM users WHERE app_id = ? AND username = ? AND (? IS NULL OR uuid = ?)")
            let upsert = try db.cachedStatement(
                sql: """
                    INSERT INTO device_cursors (app_id, username, device_id, acked_seq, updated_at) VALUES (?, ?, ?, ?, ?)
                    ON CONFLICT (app_id, username, device_id)
                    DO UPDATE SET acked_seq = MAX(acked_seq, excluded.acked_seq), updated_at = excluded.updated_at
                    """)
            for cursor in cursors {
                guard let highest = try Int64.fetchOne(top, arguments: [cursor.app, cursor.username, cursor.userID, cursor.userID]) else {
                    continue
                }
                try upsert.execute(arguments: [cursor.app, cursor.username, cursor.device, min(max(cursor.seq, 0), highest), now])
            }
        }
    }

    public func devices(of username: String, app: Int64) async throws -> [SeenDevice] {
        try await read { db in
            try Row.fetchAll(
                db, sql: "SELECT device_id, updated_at, acked_seq FROM device_cursors WHERE app_id = ? AND username = ? ORDER BY device_id",
                arguments: [app, username]
            ).map { row in
                SeenDevice(
                    deviceID: try row.decode(String.self, forColumn: "device_id"),
                    lastSeen: try row.decode(Int64.self, forColumn: "updated_at"),
                    acknowledgedSeq: try row.decode(Int64.self, forColumn: "acked_seq"))
            }
        }
    }

    public func offlineCount(of username: String, app: Int64) async throws -> Int {
        try await read { db in
            try Int.fetchOne(
                db,
                sql: """
                    SELECT COUNT(*) FROM inbox WHERE app_id = ? AND username = ? AND origin_device IS NULL AND seq > COALESCE(
                        (SELECT MAX(acked_seq) FROM device_cursors WHERE app_id = ? AND username = ?), 0)
                    """,
                arguments: [app, username, app, username]) ?? 0
        }
    }

    public func offlineStatus(of messageID: UInt64, for username: String, app: Int64) async throws -> OfflineStatus? {
        guard let id = messageID.storedID else { return nil }
        return try await read { db in
            guard
                let seq = try Int64.fetchOne(
                    db, sql: "SELECT seq FROM inbox WHERE app_id = ? AND message_id = ? AND username = ?",
                    arguments: [app, id, username])
            else { return nil }
            let acked =
                try Int64.fetchOne(
                    db, sql: "SELECT MAX(acked_seq) FROM device_cursors WHERE app_id = ? AND username = ?", arguments: [app, username]) ?? 0
            return acked >= seq ? .delivered : .undelivered
        }
    }

    // MARK: Retention

    /// Rows removed per write transaction: each batch holds SQLite's single writer for a few milliseconds.
    static let retentionBatch = 500

    public func enforceRetention(_ app: AppRecord, now: Int64) async throws -> Int {
        let cutoff = now - app.limits.maxAgeSeconds * 1000
        // What to delete is found by reads (which never block writers), then deleted in small write transactions.
        let tooOld = try await read { db in
            try Int64.fetchAll(db, sql: "SELECT rowid FROM inbox WHERE app_id = ? AND created_at < ?", arguments: [app.id, cutoff])
        }
        let overLimit = try await read { db in
            try Int64.fetchAll(
                db,
                sql: """
                    SELECT rowid FROM (
                        SELECT rowid, chat_type,
                               ROW_NUMBER() OVER (PARTITION BY username, conversation ORDER BY seq DESC) AS newest
                        FROM inbox WHERE app_id = ? AND created_at >= ?)
                    WHERE (chat_type = 'chat' AND newest > ?) OR (chat_type = 'groupchat' AND newest > ?)
                    """,
                arguments: [app.id, cutoff, app.limits.perChat, app.limits.perGroup])
        }
        var removed = 0
        for batch in Self.chunks(Array(Set(tooOld + overLimit)), of: Self.retentionBatch) {
            removed += try await write { db in
                try db.execute(
                    sql: "DELETE FROM inbox WHERE rowid IN (\(Self.marks(batch.count)))", arguments: StatementArguments(Array(batch)))
                return db.changesCount
            }
        }
        let unreferenced = try await read { db in
            try Int64.fetchAll(
                db,
                sql: """
                    SELECT id FROM messages WHERE app_id = ? AND NOT EXISTS (
                        SELECT 1 FROM inbox WHERE inbox.app_id = messages.app_id AND inbox.message_id = messages.id)
                    AND NOT EXISTS (SELECT 1 FROM pending_routes r WHERE r.app_id = messages.app_id AND r.message_id = messages.id)
                    """,
                arguments: [app.id])
        }
        for batch in Self.chunks(unreferenced, of: Self.retentionBatch) {
            try await write { db in
                try db.execute(
                    sql: "DELETE FROM messages WHERE app_id = ? AND id IN (\(Self.marks(batch.count)))",
                    arguments: StatementArguments([app.id] + Array(batch)))
            }
        }
        // Finished push records are kept as long as messages are, and so are cursors of devices unseen that long (a device
        // that comes back after that re-reads what its inbox still holds); send receipts answer retries for 24 h.
        while try await write({ db in
            let ids = try Int64.fetchAll(
                db, sql: "SELECT id FROM push_jobs WHERE app_id = ? AND status != 'pending' AND updated_at < ? LIMIT ?",
                arguments: [app.id, cutoff, Self.retentionBatch])
            guard !ids.isEmpty else { return false }
            let list = ids.map(String.init).joined(separator: ",")
            try db.execute(sql: "DELETE FROM push_attempts WHERE job_id IN (\(list))")
            let contents = try Int64?.fetchAll(db, sql: "DELETE FROM push_jobs WHERE id IN (\(list)) RETURNING content_id")
            try Self.deleteUnreferencedContents(contents, app: app.id, db: db)
            return ids.count == Self.retentionBatch
        }) {}
        try await deleteInBatches(
            select: "SELECT rowid FROM send_receipts WHERE app_id = ? AND created_at < ? LIMIT ?",
            delete: { "DELETE FROM send_receipts WHERE rowid IN (\($0))" }, app: app.id, cutoff: now - SendReceipt.lifetime)
        try await deleteInBatches(
            select: "SELECT rowid FROM device_cursors WHERE app_id = ? AND updated_at < ? LIMIT ?",
            delete: { "DELETE FROM device_cursors WHERE rowid IN (\($0))" }, app: app.id, cutoff: cutoff)
        try await trimWebhookOutbox(app: app.id)
        return removed
    }

    /// Deletes what `select` (app, cutoff, limit) finds, one small write transaction per batch, until nothing is left.
    private func deleteInBatches(select: String, delete: (String) -> String, app: Int64, cutoff: Int64) async throws {
        while true {
            let ids = try await read { db in try Int64.fetchAll(db, sql: select, arguments: [app, cutoff, Self.retentionBatch]) }
            guard !ids.isEmpty else { return }
            let statement = delete(ids.map(String.init).joined(separator: ","))
            try await write { db in try db.execute(sql: statement) }
            if ids.count < Self.retentionBatch { return }
        }
    }
}
