import BeaconCore
import BeaconStorage
import Foundation
import GRDB

/// The push-result webhook: its configuration and outbox (filled by the `v9-webhooks` triggers and `removeBinding`).
extension SQLiteStore {
    @discardableResult
    public func setWebhook(_ config: WebhookConfig?, app: Int64, now: Int64) async throws -> WebhookState? {
        try await write { db in
            let previous = try Self.webhook(app: app, db: db)
            if let config {
                // A new configuration starts afresh, and fences out a batch claimed under the old one (claim_token).
                try db.execute(
                    sql: """
                        INSERT INTO webhooks (app_id, url, sealed_secret, enabled, updated_at) VALUES (?, ?, ?, ?, ?)
                        ON CONFLICT (app_id) DO UPDATE SET url = excluded.url, sealed_secret = excluded.sealed_secret,
                            enabled = excluded.enabled, updated_at = excluded.updated_at, failures = 0, next_attempt_at = 0,
                            last_error = NULL, claimed_until = 0, claim_token = claim_token + 1
                        """,
                    arguments: [app, config.url, Data(config.sealedSecret), config.enabled, now])
            } else {
                try db.execute(sql: "DELETE FROM webhooks WHERE app_id = ?", arguments: [app])
                try db.execute(sql: "DELETE FROM webhook_events WHERE app_id = ?", arguments: [app])
            }
            return previous
        }
    }

    public func webhook(app: Int64) async throws -> WebhookState? {
        try await read { db in try Self.webhook(app: app, db: db) }
    }

    private static func webhook(app: Int64, db: Database) throws -> WebhookState? {
        guard let row = try Row.fetchOne(db, sql: "SELECT * FROM webhooks WHERE app_id = ?", arguments: [app]) else { return nil }
        let pending = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM webhook_events WHERE app_id = ?", arguments: [app]) ?? 0
        return WebhookState(
            config: try webhookConfig(from: row), pendingEvents: pending, consecutiveFailures: try row.decode(forColumn: "failures"),
            nextAttemptAt: try row.decode(forColumn: "next_attempt_at"), lastError: try row.decode(forColumn: "last_error"),
            droppedEvents: try row.decode(forColumn: "dropped_events"))
    }

    // Rows are decoded with errors, not GRDB's trapping subscripts: a damaged stored row fails its delivery, not the server.
    private static func webhookConfig(from row: Row) throws -> WebhookConfig {
        WebhookConfig(
            url: try row.decode(forColumn: "url"), sealedSecret: [UInt8](try row.decode(Data.self, forColumn: "sealed_secret")),
            enabled: try row.decode(forColumn: "enabled"))
    }

    public func claimWebhookBatch(now: Int64, lease: Int64, limit: Int) async throws -> WebhookBatch? {
        let dueSQL = """
            SELECT w.app_id FROM webhooks w WHERE w.enabled = 1 AND w.next_attempt_at <= ? AND w.claimed_until <= ?
                AND EXISTS (SELECT 1 FROM webhook_events e WHERE e.app_id = w.app_id)
            ORDER BY w.next_attempt_at LIMIT 1
            """
        // Looked for first by a read, which never waits for the writer: most polls find nothing.
        guard try await read({ db in try Int64.fetchOne(db, sql: dueSQL, arguments: [now, now]) }) != nil else { return nil }
        return try await write { db in
            guard
                let row = try Row.fetchOne(
                    db,
                    sql: "UPDATE webhooks SET claimed_until = ?, claim_token = ? WHERE app_id = (\(dueSQL)) RETURNING *",
                    // Random: a webhook removed and set again starts no count a batch of the old one could match.
                    arguments: [now + lease, Int64.random(in: 1...Int64.max), now, now])
            else { return nil }
            let app: Int64 = try row.decode(forColumn: "app_id")
            let events = try Row.fetchAll(
                db, sql: "SELECT * FROM webhook_events WHERE app_id = ? ORDER BY id LIMIT ?", arguments: [app, max(limit, 1)]
            ).map(Self.webhookEvent(from:))
            return WebhookBatch(
                app: app, config: try Self.webhookConfig(from: row), events: events,
                consecutiveFailures: try row.decode(forColumn: "failures"), claimToken: try row.decode(forColumn: "claim_token"))
        }
    }

