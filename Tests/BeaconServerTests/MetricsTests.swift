import APNsSimulator
import BeaconCore
import BeaconStorage
import BeaconTesting
import Foundation
import GRDB
import HummingbirdWSClient
import Logging
import Synchronization
import Testing

@testable import BeaconPostgres
@testable import BeaconSQLite
@testable import BeaconServer

private let phone = String(repeating: "ef", count: 32)

/// `GET /metrics` moves with real traffic; `GET /ready` and `GET /health` answer a load balancer.
@Suite struct MetricsTests {
    /// The exposition's lines.
    private static func metrics(_ beacon: TestBeacon) async throws -> Set<String> {
        let (status, body) = try await REST.call(beacon.baseURL, "GET", "/metrics")
        #expect(status == 200)
        return Set((body.stringValue ?? "").split(separator: "\n").map(String.init))
    }

    /// `/ready`'s checks: these, and the cluster's on PostgreSQL (whose test servers are cluster nodes).
    private static func checks(_ beacon: TestBeacon, _ checks: [String: JSONValue]) -> JSONValue {
        .object(beacon.store is PostgresStore ? checks.merging(["cluster": "alive"]) { $1 } : checks)
    }

    /// The value of the sample named exactly `sample` (with its labels).
    private static func value(_ sample: String, in lines: Set<String>) -> Double? {
        lines.first { $0.hasPrefix(sample + " ") }.flatMap { Double($0.dropFirst(sample.count + 1)) }
    }

