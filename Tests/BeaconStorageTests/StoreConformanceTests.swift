import BeaconCore
import BeaconPostgres
import BeaconSQLite
import BeaconStorage
import BeaconTesting
import Foundation
import Logging
import Testing

let now: Int64 = 1_800_000_000_000

/// The same apns-id for a device name every time (tests compare what is reported with what was stored).
func fixedAPNsID(_ device: String) -> UUID {
    let number = device.utf8.reduce(UInt64(0)) { ($0 &* 31) &+ UInt64($1) } & 0xFFFF_FFFF_FFFF
    return UUID(
        uuidString: "00000000-0000-4000-8000-"
            + String(String(number, radix: 16).reversed()).padding(toLength: 12, withPad: "0", startingAt: 0))
        ?? UUID()
}

/// Stores message `id` from alice to bob with one push job for bob's device `d1` (token `aa`, notifier `ios`), recorded at
/// `time`; whether the route was recorded.
func queueOneJob(
    _ store: any BeaconStore, _ app: AppRecord, id: UInt64, priority: PushPriority = .immediate, apnsID: UUID = UUID(), at time: Int64
) async throws -> Bool {
    _ = try await store.append(
        [NewMessage(message: text(id, from: "alice", to: "bob"), deliveries: [Delivery(username: "bob")], routesPushes: true)], app: app.id,
        receipt: nil)
    let job = NewPushJob(
        username: "bob", deviceID: "d1", notifier: "ios", deviceToken: "aa", topic: "t", pushType: .alert, priority: priority,
        expiration: 0,
        collapseID: nil, apnsID: apnsID, payload: #"{"aps":{"alert":"x"}}"#)
    return try await store.recordRoute(PushRoute(messageID: id, replacing: .pendingRoute(), jobs: [job], now: time), app: app.id)
}

/// Stores message `id` from alice to bob and records its route: one push to each of bob's devices `d1` (token `aa`) and
/// `d2` (token `bb`), which share their payload (stored once: `PushContents`).
func queueSharedJobs(_ store: any BeaconStore, _ app: AppRecord, id: UInt64) async throws -> Bool {
    _ = try await store.append(
        [NewMessage(message: text(id, from: "alice", to: "bob"), deliveries: [Delivery(username: "bob")], routesPushes: true)], app: app.id,
        receipt: nil)
    let jobs = [("d1", "aa"), ("d2", "bb")].map { device, token in
        var job = PushContentsTests.job("bob")
        job.deviceID = device
        job.deviceToken = token
        return job
    }
    return try await store.recordRoute(PushRoute(messageID: id, replacing: .pendingRoute(), jobs: jobs, now: now), app: app.id)
}

/// The app of a conformance test; with `pushConfig`, a push configuration named `ios` too, without which no message of the
/// app gets a pending route.
func makeApp(_ store: any BeaconStore, limits: OfflineLimits = .default, pushConfig: Bool = true) async throws -> AppRecord {
    let app = try await store.createApp(
        AppKey(org: "acme", name: "chat"), clientID: "id", clientSecretHash: "hash", limits: limits, now: now)
    if pushConfig {
        try await store.savePushConfig(
            PushConfigRecord(
                appID: app.id, name: "ios", kind: .p8, environment: "development", bundleID: "com.x", voip: false, keyID: "K", teamID: "T",
                sealedSecret: [1, 2, 3], expiresAt: nil, createdAt: now))
    }
    return app
}

func makeUsers(_ store: any BeaconStore, _ app: AppRecord, _ names: [String]) async throws {
    _ = try await store.createUsers(names.map { NewUser(username: $0, passwordHash: "h") }, app: app.id, now: now)
}

func text(_ id: UInt64, from: String, to: String, chatType: ChatType = .chat, at time: Int64 = now) -> Message {
    Message(id: id, from: from, to: to, chatType: chatType, type: .txt, body: ["msg": .string("m\(id)")], ext: ["k": 1], timestamp: time)
}

@Suite struct StoreConformanceTests {
    @Test(arguments: StoreKind.available)
    func appsAreUniqueAndFoundByKeyAndID(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            #expect(try await store.app(AppKey(org: "acme", name: "chat")) == app)
            #expect(try await store.app(id: app.id) == app)
            #expect(try await store.app(AppKey(org: "acme", name: "other")) == nil)
            await #expect(throws: BeaconError.self) { try await makeApp(store) }
            #expect(try await store.allApps() == [app])
        }
    }

    @Test(arguments: StoreKind.available)
    func settingIsWrittenOnce(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let first = try await store.setting("key") { "one" }
            let second = try await store.setting("key") { "two" }
            #expect(first == "one")
            #expect(second == "one")
        }
    }

    @Test(arguments: StoreKind.available)
    func usersAreCreatedAllOrNothing(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            try await makeUsers(store, app, ["alice"])
            await #expect(throws: BeaconError.self) { try await makeUsers(store, app, ["bob", "alice"]) }
            #expect(try await store.user("bob", app: app.id) == nil)
            #expect(try await store.existingUsers(["alice", "bob", "carol"], app: app.id) == ["alice"])
        }
    }

    @Test(arguments: StoreKind.available)
    func userUpdatesKeepUnsetFields(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            try await makeUsers(store, app, ["alice"])
            _ = try await store.updateUser("alice", app: app.id, changes: UserChanges(nickname: "Alice"), now: now + 1)
            let updated = try await store.updateUser("alice", app: app.id, changes: UserChanges(timezone: "Asia/Tokyo"), now: now + 2)
            #expect(updated?.nickname == "Alice")
            #expect(updated?.timezone == "Asia/Tokyo")
            #expect(updated?.modifiedAt == now + 2)
            #expect(try await store.updateUser("nobody", app: app.id, changes: UserChanges(nickname: "x"), now: now) == nil)
            try await store.revokeTokens(of: "alice", app: app.id, before: now + 5)
            #expect(try await store.user("alice", app: app.id)?.tokensValidAfter == now + 5)
        }
    }

    @Test(arguments: StoreKind.available)
    func groupsTrackMembers(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            try await makeUsers(store, app, ["alice", "bob", "carol"])
            let group = GroupRecord(appID: app.id, id: "g1", name: "G", description: "", owner: "alice", maxUsers: 10, createdAt: now)
            try await store.createGroup(group, members: ["bob"])
            #expect(try await store.group("g1", app: app.id) == group)
            #expect(try await store.groupMembers("g1", app: app.id) == ["alice", "bob"])
            #expect(try await store.addGroupMember("carol", group: "g1", app: app.id, now: now))
            #expect(try await !store.addGroupMember("carol", group: "g1", app: app.id, now: now))
            #expect(try await store.removeGroupMember("bob", group: "g1", app: app.id))
            #expect(try await !store.removeGroupMember("bob", group: "g1", app: app.id))
            #expect(try await store.groupMembers("g1", app: app.id) == ["alice", "carol"])
            await #expect(throws: BeaconError.self) { try await store.createGroup(group, members: []) }

            // A group only the app owns (Tencent's create_group without Owner_Account): its empty owner is no member.
            let appOwned = GroupRecord(appID: app.id, id: "g2", name: "A", description: "", owner: "", maxUsers: 10, createdAt: now)
            try await store.createGroup(appOwned, members: ["carol"])
            #expect(try await store.groupMembers("g2", app: app.id) == ["carol"])
            #expect(try await store.groups(of: "carol", app: app.id) == ["g1", "g2"])
            #expect(try await store.groups(of: "bob", app: app.id) == [])
            // Deleting a group takes its memberships; another group keeps its own.
            #expect(try await store.deleteGroup("g1", app: app.id))
            #expect(try await !store.deleteGroup("g1", app: app.id))
            #expect(try await store.group("g1", app: app.id) == nil)
            #expect(try await store.groupMembers("g1", app: app.id) == [])
            #expect(try await store.groups(of: "carol", app: app.id) == ["g2"])
            #expect(try await store.groupMembers("g2", app: app.id) == ["carol"])
        }
    }

    @Test(arguments: StoreKind.available)
    func appendNumbersEachInboxInOrder(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            try await makeUsers(store, app, ["alice", "bob"])
            for id in UInt64(1)...5 {
                let entries = try await store.append(
                    text(id, from: "alice", to: "bob"), app: app.id,
                    deliveries: [
                        Delivery(username: "bob"), Delivery(username: "alice", originDevice: "phone"), Delivery(username: "ghost"),
                    ])
                #expect(entries.map(\.seq) == [Int64(id), Int64(id)])
                #expect(entries.map(\.username) == ["bob", "alice"])
            }
            let inbox = try await store.inbox(of: "bob", app: app.id, after: 2, limit: 2)
            #expect(inbox.map(\.seq) == [3, 4])
            #expect(inbox.map(\.message) == [text(3, from: "alice", to: "bob"), text(4, from: "alice", to: "bob")])
            let own = try await store.inbox(of: "alice", app: app.id, after: 0, limit: 10)
            #expect(own.allSatisfy { $0.originDevice == "phone" })
            #expect(try await store.offlineCount(of: "alice", app: app.id) == 0)
        }
    }

    /// Eight senders at once to overlapping groups (deliveries listed in random orders), with routes recorded as they go,
    /// while a reader follows one inbox: no deadlock surfaces, every inbox is numbered 1...n without a gap, and the
    /// reader, asking only for what is after the last entry it saw, never skips one that committed late.
    @Test(arguments: StoreKind.available)
    func concurrentGroupSendsNeitherDeadlockNorSkip(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            let members = (0..<10).map { "u\($0)" }
            try await makeUsers(store, app, members)
            let perSender = 25
            let followed = try await withThrowingTaskGroup(of: [Int64].self) { group in
                for sender in 0..<8 {
                    group.addTask {
                        for index in 0..<perSender {
                            let id = UInt64(sender * 1000 + index + 1)
                            // Overlapping groups: six of the ten members, starting at the sender's position, in random order.
                            let recipients = (0..<6).map { members[(sender + $0) % 10] }.shuffled()
                            let message = Message(
                                id: id, from: "u\(sender)", to: "g\(sender % 3)", chatType: .groupchat, type: .txt, body: ["msg": "x"],
                                ext: [:],
                                timestamp: now)
                            _ = try await store.append(
                                [NewMessage(message: message, deliveries: recipients.map { Delivery(username: $0) }, routesPushes: true)],
                                app: app.id, receipt: nil)
                            let route = PushRoute(messageID: id, replacing: .pendingRoute(), jobs: [], now: now)
                            #expect(try await store.recordRoute(route, app: app.id))
                        }
                        return []
                    }
                }
                group.addTask {
                    // u7 receives from senders 2...7 (six members from each sender's position): 150 messages.
                    var seen: [Int64] = []
                    for _ in 0..<20_000 where seen.count < 6 * perSender {
                        let page = try await store.inbox(of: "u7", app: app.id, after: seen.last ?? 0, limit: 50)
                        seen += page.map(\.seq)
                        if page.isEmpty { try await Task.sleep(for: .milliseconds(1)) }
                    }
                    return seen
                }
                return try await group.reduce(into: []) { $0 += $1 }
            }
            #expect(followed == Array(1...Int64(6 * perSender)))
            // Every message counted: pushes of nothing stored (as a test push is) hand each member their badge (unread:
            // received from others) in a job's payload.
            let probe = UInt64(99_999)
            let jobs = members.map { member in
                NewPushJob(
                    username: member, deviceID: "d", notifier: "n", deviceToken: "t-\(member)", topic: "t", pushType: .alert,
                    priority: .immediate,
                    expiration: 0, collapseID: nil, apnsID: UUID(), payload: "{\"aps\":{\"x\":1}}", badgeOffset: 13)
            }
            #expect(try await store.recordRoute(PushRoute(messageID: probe, replacing: .nothing, jobs: jobs, now: now), app: app.id))
            for (index, member) in members.enumerated() {
                // Sender s reaches members s...s+5 (mod 10).
                let received = perSender * (0..<8).filter { ((index - $0) % 10 + 10) % 10 < 6 }.count
                let inbox = try await store.inbox(of: member, app: app.id, after: 0, limit: 1000)
                #expect(inbox.map(\.seq) == Array(1...Int64(received)), "\(member)")
                let payload = try await store.pushJobs(app: app.id, username: member, messageID: probe, limit: 1).first?.job.payload
                let sentOwn = index < 8 ? perSender : 0
                #expect(payload == "{\"aps\":{\"x\":1,\"badge\":\(received - sentOwn)}}", "\(member)")
            }
        }
    }

    @Test(arguments: StoreKind.available)
    func cursorsMoveForwardOnlyAndDriveOfflineCounts(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            try await makeUsers(store, app, ["alice", "bob"])
            for id in UInt64(1)...4 {
                _ = try await store.append(text(id, from: "alice", to: "bob"), app: app.id, deliveries: [Delivery(username: "bob")])
            }
            #expect(try await store.cursor(of: "bob", device: "d1", app: app.id) == 0)
            #expect(try await store.offlineCount(of: "bob", app: app.id) == 4)
            #expect(try await store.offlineStatus(of: 2, for: "bob", app: app.id) == .undelivered)
            try await store.acknowledge([DeviceCursor(app: app.id, username: "bob", device: "d1", seq: 3)], now: now)
            try await store.acknowledge([DeviceCursor(app: app.id, username: "bob", device: "d1", seq: 1)], now: now + 5)
            #expect(try await store.cursor(of: "bob", device: "d1", app: app.id) == 3)
            try await store.acknowledge(
                [
                    DeviceCursor(app: app.id, username: "bob", device: "d2", seq: 99),
                    DeviceCursor(app: app.id, username: "ghost", device: "d", seq: 1),
                ],
                now: now + 9)
            #expect(try await store.cursor(of: "bob", device: "d2", app: app.id) == 4)
            // Seen: the last write's time, even one that did not move the cursor.
            #expect(
                try await store.devices(of: "bob", app: app.id)
                    == [
                        SeenDevice(deviceID: "d1", lastSeen: now + 5, acknowledgedSeq: 3),
                        SeenDevice(deviceID: "d2", lastSeen: now + 9, acknowledgedSeq: 4),
                    ])
            #expect(try await store.devices(of: "alice", app: app.id).isEmpty)
            #expect(try await store.offlineCount(of: "bob", app: app.id) == 0)
            #expect(try await store.offlineStatus(of: 2, for: "bob", app: app.id) == .delivered)
            #expect(try await store.offlineStatus(of: 99, for: "bob", app: app.id) == nil)
        }
    }

    @Test(arguments: StoreKind.available)
    func retentionKeepsTheNewestPerConversationAndDropsOldOnes(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store, limits: OfflineLimits(perChat: 3, perGroup: 2, maxAgeSeconds: 3600))
            try await makeUsers(store, app, ["alice", "bob", "carol"])
            var id: UInt64 = 0
            for _ in 0..<5 {
                id += 1
                _ = try await store.append(text(id, from: "alice", to: "bob"), app: app.id, deliveries: [Delivery(username: "bob")])
                id += 1
                _ = try await store.append(text(id, from: "carol", to: "bob"), app: app.id, deliveries: [Delivery(username: "bob")])
                id += 1
                _ = try await store.append(
                    text(id, from: "alice", to: "g1", chatType: .groupchat), app: app.id, deliveries: [Delivery(username: "bob")])
            }
            id += 1
            _ = try await store.append(
                text(id, from: "carol", to: "bob", at: now - 7_200_000), app: app.id, deliveries: [Delivery(username: "bob")])
            let removed = try await store.enforceRetention(app, now: now)
            let kept = try await store.inbox(of: "bob", app: app.id, after: 0, limit: 100)
            // 5+5+5+1 stored; the old one goes by age, then 2 from alice, 2 from carol and 3 from the group by count.
            #expect(removed == 8)
            #expect(kept.filter { $0.message.from == "alice" && $0.message.chatType == .chat }.map(\.message.id) == [7, 10, 13])
            #expect(kept.filter { $0.message.from == "carol" }.map(\.message.id) == [8, 11, 14])
            #expect(kept.filter { $0.message.chatType == .groupchat }.map(\.message.id) == [12, 15])
            #expect(try await store.enforceRetention(app, now: now) == 0)
        }
    }

    @Test(arguments: StoreKind.available)
    func deletingAUserRemovesTheirInboxAndMemberships(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            try await makeUsers(store, app, ["alice", "bob"])
            try await store.createGroup(
                GroupRecord(appID: app.id, id: "g1", name: "G", description: "", owner: "alice", maxUsers: 10, createdAt: now),
                members: ["bob"])
            _ = try await store.append(text(1, from: "alice", to: "bob"), app: app.id, deliveries: [Delivery(username: "bob")])
            #expect(try await store.deleteUser("bob", app: app.id, now: now))
            #expect(try await !store.deleteUser("bob", app: app.id, now: now))
            #expect(try await store.groupMembers("g1", app: app.id) == ["alice"])
            #expect(try await store.inbox(of: "bob", app: app.id, after: 0, limit: 10).isEmpty)
        }
    }

    @Test(arguments: StoreKind.available)
    func appendIsAtomicForLargeFanOut(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            let names = (0..<2000).map { "u\($0)" }
            try await makeUsers(store, app, names)
            let entries = try await store.append(
                text(1, from: "u0", to: "g", chatType: .groupchat), app: app.id,
                deliveries: names.dropFirst().map { Delivery(username: $0) })
            #expect(entries.count == 1999)
            #expect(Set(entries.map(\.seq)) == [1])
        }
    }

    @Test(arguments: StoreKind.available)
    func sendsAreAtomicAndAnsweredOnceByTheirReceipt(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            try await makeUsers(store, app, ["alice", "bob", "carol"])
            let receipt = SendReceipt(scope: "rest:app", reference: "r1", now: now)
            let first = try await store.append(
                [
                    NewMessage(message: text(1, from: "alice", to: "bob"), deliveries: [Delivery(username: "bob")]),
                    NewMessage(message: text(2, from: "alice", to: "carol"), deliveries: [Delivery(username: "carol")]),
                ], app: app.id, receipt: receipt)
            guard case .stored(let entries, _, _) = first else {
                Issue.record("expected stored")
                return
            }
            #expect(entries.map(\.username) == ["bob", "carol"])
            let retry = try await store.append(
                [NewMessage(message: text(3, from: "alice", to: "bob"), deliveries: [Delivery(username: "bob")])], app: app.id,
                receipt: receipt)
            #expect(retry == .repeated(["bob": 1, "carol": 2]))
            #expect(try await store.inbox(of: "bob", app: app.id, after: 0, limit: 10).map(\.message.id) == [1])
            // Another scope's reference is another send.
            let other = try await store.append(
                [NewMessage(message: text(4, from: "alice", to: "bob"), deliveries: [Delivery(username: "bob")])], app: app.id,
                receipt: SendReceipt(scope: "rest:user:alice", reference: "r1", now: now))
            #expect(other != .repeated(["bob": 1, "carol": 2]))
            // All or nothing: a message whose id exists already fails the whole append.
            await #expect(throws: (any Error).self) {
                _ = try await store.append(
                    [
                        NewMessage(message: text(5, from: "alice", to: "bob"), deliveries: [Delivery(username: "bob")]),
                        NewMessage(message: text(1, from: "alice", to: "carol"), deliveries: [Delivery(username: "carol")]),
                    ], app: app.id, receipt: nil)
            }
            #expect(try await store.inbox(of: "bob", app: app.id, after: 0, limit: 10).map(\.message.id) == [1, 4])
            // Ids no message can have are simply not found.
            #expect(try await store.offlineStatus(of: UInt64.max, for: "bob", app: app.id) == nil)
        }
    }

    /// Retries of one send racing each other store it once: one is stored, the others answer its message ids. Receivers
    /// that do not exist (none required) get nothing; the others' sequences run on without a gap.
    @Test(arguments: StoreKind.available)
    func racingRetriesOfOneSendStoreItOnce(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            try await makeUsers(store, app, ["alice", "bob", "carol"])
            let receipt = SendReceipt(scope: "ws:alice/phone", reference: "s1", now: now)
            let results = try await withThrowingTaskGroup(of: AppendResult.self) { group in
                for attempt in 0..<8 {
                    group.addTask {
                        try await store.append(
                            [
                                NewMessage(
                                    message: text(UInt64(100 + attempt), from: "alice", to: "g", chatType: .groupchat),
                                    deliveries: ["bob", "zed", "carol", "alice"].map { Delivery(username: $0) }, routesPushes: true)
                            ], app: app.id, receipt: receipt)
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            let stored = results.compactMap { result -> (entries: [InboxEntry], routed: Set<UInt64>)? in
                guard case .stored(let entries, let routed, _) = result else { return nil }
                return (entries, routed)
            }
            try #require(stored.count == 1)
            let id = try #require(stored[0].entries.first?.message.id)
            #expect(stored[0].entries.map(\.username) == ["bob", "carol", "alice"] && stored[0].entries.allSatisfy { $0.seq == 1 })
            #expect(stored[0].routed == [id])
            #expect(results.filter { $0 == .repeated(["g": id]) }.count == 7)
            for attempt in 0..<8 where 100 + UInt64(attempt) != id {
                #expect(try await store.message(100 + UInt64(attempt), app: app.id) == nil)
            }
            #expect(try await store.inbox(of: "bob", app: app.id, after: 0, limit: 10).map(\.message.id) == [id])
            #expect(try await store.pendingRoutes(before: now + 1, limit: 10).map(\.message.id) == [id])
            // The next message's sequences follow.
            let next = try await store.append(text(200, from: "bob", to: "carol"), app: app.id, deliveries: [Delivery(username: "carol")])
            #expect(next.map(\.seq) == [2])
        }
    }

    /// One send to several targets numbers each receiver's rows in the messages' order (the sender's copies too); a target
    /// none of whose receivers exists is stored for nobody; a send that fails stores nothing, its receipt and sequences
    /// included, and the next one follows without a gap.
    @Test(arguments: StoreKind.available)
    func aSendToSeveralTargetsNumbersEachReceiverInOrderAndAFailedOneLeavesNoGap(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            try await makeUsers(store, app, ["alice", "bob"])
            func group(_ id: UInt64, _ target: String, _ receivers: [String]) -> NewMessage {
                NewMessage(
                    message: text(id, from: "alice", to: target, chatType: .groupchat),
                    deliveries: receivers.map { Delivery(username: $0, originDevice: $0 == "alice" ? "phone" : nil) })
            }
            let receipt = SendReceipt(scope: "ws:alice/phone", reference: "multi", now: now)
            guard
                case .stored(let entries, _, _) = try await store.append(
                    [group(1, "g1", ["bob", "alice"]), group(2, "g2", ["zed"]), group(3, "g3", ["bob", "alice"])], app: app.id,
                    receipt: receipt)
            else { return #expect(Bool(false), "expected stored") }
            #expect(
                entries.map { "\($0.username) \($0.seq) \($0.message.id) \($0.originDevice ?? "-")" } == [
                    "bob 1 1 -", "alice 1 1 phone", "bob 2 3 -", "alice 2 3 phone",
                ])
            #expect(try await store.message(2, app: app.id) != nil)  // stored, for nobody
            #expect(
                try await store.sentMessages(scope: receipt.scope, reference: receipt.reference, app: app.id) == [
                    "g1": 1, "g2": 2, "g3": 3,
                ])

            let failing = SendReceipt(scope: "ws:alice/phone", reference: "fails", now: now)
            await #expect(throws: (any Error).self) {
                _ = try await store.append([group(4, "g1", ["bob"]), group(1, "g3", ["bob"])], app: app.id, receipt: failing)
            }
            #expect(try await store.sentMessages(scope: failing.scope, reference: failing.reference, app: app.id) == nil)
            #expect(try await store.message(4, app: app.id) == nil)
            let next = try await store.append(text(5, from: "alice", to: "bob"), app: app.id, deliveries: [Delivery(username: "bob")])
            #expect(next.map(\.seq) == [3])
        }
    }

    @Test(arguments: StoreKind.available)
    func retentionForgetsReceiptsAndCursorsOfLongGoneDevices(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            try await makeUsers(store, app, ["alice", "bob"])
            let receipt = SendReceipt(scope: "rest:app", reference: "r1", now: now)
            _ = try await store.append(
                [NewMessage(message: text(1, from: "alice", to: "bob"), deliveries: [Delivery(username: "bob")])], app: app.id,
                receipt: receipt)
            try await store.acknowledge([DeviceCursor(app: app.id, username: "bob", device: "old", seq: 1)], now: now)
            _ = try await store.enforceRetention(app, now: now + 8 * 24 * 3600 * 1000)
            #expect(try await store.cursor(of: "bob", device: "old", app: app.id) == 0)
            let again = try await store.append(
                [NewMessage(message: text(2, from: "alice", to: "bob"), deliveries: [Delivery(username: "bob")])], app: app.id,
                receipt: receipt)
            #expect(again != .repeated(["bob": 1]))
        }
    }
}
