import BeaconCore
import BeaconPostgres
import BeaconStorage
import BeaconTesting
import Foundation
import Logging
import Testing

let postgresAvailable = ProcessInfo.processInfo.environment["BEACON_TEST_POSTGRES_URL"] != nil

/// Runs `body` with `count` stores on one fresh PostgreSQL schema, each with its own pool (as separate nodes have).
private func withNodes(_ count: Int, _ body: @Sendable ([PostgresStore]) async throws -> Void) async throws {
    let url = try StoreKind.freshPostgresURL()
    @Sendable func open(_ stores: [PostgresStore]) async throws {
        if stores.count == count { return try await body(stores) }
        try await PostgresStore.withStore(url: url, logger: Logger(label: "test")) { try await open(stores + [$0]) }
    }
    try await open([])
}

private func makeApp(_ store: any BeaconStore) async throws -> AppRecord {
    let app = try await store.createApp(
        AppKey(org: "acme", name: "chat"), clientID: "id", clientSecretHash: "h", limits: .default, now: now)
    _ = try await store.createUsers(
        ["alice", "bob", "carol"].map { NewUser(username: $0, passwordHash: "h") }, app: app.id, now: now)
    // Without a push configuration, no message of the app gets a pending route.
    try await store.savePushConfig(
        PushConfigRecord(
            appID: app.id, name: "n", kind: .p8, environment: "development", bundleID: "com.example", voip: false, keyID: "K",
            teamID: "T", sealedSecret: [1], expiresAt: nil, createdAt: now))
    return app
}