    @Test func metricsFollowMessagesPushesConnectionsAndRequests() async throws {
        try await withPushBeacon { beacon, simulator in
            try await beacon.createUsers("alice", "bob")
            try await beacon.uploadP8()
            _ = try await beacon.bind("bob", token: phone)
            let before = try await Self.metrics(beacon)
            #expect(!before.contains { $0.hasPrefix("beacon_messages_stored_total{") })
            let writes = #"beacon_store_transaction_duration_seconds_count{kind="write"}"#
            let writesBefore = try #require(Self.value(writes, in: before))
            _ = try await beacon.rest("POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "hi"]])
            _ = try await beacon.rest("POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "cmd", "body": ["action": "x"]])
            // Each stored message is at least one write transaction.
            #expect(try #require(Self.value(writes, in: try await Self.metrics(beacon))) >= writesBefore + 2)
            #expect(try await beacon.pushOutcomes.attempts(1).map(\.status) == [.sent])
            // bob's laptop catches up with the two messages.
            let device = try await beacon.connect("bob", device: "laptop")
            try await device.events.synced()
            let text = try await Self.metrics(beacon)
            #expect(text.contains(#"beacon_messages_stored_total{type="txt",chat_type="chat"} 1"#))
            #expect(text.contains(#"beacon_messages_stored_total{type="cmd",chat_type="chat"} 1"#))
            #expect(text.contains(#"beacon_push_decisions_total{outcome="push",reason="",decision="initial"} 1"#))
            #expect(text.contains(#"beacon_apns_requests_total{status="200",reason=""} 1"#))
            #expect(text.contains("beacon_apns_request_duration_seconds_count 1"))
            #expect(text.contains("beacon_websocket_connected_devices 1.0"))
            #expect(text.contains("beacon_websocket_connects_total 1"))
            #expect(text.contains("beacon_sync_catchup_messages_count 1"))
            #expect(text.contains("beacon_sync_catchup_messages_sum 2.0"))
            #expect(text.contains("beacon_push_queue_depth 0.0"))
            #expect(text.contains("beacon_store_up 1.0"))
            #expect(
                text.contains(#"beacon_http_requests_total{route="/{org}/{app}/messages/users",method="POST",status="200"} 2"#),
                "\(text.sorted())")
            // Labels never carry users, devices or tokens.
            #expect(!text.contains { $0.contains("bob") || $0.contains("laptop") || $0.contains(phone) })

            // A refused push (its binding removed) and a skip are counted by reason.
            await device.client.logout()
            simulator.markUnregistered(deviceToken: phone, timestamp: Int64(Date().timeIntervalSince1970 * 1000) + 60_000)
            _ = try await beacon.rest("POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "gone"]])
            _ = try await beacon.pushOutcomes.attempts(2)
            _ = try await beacon.rest(
                "POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "unbound"]])
            _ = try await beacon.deliveries(of: "bob") { $0.count == 3 }
            // The logout's connection ends on the server after the answer: its count comes shortly (at most 10 s here).
            var after: Set<String> = []
            // (The session counts the disconnect, then the connected devices: both, so no scrape falls between the two.)
            try await waitUntil("the logout counted", timeout: .seconds(10), interval: .milliseconds(100)) {
                after = try await Self.metrics(beacon)
                return after.contains("beacon_websocket_disconnects_total 1") && after.contains("beacon_websocket_connected_devices 0.0")
            }
            #expect(after.contains(#"beacon_apns_requests_total{status="410",reason="Unregistered"} 1"#))
            #expect(after.contains("beacon_push_bindings_removed_total 1"))
            #expect(after.contains(#"beacon_push_decisions_total{outcome="skipped",reason="no_binding",decision="initial"} 1"#))
            #expect(after.contains("beacon_websocket_connected_devices 0.0"))
            #expect(after.contains("beacon_websocket_disconnects_total 1"))
        }
    }

    @Test func storeTransactionHistogramIsCumulativeWithAnInfiniteBucket() {
        let timings = TransactionTimings()
        timings.record(.write, .microseconds(100))
        timings.record(.write, .milliseconds(3))
        timings.record(.write, .seconds(20))
        let lines = BeaconMetrics.exposition(of: timings.snapshot()).split(separator: "\n").map(String.init)
        let name = "beacon_store_transaction_duration_seconds"
        #expect(lines.first == "# TYPE \(name) histogram")
        #expect(lines.contains(#"\#(name)_bucket{kind="write",le="0.0005"} 1"#))
        #expect(lines.contains(#"\#(name)_bucket{kind="write",le="0.0025"} 1"#))
        #expect(lines.contains(#"\#(name)_bucket{kind="write",le="0.005"} 2"#))
        #expect(lines.contains(#"\#(name)_bucket{kind="write",le="10.0"} 2"#))
        #expect(lines.contains(#"\#(name)_bucket{kind="write",le="+Inf"} 3"#))
        #expect(lines.contains(#"\#(name)_count{kind="write"} 3"#))
        #expect(lines.contains { $0.hasPrefix(#"\#(name)_sum{kind="write"} 20.003"#) })
        // Kinds never run are left out.
        #expect(!lines.contains { $0.contains(#"kind="read""#) })
    }

    @Test func readinessNamesEachCheck() async throws {
        try await withPushBeacon { beacon, _ in
            let (status, body) = try await REST.call(beacon.baseURL, "GET", "/ready")
            #expect(status == 200)
            #expect(body == Self.checks(beacon, ["status": "ready", "store": "ok", "migrations": "done", "push_worker": "running"]))
            #expect(try await REST.call(beacon.baseURL, "GET", "/health").1 == "ok")
            // Unknown paths share one route label, whatever they are.
            for path in ["/nope", "/acme/chat/nothing/here"] {
                #expect(try await REST.call(beacon.baseURL, "GET", path).0 == 404)
            }
            let lines = try await Self.metrics(beacon)
            #expect(lines.contains(#"beacon_http_requests_total{route="NotFound",method="GET",status="404"} 2"#))
            #expect(lines.contains(#"beacon_http_request_duration_seconds_count{route="NotFound",method="GET",status="404"} 2"#))
        }
    }

    /// A WebSocket upgrade is a request too: a refused one is counted with its status.
    @Test func refusedUpgradesAreCounted() async throws {
        try await TestBeacon.run { beacon in
            _ = try? await WebSocketClient.connect(
                url: "ws://127.0.0.1:\(beacon.port)/acme/chat/ws?device_id=d&access_token=not-a-token", logger: Logger(label: "test")
            ) { _, _, _ in }
            let lines = try await Self.metrics(beacon)
            #expect(lines.contains { $0.hasPrefix("beacon_http_requests_total{") && $0.contains("/ws\"") && $0.contains(#"status="401""#) })
        }
    }

    /// A database that lacks a migration this version needs (an old backup restored under a running node) is not
    /// ready, and says which.
    @Test func readinessFailsWhileAMigrationIsPending() async throws {
        try await withPushBeacon { beacon, _ in
            let missing: String
            switch beacon.store {
            case let sqlite as SQLiteStore:
                missing = try #require(SQLiteStore.migrator.migrations.last)
                let queue = try DatabaseQueue(path: sqlite.path)
                try await queue.write { db in try db.execute(sql: "DELETE FROM grdb_migrations WHERE identifier = ?", arguments: [missing])
                }
                try queue.close()
            case let postgres as PostgresStore:
                missing = try #require(PostgresStore.migrations.last?.version)
                try await postgres.execute("DELETE FROM schema_migrations WHERE version = \(missing)")
            default:
                Issue.record("unknown store \(type(of: beacon.store))")
                return
            }
            let (status, body) = try await REST.call(beacon.baseURL, "GET", "/ready")
            #expect(status == 503)
            #expect(
                body
                    == Self.checks(
                        beacon,
                        ["status": "not_ready", "store": "ok", "migrations": .string("pending: \(missing)"), "push_worker": "running"]))
        }
    }

    /// The bound holds for a body that ignores cancellation (as a postgres-nio query does): the wait ends on time and
    /// the body finishes in the background.
    @Test func aTimeoutDoesNotWaitForABodyThatIgnoresCancellation() async throws {
        let (release, releaseSink) = AsyncStream.makeStream(of: Void.self)
        let (finished, finishedSink) = AsyncStream.makeStream(of: Bool.self)
        let ended = Atomic<Bool>(false)
        // Released after 5 s anyway: a broken bound then shows as the body's answer, not as a hang.
        let releaser = Task {
            try await Task.sleep(for: .seconds(5))
            releaseSink.yield()
        }
        defer { releaser.cancel() }
        await #expect(throws: TimedOut.self) {
            try await withTimeout(.milliseconds(50)) {
                // Waits for the release below, cancelled or not (an unstructured task's wait is not cancelled with this one).
                await Task { for await _ in release { break } }.value
                ended.store(true, ordering: .relaxed)
                finishedSink.yield(Task.isCancelled)
                return 1
            }
        }
        let endedEarly = ended.load(ordering: .relaxed)
        #expect(!endedEarly)
        releaseSink.yield()
        // It ran on, was cancelled, and its result went nowhere.
        let wasCancelled = try await withTimeout(.seconds(10)) { await finished.first { _ in true } }
        #expect(wasCancelled == true)
        #expect(try await withTimeout(.seconds(10)) { 7 } == 7)
    }
}
