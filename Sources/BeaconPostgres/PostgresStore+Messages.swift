import BeaconCore
import BeaconStorage
import Foundation
import PostgresNIO

/// Messages, inboxes, cursors and retention.
extension PostgresStore {
    public func sentMessages(scope: String, reference: String, app: Int64) async throws -> [String: UInt64]? {
        try await sentMessages(scope: scope, reference: reference, app: app, on: nil)
    }

    /// `sentMessages`, on `connection` (a transaction's, which must not wait for a second one from the pool) or the pool.
    func sentMessages(scope: String, reference: String, app: Int64, on connection: PostgresConnection?) async throws -> [String: UInt64]? {
        let query: PostgresQuery =
            "SELECT message_ids FROM send_receipts WHERE app_id = \(app) AND scope = \(scope) AND reference = \(reference)"
        let text =
            if let connection {
                try await connection.query(query, logger: logger).collect().first.map { try $0.decode(String.self) }
            } else {
                try await rows(query).first.map { try $0[0].decode(String.self) }
            }
        return text.map(StoredForm.receiptIDs(from:))
    }

    public func append(_ messages: [NewMessage], app: Int64, receipt: SendReceipt?, readingInputs request: RoutingInputsRequest?)
        async throws -> AppendResult
    {
        let encoded = try StoredForm.encode(messages)
        let resultsText = try StoredForm.receiptIDs(of: messages)
        // One round trip for a send whose receivers need not exist (a device's, a user's); an app's send to users that must
        // exist fails as a whole, naming the first missing, in a transaction.
        let required = messages.contains { $0.deliveries.contains(where: \.required) }
        let (appended, read) =
            required
            ? try await transaction { connection in
                try await append(encoded, app: app, receipt: receipt, resultsText: resultsText, readingInputs: request, on: connection)
            }
            : try await append(encoded, app: app, receipt: receipt, resultsText: resultsText, readingInputs: request, on: nil)
        guard let read, case .stored(let entries, let routed, _) = appended else { return appended }
        // Decoded after the commit: the receivers' rows the append locked are not held for it, and the messages are stored
        // whatever it finds (inputs that do not decode are left to the router, which reads them itself).
        do {
            return .stored(entries, routed: routed, inputs: try Self.inputs(from: read))
        } catch {
            logger.error("the routing inputs read with an append did not decode", metadata: ["error": "\(error)"])
            return appended
        }
    }

    public func inbox(of username: String, app: Int64, after seq: Int64, limit: Int) async throws -> [InboxEntry] {
        try await rows(
            """
            SELECT i.seq, i.origin_device, \(unescaped: Self.messageColumns("m")) FROM inbox i
            JOIN messages m ON m.app_id = i.app_id AND m.id = i.message_id
            WHERE i.app_id = \(app) AND i.username = \(username) AND i.seq > \(seq) ORDER BY i.seq LIMIT \(max(limit, 0))
            """
        ).map { row in
            InboxEntry(
                username: username, seq: try row["seq"].decode(Int64.self), message: try Self.message(from: row),
                originDevice: try row["origin_device"].decode(String?.self))
        }
    }

    public func cursor(of username: String, device: String, app: Int64) async throws -> Int64 {
        try await rows(
            "SELECT acked_seq FROM device_cursors WHERE app_id = \(app) AND username = \(username) AND device_id = \(device)"
        ).first.map { try $0["acked_seq"].decode(Int64.self) } ?? 0
    }

    public func acknowledge(_ cursors: [DeviceCursor], now: Int64) async throws {
        guard !cursors.isEmpty else { return }
        // One statement; cursors only move forward and never past the inbox. Users that are gone are skipped: each user's
        // row is share-locked, so a delete of the user either finishes first (no cursor written) or waits for this.
        let apps = cursors.map(\.app)
        let usernames = cursors.map(\.username)
        let devices = cursors.map(\.device)
        let userIDs = cursors.map { $0.userID ?? "" }  // "": any holder of the name (postgres-nio has no arrays of optionals)
        let seqs = cursors.map { max($0.seq, 0) }
        try await execute(
            """
            INSERT INTO device_cursors (app_id, username, device_id, acked_seq, updated_at)
            SELECT c.app_id, c.username, c.device_id, LEAST(c.seq, u.inbox_seq), \(now)
            FROM unnest(\(apps)::bigint[], \(usernames)::text[], \(userIDs)::text[], \(devices)::text[], \(seqs)::bigint[])
                AS c(app_id, username, uid, device_id, seq)
            JOIN users u ON u.app_id = c.app_id AND u.username = c.username AND (c.uid = '' OR u.uuid = c.uid)
            ORDER BY c.app_id, c.username, c.device_id
            FOR KEY SHARE OF u
            ON CONFLICT (app_id, username, device_id)
            DO UPDATE SET acked_seq = GREATEST(device_cursors.acked_seq, excluded.acked_seq), updated_at = excluded.updated_at
            """)
    }

