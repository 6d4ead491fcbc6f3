import BeaconCore
import BeaconStorage
import BeaconTesting
import Foundation
import Testing

/// The command that restarts the test PostgreSQL (set by `scripts/test` for this suite alone: a restart would break the
/// other suites' connections if they ran beside it).
private let restartCommand = ProcessInfo.processInfo.environment["BEACON_TEST_POSTGRES_RESTART"]

@Suite(.serialized, .enabled(if: restartCommand != nil, "run by scripts/test after the other suites"))
struct PostgresRestartTests {
    /// Two nodes while PostgreSQL restarts: sends fail while it is down and work again once it is back, deliveries across
    /// nodes resume (the listeners reconnect and their devices read the store), and no node declares itself or the other
    /// dead (everyone's heartbeats were late together).
    @Test func nodesRideOutAPostgreSQLRestart() async throws {
        try await TestBeacon.runNodes(2) { nodes in
            let (a, b) = (nodes[0], nodes[1])
            try await a.createUsers("alice", "bob")
            let bob = try await a.connect("bob")
            try await bob.events.synced()
            let send: @Sendable (String) async throws -> Int = { text in
                try await b.rest(
                    "POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": .string(text)]]
                ).0
            }
            #expect(try await send("before") == 200)
            _ = try await bob.messages.wait { $0.count >= 1 }

            // The restarted postmaster outlives the command; it inherits none of this process's descriptors (swift-subprocess
            // closes them in the child).
            let restart = try await runToExit(
                URL(fileURLWithPath: "/bin/bash"), ["-c", (try #require(restartCommand)) + " >/dev/null 2>&1"], timeout: .seconds(60))
            #expect(restart.status == 0)

            // The pools reconnect: a send succeeds again within a bounded time.
            try await waitUntil("a send accepted after the restart", timeout: .seconds(60), interval: .milliseconds(100)) {
                (try? await send("after 0")) == 200
            }
            for index in 1..<5 { #expect(try await send("after \(index)") == 200) }
            let texts = try await bob.messages.wait { $0.count >= 6 }.map(\.content)
            #expect(texts.contains(.text("after 4")))
            // Longer than a node's silence limit: both nodes are still members.
            try await Task.sleep(for: .seconds(7))
            let cluster = try #require(a.store as? any ClusterStore)
            let alive = try await cluster.liveNodes().map(\.epoch)
            #expect(Set(alive) == Set([a.clusterNode?.epoch, b.clusterNode?.epoch].compactMap { $0 }))
            #expect(try await send("still") == 200)
            await bob.client.logout()
        }
    }
}
