import BeaconCore
import BeaconStorage
import Foundation
import PostgresNIO

/// The push-result webhook: its configuration and outbox (filled by the `v4-webhooks` trigger and `removeBinding`).
extension PostgresStore {
    @discardableResult
    public func setWebhook(_ config: WebhookConfig?, app: Int64, now: Int64) async throws -> WebhookState? {
        try await transaction { connection in
            // Deleting waits for pushes recording events (their key-share locks), so none is left behind; replacing does not.
            let previous = try await Self.webhook(
                app: app, connection: connection, logger: logger, lock: config == nil ? .forUpdate : .forNoKeyUpdate)
            if let config {
                // A new configuration starts afresh, and fences out a batch claimed under the old one (claim_token).
                try await connection.query(
                    """
                    INSERT INTO webhooks (app_id, url, sealed_secret, enabled, updated_at)
                    VALUES (\(app), \(config.url), \(Data(config.sealedSecret)), \(config.enabled), \(now))
                    ON CONFLICT (app_id) DO UPDATE SET url = excluded.url, sealed_secret = excluded.sealed_secret,
                        enabled = excluded.enabled, updated_at = excluded.updated_at, failures = 0, next_attempt_at = 0,
                        last_error = NULL, claimed_until = 0, claim_token = webhooks.claim_token + 1
                    """, logger: logger)
            } else {
                try await connection.query("DELETE FROM webhooks WHERE app_id = \(app)", logger: logger)
                try await connection.query("DELETE FROM webhook_events WHERE app_id = \(app)", logger: logger)
            }
            return previous
        }
    }

    public func webhook(app: Int64) async throws -> WebhookState? {
        try await transaction { connection in try await Self.webhook(app: app, connection: connection, logger: logger, lock: nil) }
    }

    /// A row lock `webhook(app:connection:logger:lock:)` may take.
    private enum RowLock: String {
        case forUpdate = "FOR UPDATE"
        case forNoKeyUpdate = "FOR NO KEY UPDATE"
    }

    private static func webhook(app: Int64, connection: PostgresConnection, logger: Logger, lock: RowLock?) async throws -> WebhookState? {
        let query: PostgresQuery =
            "SELECT \(unescaped: webhookColumns) FROM webhooks WHERE app_id = \(app) \(unescaped: lock?.rawValue ?? "")"
        guard let row = try await connection.query(query, logger: logger).collect().first?.makeRandomAccess() else { return nil }
        let pending =
            try await connection.query("SELECT COUNT(*) FROM webhook_events WHERE app_id = \(app)", logger: logger)
            .collect().first?.decode(Int64.self) ?? 0
        return WebhookState(
            config: try webhookConfig(from: row), pendingEvents: Int(pending), consecutiveFailures: try row["failures"].decode(Int.self),
            nextAttemptAt: try row["next_attempt_at"].decode(Int64.self), lastError: try row["last_error"].decode(String?.self),
            droppedEvents: try row["dropped_events"].decode(Int64.self))
    }

    private static let webhookColumns =
        "app_id, url, sealed_secret, enabled, failures, next_attempt_at, last_error, dropped_events, claim_token"

    private static func webhookConfig(from row: PostgresRandomAccessRow) throws -> WebhookConfig {
        WebhookConfig(
            url: try row["url"].decode(String.self), sealedSecret: [UInt8](try row["sealed_secret"].decode(Data.self)),
            enabled: try row["enabled"].decode(Bool.self))
    }

    public func claimWebhookBatch(now: Int64, lease: Int64, limit: Int) async throws -> WebhookBatch? {
        try await transaction { connection in
            // SKIP LOCKED: nodes polling together each take a different app, or nothing. NO KEY UPDATE (what the UPDATE
            // needs): the key-share locks that pushes take on the row while recording events do not make it skip the app.
            guard
                let row = try await connection.query(
                    """
                    UPDATE webhooks SET claimed_until = \(now + lease), claim_token = \(Int64.random(in: 1...Int64.max))
                    WHERE app_id = (
                        SELECT w.app_id FROM webhooks w WHERE w.enabled AND w.next_attempt_at <= \(now) AND w.claimed_until <= \(now)
                            AND EXISTS (SELECT 1 FROM webhook_events e WHERE e.app_id = w.app_id)
                        ORDER BY w.next_attempt_at LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED)
                    RETURNING \(unescaped: Self.webhookColumns)
                    """, logger: logger
                ).collect().first?.makeRandomAccess()
            else { return nil }
            let app = try row["app_id"].decode(Int64.self)
            var events: [WebhookEvent] = []
            for event in try await connection.query(
                "SELECT * FROM webhook_events WHERE app_id = \(app) ORDER BY id LIMIT \(max(limit, 1))", logger: logger
            ).collect() {
                events.append(try Self.webhookEvent(from: event.makeRandomAccess()))
            }
            return WebhookBatch(
                app: app, config: try Self.webhookConfig(from: row), events: events,
                consecutiveFailures: try row["failures"].decode(Int.self),
                claimToken: try row["claim_token"].decode(Int64.self))
        }
    }

