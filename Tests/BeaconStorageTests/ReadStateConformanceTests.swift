import BeaconCore
import BeaconStorage
import BeaconTesting
import Foundation
import Testing

/// Read markers, unread counts, the badge and withdrawal jobs, on every store kind.
@Suite struct ReadStateConformanceTests {
    private static let alice = ConversationID(chatType: .chat, key: "alice")
    private static let carol = ConversationID(chatType: .chat, key: "carol")

    /// Stores `message` in the inboxes of `to` (received) and of its sender (sent from device "d").
    private static func deliver(
        _ store: any BeaconStore, _ app: AppRecord, _ message: Message, to receivers: [String], routes: Bool = false
    )
        async throws
    {
        let deliveries = receivers.map { Delivery(username: $0) } + [Delivery(username: message.from, originDevice: "d")]
        _ = try await store.append([NewMessage(message: message, deliveries: deliveries, routesPushes: routes)], app: app.id, receipt: nil)
    }

    /// An alert job for bob's device `device`, its badge spliced in when recorded.
    private static func alert(device: String) -> NewPushJob {
        NewPushJob(
            username: "bob", deviceID: device, notifier: "ios", deviceToken: "t-\(device)", topic: "t", pushType: .alert,
            priority: .immediate,
            expiration: 0, collapseID: nil, apnsID: UUID(), payload: #"{"aps":{"alert":"x"}}"#, badgeOffset: 19)
    }

    @Test(arguments: StoreKind.available)
    func markersMoveForwardAndDriveUnreadCountsAndTheBadge(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            try await makeUsers(store, app, ["alice", "bob", "carol"])
            for id in UInt64(1)...3 { try await Self.deliver(store, app, text(id, from: "alice", to: "bob"), to: ["bob"]) }
            let command = Message(id: 4, from: "alice", to: "bob", chatType: .chat, type: .cmd, body: ["action": "x"], timestamp: now)
            try await Self.deliver(store, app, command, to: ["bob"])
            try await Self.deliver(store, app, text(5, from: "carol", to: "bob"), to: ["bob"])
            try await Self.deliver(store, app, text(6, from: "bob", to: "alice"), to: ["alice"])
            var silent = text(7, from: "carol", to: "bob")
            silent.ext = ["em_ignore_notification": true]
            try await Self.deliver(store, app, silent, to: ["bob"])
            // Received and counting: 1, 2, 3 and 5 (not the command, not bob's own, not the silent one).
            #expect(try await store.badge(of: "bob", app: app.id) == 4)
            var conversations = try await store.conversations(of: "bob", app: app.id, limit: 10)
            #expect(conversations.map(\.conversation) == [Self.carol, Self.alice])
            #expect(conversations.map(\.unread) == [1, 3])
            #expect(conversations.map(\.lastMessageID) == [7, 6])
            #expect(conversations.allSatisfy { $0.read == nil && !$0.muted })

            var update = try await store.markRead("bob", app: app.id, conversation: Self.alice, upTo: 2, readingDevice: nil, now: now)
            #expect(update.markers == [ReadMarker(conversation: Self.alice, seq: 2, upTo: 2, version: 1)])
            #expect(update.badge == 2)
            // Markers never move back; reading again what is read changes nothing.
            update = try await store.markRead("bob", app: app.id, conversation: Self.alice, upTo: 1, readingDevice: nil, now: now)
            #expect(update.markers.isEmpty && update.badge == 2)
            // A message id the conversation does not hold reads up to the newest entry before it.
            update = try await store.markRead("bob", app: app.id, conversation: Self.alice, upTo: 5, readingDevice: nil, now: now)
            #expect(update.markers.map(\.upTo) == [4])
            #expect(update.badge == 1)
            // Muting carol takes her conversation out of the badge, unless the app's policy counts muted ones.
            try await store.savePushSettings(
                PushSettingsRecord(username: "bob", scope: Self.carol.description, remindType: "NONE"), app: app.id)
            #expect(try await store.badge(of: "bob", app: app.id) == 0)
            #expect(try await store.conversations(of: "bob", app: app.id, limit: 10).first?.muted == true)
            var policy = try await store.pushPolicy(app: app.id)
            policy.badgeCountsMuted = true
            try await store.savePushPolicy(policy, app: app.id)
            #expect(try await store.pushPolicy(app: app.id).badgeCountsMuted)
            #expect(try await store.badge(of: "bob", app: app.id) == 1)
            // Muted at the user level, with the conversation inheriting: muted too.
            try await store.savePushSettings(
                PushSettingsRecord(username: "bob", scope: Self.carol.description, remindType: "DEFAULT"), app: app.id)
            try await store.savePushSettings(PushSettingsRecord(username: "bob", scope: "", remindType: "NONE"), app: app.id)
            policy.badgeCountsMuted = false
            try await store.savePushPolicy(policy, app: app.id)
            #expect(try await store.badge(of: "bob", app: app.id) == 0)
            try await store.savePushSettings(PushSettingsRecord(username: "bob", scope: "", remindType: "ALL"), app: app.id)
            #expect(try await store.badge(of: "bob", app: app.id) == 1)

            // Reading everything reads each conversation with an entry after its marker (bob's own message 6 included).
            update = try await store.markRead("bob", app: app.id, conversation: nil, upTo: nil, readingDevice: nil, now: now)
            #expect(
                update.markers == [
                    ReadMarker(conversation: Self.alice, seq: 6, upTo: 6, version: 3),
                    ReadMarker(conversation: Self.carol, seq: 7, upTo: 7, version: 4),
                ])
            #expect(update.badge == 0)
            #expect(try await store.readMarkers(of: "bob", app: app.id, after: 0, limit: 10).map(\.version) == [3, 4])
            #expect(try await store.readMarkers(of: "bob", app: app.id, after: 3, limit: 10).map(\.conversation) == [Self.carol])
            conversations = try await store.conversations(of: "bob", app: app.id, limit: 10)
            #expect(conversations.map(\.unread) == [0, 0])
            #expect(conversations.map { $0.read?.upTo } == [7, 6])
            #expect(try await store.conversations(of: "bob", app: app.id, limit: 1).count == 1)
        }
    }

    @Test(arguments: StoreKind.available)
    func aReportedBadgeIsCountedOnAndLosesWhatIsReadAndReadsFindThePushedDevices(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            try await makeUsers(store, app, ["alice", "bob"])
            try await Self.deliver(store, app, text(1, from: "alice", to: "bob"), to: ["bob"])
            // The app shows 10 (its own count, message 1 among them); message 2 comes after the report.
            try await store.reportBadge(of: "bob", app: app.id, value: 10)
            #expect(try await store.badge(of: "bob", app: app.id) == 10)
            try await Self.deliver(store, app, text(2, from: "alice", to: "bob"), to: ["bob"], routes: true)
            try await store.bind(
                PushBinding(username: "bob", deviceID: "phone", notifier: "ios", deviceToken: "t-phone", boundAt: 1), app: app.id)
            try await store.bind(
                PushBinding(username: "bob", deviceID: "pad", notifier: "ios", deviceToken: "t-pad", boundAt: 1), app: app.id)
            #expect(
                try await store.recordRoute(
                    PushRoute(
                        messageID: 2, replacing: .pendingRoute(), jobs: [Self.alert(device: "phone"), Self.alert(device: "pad")], now: now),
                    app: app.id))
            let claimed = try await store.claimPushJobs(now: now, lease: 1000, limit: 10)
            #expect(claimed.map(\.job.payload) == Array(repeating: #"{"aps":{"alert":"x","badge":11}}"#, count: 2))
            try await store.recordPushAttempts(
                claimed.map { PushAttemptOutcome(jobID: $0.id, claimToken: $0.claimToken, status: .sent, httpStatus: 200, reason: nil) },
                now: now)
            // Message 3's pushes are still waiting when bob reads: the pad's was never taken, the tablet's was taken by a
            // worker whose lease then lapsed (it may have reached APNs).
            try await store.bind(
                PushBinding(username: "bob", deviceID: "tablet", notifier: "ios", deviceToken: "t-tablet", boundAt: 1), app: app.id)
            try await Self.deliver(store, app, text(3, from: "alice", to: "bob"), to: ["bob"], routes: true)
            #expect(
                try await store.recordRoute(
                    PushRoute(
                        messageID: 3, replacing: .pendingRoute(), jobs: [Self.alert(device: "tablet"), Self.alert(device: "pad")],
                        now: now + 1),
                    app: app.id))
            _ = try await store.claimPushJobs(now: now + 1, lease: 1000, limit: 1)
            // Reading all: message 1 leaves the reported total, messages 2 and 3 the count after it.
            let update = try await store.markRead(
                "bob", app: app.id, conversation: Self.alice, upTo: nil, readingDevice: "pad", now: now + 2000)
            #expect(update.badge == 9)
            #expect(
                update.pushedDevices == [
                    SkippedDevice(deviceID: "phone", notifier: "ios"), SkippedDevice(deviceID: "tablet", notifier: "ios"),
                ])
            // The waiting push of a message now read is not sent.
            let third = try await store.pushJobs(app: app.id, username: "bob", messageID: 3, limit: 10)
            #expect(third.map(\.status) == [.skipped, .skipped])
            #expect(third.map(\.lastReason) == ["read", "read"])
            #expect(try await store.claimPushJobs(now: now + 2001, lease: 1000, limit: 10).isEmpty)
            #expect(
                try await store.markRead("bob", app: app.id, conversation: nil, upTo: nil, readingDevice: nil, now: now).markers.isEmpty)
            await #expect(throws: BeaconError.self) {
                try await store.markRead("nobody", app: app.id, conversation: nil, upTo: nil, readingDevice: nil, now: now)
            }
            // Deleting the user takes their read state with them.
            #expect(try await store.deleteUser("bob", app: app.id, now: now))
            try await makeUsers(store, app, ["bob"])
            #expect(try await store.readMarkers(of: "bob", app: app.id, after: 0, limit: 10).isEmpty)
        }
    }

    @Test func withdrawalDueTimesAreSpacedAndNeverOverflow() {
        #expect(WithdrawalSchedule.due(after: nil, spacing: 3000, now: 10_000) == 10_000)
        #expect(WithdrawalSchedule.due(after: 9_000, spacing: 3000, now: 10_000) == 12_000)
        #expect(WithdrawalSchedule.due(after: 1_000, spacing: 3000, now: 10_000) == 10_000)
        #expect(WithdrawalSchedule.due(after: Int64.max - 1, spacing: 3000, now: 10_000) == Int64.max)
    }

    @Test(arguments: StoreKind.available)
    func withdrawalsAreCoalescedPerDevice(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            try await makeUsers(store, app, ["alice", "bob"])
            try await Self.deliver(store, app, text(1, from: "alice", to: "bob"), to: ["bob"])
            try await store.bind(
                PushBinding(username: "bob", deviceID: "phone", notifier: "ios", deviceToken: "t-phone", boundAt: 1), app: app.id)
            func withdrawal(_ payload: String, token: String = "t-phone") -> NewPushJob {
                NewPushJob(
                    username: "bob", deviceID: "phone", notifier: "ios", deviceToken: token, topic: "t", pushType: .background,
                    priority: .considerate,
                    expiration: 0, collapseID: nil, apnsID: UUID(), payload: payload)
            }
            func queue(_ payload: String, version: Int64, at time: Int64, token: String = "t-phone") async throws {
                try await store.queueWithdrawals(
                    [withdrawal(payload, token: token)], messageID: 1, readVersion: version, app: app.id, spacing: 3000, now: time)
            }
            func sent(_ jobs: [PushJob], at time: Int64) async throws {
                try await store.recordPushAttempts(
                    jobs.map { PushAttemptOutcome(jobID: $0.id, claimToken: $0.claimToken, status: .sent, httpStatus: 200, reason: nil) },
                    now: time)
            }
            try await queue("w1", version: 1, at: now)
            let first = try await store.claimPushJobs(now: now, lease: 60_000, limit: 10)
            #expect(first.map(\.job.payload) == ["w1"])
            #expect(first.map(\.job.pushType) == [.background])
            // The first is on its way: the next waits out the spacing; a third while it waits replaces it.
            try await queue("w2", version: 2, at: now + 100)
            try await queue("w3", version: 3, at: now + 200)
            // Reads that committed in the other order: the older state's withdrawal is not queued after the newer one.
            try await queue("w2-late", version: 2, at: now + 300)
            #expect(
                try await store.pushJobs(app: app.id, username: "bob", messageID: nil, limit: 10).map(\.lastReason) == [
                    nil, "superseded", nil,
                ])
            #expect(try await store.claimPushJobs(now: now + 2999, lease: 60_000, limit: 10).isEmpty)
            let second = try await store.claimPushJobs(now: now + 3000, lease: 60_000, limit: 10)
            #expect(second.map(\.job.payload) == ["w3"])
            try await sent(first + second, at: now + 3001)
            // Long after, one is due at once.
            try await queue("w4", version: 4, at: now + 60_000)
            let third = try await store.claimPushJobs(now: now + 60_000, lease: 60_000, limit: 10)
            #expect(third.map(\.job.payload) == ["w4"])
            // Its lease lapses while a slow worker still sends it: a newer state replaces it, and the slow worker's answer
            // no longer completes it.
            try await queue("w5", version: 5, at: now + 120_000)
            #expect(
                try await store.recordPushAttempts(
                    [PushAttemptOutcome(jobID: third[0].id, claimToken: third[0].claimToken, status: .sent, httpStatus: 200, reason: nil)],
                    now: now + 120_001) == 0)
            let fourth = try await store.claimPushJobs(now: now + 120_001, lease: 60_000, limit: 10)
            #expect(fourth.map(\.job.payload) == ["w5"])
            try await sent(fourth, at: now + 120_002)
            // A waiting one for the device's old token is replaced by one for its new token.
            try await queue("w6", version: 6, at: now + 200_000)
            try await store.bind(
                PushBinding(username: "bob", deviceID: "phone", notifier: "ios", deviceToken: "t-new", boundAt: 2), app: app.id)
            try await queue("w7", version: 7, at: now + 200_001, token: "t-new")
            let fifth = try await store.claimPushJobs(now: now + 203_001, lease: 60_000, limit: 10)
            #expect(fifth.map(\.job.payload) == ["w7"])
            #expect(
                try await store.pushJobs(app: app.id, username: "bob", messageID: nil, limit: 10).first { $0.job.payload == "w6" }?
                    .lastReason
                    == "superseded")
            // A user deleted and created again counts versions from 1: the old withdrawals do not hold the new ones back.
            #expect(try await store.deleteUser("bob", app: app.id, now: now + 300_000))
            try await makeUsers(store, app, ["bob"])
            try await queue("again", version: 1, at: now + 300_001, token: "t-new")
            #expect(try await store.pushJobs(app: app.id, username: "bob", messageID: nil, limit: 1).first?.job.payload == "again")
        }
    }
}