    public func devices(of username: String, app: Int64) async throws -> [SeenDevice] {
        try await rows(
            "SELECT device_id, updated_at, acked_seq FROM device_cursors WHERE app_id = \(app) AND username = \(username) ORDER BY device_id COLLATE \"C\""
        ).map { row in
            SeenDevice(
                deviceID: try row["device_id"].decode(String.self), lastSeen: try row["updated_at"].decode(Int64.self),
                acknowledgedSeq: try row["acked_seq"].decode(Int64.self))
        }
    }

    public func offlineCount(of username: String, app: Int64) async throws -> Int {
        try await rows(
            """
            SELECT COUNT(*) AS count FROM inbox WHERE app_id = \(app) AND username = \(username) AND origin_device IS NULL AND seq > COALESCE(
                (SELECT MAX(acked_seq) FROM device_cursors WHERE app_id = \(app) AND username = \(username)), 0)
            """
        ).first.map { try $0["count"].decode(Int.self) } ?? 0
    }

    public func offlineStatus(of messageID: UInt64, for username: String, app: Int64) async throws -> OfflineStatus? {
        guard let id = messageID.storedID else { return nil }
        guard
            let row = try await rows(
                """
                SELECT i.seq, COALESCE((SELECT MAX(acked_seq) FROM device_cursors c WHERE c.app_id = i.app_id AND c.username = i.username), 0) AS acked
                FROM inbox i WHERE i.app_id = \(app) AND i.message_id = \(id) AND i.username = \(username)
                """
            ).first
        else { return nil }
        return try row["acked"].decode(Int64.self) >= row["seq"].decode(Int64.self) ? .delivered : .undelivered
    }

    // MARK: Retention

    /// Rows removed per statement: each batch is a short transaction of its own.
    static let retentionBatch = 500

    public func enforceRetention(_ app: AppRecord, now: Int64) async throws -> Int {
        let cutoff = now - app.limits.maxAgeSeconds * 1000
        var removed = 0
        // Too old, then beyond the per-conversation limits: batch by batch, each its own short statement.
        while true {
            let batch = try await execute(
                """
                DELETE FROM inbox WHERE ctid IN (
                    SELECT ctid FROM inbox WHERE app_id = \(app.id) AND created_at < \(cutoff) LIMIT \(Self.retentionBatch))
                RETURNING 1
                """)
            removed += batch
            if batch < Self.retentionBatch { break }
        }
        while true {
            let batch = try await execute(
                """
                DELETE FROM inbox WHERE ctid IN (
                    SELECT ctid FROM (
                        SELECT ctid, chat_type, ROW_NUMBER() OVER (PARTITION BY username, conversation ORDER BY seq DESC) AS newest
                        FROM inbox WHERE app_id = \(app.id)) ranked
                    WHERE (chat_type = 'chat' AND newest > \(app.limits.perChat)) OR (chat_type = 'groupchat' AND newest > \(app.limits.perGroup))
                    LIMIT \(Self.retentionBatch))
                RETURNING 1
                """)
            removed += batch
            if batch < Self.retentionBatch { break }
        }
        while try await execute(
            """
            DELETE FROM messages WHERE (app_id, id) IN (
                SELECT m.app_id, m.id FROM messages m WHERE m.app_id = \(app.id)
                    AND NOT EXISTS (SELECT 1 FROM inbox i WHERE i.app_id = m.app_id AND i.message_id = m.id)
                    AND NOT EXISTS (SELECT 1 FROM pending_routes r WHERE r.app_id = m.app_id AND r.message_id = m.id)
                LIMIT \(Self.retentionBatch))
            RETURNING 1
            """) == Self.retentionBatch
        {}
        // Finished push records are kept as long as messages are, and so are cursors of devices unseen that long;
        // send receipts answer retries for 24 h.
        while try await transaction({ connection in
            let contents = try await connection.query(
                """
                WITH finished AS (
                    SELECT id FROM push_jobs WHERE app_id = \(app.id) AND status != 'pending' AND updated_at < \(cutoff)
                    LIMIT \(Self.retentionBatch)),
                attempts AS (DELETE FROM push_attempts WHERE job_id IN (SELECT id FROM finished))
                DELETE FROM push_jobs WHERE id IN (SELECT id FROM finished) RETURNING content_id
                """, logger: logger
            ).collect().map { try $0.decode(Int64?.self) }
            try await Self.deleteUnreferencedContents(Set(contents.compactMap { $0 }), app: app.id, connection: connection, logger: logger)
            return contents.count == Self.retentionBatch
        }) {}
        while try await execute(
            """
            DELETE FROM send_receipts WHERE ctid IN (
                SELECT ctid FROM send_receipts WHERE app_id = \(app.id) AND created_at < \(now - SendReceipt.lifetime)
                LIMIT \(Self.retentionBatch))
            RETURNING 1
            """) == Self.retentionBatch
        {}
        while try await execute(
            """
            DELETE FROM device_cursors WHERE ctid IN (
                SELECT ctid FROM device_cursors WHERE app_id = \(app.id) AND updated_at < \(cutoff) LIMIT \(Self.retentionBatch))
            RETURNING 1
            """) == Self.retentionBatch
        {}
        try await trimWebhookOutbox(app: app.id)
        return removed
    }
}
