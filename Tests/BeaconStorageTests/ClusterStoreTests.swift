import BeaconCore
import BeaconPostgres
import BeaconStorage
import Foundation
import Logging
import Testing

private let now: Int64 = 1_800_000_000_000
private let postgresAvailable = ProcessInfo.processInfo.environment["BEACON_TEST_POSTGRES_URL"] != nil

/// Runs `body` with `count` stores on one fresh PostgreSQL schema, each with its own pool (as separate nodes have).
private func withNodes(_ count: Int, _ body: @Sendable ([PostgresStore]) async throws -> Void) async throws {
    let url = try StoreKind.freshSchemaURL()
    @Sendable func open(_ stores: [PostgresStore]) async throws {
        if stores.count == count { return try await body(stores) }
        try await PostgresStore.withStore(url: url, logger: Logger(label: "test")) { try await open(stores + [$0]) }
    }
    try await open([])
}

private func makeApp(_ store: any BeaconStore) async throws -> AppRecord {
    let app = try await store.createApp(AppKey(org: "acme", name: "chat"), clientID: "id", clientSecretHash: "h", limits: .default, now: now)
    _ = try await store.createUsers(
        ["alice", "bob", "carol"].map { NewUser(username: $0, passwordHash: "h") }, app: app.id, now: now)
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
            #expect(Set(joined.map(\.slot)) == Set(0..<6))  // joins take turns: no slot twice
            #expect(Set(joined.map(\.epoch)).count == 6)
            let alive = joined[0]
            try await Task.sleep(for: .milliseconds(2100))
            #expect(try await stores[0].heartbeat(alive))
            // Two nodes look for the dead at once: each dead node is cleaned up by one of them.
            async let first = stores[0].removeDeadNodes(silentFor: 2000)
            async let second = stores[1].removeDeadNodes(silentFor: 2000)
            let dead = try await first.nodes + second.nodes
            #expect(Set(dead.map(\.epoch)) == Set(joined.dropFirst().map(\.epoch)))
            #expect(dead.count == 5)
            #expect(try await stores[0].liveNodes() == [alive])
            #expect(try await !stores[1].heartbeat(joined[1]))  // declared dead: it must stop
            // A freed slot is taken again by the next node.
            #expect(try await stores[1].joinCluster(name: "late").slot == 1)
        }
    }

    @Test func aDeadNodesClaimsAreReleasedAndItsDevicesGoOffline() async throws {
        try await withNodes(1) { stores in
            let store = stores[0]
            let app = try await makeApp(store)
            let (live, dead) = (try await store.joinCluster(name: "live"), try await store.joinCluster(name: "dead"))
            try await store.bind(PushBinding(username: "bob", deviceID: "phone", notifier: "n", deviceToken: "t1", boundAt: now), app: app.id)
            _ = try await store.append(
                [NewMessage(message: Message(id: 7, from: "alice", to: "bob", chatType: .chat, type: .txt, body: [:], ext: [:], timestamp: now),
                    deliveries: [Delivery(username: "bob")], routesPushes: true)], app: app.id, receipt: nil)
            let job = NewPushJob(
                username: "bob", deviceID: "phone", notifier: "n", deviceToken: "t1", topic: "com.example", pushType: "alert", priority: 10,
                expiration: 0, collapseID: nil, apnsID: "a", payload: "{}")
            #expect(try await store.recordRoute(PushRoute(messageID: 7, replacing: .pendingRoute, jobs: [job], raisesBadge: [], now: now), app: app.id))
            let claimed = try await store.claimPushJobs(now: now, lease: 60_000, limit: 10, node: dead.epoch)
            #expect(claimed.count == 1)
            #expect(try await store.claimPushJobs(now: now + 1, lease: 60_000, limit: 10, node: live.epoch).isEmpty)  // leased
            let device = DeviceKey(app: app.id, username: "bob", deviceID: "phone")
            #expect(try await store.connect(device, through: DeviceConnection(node: dead.epoch, id: 1), now: now) == nil)
            try await store.post([Letter(node: dead.epoch, body: "lost")])

            try await store.leaveCluster(dead)
            let removed = try await store.removeDeadNodes(silentFor: 5000)
            #expect(removed.nodes == [dead])
            #expect(removed.users.map(\.username) == ["bob"])
            #expect(try await store.connections(of: ["bob"], app: app.id).isEmpty)
            #expect(try await store.takeLetters(for: dead.epoch, limit: 10).isEmpty)
            // Its claim is due at once, long before the lease's end, under a new claim token.
            let again = try await store.claimPushJobs(now: now + 2, lease: 60_000, limit: 10, node: live.epoch)
            #expect(again.map(\.id) == claimed.map(\.id))
            #expect(again.first?.claimToken != claimed.first?.claimToken)
            #expect(try await store.removeDeadNodes(silentFor: 5000).nodes.isEmpty)
        }
    }

    @Test func theNewestConnectionOfADeviceWins() async throws {
        try await withNodes(1) { stores in
            let store = stores[0]
            let app = try await makeApp(store)
            let device = DeviceKey(app: app.id, username: "bob", deviceID: "phone")
            let (a, b) = (DeviceConnection(node: 1, id: 10), DeviceConnection(node: 2, id: 20))
            #expect(try await store.connect(device, through: a, now: now) == nil)
            #expect(try await store.connect(device, through: a, now: now) == nil)  // the same connection again replaces nothing
            #expect(try await store.connect(device, through: b, now: now) == a)
            #expect(try await store.connect(DeviceKey(app: app.id, username: "bob", deviceID: "pad"), through: a, now: now) == nil)
            #expect(try await store.connections(of: ["bob", "carol"], app: app.id) == ["bob": ["phone": b, "pad": a]])
            #expect(try await !store.disconnect(device, through: a))  // the replaced connection ending leaves the device online
            #expect(try await store.disconnect(device, through: b))
            #expect(try await store.connections(of: ["bob"], app: app.id) == ["bob": ["pad": a]])
        }
    }

    @Test func lettersAreTakenOnceInOrderByTheirNodeOnly() async throws {
        try await withNodes(2) { stores in
            try await stores[0].post((0..<700).map { Letter(node: 1, body: "a\($0)") } + [Letter(node: 2, body: "b")])
            // Two readers of one mailbox at once (a node's poll and its wake-up never overlap, but nothing may break if they did).
            async let first = stores[0].takeLetters(for: 1, limit: 500)
            async let second = stores[1].takeLetters(for: 1, limit: 500)
            let (one, two) = try await (first, second)
            #expect(one.count + two.count == 700)
            #expect(Set(one + two).count == 700)
            for batch in [one, two] {
                let numbers = batch.map { Int($0.dropFirst())! }
                #expect(numbers == numbers.sorted())
            }
            #expect(try await stores[0].takeLetters(for: 2, limit: 10) == ["b"])
            #expect(try await stores[0].takeLetters(for: 1, limit: 10).isEmpty)
        }
    }

    @Test func aWakeUpReachesTheListeningNode() async throws {
        try await withNodes(2) { stores in
            let (woken, wake) = AsyncStream.makeStream(of: Void.self)
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await stores[0].listenForWakeups(of: 42) { wake.yield() } }
                group.addTask {
                    try await Task.sleep(for: .seconds(20))
                    Issue.record("no wake-up within 20 s")
                }
                var wakeups = woken.makeAsyncIterator()
                _ = await wakeups.next()  // listening (the first call comes once LISTEN is in place)
                try await stores[1].wake([42, 43])
                _ = await wakeups.next()
                group.cancelAll()
            }
        }
    }
}
