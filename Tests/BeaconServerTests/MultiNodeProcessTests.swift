import BeaconCore
import BeaconProtocol
import BeaconTesting
import Foundation
import HummingbirdWSClient
import Logging
import Synchronization
import Testing

@testable import BeaconPostgres

/// Three real `beacon serve` processes on one PostgreSQL, one of them killed with SIGKILL under load.
@Suite(.serialized, .enabled(if: StoreKind.postgresURL != nil, "needs BEACON_TEST_POSTGRES_URL"))
struct MultiNodeProcessTests {
    /// Senders write through all three nodes; r0 has a device on node 0 that acknowledges nothing, r1 a device on node 2
    /// that reads live. Node 0 is killed. Within seconds another node declares it dead: its claimed pushes and r0's
    /// `online` skips are pushed; unanswered sends, retried on a survivor, are stored once; every acknowledged message of
    /// the receivers without a live device is pushed, and every one is synced once; r1's device received every message of
    /// its inbox live, wherever it was stored.
    @Test func killMinus9OfANodeLosesNothingAndItsDevicesArePushed() async throws {
        try await withTemporaryDirectory { directory in
            let simulator = try await SimulatorProcess.start(in: directory)
            defer { Task { await simulator.process.stop() } }
            let environment = [
                "BEACON_DATABASE_URL": try StoreKind.freshPostgresURL(),
                "BEACON_SECRET_KEY": Data(repeating: 9, count: 32).base64EncodedString(),
            ]
            let credentials = try await CrashTests.createApp(directory.appendingPathComponent("unused"), environment: environment)
            var started: [ServerProcess] = []
            for index in 0..<3 {
                started.append(
                    try await ServerProcess.start(
                        dataDirectory: directory.appendingPathComponent("node\(index)"), simulator: simulator,
                        extra: ["--node-id", "n\(index)"],
                        environment: environment))
            }
            let nodes = started
            defer { for node in nodes { Task { await node.process.stop() } } }
            let appToken = try await nodes[1].token(
                ["grant_type": "client_credentials", "client_id": .string(credentials.id), "client_secret": .string(credentials.secret)])
            _ = try await simulator.control("PUT", "/faults", ["delay_ms": 1000])  // every node holds claimed pushes when the kill comes
            try await CrashTests.provision(nodes[1], simulator: simulator, appToken: appToken)

            let watcherToken = try await nodes[0].token(CrashTests.password("r0"))
            let watcher = Task {
                try await WebSocketClient.connect(
                    url: nodes[0].webSocketURL(token: watcherToken, device: "watcher"), logger: Logger(label: "test")
                ) {
                    inbound, _, _ in
                    for try await _ in inbound.messages(maxSize: 1 << 20) {}
                }
            }
            defer { watcher.cancel() }
            let live = LiveReader()
            let readerToken = try await nodes[2].token(CrashTests.password("r1"))
            let reader = Task { try await live.read(url: nodes[2].webSocketURL(token: readerToken, device: "laptop")) }
            defer { reader.cancel() }
            try await live.waitUntilSynced()

            let ledger = Locked(CrashTests.Ledger())
            let load = Task {
                await withTaskGroup(of: Void.self) { group in
                    for (index, sender) in ["s0", "s1", "s2"].enumerated() {
                        group.addTask { await CrashTests.restSender(sender, server: nodes[index], appToken: appToken, ledger: ledger) }
                    }
                }
            }
            try await waitUntil("150 sends acknowledged", timeout: .seconds(120)) { ledger.withLock { $0.acknowledged.count } >= 150 }
            nodes[0].process.signal(SIGKILL)
            let killedAt = ContinuousClock.now
            _ = await nodes[0].process.exitStatus(within: .seconds(10))
            // The survivors go on for a moment, then stop (what was cut off is retried below).
            try await Task.sleep(for: .milliseconds(500))
            load.cancel()
            await load.value
            let declared = try await Self.firstLine(containing: "declared a node dead", in: [nodes[1], nodes[2]], timeout: .seconds(30))
            #expect(declared.contains("n0"))

            let (acknowledged, unanswered) = ledger.withLock { ($0.acknowledged, $0.unanswered) }
            let retried = try await CrashTests.retry(unanswered, server: nodes[1], appToken: appToken)
            var expected = acknowledged
            for (send, id) in retried { expected[send] = id }
            #expect(Set(expected.values).count == expected.count, "two sends got one message id")

            _ = try await simulator.control("PUT", "/faults", [:])
            // r1's device reads and acknowledges live: its messages are skipped `online`, rightly never pushed.
            let wanted = Set(expected.filter { $0.key.receiver != "r1" }.values)
            var pushes: [String: Int] = [:]
            // (Not thrown: what is missing is reported below.)
            try? await waitUntil("every wanted message pushed", timeout: .seconds(60), interval: .milliseconds(100)) {
                pushes = try await CrashTests.pushesByMessage(simulator)
                return wanted.allSatisfy { pushes[$0, default: 0] > 0 }
            }
            let allPushedAfter = killedAt.duration(to: .now)
            let unpushed = wanted.filter { pushes[$0, default: 0] == 0 }
            #expect(unpushed.isEmpty, "\(unpushed.count) stored messages were never pushed")
            #expect(allPushedAfter < .seconds(20), "the last push went \(allPushedAfter) after the kill")
            // A push can go twice only if the dead node sent it and died before recording it: such a job was claimed once
            // more than it has recorded attempts. Duplicates stay within those claims.
            let duplicates = pushes.values.reduce(0) { $0 + max(0, $1 - 1) }
            let lostClaims = try await PostgresStore.withStore(url: environment["BEACON_DATABASE_URL"] ?? "", logger: Logger(label: "test"))
            { store in
                try await store.rows(
                    "SELECT count(*) AS n FROM push_jobs j WHERE j.attempts > (SELECT count(*) FROM push_attempts a WHERE a.job_id = j.id)"
                ).first?["n"].decode(Int.self) ?? 0
            }
            #expect(duplicates <= lostClaims, "\(duplicates) duplicated pushes, \(lostClaims) claims of the dead node")

            // r0's device, which was on the dead node, reconnects to another: everything, in order, once.
            let watcherStored = try await nodes[1].storedMessages(
                token: try await nodes[1].token(CrashTests.password("r0")), device: "watcher")
            #expect(zip(watcherStored, watcherStored.dropFirst()).allSatisfy { $0.seq < $1.seq })
            #expect(watcherStored.map(\.messageID).count == Set(watcherStored.map(\.messageID)).count)
            #expect(Set(watcherStored.map(\.messageID)) == Set(expected.filter { $0.key.receiver == "r0" }.values))
            for receiver in CrashTests.receivers {
                let token = try await nodes[1].token(CrashTests.password(receiver))
                let stored = try await nodes[1].storedMessages(token: token, device: "tablet")
                let ids = stored.map(\.messageID)
                #expect(Set(ids).count == ids.count, "\(receiver) got a message twice")
                #expect(Set(ids) == Set(expected.filter { $0.key.receiver == receiver }.values), "\(receiver): stored messages differ")
                if receiver == "r1" {
                    // Everything reached the live device without it asking: from the dead node before it died, and from the others.
                    try await live.waitForAll(Set(ids))
                }
            }
            print(
                "3 nodes, kill -9 of one: \(acknowledged.count) acknowledged, \(unanswered.count) unanswered (retried), "
                    + "pushes \(pushes.values.reduce(0, +)) for \(wanted.count) messages, duplicated \(duplicates) (claims lost with the node: "
                    + "\(lostClaims)), all pushed \(allPushedAfter) after the kill; \(declared)")
        }
    }

