import BeaconCore
import BeaconSQLite
import BeaconStorage
import BeaconTesting
import Foundation
import GRDB
import PostgresNIO
import Testing

@testable import BeaconPostgres

/// The push-result webhook's outbox, on every store kind: what records an event, claims, backoff, fencing, bounds.
@Suite struct WebhookConformanceTests {
    private static let config = WebhookConfig(url: "http://127.0.0.1:9/hook", sealedSecret: [1, 2, 3], enabled: true)

    private static func job(_ device: String, skip: String? = nil) -> NewPushJob {
        NewPushJob(
            username: "bob", deviceID: device, notifier: "ios", deviceToken: "t-\(device)", topic: "t", pushType: .alert,
            priority: .immediate,
            expiration: 0, collapseID: nil, apnsID: fixedAPNsID(device), payload: #"{"aps":{"alert":"x"}}"#, skipReason: skip)
    }

    /// Stores message `id` from alice to bob and records its decisions.
    private static func route(_ store: any BeaconStore, _ app: AppRecord, _ id: UInt64, _ jobs: [NewPushJob], at time: Int64 = now)
        async throws
    {
        _ = try await store.append(
            [NewMessage(message: text(id, from: "alice", to: "bob"), deliveries: [Delivery(username: "bob")], routesPushes: true)],
            app: app.id, receipt: nil)
        #expect(try await store.recordRoute(PushRoute(messageID: id, replacing: .pendingRoute(), jobs: jobs, now: time), app: app.id))
    }

    @Test(arguments: StoreKind.available)
    func everyFinalOutcomeIsRecordedOnceAndDeliveredInOrder(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            try await makeUsers(store, app, ["alice", "bob"])
            // Without a webhook nothing is recorded.
            try await Self.route(store, app, 1, [Self.job("phone", skip: "dnd")])
            #expect(try await store.webhook(app: app.id) == nil)
            #expect(try await store.webhookOutboxStats().pending == 0)

            #expect(try await store.setWebhook(Self.config, app: app.id, now: now) == nil)
            try await store.bind(
                PushBinding(username: "bob", deviceID: "phone", notifier: "ios", deviceToken: "t-phone", boundAt: 1), app: app.id)
            // A skip is recorded as it is stored; a pushed job when APNs answered for good, not while it is retried.
            try await Self.route(store, app, 2, [Self.job("phone"), Self.job("pad", skip: "dnd")], at: now + 1)
            #expect(try await store.webhook(app: app.id)?.pendingEvents == 1)
            let claimed = try await store.claimPushJobs(now: now + 1, lease: 1000, limit: 10)
            #expect(claimed.count == 1)
            try await store.recordPushAttempts(
                claimed.map {
                    PushAttemptOutcome(
                        jobID: $0.id, claimToken: $0.claimToken, status: .pending, httpStatus: 500, reason: "InternalServerError",
                        nextAttemptAt: now + 2)
                },
                now: now + 2)
            #expect(try await store.webhook(app: app.id)?.pendingEvents == 1)
            let again = try await store.claimPushJobs(now: now + 3, lease: 1000, limit: 10)
            try await store.recordPushAttempts(
                again.map { PushAttemptOutcome(jobID: $0.id, claimToken: $0.claimToken, status: .sent, httpStatus: 200, reason: nil) },
                now: now + 4)
            #expect(try await store.webhookOutboxStats() == WebhookOutboxStats(pending: 2, oldest: now + 1, dropped: 0))

            // One batch per app at a time.
            let batch = try #require(try await store.claimWebhookBatch(now: now + 5, lease: 60_000, limit: 10))
            #expect(batch.app == app.id && batch.config == Self.config && batch.consecutiveFailures == 0)
            #expect(batch.events.map(\.kind) == [.push, .push])
            #expect(batch.events.map(\.outcome) == ["skipped", "sent"])
            #expect(batch.events.map(\.reason) == ["dnd", nil])
            #expect(batch.events.map(\.deviceID) == ["pad", "phone"])
            #expect(batch.events.map(\.messageID) == [2, 2])
            #expect(
                batch.events[1].apnsStatus == 200 && batch.events[1].apnsID == StoredForm.text(of: fixedAPNsID("phone"))
                    && batch.events[1].attempts == 2)
            #expect(batch.events[0].id < batch.events[1].id)
            #expect(try await store.claimWebhookBatch(now: now + 5, lease: 60_000, limit: 10) == nil)

            // A failed delivery backs off; the same events go again afterwards.
            #expect(try await store.finishWebhookBatch(batch, error: "http_5xx", retryAt: now + 1000, now: now + 6))
            var state = try #require(try await store.webhook(app: app.id))
            #expect(state.consecutiveFailures == 1 && state.lastError == "http_5xx" && state.nextAttemptAt == now + 1000)
            #expect(try await store.claimWebhookBatch(now: now + 999, lease: 60_000, limit: 10) == nil)
            let retry = try #require(try await store.claimWebhookBatch(now: now + 1000, lease: 60_000, limit: 1))
            #expect(retry.events == [batch.events[0]] && retry.consecutiveFailures == 1)
            // The first claim is fenced out once another took the events.
            #expect(try await !store.finishWebhookBatch(batch, error: nil, retryAt: 0, now: now + 1001))
            #expect(try await store.finishWebhookBatch(retry, error: nil, retryAt: 0, now: now + 1001))
            state = try #require(try await store.webhook(app: app.id))
            #expect(state.pendingEvents == 1 && state.consecutiveFailures == 0 && state.lastError == nil)
            let last = try #require(try await store.claimWebhookBatch(now: now + 1002, lease: 60_000, limit: 10))
            #expect(last.events == [batch.events[1]])
            // A lapsed claim hands the events on.
            let taken = try #require(try await store.claimWebhookBatch(now: now + 61_003, lease: 60_000, limit: 10))
            #expect(taken.events == last.events && taken.claimToken != last.claimToken)
            #expect(try await !store.finishWebhookBatch(last, error: nil, retryAt: 0, now: now + 61_004))
            #expect(try await store.finishWebhookBatch(taken, error: nil, retryAt: 0, now: now + 61_004))
            #expect(try await store.claimWebhookBatch(now: now + 61_005, lease: 60_000, limit: 10) == nil)
            #expect(try await store.webhookOutboxStats() == WebhookOutboxStats(pending: 0, oldest: nil, dropped: 0))
        }
    }

    @Test(arguments: StoreKind.available)
    func deadBindingsDisabledWebhooksAndRemoval(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            try await makeUsers(store, app, ["alice", "bob"])
            try await store.setWebhook(Self.config, app: app.id, now: now)
            try await store.bind(
                PushBinding(username: "bob", deviceID: "phone", notifier: "ios", deviceToken: "t-phone", voipToken: "v-phone", boundAt: 1),
                app: app.id)
            #expect(
                try await store.removeBinding(deviceToken: "v-phone", notifier: "ios", app: app.id, unlessBoundSince: nil, now: now + 7))
            #expect(
                try await store.removeBinding(deviceToken: "t-phone", notifier: "ios", app: app.id, unlessBoundSince: nil, now: now + 8))
            #expect(
                try await !store.removeBinding(deviceToken: "t-phone", notifier: "ios", app: app.id, unlessBoundSince: nil, now: now + 9))
            let batch = try #require(try await store.claimWebhookBatch(now: now + 10, lease: 60_000, limit: 10))
            #expect(batch.events.map(\.kind) == [.bindingRemoved, .bindingRemoved])
            #expect(batch.events.map(\.reason) == ["voip_token", "token"])
            #expect(batch.events.map(\.at) == [now + 7, now + 8])
            #expect(
                batch.events.allSatisfy { $0.username == "bob" && $0.deviceID == "phone" && $0.notifier == "ios" && $0.messageID == nil })

            // Setting the webhook again starts its state afresh and fences out a batch claimed before.
            let disabled = WebhookConfig(url: "https://example.com/hook", sealedSecret: [9], enabled: false)
            let previous = try #require(try await store.setWebhook(disabled, app: app.id, now: now + 11))
            #expect(previous.config == Self.config && previous.pendingEvents == 2)
            #expect(try await !store.finishWebhookBatch(batch, error: nil, retryAt: 0, now: now + 12))
            // Disabled: nothing new is recorded and nothing is claimed; what waits stays.
            try await Self.route(store, app, 3, [Self.job("pad", skip: "dnd")])
            #expect(try await store.webhook(app: app.id)?.pendingEvents == 2)
            #expect(try await store.claimWebhookBatch(now: now + 13, lease: 60_000, limit: 10) == nil)
            // Removing the webhook drops its events.
            #expect(try await store.setWebhook(nil, app: app.id, now: now + 14)?.config == disabled)
            #expect(try await store.webhook(app: app.id) == nil)
            #expect(try await store.webhookOutboxStats() == WebhookOutboxStats(pending: 0, oldest: nil, dropped: 0))
            #expect(try await store.setWebhook(nil, app: app.id, now: now + 15) == nil)
        }
    }

    /// PostgreSQL: deleting a webhook while a push's transaction is recording its event waits for that transaction, and
    /// then removes its event too (none is left behind for a later webhook).
    @Test(.enabled(if: postgresAvailable, "needs BEACON_TEST_POSTGRES_URL"))
    func deletingAWebhookDuringARecordedOutcomeLeavesNoEvent() async throws {
        try await StoreKind.postgres.withStore { store in
            let postgres = try #require(store as? PostgresStore)
            let app = try await makeApp(store)
            try await makeUsers(store, app, ["alice", "bob"])
            try await store.setWebhook(Self.config, app: app.id, now: now)
            try await store.bind(
                PushBinding(username: "bob", deviceID: "phone", notifier: "ios", deviceToken: "t-phone", boundAt: 1), app: app.id)
            try await Self.route(store, app, 1, [Self.job("phone")])
            #expect(try await store.webhook(app: app.id)?.pendingEvents == 0)
            let (deleted, deletedSink) = AsyncStream.makeStream(of: Void.self)
            try await postgres.client.withTransaction(logger: postgres.logger) { connection in
                // The job's outcome, recorded by the trigger inside this open transaction.
                try await connection.query(
                    "UPDATE push_jobs SET status = 'failed', updated_at = \(now + 1) WHERE app_id = \(app.id)", logger: postgres.logger)
                Task {
                    try await store.setWebhook(nil, app: app.id, now: now + 2)
                    deletedSink.finish()
                }
                // The deletion cannot finish while this transaction holds its key-share lock on the webhook.
                try await Task.sleep(for: .milliseconds(300))
            }
            for await _ in deleted {}
            #expect(try await store.webhook(app: app.id) == nil)
            let left = try await postgres.rows("SELECT COUNT(*) AS n FROM webhook_events WHERE app_id = \(app.id)")
            #expect(try left.first.map { try $0["n"].decode(Int64.self) } == 0)
        }
    }

    @Test(arguments: StoreKind.available)
    func retentionDropsTheOldestEventsBeyondTheBound(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            try await store.setWebhook(Self.config, app: app.id, now: now)
            let count = WebhookOutbox.maxEventsPerApp + 5
            // Events written straight into the outbox (recording 100,005 outcomes through pushes would take minutes).
            switch store {
            case let sqlite as SQLiteStore:
                let queue = try DatabaseQueue(path: sqlite.path)
                try await queue.write { db in
                    try db.execute(
                        sql: """
                            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
                            INSERT INTO webhook_events (app_id, kind, at, username, device_id, notifier) SELECT ?, 'push', i, 'bob', 'd', 'ios' FROM n
                            """,
                        arguments: [count, app.id])
                }
                try queue.close()
            case let postgres as PostgresStore:
                try await postgres.execute(
                    """
                    INSERT INTO webhook_events (app_id, kind, at, username, device_id, notifier)
                    SELECT \(app.id), 'push', i, 'bob', 'd', 'ios' FROM generate_series(1, \(count)) AS i
                    """)
            default:
                Issue.record("no way to fill the outbox of \(type(of: store))")
            }
            _ = try await store.enforceRetention(app, now: now)
            let state = try #require(try await store.webhook(app: app.id))
            #expect(state.pendingEvents == WebhookOutbox.maxEventsPerApp && state.droppedEvents == 5)
            #expect(
                try await store.webhookOutboxStats() == WebhookOutboxStats(pending: WebhookOutbox.maxEventsPerApp, oldest: 6, dropped: 5))
        }
    }
}
