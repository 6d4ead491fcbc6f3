import BeaconCore
import BeaconPostgres
import BeaconSQLite
import BeaconStorage
import Foundation
import Logging
import Testing

/// The behaviour every `BeaconStore` must have. Each test runs against every store kind available here: SQLite always,
/// PostgreSQL when `BEACON_TEST_POSTGRES_URL` names a server (`scripts/test` starts a throwaway one).
enum StoreKind: String, CustomTestStringConvertible {
    case sqlite
    case postgres

    var testDescription: String { rawValue }

    static var available: [StoreKind] {
        ProcessInfo.processInfo.environment["BEACON_TEST_POSTGRES_URL"] == nil ? [.sqlite] : [.sqlite, .postgres]
    }

    /// Runs `body` with a fresh, empty store: a temporary SQLite directory, or a PostgreSQL schema of its own.
    func withStore(_ body: @Sendable (any BeaconStore) async throws -> Void) async throws {
        switch self {
        case .sqlite:
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("beacon-store-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: directory) }
            try await body(try SQLiteStore(directory: directory.path))
        case .postgres:
            try await PostgresStore.withStore(url: try Self.freshSchemaURL(), logger: Logger(label: "test")) { try await body($0) }
        }
    }

    /// The test server's URL with a schema no other test uses.
    static func freshSchemaURL() throws -> String {
        let base = try #require(ProcessInfo.processInfo.environment["BEACON_TEST_POSTGRES_URL"])
        let schema = "t_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
        return base + (base.contains("?") ? "&" : "?") + "schema=\(schema)"
    }
}

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
    return try await store.recordRoute(PushRoute(messageID: id, replacing: .pendingRoute, jobs: [job], now: time), app: app.id)
}