    /// The first line containing `marker` printed by any of the processes.
    static func firstLine(containing marker: String, in servers: [ServerProcess], timeout: Duration) async throws -> String {
        var found: String?
        try await waitUntil("a process printing '\(marker)'", timeout: timeout, interval: .milliseconds(50)) {
            found = servers.lazy.compactMap { server in server.process.lines.items.first { $0.contains(marker) } }.first
            return found != nil
        }
        return found ?? ""
    }
}

/// A device that reads and acknowledges everything it is sent, recording the message ids.
final class LiveReader: Sendable {
    private let frames: Collector<ServerFrame>
    private let sink: AsyncStream<ServerFrame>.Continuation

    init() {
        let (stream, sink) = AsyncStream.makeStream(of: ServerFrame.self)
        frames = Collector(stream)
        self.sink = sink
    }

    func read(url: String) async throws {
        try await WebSocketClient.connect(url: url, logger: Logger(label: "test")) { inbound, outbound, _ in
            for try await message in inbound.messages(maxSize: 1 << 20) {
                guard case .text(let text) = message, let frame = try? JSONDecoder().decode(ServerFrame.self, from: Data(text.utf8)) else {
                    continue
                }
                self.sink.yield(frame)
                if case .message(let seq?, _) = frame {
                    try await outbound.write(.text(#"{"op":"ack","seq":\#(seq)}"#))
                }
            }
        }
    }

    func waitUntilSynced() async throws {
        try await frames.wait { $0.contains { if case .synced = $0 { true } else { false } } }
    }

    /// Waits (bounded) until every id in `ids` was received.
    func waitForAll(_ ids: Set<String>) async throws {
        try await frames.wait(timeout: .seconds(30)) { frames in
            let seen = Set(
                frames.compactMap { frame -> String? in
                    if case .message(_?, let message) = frame { return message.msgID }
                    return nil
                })
            return ids.isSubset(of: seen)
        }
    }
}
