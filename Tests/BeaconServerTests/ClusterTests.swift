import APNsSimulator
import BeaconCore
import BeaconProtocol
import BeaconServer
import BeaconStorage
import BeaconTesting
import Foundation
import PostgresNIO
import Synchronization
import Testing

@testable import BeaconPostgres

private let postgresAvailable = ProcessInfo.processInfo.environment["BEACON_TEST_POSTGRES_URL"] != nil

/// Several nodes on one PostgreSQL, in one process: each node has its own pool, presence and mailbox, as separate
/// processes would (`MultiNodeProcessTests` kills real ones).
@Suite(.enabled(if: postgresAvailable, "needs BEACON_TEST_POSTGRES_URL"))
struct ClusterTests {
    @Test func aMessageSentOnOneNodeReachesADeviceOnAnotherLive() async throws {
        try await TestBeacon.runNodes(2) { nodes in
            let (a, b) = (nodes[0], nodes[1])
            try await a.createUsers("alice", "bob")
            let bob = try await a.connect("bob")
            try await bob.events.synced()
            let alice = try await b.connect("alice")
            try await alice.events.synced()
            // Easemob's online devices, asked of the node bob is not connected to.
            let (listed, resources) = try await b.rest("GET", "/users/bob/resources")
            #expect(listed == 200)
            #expect(resources["entities"] == .array([.object(["res": .string("phone")])]))
            _ = try await alice.send(to: "bob", "stored")
            _ = try await alice.send(to: "bob", "online only", onlineOnly: true)
            let (status, _) = try await b.rest(
                "POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "rest"]])
            #expect(status == 200)
            let texts = try await bob.messages.wait { $0.count >= 3 }.map(\.content)
            #expect(Set(texts) == [.text("stored"), .text("online only"), .text("rest")])
            await bob.client.logout()
            await alice.client.logout()
        }
    }

    /// A node alone reads presence from memory (`Solitude`); a node joining beside it registers devices only once the
    /// first can no longer count itself alone. The first node's heartbeats are held just after one that found it alone:
    /// a message it stores while bob's device is connecting to the new node is found by the device's first sync, and one
    /// it stores after the device registered reaches it live.
    @Test func aNodeThatWasAloneReachesADeviceOnANodeThatJustJoined() async throws {
        let gate = Gate()
        let holding = Atomic<Bool>(false)
        var options = TestBeacon.Options()
        options.hooks.afterHeartbeat = { if holding.load(ordering: .relaxed) { await gate.pass() } }
        let first = options
        let aloneAtRegistration = Locked<[Bool]>([])
        let directory = StoreKind.temporaryDirectory("beacon-cluster")
        try await StoreKind.postgres.withStores(2) { stores in
            try await TestBeacon.run(store: stores[0], directory: directory, options: first) { a in
                // Its heartbeats go on at shutdown.
                defer { gate.open() }
                try await a.createUsers("alice", "bob")
                try await waitUntil("a alone", timeout: .seconds(10)) { a.server.isAloneInCluster }
                holding.store(true, ordering: .relaxed)
                try await gate.waitForArrivals(1)
                var options = TestBeacon.Options()
                options.hooks.afterDeviceRegistered = { _, _ in aloneAtRegistration.withLock { $0.append(a.server.isAloneInCluster) } }
                let second = options
                try await TestBeacon.run(store: stores[1], directory: directory, options: second) { b in
                    async let connecting = b.connect("bob")
                    let (before, _) = try await a.rest(
                        "POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "before"]])
                    #expect(before == 200)
                    let bob = try await connecting
                    try await bob.events.synced()
                    let (after, _) = try await a.rest(
                        "POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "after"]])
                    #expect(after == 200)
                    #expect(try await bob.messages.wait { $0.count >= 2 }.map(\.content) == [.text("before"), .text("after")])
                    #expect(aloneAtRegistration.withLock { $0 } == [false])
                    await bob.client.logout()
                }
            }
        }
    }

    /// Alone, a node answers presence from memory: a device whose presence row could not be removed is offline at once
    /// (other nodes, had there been any, would count it online until the row goes), and what it was online for is pushed.
    @Test func aloneADeviceWhoseRowCouldNotBeRemovedIsPushedAtOnce() async throws {
        var hooks = BeaconHooks()
        hooks.beforePresenceRemoval = { username, _ in
            if username == "bob" { throw BeaconError(.internalError, "injected failure") }
        }
        let failingAlways = hooks
        try await withSimulator { simulator in
            try await TestBeacon.runNodes(1, push: simulator, hooks: failingAlways) { nodes in
                let a = nodes[0]
                let store = try #require(a.store as? PostgresStore)
                try await waitUntil("a alone", timeout: .seconds(10)) { a.server.isAloneInCluster }
                try await a.createUsers("alice", "bob")
                try await a.uploadP8()
                let token = String(repeating: "ab", count: 32)
                #expect(try await a.bind("bob", device: "phone", token: token).0 == 200)
                let phone = try await RawDevice.connect(a, "bob", device: "phone")
                let (status, _) = try await a.rest(
                    "POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "hi"]])
                #expect(status == 200)
                try await a.deliveries(of: "bob") { $0.first?["reason"]?.stringValue == "online" }
                try await phone.close()
                try await waitUntil("bob pushed", timeout: .seconds(15)) { simulator.deliveries(deviceToken: token).count == 1 }
                let app = try #require(try await store.app(AppKey(org: "acme", name: "chat")))
                #expect(try await store.connections(of: ["bob"], app: app.id)["bob"]?.keys.sorted() == ["phone"])  // the row stayed
            }
        }
    }

    @Test func aDeviceConnectingToAnotherNodeReplacesItsConnectionThere() async throws {
        try await TestBeacon.runNodes(2) { nodes in
            let (a, b) = (nodes[0], nodes[1])
            try await a.createUsers("bob")
            let first = try await RawDevice.connect(a, "bob", device: "phone")
            let second = try await RawDevice.connect(b, "bob", device: "phone")
            try await first.frames.wait { $0.contains { if case .closing("replaced") = $0 { true } else { false } } }
            try await first.close()
            // The replaced connection ending does not take the device offline: it is connected to the other node.
            #expect(try await a.presence.onlineDevices(of: ["bob"], app: 1) == ["bob": ["phone"]])
            try await second.close()
            try await waitUntil("bob offline", timeout: .seconds(10)) { try await b.presence.onlineDevices(of: ["bob"], app: 1).isEmpty }
            #expect(try await a.presence.onlineDevices(of: ["bob"], app: 1).isEmpty)
        }
    }

    @Test func aKickOnOneNodeClosesTheDeviceOnAnother() async throws {
        try await TestBeacon.runNodes(2) { nodes in
            let (a, b) = (nodes[0], nodes[1])
            try await a.createUsers("bob")
            let device = try await RawDevice.connect(a, "bob", device: "phone")
            let (status, _) = try await b.rest("POST", "/users/bob/disconnect")
            #expect(status == 200)
            try await device.frames.wait { $0.contains { if case .closing("kicked") = $0 { true } else { false } } }
            try await device.close()
        }
    }

    @Test func disconnectingOneDeviceOnOneNodeClosesItOnAnother() async throws {
        try await TestBeacon.runNodes(2) { nodes in
            let (a, b) = (nodes[0], nodes[1])
            try await a.createUsers("bob")
            let phone = try await RawDevice.connect(a, "bob", device: "phone")
            let pad = try await RawDevice.connect(a, "bob", device: "pad")
            let (status, answer) = try await b.rest("DELETE", "/users/bob/disconnect/phone")
            #expect(status == 200 && answer["data"]?["result"] == true)
            try await phone.frames.wait { $0.contains { if case .closing("kicked") = $0 { true } else { false } } }
            #expect(!pad.frames.items.contains { if case .closing = $0 { true } else { false } })
            try await phone.close()
            try await pad.close()
        }
    }

    /// Bob's phone is online on node A while alice writes through node B: B's decision sees it (skipped `online`); when the
    /// phone leaves A, the message is decided again and pushed.
    @Test func pushDecisionsSeeDevicesOnEveryNode() async throws {
        try await withSimulator { simulator in
            try await TestBeacon.runNodes(2, push: simulator) { nodes in
                let (a, b) = (nodes[0], nodes[1])
                try await a.createUsers("alice", "bob")
                try await a.uploadP8()
                #expect(try await a.bind("bob", device: "phone", token: String(repeating: "ab", count: 32)).0 == 200)
                let phone = try await RawDevice.connect(a, "bob", device: "phone")
                let (status, _) = try await b.rest(
                    "POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "hi"]])
                #expect(status == 200)
                try await b.deliveries(of: "bob") {
                    $0.first?["status"]?.stringValue == "skipped" && $0.first?["reason"]?.stringValue == "online"
                }
                try await phone.close()
                let records = try await b.deliveries(of: "bob") { $0.contains { $0["status"]?.stringValue == "sent" } }
                #expect(records.filter { $0["status"]?.stringValue == "sent" }.count == 1)
                #expect(simulator.deliveries(deviceToken: String(repeating: "ab", count: 32)).count == 1)
            }
        }
    }

    /// A connection this node held whose presence row is gone (taken over elsewhere, removed by a rescuer, or never
    /// written): what it was online for is decided again when it ends here, not a minute later by the periodic pass.
    @Test func aConnectionWhoseRowIsGoneStillDecidesAgainWhenItEnds() async throws {
        try await withSimulator { simulator in
            try await TestBeacon.runNodes(1, push: simulator) { nodes in
                let a = nodes[0]
                let store = try #require(a.store as? PostgresStore)
                try await a.createUsers("alice", "bob")
                try await a.uploadP8()
                let token = String(repeating: "ef", count: 32)
                #expect(try await a.bind("bob", device: "phone", token: token).0 == 200)
                let phone = try await RawDevice.connect(a, "bob", device: "phone")
                let (status, _) = try await a.rest(
                    "POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "hi"]])
                #expect(status == 200)
                try await a.deliveries(of: "bob") { $0.first?["reason"]?.stringValue == "online" }
                try await store.execute("DELETE FROM device_presence WHERE username = 'bob'")
                try await phone.close()
                try await waitUntil("bob's skip decided again and pushed", timeout: .seconds(15)) {
                    simulator.deliveries(deviceToken: token).count == 1
                }
            }
        }
    }

    /// A node that dies holding a device: once it is declared dead, the device counts as offline and what it was online for
    /// is pushed; its mailbox and presence are gone.
    @Test func aDeadNodesDevicesAreTakenOfflineAndPushed() async throws {
        try await withSimulator { simulator in
            try await TestBeacon.runNodes(1, push: simulator) { nodes in
                let a = nodes[0]
                let store = try #require(a.store as? PostgresStore)
                try await a.createUsers("alice", "bob")
                try await a.uploadP8()
                let token = String(repeating: "cd", count: 32)
                #expect(try await a.bind("bob", device: "phone", token: token).0 == 200)
                // Another node, which will never beat, holds bob's phone.
                let doomed = try await store.joinCluster(name: "doomed")
                // As a real node would (`Solitude`): its devices register once the others' heartbeats found it.
                try await waitUntil("a sees the doomed node", timeout: .seconds(10)) { !a.server.isAloneInCluster }
                let app = try #require(try await store.app(AppKey(org: "acme", name: "chat")))
                _ = try await store.connect(
                    DeviceKey(app: app.id, username: "bob", deviceID: "phone"), node: doomed.epoch, connection: 1, openedAgo: 0)
                let (status, _) = try await a.rest(
                    "POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "hi"]])
                #expect(status == 200)
                try await a.deliveries(of: "bob") { $0.first?["reason"]?.stringValue == "online" }
                try await store.execute("UPDATE cluster_nodes SET heartbeat_at = heartbeat_at - 6000 WHERE epoch = \(doomed.epoch)")
                try await a.deliveries(of: "bob") { $0.contains { $0["status"]?.stringValue == "sent" } }
                #expect(simulator.deliveries(deviceToken: token).count == 1)
                #expect(try await store.liveNodes().map(\.epoch) == [try #require(a.clusterNode).epoch])
            }
        }
    }

    /// A device's presence row could not be removed when it disconnected (the database restarting): the removal is tried
    /// again in the background, the device goes offline, and what it was online for is pushed.
    @Test func aFailedPresenceRemovalIsTriedAgain() async throws {
        let failures = Locked(0)
        var hooks = BeaconHooks()
        hooks.beforePresenceRemoval = { username, _ in
            guard username == "bob" else { return }
            let fail = failures.withLock { count in
                count += 1
                return count == 1
            }
            if fail { throw BeaconError(.internalError, "injected failure") }
        }
        let failingOnce = hooks
        try await withSimulator { simulator in
            try await TestBeacon.runNodes(2, push: simulator, hooks: failingOnce) { nodes in
                let a = nodes[0]
                // Beside another node, which reads the shared rows: alone, a node answers presence from memory (`Solitude`).
                try await waitUntil("a sees b", timeout: .seconds(10)) { !a.server.isAloneInCluster }
                try await a.createUsers("alice", "bob")
                try await a.uploadP8()
                let token = String(repeating: "ef", count: 32)
                #expect(try await a.bind("bob", device: "phone", token: token).0 == 200)
                let phone = try await RawDevice.connect(a, "bob", device: "phone")
                let (status, _) = try await a.rest(
                    "POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "hi"]])
                #expect(status == 200)
                try await a.deliveries(of: "bob") { $0.first?["reason"]?.stringValue == "online" }
                try await phone.close()
                let records = try await a.deliveries(of: "bob") { $0.contains { $0["status"]?.stringValue == "sent" } }
                #expect(records.filter { $0["status"]?.stringValue == "sent" }.count == 1)
                #expect(simulator.deliveries(deviceToken: token).count == 1)
                #expect(try await a.presence.onlineDevices(of: ["bob"], app: 1).isEmpty)
                #expect(failures.withLock { $0 } >= 2)  // failed once, then removed by a retry
            }
        }
    }

    /// Every removal of a device's presence row fails (retries included): the node's reconcile removes the row (its
    /// connection has ended), the device goes offline, and what it was online for is pushed.
    @Test func theReconcileRemovesPresenceWhoseRemovalKeptFailing() async throws {
        let failures = Locked(0)
        var hooks = BeaconHooks()
        hooks.beforePresenceRemoval = { username, _ in
            guard username == "bob" else { return }
            failures.withLock { $0 += 1 }
            throw BeaconError(.internalError, "injected failure")
        }
        let failingAlways = hooks
        try await withSimulator { simulator in
            try await TestBeacon.runNodes(2, push: simulator, hooks: failingAlways) { nodes in
                let a = nodes[0]
                // Beside another node, which reads the shared rows: alone, a node answers presence from memory (`Solitude`).
                try await waitUntil("a sees b", timeout: .seconds(10)) { !a.server.isAloneInCluster }
                try await a.createUsers("alice", "bob", "carol")
                try await a.uploadP8()
                let token = String(repeating: "fe", count: 32)
                #expect(try await a.bind("bob", device: "phone", token: token).0 == 200)
                let phone = try await RawDevice.connect(a, "bob", device: "phone")
                let carol = try await RawDevice.connect(a, "carol", device: "pad")
                let (status, _) = try await a.rest(
                    "POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "hi"]])
                #expect(status == 200)
                try await a.deliveries(of: "bob") { $0.first?["reason"]?.stringValue == "online" }
                try await phone.close()
                try await waitUntil("the presence write failed") { failures.withLock { $0 } >= 1 }
                #expect(failures.withLock { $0 } >= 1)
                // The row stayed: bob counts as online although his only connection ended.
                #expect(try await a.presence.onlineDevices(of: ["bob"], app: 1) == ["bob": ["phone"]])
                try await a.server.reconcilePresence()
                #expect(try await a.presence.onlineDevices(of: ["bob"], app: 1).isEmpty)
                #expect(try await a.presence.onlineDevices(of: ["carol"], app: 1) == ["carol": ["pad"]])  // still connected
                try await a.deliveries(of: "bob") { $0.contains { $0["status"]?.stringValue == "sent" } }
                #expect(simulator.deliveries(deviceToken: token).count == 1)
                try await carol.close()
            }
        }
    }

    /// Both nodes' notification connections are killed, and held from listening again while alice's messages go to bob's
    /// node: their notifications are lost (no letter carries them), yet once that node listens again bob reads them all
    /// from the store (and without a lost notification, each message between nodes is carried by one, not a letter).
    @Test func notificationsLostWhileANodeWasDeafCostNoMessage() async throws {
        let gate = Gate()
        let holding = Atomic<Bool>(false)
        var hooks = BeaconHooks()
        hooks.beforeListening = { if holding.load(ordering: .relaxed) { await gate.pass() } }
        try await TestBeacon.runNodes(2, hooks: hooks) { nodes in
            defer { gate.open() }
            let (a, b) = (nodes[0], nodes[1])
            let store = try #require(a.store as? PostgresStore)
            try await a.createUsers("alice", "bob")
            let bob = try await a.connect("bob")
            try await bob.events.synced()
            // This test's two listeners (other tests run beside it on the same server).
            let channels = try [a, b].map { "'LISTEN \"beacon_node_\(try #require($0.clusterNode).epoch)\";'" }.joined(separator: ",")
            let listening = "SELECT count(*) AS n FROM pg_stat_activity WHERE query IN (\(channels))"
            try await waitUntil("both nodes listening", timeout: .seconds(10)) {
                try await store.rows(PostgresQuery(unsafeSQL: listening)).first?["n"].decode(Int.self) ?? 0 >= 2
            }
            let traffic = try #require(b.server.clusterTraffic)
            let (live, _) = try await b.rest(
                "POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "live"]])
            #expect(live == 200)
            #expect(try await bob.messages.wait { $0.count >= 1 }.map(\.content) == [.text("live")])
            #expect(try #require(b.server.clusterTraffic).letters == traffic.letters)
            #expect(try #require(b.server.clusterTraffic).notifications > traffic.notifications)

            holding.store(true, ordering: .relaxed)
            let killed = try await store.execute(
                PostgresQuery(unsafeSQL: "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query IN (\(channels))"))
            #expect(killed == 2)
            try await gate.waitForArrivals(2)  // neither listens
            let before = try #require(b.server.clusterTraffic)
            for index in 0..<5 {
                let (status, _) = try await b.rest(
                    "POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": .string("m\(index)")]])
                #expect(status == 200)
            }
            // All five notifications went out while nobody listened.
            try await waitUntil("the notifications sent") {
                try #require(b.server.clusterTraffic).notifications >= before.notifications + 5
            }
            #expect(try #require(b.server.clusterTraffic).letters == before.letters)
            holding.store(false, ordering: .relaxed)
            gate.open()
            let texts = try await bob.messages.wait { $0.count >= 6 }.map(\.content)
            #expect(texts == [.text("live")] + (0..<5).map { .text("m\($0)") })
            try await waitUntil("both nodes listening again", timeout: .seconds(10)) {
                try await store.rows(PostgresQuery(unsafeSQL: listening)).first?["n"].decode(Int.self) ?? 0 >= 2
            }
            await bob.client.logout()
        }
    }

    /// Bob's old session is on node B when node A deletes bob, creates him again, and sends the new bob a message while
    /// B is held before acting on what arrived: A's relay finds the old session's row and hands the message to B, after
    /// the deletion's close (a letter whose wake-up went before the deletion answered). Released, B takes both at once and
    /// acts on the close first: the old session closes without the message; the new bob's device, on A, gets it. (The
    /// sessions' audit is held off: it would close the old session by itself.)
    @Test func aUserDeletedOnOneNodeIsClosedOnAnotherBeforeAMessageToTheNextHolderArrives() async throws {
        let gate = Gate()
        let held = Atomic<Int64>(0)  // the node held, once known
        let waiting = Locked<(@Sendable () -> [NodeSignal])?>(nil)
        var hooks = BeaconHooks()
        hooks.sessionAuditInterval = .seconds(3600)
        hooks.beforeActing = { node, queued in
            guard node == held.load(ordering: .relaxed) else { return }
            waiting.withLock { $0 = queued }
            await gate.pass()
        }
        try await TestBeacon.runNodes(2, hooks: hooks) { nodes in
            defer { gate.open() }
            let (a, b) = (nodes[0], nodes[1])
            try await a.createUsers("alice", "bob")
            let old = try await RawDevice.connect(b, "bob", device: "phone")
            held.store(try #require(b.clusterNode).epoch, ordering: .relaxed)
            try await gate.waitForArrivals(1)
            let (deleted, _) = try await a.rest("DELETE", "/users/bob")
            #expect(deleted == 200)
            try await a.createUsers("bob")
            let new = try await RawDevice.connect(a, "bob", device: "pad")
            let (sent, _) = try await a.rest(
                "POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "for the new bob"]])
            #expect(sent == 200)
            try await waitUntil("the close's wake-up and the message's notice waiting on B") {
                let signals = waiting.withLock { $0 }?() ?? []
                guard let notice = signals.firstIndex(where: { if case .notice = $0 { true } else { false } }) else { return false }
                return signals[..<notice].contains(.wakeup)
            }
            held.store(0, ordering: .relaxed)
            gate.open()
            try await new.frames.wait { RawDevice.stored(in: $0).map(\.text) == ["for the new bob"] }
            let frames = try await old.frames.wait { $0.contains { if case .closing = $0 { true } else { false } } }
            #expect(RawDevice.stored(in: frames).isEmpty)
            #expect(frames.contains { if case .closing("kicked") = $0 { true } else { false } })
            try await old.close()
            try await new.close()
        }
    }

    /// Node A's notification connection goes silent without closing (every notification dropped, as a half-open
    /// connection would lose them): A finds it out by its own probe going unheard, closes it and listens on a new
    /// connection, and bob, connected to A, reads what was sent to him meanwhile.
    @Test func aSilentNotificationConnectionIsReplacedAndNothingIsLost() async throws {
        let silent = Atomic<Bool>(false)
        var hooks = BeaconHooks()
        hooks.dropsNotification = { silent.load(ordering: .relaxed) }
        try await TestBeacon.runNodes(2, hooks: hooks) { nodes in
            let (a, b) = (nodes[0], nodes[1])
            let store = try #require(a.store as? PostgresStore)
            try await a.createUsers("alice", "bob")
            let bob = try await a.connect("bob")
            try await bob.events.synced()
            let listener = "SELECT pid FROM pg_stat_activity WHERE query = 'LISTEN \"beacon_node_\(try #require(a.clusterNode).epoch)\";'"
            var pids: [Int32] = []
            try await waitUntil("both nodes listening", timeout: .seconds(10)) {
                pids = try await store.rows(PostgresQuery(unsafeSQL: listener)).map { try $0["pid"].decode(Int32.self) }
                return !pids.isEmpty
            }
            silent.store(true, ordering: .relaxed)
            let (status, _) = try await b.rest(
                "POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "while silent"]])
            #expect(status == 200)
            #expect(try await bob.messages.wait { $0.count >= 1 }.map(\.content) == [.text("while silent")])
            // The silent connection was closed: another listens.
            try await waitUntil("a new listening connection", timeout: .seconds(10)) {
                let listening = try await store.rows(PostgresQuery(unsafeSQL: listener)).map { try $0["pid"].decode(Int32.self) }
                return !listening.isEmpty && Set(listening).isDisjoint(with: pids)
            }
            silent.store(false, ordering: .relaxed)
            await bob.client.logout()
        }
    }
}