/// What several nodes on one PostgreSQL share: membership, presence, mailboxes, claims released by death.
@Suite(.enabled(if: postgresAvailable, "needs BEACON_TEST_POSTGRES_URL"))
struct ClusterStoreTests {
    @Test func nodesGetDistinctSlotsAndSilentOnesAreDeclaredDeadOnce() async throws {
        try await withNodes(2) { stores in
            let joined = try await withThrowingTaskGroup(of: ClusterNode.self) { group in
                for index in 0..<6 { group.addTask { try await stores[index % 2].joinCluster(name: "n\(index)") } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(Set(joined.map(\.slot)).count == 6)  // joins take turns: no slot twice
            #expect(joined.allSatisfy { $0.slot < 1024 })
            #expect(Set(joined.map(\.epoch)).count == 6)
            let alive = joined[0]
            try await Task.sleep(for: .milliseconds(2100))
            // Two nodes look for the dead at once: each dead node is cleaned up by one of them; neither declares itself dead
            // (the rescuer beats in the same transaction).
            async let first = stores[0].removeDeadNodes(silentFor: 2000, by: alive)
            async let second = stores[1].removeDeadNodes(silentFor: 2000, by: alive)
            let (one, two) = try await (try #require(first), try #require(second))
            #expect(Set((one.nodes + two.nodes).map(\.epoch)) == Set(joined.dropFirst().map(\.epoch)))
            #expect(one.nodes.count + two.nodes.count == 5)
            #expect(one.died.count + two.died.count == 5)  // silent, not left
            #expect(try await stores[0].liveNodes() == [alive])
            #expect(try await stores[1].heartbeat(joined[1]) == nil)  // declared dead: it must stop
            #expect(try await stores[1].removeDeadNodes(silentFor: 2000, by: joined[1]) == nil)  // and rescues nobody
            #expect(try await stores[0].heartbeat(alive) == 0)  // alone now
            // A node that leaves is cleaned up at once, as one that left rather than died.
            let leaver = try await stores[1].joinCluster(name: "leaver")
            #expect(try await stores[0].heartbeat(alive) == 1)
            #expect(try await stores[1].heartbeat(leaver) == 1)
            try await stores[1].leaveCluster(leaver)
            #expect(try await stores[0].heartbeat(alive) == 0)  // one that left is not counted, even before its removal
            let left = try #require(try await stores[0].removeDeadNodes(silentFor: 5000, by: alive))
            #expect(left.nodes == [leaver])
            #expect(left.died.isEmpty)
        }
    }

    @Test func aDeadNodesClaimsAreReleasedAndItsDevicesGoOffline() async throws {
        try await withNodes(1) { stores in
            let store = stores[0]
            let app = try await makeApp(store)
            let (live, dead) = (try await store.joinCluster(name: "live"), try await store.joinCluster(name: "dead"))
            try await store.bind(
                PushBinding(username: "bob", deviceID: "phone", notifier: "n", deviceToken: "t1", boundAt: now), app: app.id)
            _ = try await store.append(
                [
                    NewMessage(
                        message: Message(id: 7, from: "alice", to: "bob", chatType: .chat, type: .txt, body: [:], ext: [:], timestamp: now),
                        deliveries: [Delivery(username: "bob")], routesPushes: true)
                ], app: app.id, receipt: nil)
            let job = NewPushJob(
                username: "bob", deviceID: "phone", notifier: "n", deviceToken: "t1", topic: "com.example", pushType: .alert,
                priority: .immediate,
                expiration: 0, collapseID: nil, apnsID: UUID(), payload: "{}")
            #expect(try await store.recordRoute(PushRoute(messageID: 7, replacing: .pendingRoute(), jobs: [job], now: now), app: app.id))
            let claimed = try await store.claimPushJobs(now: now, lease: 60_000, limit: 10, node: dead.epoch)
            #expect(claimed.count == 1)
            #expect(try await store.claimPushJobs(now: now + 1, lease: 60_000, limit: 10, node: live.epoch).isEmpty)  // leased
            let device = DeviceKey(app: app.id, username: "bob", deviceID: "phone")
            #expect(try await store.connect(device, node: dead.epoch, connection: 1, openedAgo: 0) == .connected(replacing: nil))
            try await store.post([Letter(node: dead.epoch, body: "lost")])

            try await store.leaveCluster(dead)
            let removed = try #require(try await store.removeDeadNodes(silentFor: 5000, by: live))
            #expect(removed.nodes == [dead])
            #expect(removed.users.map(\.username) == ["bob"])
            #expect(try await store.connections(of: ["bob"], app: app.id).isEmpty)
            #expect(try await store.takeLetters(for: dead.epoch, limit: 10).isEmpty)
            // Nothing can be left behind for it any more: no letter, no device.
            try await store.post([Letter(node: dead.epoch, body: "late")])
            #expect(try await store.takeLetters(for: dead.epoch, limit: 10).isEmpty)
            #expect(try await store.connect(device, node: dead.epoch, connection: 2, openedAgo: 0) == .nodeGone)
            // Its claim is due at once, long before the lease's end, under a new claim token.
            let again = try await store.claimPushJobs(now: now + 2, lease: 60_000, limit: 10, node: live.epoch)
            #expect(again.map(\.id) == claimed.map(\.id))
            #expect(again.first?.claimToken != claimed.first?.claimToken)
            #expect(try await store.removeDeadNodes(silentFor: 5000, by: live)?.nodes.isEmpty == true)
        }
    }

    @Test func theLaterConnectionOfADeviceWinsWhateverTheOrderTheyRegisterIn() async throws {
        try await withNodes(2) { stores in
            let store = stores[0]
            let app = try await makeApp(store)
            let (nodeA, nodeB) = (try await store.joinCluster(name: "a").epoch, try await store.joinCluster(name: "b").epoch)
            let device = DeviceKey(app: app.id, username: "bob", deviceID: "phone")
            #expect(try await store.connect(device, node: nodeA, connection: 10, openedAgo: 0) == .connected(replacing: nil))
            #expect(try await store.connect(device, node: nodeA, connection: 10, openedAgo: 0) == .connected(replacing: nil))  // again
            let a = try #require(try await store.connections(of: ["bob"], app: app.id)["bob"]?["phone"])
            try await Task.sleep(for: .milliseconds(20))
            guard case .connected(let replaced) = try await store.connect(device, node: nodeB, connection: 20, openedAgo: 0) else {
                Issue.record("the later connection did not win")
                return
            }
            #expect(replaced == a)
            let b = try #require(try await store.connections(of: ["bob"], app: app.id)["bob"]?["phone"])
            #expect(b.node == nodeB && b.id == 20 && b.openedAt > a.openedAt)
            // A connection opened 10 s ago that registers only now (its node was slow) must not replace b: it learns it lost.
            #expect(try await store.connect(device, node: nodeA, connection: 5, openedAgo: 10_000) == .superseded(by: b))
            #expect(
                try await store.connect(DeviceKey(app: app.id, username: "bob", deviceID: "pad"), node: nodeA, connection: 30, openedAgo: 0)
                    == .connected(replacing: nil))
            let current = try await store.connections(of: ["bob", "carol"], app: app.id)
            #expect(current.keys.sorted() == ["bob"])
            #expect(current["bob"]?["phone"] == b)
            #expect(current["bob"]?["pad"]?.id == 30)
            #expect(try await !store.disconnect(device, node: nodeA, connection: 10))  // the replaced one ending leaves the device online
            #expect(try await store.disconnect(device, node: nodeB, connection: 20))
            #expect(try await store.connections(of: ["bob"], app: app.id)["bob"]?.keys.sorted() == ["pad"])

            // Two first connections at once, through two pools: the one opened later is current, the other learns it lost.
            for round in 0..<10 {
                let key = DeviceKey(app: app.id, username: "carol", deviceID: "d\(round)")
                async let first = stores[0].connect(key, node: nodeA, connection: 100 + Int64(round), openedAgo: 5000)
                async let second = stores[1].connect(key, node: nodeB, connection: 200 + Int64(round), openedAgo: 0)
                let outcomes = try await (first, second)
                let winner = try #require(try await store.connections(of: ["carol"], app: app.id)["carol"]?[key.deviceID])
                #expect(winner.id == 200 + Int64(round))
                switch outcomes {
                case (.connected(nil), .connected(let replaced?)): #expect(replaced.id == 100 + Int64(round))
                case (.superseded(let by), .connected(nil)): #expect(by == winner)
                default: Issue.record("unexpected outcomes \(outcomes)")
                }
            }
        }
    }

    @Test func aReconcileRemovesTheNodesPresenceOfConnectionsNoLongerLive() async throws {
        try await withNodes(1) { stores in
            let store = stores[0]
            let app = try await makeApp(store)
            let (mine, other) = (try await store.joinCluster(name: "mine").epoch, try await store.joinCluster(name: "other").epoch)
            let phone = DeviceKey(app: app.id, username: "bob", deviceID: "phone")
            let pad = DeviceKey(app: app.id, username: "bob", deviceID: "pad")
            let laptop = DeviceKey(app: app.id, username: "carol", deviceID: "laptop")
            let tv = DeviceKey(app: app.id, username: "alice", deviceID: "tv")
            #expect(try await store.reconcilePresence(node: mine, live: { [] }).isEmpty)  // no rows at all
            for (device, node, id) in [(phone, mine, Int64(1)), (pad, mine, 2), (laptop, mine, 3), (tv, other, 4)] {
                #expect(try await store.connect(device, node: node, connection: id, openedAgo: 0) == .connected(replacing: nil))
            }
            // Every connection still live: nothing goes.
            #expect(try await store.reconcilePresence(node: mine, live: { [1, 2, 3, 99] }).isEmpty)
            // The pad's and the laptop's connections ended here without their rows going; the other node's row is its own.
            let removed = try await store.reconcilePresence(node: mine, live: { [1] })
            #expect(Set(removed) == [pad, laptop])
            let current = try await store.connections(of: ["alice", "bob", "carol"], app: app.id)
            #expect(current["bob"]?.keys.sorted() == ["phone"])
            #expect(current["carol"] == nil)
            #expect(current["alice"]?["tv"]?.node == other)
            #expect(try await store.reconcilePresence(node: mine, live: { [1] }).isEmpty)  // done already
            // The phone reconnected to the other node: its row is no longer this node's, whatever this node holds.
            _ = try await store.connect(phone, node: other, connection: 5, openedAgo: 0)
            #expect(try await store.reconcilePresence(node: mine, live: { [] }).isEmpty)
            #expect(try await store.connections(of: ["bob"], app: app.id)["bob"]?["phone"]?.id == 5)
        }
    }

    @Test func lettersAreTakenOnceInOrderByTheirNodeOnly() async throws {
        try await withNodes(2) { stores in
            let (one, two) = (try await stores[0].joinCluster(name: "one").epoch, try await stores[0].joinCluster(name: "two").epoch)
            try await stores[0].post((0..<700).map { Letter(node: one, body: "a\($0)") } + [Letter(node: two, body: "b")])
            // Two readers of one mailbox at once (a node's poll and its wake-up never overlap, but nothing may break if they did).
            async let first = stores[0].takeLetters(for: one, limit: 500)
            async let second = stores[1].takeLetters(for: one, limit: 500)
            let (taken, alsoTaken) = try await (first, second)
            #expect(taken.count + alsoTaken.count == 700)
            #expect(Set(taken + alsoTaken).count == 700)
            for batch in [taken, alsoTaken] {
                let numbers = batch.compactMap { Int($0.dropFirst()) }
                #expect(numbers == numbers.sorted())
            }
            #expect(try await stores[0].takeLetters(for: two, limit: 10) == ["b"])
            #expect(try await stores[0].takeLetters(for: one, limit: 10).isEmpty)
        }
    }

    /// Notifications reach the node listening on their channel, in the order sent, wake-ups without a body and notices
    /// with theirs; those for another node do not.
    @Test func notificationsReachTheListeningNodeInOrder() async throws {
        try await withNodes(2) { stores in
            // Channels are the database server's, whatever the schema: nodes of their own.
            let (node, other) = (Int64.random(in: 1...Int64.max), Int64.random(in: 1...Int64.max))
            let (arrived, arrive) = AsyncStream.makeStream(of: NodeSignal.self)
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await stores[0].listen(for: node) { arrive.yield($0) } }
                group.addTask {
                    try await Task.sleep(for: .seconds(20))
                    Issue.record("the notifications did not all arrive within 20 s")
                }
                var signals = arrived.makeAsyncIterator()
                #expect(await signals.next() == .listening)  // LISTEN is in place
                // The largest body that fits: 7,999 bytes.
                let large = String(repeating: "é", count: (Letter.notificationLimit - 2) / 2) + "e"
                #expect(Letter(node: node, body: large).fitsInANotification)
                #expect(!Letter(node: node, body: large + "e").fitsInANotification)
                try await stores[1].notify([
                    .wakeup(node), Letter(node: other, body: "elsewhere"), Letter(node: node, body: "first"),
                    Letter(node: node, body: large),
                ])
                try await stores[1].notify([Letter(node: node, body: "next")])
                var received: [NodeSignal] = []
                for _ in 0..<4 { received.append(try #require(await signals.next())) }
                #expect(received == [.wakeup, .notice("first"), .notice(large), .notice("next")])
                group.cancelAll()
            }
        }
    }
}