func makeApp(_ store: any BeaconStore, limits: OfflineLimits = .default) async throws -> AppRecord {
    try await store.createApp(AppKey(org: "acme", name: "chat"), clientID: "id", clientSecretHash: "hash", limits: limits, now: now)
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
                            let route = PushRoute(messageID: id, replacing: .pendingRoute, jobs: [], now: now)
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
            // Every message counted: a last route hands each member their badge (unread: received from others) in a job's payload.
            let probe = UInt64(99_999)
            _ = try await store.append(
                [NewMessage(message: text(probe, from: "u0", to: "u1"), deliveries: [], routesPushes: true)], app: app.id, receipt: nil)
            let jobs = members.map { member in
                NewPushJob(
                    username: member, deviceID: "d", notifier: "n", deviceToken: "t-\(member)", topic: "t", pushType: .alert,
                    priority: .immediate,
                    expiration: 0, collapseID: nil, apnsID: UUID(), payload: "{\"aps\":{\"x\":1}}", badgeOffset: 13)
            }
            #expect(try await store.recordRoute(PushRoute(messageID: probe, replacing: .pendingRoute, jobs: jobs, now: now), app: app.id))
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
    func pushConfigurationsAreSavedReplacedAndDeleted(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            var config = PushConfigRecord(
                appID: app.id, name: "ios", kind: .p8, environment: "development", bundleID: "com.x", voip: false, keyID: "K", teamID: "T",
                sealedSecret: [1, 2, 3], expiresAt: nil, createdAt: now)
            try await store.savePushConfig(config)
            config.bundleID = "com.y"
            config.createdAt = now + 1
            try await store.savePushConfig(config)
            #expect(try await store.pushConfig("ios", app: app.id) == config)
            #expect(try await store.pushConfigs(app: app.id) == [config])
            #expect(try await store.deletePushConfig("ios", app: app.id))
            #expect(try await !store.deletePushConfig("ios", app: app.id))
        }
    }

    @Test(arguments: StoreKind.available)
    func aDeviceTokenBelongsToOneUserAtATime(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            try await makeUsers(store, app, ["alice", "bob"])
            try await store.bind(
                PushBinding(username: "alice", deviceID: "d1", notifier: "ios", deviceToken: "aa", boundAt: 1), app: app.id)
            try await store.bind(
                PushBinding(username: "alice", deviceID: "d1", notifier: "voip", deviceToken: "aa", boundAt: 1), app: app.id)
            try await store.bind(PushBinding(username: "bob", deviceID: "d9", notifier: "ios", deviceToken: "aa", boundAt: 2), app: app.id)
            #expect(try await store.bindings(of: "alice", app: app.id).isEmpty)
            #expect(try await store.bindings(of: "bob", app: app.id).map(\.deviceToken) == ["aa"])
            // Found by its token: the current owner's device only.
            #expect(
                try await store.bindings(holding: "aa", app: app.id).map { "\($0.username)/\($0.deviceID)/\($0.notifier)" } == [
                    "bob/d9/ios"
                ])
            #expect(try await store.bindings(holding: "zz", app: app.id).isEmpty)
            // 410 with a timestamp before the binding: kept; after: removed.
            #expect(try await !store.removeBinding(deviceToken: "aa", notifier: "ios", app: app.id, unlessBoundSince: 1, now: 5))
            #expect(try await store.removeBinding(deviceToken: "aa", notifier: "ios", app: app.id, unlessBoundSince: 3, now: 5))
            try await store.bind(PushBinding(username: "bob", deviceID: "d9", notifier: "ios", deviceToken: "bb", boundAt: 4), app: app.id)
            try await store.bind(PushBinding(username: "bob", deviceID: "d9", notifier: "voip", deviceToken: "cc", boundAt: 4), app: app.id)
            try await store.unbind(username: "bob", deviceID: "d9", notifier: "voip", app: app.id)
            #expect(try await store.bindings(of: "bob", app: app.id).map(\.notifier) == ["ios"])
            try await store.unbindAll(username: "bob", app: app.id)
            #expect(try await store.bindings(of: "bob", app: app.id).isEmpty)
        }
    }

    /// A job for `username`'s device `d1` through `ios`, pushed (badge spliced in) or skipped with `skip`.
    private static func job(_ username: String, token: String = "aa", skip: String? = nil, pushType: PushType = .alert) -> NewPushJob {
        NewPushJob(
            username: username, deviceID: "d1", notifier: "ios", deviceToken: token, topic: "t", pushType: pushType, priority: .immediate,
            expiration: 0,
            collapseID: nil, apnsID: UUID(), payload: skip == nil ? #"{"aps":{"alert":"x"}}"# : "", badgeOffset: skip == nil ? 19 : nil,
            skipReason: skip)
    }

    /// Stores message `id` for bob with a pending route, and records `jobs` as its decision.
    private static func route(_ store: any BeaconStore, _ app: AppRecord, id: UInt64, jobs: [NewPushJob]) async throws -> Bool {
        _ = try await store.append(
            [NewMessage(message: text(id, from: "alice", to: "bob"), deliveries: [Delivery(username: "bob")], routesPushes: true)],
            app: app.id,
            receipt: nil)
        return try await store.recordRoute(PushRoute(messageID: id, replacing: .pendingRoute, jobs: jobs, now: now), app: app.id)
    }

    @Test(arguments: StoreKind.available)
    func pushJobsGetTheirBadgeWhenRecordedAndAreLeasedAndFenced(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            try await makeUsers(store, app, ["alice", "bob", "carol"])
            try await store.bind(PushBinding(username: "bob", deviceID: "d1", notifier: "ios", deviceToken: "aa", boundAt: 1), app: app.id)
            #expect(try await Self.route(store, app, id: 1, jobs: [Self.job("bob")]))
            #expect(try await Self.route(store, app, id: 2, jobs: [Self.job("bob")]))
            let claimed = try await store.claimPushJobs(now: now, lease: 1000, limit: 10)
            #expect(claimed.map(\.job.payload) == [#"{"aps":{"alert":"x","badge":1}}"#, #"{"aps":{"alert":"x","badge":2}}"#])
            #expect(claimed.map(\.attempts) == [1, 1])
            #expect(try await store.claimPushJobs(now: now + 10, lease: 1000, limit: 10).isEmpty)  // leased
            #expect(
                try await store.recordPushAttempts(
                    [
                        PushAttemptOutcome(
                            jobID: claimed[0].id, claimToken: claimed[0].claimToken, status: .sent, httpStatus: 200, reason: nil)
                    ], now: now + 20) == 1)
            // The unrecorded one comes back when its lease runs out (a crashed worker) ...
            let again = try await store.claimPushJobs(now: now + 1001, lease: 1000, limit: 10)
            #expect(again.map(\.id) == [claimed[1].id])
            #expect(again[0].attempts == 2)
            // ... and the first claim can no longer complete it.
            #expect(
                try await store.recordPushAttempts(
                    [
                        PushAttemptOutcome(
                            jobID: claimed[1].id, claimToken: claimed[1].claimToken, status: .sent, httpStatus: 200, reason: nil)
                    ], now: now + 1001) == 0)
            try await store.recordPushAttempts(
                [
                    PushAttemptOutcome(
                        jobID: again[0].id, claimToken: again[0].claimToken, status: .pending, httpStatus: 503, reason: "Shutdown",
                        nextAttemptAt: now + 5000)
                ],
                now: now + 1002)
            #expect(try await store.nextPushJobDue() == now + 5000)
            #expect(try await store.claimPushJobs(now: now + 4999, lease: 1000, limit: 10).isEmpty)
            let records = try await store.pushJobs(app: app.id, username: "bob", messageID: nil, limit: 10)
            #expect(records.map(\.status) == [.pending, .sent])
            #expect(records[0].history.map(\.reason) == ["Shutdown"])
            // Filtered on the server: status, reason, time of the last change, all together.
            func ids(_ filter: PushJobFilter) async throws -> [Int64] {
                try await store.pushJobs(app: app.id, matching: filter, limit: 10).map(\.id)
            }
            #expect(try await ids(PushJobFilter(status: .sent)) == [records[1].id])
            #expect(try await ids(PushJobFilter(username: "bob", status: .pending, reason: "Shutdown")) == [records[0].id])
            #expect(try await ids(PushJobFilter(status: .sent, reason: "Shutdown")).isEmpty)
            #expect(try await ids(PushJobFilter(updatedSince: now + 1002)) == [records[0].id])
            #expect(try await ids(PushJobFilter(updatedSince: now + 1003)).isEmpty)
            #expect(try await ids(PushJobFilter(username: "carol", status: .pending)).isEmpty)
            #expect(try await store.pushJobs(app: app.id, username: nil, messageID: 1, limit: 10).count == 1)
            #expect(try await store.pushJobs(app: app.id, username: nil, messageID: UInt64(Int64.max) + 1, limit: 10).isEmpty)
            // Finished records go with retention; pending ones stay whatever their age.
            _ = try await store.enforceRetention(app, now: now + 8 * 24 * 3600 * 1000)
            #expect(try await store.pushJobs(app: app.id, username: "bob", messageID: nil, limit: 10).map(\.status) == [.pending])
            // A job its claim never sent, handed back: due again at once, that attempt not counted; a stale claim's hand-back
            // changes nothing.
            let unsent = try await store.claimPushJobs(now: now + 5000, lease: 60_000, limit: 10)
            #expect(unsent.map(\.attempts) == [3])
            try await store.returnUnsentPushJobs(unsent)
            let handedBack = try await store.claimPushJobs(now: now + 5000, lease: 60_000, limit: 10)
            #expect(handedBack.map(\.id) == unsent.map(\.id))
            #expect(handedBack.map(\.attempts) == [3])
            try await store.returnUnsentPushJobs(unsent)
            #expect(try await store.claimPushJobs(now: now + 5000, lease: 60_000, limit: 10).isEmpty)
            try await store.returnUnsentPushJobs(handedBack)
            // A claim released (restart) is due again at once.
            _ = try await store.claimPushJobs(now: now + 5000, lease: 60_000, limit: 10)
            try await store.releasePushClaims()
            #expect(try await store.claimPushJobs(now: now + 5001, lease: 1000, limit: 10).count == 1)
            // The badge is the unread count when the job is recorded: read up to message 2, message 3 makes it 1.
            _ = try await store.markRead(
                "bob", app: app.id, conversation: ConversationID(chatType: .chat, key: "alice"), upTo: 2, readingDevice: nil, now: now)
            #expect(try await Self.route(store, app, id: 3, jobs: [Self.job("bob")]))
            #expect(
                try await store.pushJobs(app: app.id, username: "bob", messageID: 3, limit: 1).first?.job.payload
                    == #"{"aps":{"alert":"x","badge":1}}"#)
        }
    }

    @Test(arguments: StoreKind.available)
    func eachMessageIsRoutedOnceAndCrashesLeaveItPending(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            try await makeUsers(store, app, ["alice", "bob"])
            _ = try await store.append(
                [
                    NewMessage(
                        message: text(7, from: "alice", to: "bob"), deliveries: [Delivery(username: "bob"), Delivery(username: "alice")],
                        routesPushes: true)
                ],
                app: app.id, receipt: nil)
            // Not routed yet (a crash): found by the sweep, with its recipients (not the sender).
            #expect(try await store.pendingRoutes(before: now, limit: 10).isEmpty)
            let pending = try await store.pendingRoutes(before: now + 1, limit: 10)
            #expect(pending.map(\.message.id) == [7])
            #expect(pending.first?.recipients == ["bob"])
            let route = PushRoute(messageID: 7, replacing: .pendingRoute, jobs: [Self.job("bob", skip: "no_binding")], now: now)
            #expect(try await store.recordRoute(route, app: app.id))
            #expect(try await !store.recordRoute(route, app: app.id))  // decided once
            #expect(try await store.pushJobs(app: app.id, username: "bob", messageID: 7, limit: 10).count == 1)
            #expect(try await store.pendingRoutes(before: now + 1, limit: 10).isEmpty)
        }
    }

    @Test(arguments: StoreKind.available)
    func jobsWhoseBindingChangedAreSkippedInsteadOfSent(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            try await makeUsers(store, app, ["alice", "bob", "carol"])
            try await store.bind(
                PushBinding(username: "bob", deviceID: "d1", notifier: "ios", deviceToken: "aa", voipToken: "vv", boundAt: 1), app: app.id)
            #expect(try await Self.route(store, app, id: 1, jobs: [Self.job("bob")]))
            #expect(try await Self.route(store, app, id: 2, jobs: [Self.job("bob", token: "vv", pushType: .voip)]))
            // The phone changes hands: carol binds its token.
            try await store.bind(
                PushBinding(username: "carol", deviceID: "d5", notifier: "ios", deviceToken: "aa", boundAt: 2), app: app.id)
            #expect(try await store.bindings(of: "bob", app: app.id).isEmpty)
            #expect(try await store.claimPushJobs(now: now, lease: 1000, limit: 10).isEmpty)
            let records = try await store.pushJobs(app: app.id, username: "bob", messageID: nil, limit: 10)
            #expect(records.map(\.status) == [.skipped, .skipped])
            #expect(records.map(\.lastReason) == ["binding_changed", "binding_changed"])
            // A VoIP token moved to another user leaves the alert binding.
            try await store.bind(
                PushBinding(username: "bob", deviceID: "d1", notifier: "ios", deviceToken: "bb", voipToken: "vv", boundAt: 3), app: app.id)
            try await store.bind(
                PushBinding(username: "carol", deviceID: "d5", notifier: "ios", deviceToken: "aa", voipToken: "vv", boundAt: 4), app: app.id
            )
            #expect(try await store.bindings(of: "bob", app: app.id).map(\.voipToken) == [nil])
            #expect(try await store.bindings(of: "bob", app: app.id).map(\.deviceToken) == ["bb"])
            // Deleting a user cancels their pending jobs.
            #expect(try await Self.route(store, app, id: 3, jobs: [Self.job("bob", token: "bb")]))
            #expect(try await store.deleteUser("bob", app: app.id, now: now))
            #expect(try await store.pushJobs(app: app.id, username: "bob", messageID: nil, limit: 10).isEmpty)  // deleted with him
            #expect(try await store.claimPushJobs(now: now, lease: 1000, limit: 10).isEmpty)
        }
    }

    @Test(arguments: StoreKind.available)
    func onlineSkipsOfUnacknowledgedMessagesAreDecidedAgainOnce(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            try await makeUsers(store, app, ["alice", "bob"])
            try await store.bind(PushBinding(username: "bob", deviceID: "d1", notifier: "ios", deviceToken: "aa", boundAt: 1), app: app.id)
            #expect(try await Self.route(store, app, id: 1, jobs: [Self.job("bob", skip: "online")]))
            #expect(try await Self.route(store, app, id: 2, jobs: [Self.job("bob", skip: "online")]))
            // Message 1 was acknowledged by a device of bob's; message 2 was not.
            try await store.acknowledge([DeviceCursor(app: app.id, username: "bob", device: "laptop", seq: 1)], now: now)
            let skips = try await store.unacknowledgedOnlineSkips(of: "bob", app: app.id, limit: 10)
            #expect(skips.map(\.message.id) == [2])
            #expect(skips.first?.devices == [SkippedDevice(deviceID: "d1", notifier: "ios")])
            let again = PushRoute(
                messageID: 2, replacing: .onlineSkips(username: "bob", devices: [SkippedDevice(deviceID: "d1", notifier: "ios")]),
                jobs: [Self.job("bob")], now: now)
            #expect(try await store.recordRoute(again, app: app.id))
            #expect(try await !store.recordRoute(again, app: app.id))
            #expect(try await store.unacknowledgedOnlineSkips(of: "bob", app: app.id, limit: 10).isEmpty)
            #expect(try await store.pushJobs(app: app.id, username: "bob", messageID: 2, limit: 10).map(\.status) == [.pending])
            // A message read (on any device, or through REST) is not decided again either.
            #expect(try await Self.route(store, app, id: 3, jobs: [Self.job("bob", skip: "online")]))
            #expect(try await store.unacknowledgedOnlineSkips(of: "bob", app: app.id, limit: 10).map(\.message.id) == [3])
            _ = try await store.markRead(
                "bob", app: app.id, conversation: ConversationID(chatType: .chat, key: "alice"), upTo: 3, readingDevice: nil, now: now)
            #expect(try await store.unacknowledgedOnlineSkips(of: "bob", app: app.id, limit: 10).isEmpty)
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
            guard case .stored(let entries) = first else {
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

    /// Two users binding the same token at the same moment (a shared phone): one of them holds it afterwards, never both.
    @Test(arguments: StoreKind.available)
    func aTokenBoundTwiceAtOnceBelongsToOneUser(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            try await makeUsers(store, app, ["alice", "bob"])
            for round in 0..<20 {
                let token = "token\(round)"
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for user in ["alice", "bob"] {
                        group.addTask {
                            try await store.bind(
                                PushBinding(username: user, deviceID: "phone", notifier: "ios", deviceToken: token, boundAt: Int64(round)),
                                app: app.id)
                        }
                    }
                    try await group.waitForAll()
                }
                let holders = try await store.bindings(of: ["alice", "bob"], app: app.id).values.joined().filter { $0.deviceToken == token }
                #expect(holders.count == 1, "round \(round): \(holders.map(\.username))")
            }
        }
    }
}