    private static func webhookEvent(from row: PostgresRandomAccessRow) throws -> WebhookEvent {
        WebhookEvent(
            id: try row["id"].decode(Int64.self), kind: WebhookEvent.Kind(rawValue: try row["kind"].decode(String.self)) ?? .push,
            at: try row["at"].decode(Int64.self), username: try row["username"].decode(String.self),
            deviceID: try row["device_id"].decode(String.self), notifier: try row["notifier"].decode(String.self),
            messageID: try row["message_id"].decode(Int64?.self).map { UInt64(bitPattern: $0) },
            pushType: try row["push_type"].decode(String?.self), outcome: try row["outcome"].decode(String?.self),
            reason: try row["reason"].decode(String?.self), apnsStatus: try row["apns_status"].decode(Int?.self),
            apnsID: try row["apns_id"].decode(String?.self), attempts: try row["attempts"].decode(Int?.self))
    }

    @discardableResult
    public func finishWebhookBatch(_ batch: WebhookBatch, error: String?, retryAt: Int64, now: Int64) async throws -> Bool {
        if let error {
            return try await execute(
                """
                UPDATE webhooks SET failures = failures + 1, last_error = \(error), next_attempt_at = \(retryAt), claimed_until = 0
                WHERE app_id = \(batch.app) AND claim_token = \(batch.claimToken) RETURNING 1
                """) > 0
        }
        return try await transaction { connection in
            let finished = try await connection.query(
                """
                UPDATE webhooks SET failures = 0, last_error = NULL, next_attempt_at = \(now), claimed_until = 0
                WHERE app_id = \(batch.app) AND claim_token = \(batch.claimToken) RETURNING 1
                """, logger: logger
            ).collect().count
            guard finished > 0 else { return false }
            try await connection.query(
                "DELETE FROM webhook_events WHERE app_id = \(batch.app) AND id = ANY(\(batch.events.map(\.id)))", logger: logger)
            return true
        }
    }

    public func webhookOutboxStats() async throws -> WebhookOutboxStats {
        let query = """
            SELECT (SELECT COUNT(*) FROM webhook_events e JOIN webhooks w ON w.app_id = e.app_id AND w.enabled) AS pending,
                (SELECT MIN(e.at) FROM webhook_events e JOIN webhooks w ON w.app_id = e.app_id AND w.enabled) AS oldest,
                (SELECT COALESCE(SUM(dropped_events), 0)::BIGINT FROM webhooks WHERE enabled) AS dropped
            """
        guard let row = try await rows(PostgresQuery(unsafeSQL: query)).first else {
            return WebhookOutboxStats(pending: 0, oldest: nil, dropped: 0)
        }
        return WebhookOutboxStats(
            pending: Int(try row["pending"].decode(Int64.self)), oldest: try row["oldest"].decode(Int64?.self),
            dropped: try row["dropped"].decode(Int64.self))
    }

    /// Drops the app's oldest events beyond `WebhookOutbox.maxEventsPerApp`, counting them on the webhook.
    func trimWebhookOutbox(app: Int64) async throws {
        try await execute(
            """
            WITH dropped AS (
                DELETE FROM webhook_events WHERE app_id = \(app) AND id <= (
                    SELECT id FROM webhook_events WHERE app_id = \(app) ORDER BY id DESC LIMIT 1 OFFSET \(WebhookOutbox.maxEventsPerApp))
                RETURNING 1)
            UPDATE webhooks SET dropped_events = dropped_events + (SELECT COUNT(*) FROM dropped)
            WHERE app_id = \(app) AND EXISTS (SELECT 1 FROM dropped)
            """)
    }
}