    private static func webhookEvent(from row: Row) throws -> WebhookEvent {
        WebhookEvent(
            id: try row.decode(forColumn: "id"), kind: WebhookEvent.Kind(rawValue: try row.decode(forColumn: "kind")) ?? .push,
            at: try row.decode(forColumn: "at"), username: try row.decode(forColumn: "username"),
            deviceID: try row.decode(forColumn: "device_id"), notifier: try row.decode(forColumn: "notifier"),
            messageID: try row.decode(Int64?.self, forColumn: "message_id").map { UInt64(bitPattern: $0) },
            pushType: try row.decode(forColumn: "push_type"), outcome: try row.decode(forColumn: "outcome"),
            reason: try row.decode(forColumn: "reason"), apnsStatus: try row.decode(forColumn: "apns_status"),
            apnsID: try row.decode(forColumn: "apns_id"), attempts: try row.decode(forColumn: "attempts"))
    }

    @discardableResult
    public func finishWebhookBatch(_ batch: WebhookBatch, error: String?, retryAt: Int64, now: Int64) async throws -> Bool {
        try await write { db in
            if let error {
                try db.execute(
                    sql: """
                        UPDATE webhooks SET failures = failures + 1, last_error = ?, next_attempt_at = ?, claimed_until = 0
                        WHERE app_id = ? AND claim_token = ?
                        """,
                    arguments: [error, retryAt, batch.app, batch.claimToken])
                return db.changesCount > 0
            }
            try db.execute(
                sql: """
                    UPDATE webhooks SET failures = 0, last_error = NULL, next_attempt_at = ?, claimed_until = 0
                    WHERE app_id = ? AND claim_token = ?
                    """,
                // Due again now, behind apps due earlier: the least recently served app goes first.
                arguments: [now, batch.app, batch.claimToken])
            guard db.changesCount > 0 else { return false }
            for chunk in Self.chunks(batch.events.map(\.id)) {
                try db.execute(
                    sql: "DELETE FROM webhook_events WHERE app_id = ? AND id IN (\(Self.marks(chunk.count)))",
                    arguments: StatementArguments([batch.app] + Array(chunk)))
            }
            return true
        }
    }

    public func webhookOutboxStats() async throws -> WebhookOutboxStats {
        try await read { db in
            let events = try Row.fetchOne(
                db,
                sql:
                    "SELECT COUNT(*) AS pending, MIN(e.at) AS oldest FROM webhook_events e JOIN webhooks w ON w.app_id = e.app_id AND w.enabled = 1"
            )
            let dropped = try Int64.fetchOne(db, sql: "SELECT COALESCE(SUM(dropped_events), 0) FROM webhooks WHERE enabled = 1")
            return WebhookOutboxStats(
                pending: try events?.decode(Int.self, forColumn: "pending") ?? 0,
                oldest: try events?.decode(Int64?.self, forColumn: "oldest") ?? nil,
                dropped: dropped ?? 0)
        }
    }

    /// Drops the app's oldest events beyond `WebhookOutbox.maxEventsPerApp`, counting them on the webhook.
    func trimWebhookOutbox(app: Int64) async throws {
        try await write { db in
            guard
                let newestDropped = try Int64.fetchOne(
                    db, sql: "SELECT id FROM webhook_events WHERE app_id = ? ORDER BY id DESC LIMIT 1 OFFSET ?",
                    arguments: [app, WebhookOutbox.maxEventsPerApp])
            else { return }
            try db.execute(sql: "DELETE FROM webhook_events WHERE app_id = ? AND id <= ?", arguments: [app, newestDropped])
            let dropped = db.changesCount
            try db.execute(sql: "UPDATE webhooks SET dropped_events = dropped_events + ? WHERE app_id = ?", arguments: [dropped, app])
        }
    }

    /// Records a `binding_removed` event for each binding of the app matching `condition` (on `b`), when its webhook is on.
    static func recordBindingsRemoved(
        where condition: String, reason: String, arguments: StatementArguments, app: Int64, now: Int64, db: Database
    ) throws {
        try db.execute(
            sql: """
                INSERT INTO webhook_events (app_id, kind, at, username, device_id, notifier, reason)
                SELECT b.app_id, 'binding_removed', ?, b.username, b.device_id, b.notifier, ? FROM push_bindings b
                WHERE b.app_id = ? AND \(condition) AND EXISTS (SELECT 1 FROM webhooks w WHERE w.app_id = b.app_id AND w.enabled = 1)
                """,
            arguments: [now, reason, app] + arguments)
    }
}
