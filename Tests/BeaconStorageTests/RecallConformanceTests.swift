import BeaconCore
import BeaconStorage
import BeaconTesting
import Foundation
import Testing

/// Recalling a stored message, on every store kind: one transaction that removes it, leaves the notice, ends its
/// pushes not yet on their way and withdraws the ones that were.
@Suite struct RecallConformanceTests {
    /// An alert job for bob's device `device` (token `t-device`), its badge spliced in when recorded; skipped with `skip`.
    private static func alert(device: String, skip: String? = nil) -> NewPushJob {
        NewPushJob(
            username: "bob", deviceID: device, notifier: "ios", deviceToken: "t-\(device)", topic: "t", pushType: .alert,
            priority: .immediate, expiration: 0, collapseID: nil, apnsID: skip == nil ? UUID() : nil,
            payload: skip == nil ? #"{"aps":{"alert":"x"}}"# : "", badgeOffset: skip == nil ? 19 : nil, skipReason: skip)
    }

    /// A withdrawal as the server makes it: a background push to the same device with the recalled id, badge to come.
    private static func withdrawal(of id: UInt64) -> @Sendable (NewPushJob) -> NewPushJob {
        { sent in withdrawal(of: id, sent) }
    }

    private static func withdrawal(of id: UInt64, _ sent: NewPushJob) -> NewPushJob {
        let payload = #"{"aps":{"content-available":1},"beacon":{"recalled":[""# + String(id) + #""]}}"#
        return NewPushJob(
            username: sent.username, deviceID: sent.deviceID, notifier: sent.notifier, deviceToken: sent.deviceToken, topic: sent.topic,
            pushType: .background, priority: .considerate, expiration: 0, collapseID: nil, apnsID: UUID(), payload: payload,
            badgeOffset: payload.utf8.count - 2)
    }

    private static func recall(_ id: UInt64, noticeID: UInt64, at time: Int64) -> MessageRecall {
        let recalled = text(id, from: "alice", to: "bob")
        let notice = RecallNotice(recalling: recalled, by: "alice", at: time).message(id: noticeID)
        return MessageRecall(messageID: id, notice: notice, withdrawal: withdrawal(of: id), now: time)
    }

    @Test(arguments: StoreKind.available)
    func aRecallRemovesTheMessageLeavesANoticeAndWithdrawsWhatWasPushed(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            try await makeUsers(store, app, ["alice", "bob", "carol"])
            for device in ["d1", "d2", "d4"] {
                try await store.bind(
                    PushBinding(username: "bob", deviceID: device, notifier: "ios", deviceToken: "t-\(device)", boundAt: 1), app: app.id)
            }
            _ = try await store.append(text(2, from: "carol", to: "bob"), app: app.id, deliveries: [Delivery(username: "bob")])
            _ = try await store.append(
                [
                    NewMessage(
                        message: text(1, from: "alice", to: "bob"),
                        deliveries: [Delivery(username: "bob"), Delivery(username: "alice", originDevice: "phone")], routesPushes: true)
                ], app: app.id, receipt: nil)
            // d1 is pushed and sent; d4 is taken by a worker (on its way); d2 waits; d3 was skipped as online.
            #expect(
                try await store.recordRoute(
                    PushRoute(
                        messageID: 1, replacing: .pendingRoute(),
                        jobs: [Self.alert(device: "d1"), Self.alert(device: "d3", skip: "online")],
                        now: now), app: app.id))
            let sent = try await store.claimPushJobs(now: now, lease: 60_000, limit: 10)
            try await store.recordPushAttempts(
                sent.map { PushAttemptOutcome(jobID: $0.id, claimToken: $0.claimToken, status: .sent, httpStatus: 200, reason: nil) },
                now: now)
            #expect(
                try await store.recordRoute(
                    PushRoute(messageID: 1, replacing: .nothing, jobs: [Self.alert(device: "d4")], now: now), app: app.id))
            let inFlight = try await store.claimPushJobs(now: now, lease: 60_000, limit: 10)
            #expect(inFlight.map(\.job.deviceID) == ["d4"])
            #expect(
                try await store.recordRoute(
                    PushRoute(messageID: 1, replacing: .nothing, jobs: [Self.alert(device: "d2")], now: now + 1), app: app.id))
            #expect(try await store.offlineCount(of: "bob", app: app.id) == 2)
            #expect(try await store.message(1, app: app.id) == text(1, from: "alice", to: "bob"))

            let result = try await store.recall(Self.recall(1, noticeID: 100, at: now + 10), app: app.id)
            #expect(result?.withdrawals == 2)
            #expect(result?.notices.map(\.username).sorted() == ["alice", "bob"])
            #expect(result?.notices.allSatisfy { $0.originDevice == Delivery.noticeOrigin && $0.message.recall?.messageID == 1 } == true)
            // Gone from the store and every inbox, the notice in its place; it does not count as received.
            #expect(try await store.message(1, app: app.id) == nil)
            let inbox = try await store.inbox(of: "bob", app: app.id, after: 0, limit: 10)
            #expect(inbox.map(\.message.id) == [2, 100])
            #expect(inbox.last?.message.recall == RecallNotice(recalling: text(1, from: "alice", to: "bob"), by: "alice", at: now + 10))
            #expect(try await store.inbox(of: "alice", app: app.id, after: 0, limit: 10).map(\.message.id) == [100])
            #expect(try await store.offlineCount(of: "bob", app: app.id) == 1)
            #expect(try await store.offlineStatus(of: 1, for: "bob", app: app.id) == nil)
            #expect(try await store.pendingRoutes(before: Int64.max, limit: 10).isEmpty)
            // The pushes: sent stays sent; on its way, waiting and online-skipped end `recalled`; d1 and d4 get a withdrawal
            // carrying bob's badge without the recalled message.
            let records = try await store.pushJobs(app: app.id, username: "bob", messageID: 1, limit: 10)
            let alerts = records.filter { $0.job.pushType == .alert }.sorted { $0.job.deviceID < $1.job.deviceID }
            #expect(alerts.map(\.job.deviceID) == ["d1", "d2", "d3", "d4"])
            #expect(alerts.map(\.status) == [.sent, .skipped, .skipped, .skipped])
            #expect(alerts.dropFirst().allSatisfy { $0.lastReason == StoredJobReason.recalled.rawValue })
            let withdrawals = records.filter { $0.job.pushType == .background }
            #expect(withdrawals.map(\.job.deviceID).sorted() == ["d1", "d4"])
            #expect(withdrawals.allSatisfy { $0.status == .pending && $0.job.deviceToken == "t-\($0.job.deviceID)" })
            #expect(withdrawals.first?.job.payload == #"{"aps":{"content-available":1},"beacon":{"recalled":["1"],"badge":1}}"#)
            // The worker that held d4 can no longer record it as sent.
            #expect(
                try await store.recordPushAttempts(
                    inFlight.map {
                        PushAttemptOutcome(jobID: $0.id, claimToken: $0.claimToken, status: .sent, httpStatus: 200, reason: nil)
                    },
                    now: now + 20) == 0)
            #expect(try await store.bindingHolds(for: inFlight[0]) == false)
            // Only the withdrawals are due now.
            let due = try await store.claimPushJobs(now: now + 20, lease: 1000, limit: 10)
            #expect(due.map(\.job.pushType) == [.background, .background])

            // A second recall finds nothing and changes nothing; so does one of a message never stored.
            #expect(try await store.recall(Self.recall(1, noticeID: 101, at: now + 30), app: app.id) == nil)
            #expect(try await store.recall(Self.recall(7, noticeID: 102, at: now + 30), app: app.id) == nil)
            #expect(try await store.recall(Self.recall(UInt64(Int64.max) + 1, noticeID: 103, at: now + 30), app: app.id) == nil)
            #expect(try await store.inbox(of: "bob", app: app.id, after: 0, limit: 10).map(\.message.id) == [2, 100])
        }
    }

    @Test(arguments: StoreKind.available)
    func aRecallKeepsTheBadgeTrueAndReadWithdrawalsAndIsNotSupersededByOne(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            try await makeUsers(store, app, ["alice", "bob"])
            try await store.bind(
                PushBinding(username: "bob", deviceID: "d1", notifier: "ios", deviceToken: "t-d1", boundAt: 1), app: app.id)
            for id in UInt64(1)...3 {
                _ = try await store.append(
                    [NewMessage(message: text(id, from: "alice", to: "bob"), deliveries: [Delivery(username: "bob")], routesPushes: true)],
                    app: app.id, receipt: nil)
            }
            // bob's phone reports a badge of 5 counting all three; message 1 was pushed; message 3's push was tried once and
            // its answer lost (it waits for a retry).
            try await store.reportBadge(of: "bob", app: app.id, value: 5)
            for (id, outcome) in [(UInt64(1), PushJobStatus.sent), (3, .pending)] {
                #expect(
                    try await store.recordRoute(
                        PushRoute(messageID: id, replacing: .pendingRoute(), jobs: [Self.alert(device: "d1")], now: now), app: app.id))
                let claimed = try await store.claimPushJobs(now: now, lease: 1000, limit: 10)
                try await store.recordPushAttempts(
                    claimed.map {
                        PushAttemptOutcome(
                            jobID: $0.id, claimToken: $0.claimToken, status: outcome, httpStatus: nil, reason: nil,
                            nextAttemptAt: now + 60_000)
                    }, now: now)
            }
            // The laptop read up to message 1: the phone's read withdrawal waits under message 1's id.
            let alice = ConversationID(chatType: .chat, key: "alice")
            _ = try await store.markRead("bob", app: app.id, conversation: alice, upTo: 1, readingDevice: "laptop", now: now)
            let read = NewPushJob(
                username: "bob", deviceID: "d1", notifier: "ios", deviceToken: "t-d1", topic: "t", pushType: .background,
                priority: .considerate, expiration: 0, collapseID: nil, apnsID: UUID(), payload: #"{"beacon":{"read":[]}}"#)
            try await store.queueWithdrawals([read], messageID: 1, readVersion: 1, app: app.id, spacing: 3000, now: now + 5000)
            #expect(try await store.badge(of: "bob", app: app.id) == 4)
            func background() async throws -> [PushJob] {
                try await store.pushJobs(app: app.id, matching: PushJobFilter(username: "bob"), limit: 20).filter {
                    $0.job.pushType == .background
                }
            }

            // Message 2 is recalled, unread and counted in the reported badge: the badge loses it.
            #expect(try await store.recall(Self.recall(2, noticeID: 100, at: now + 10), app: app.id)?.withdrawals == 0)
            #expect(try await store.badge(of: "bob", app: app.id) == 3)
            // Message 1, read already: the badge stays; the read's withdrawal stored under its id is no push of it, and stays.
            #expect(try await store.recall(Self.recall(1, noticeID: 101, at: now + 20), app: app.id)?.withdrawals == 1)
            #expect(try await store.badge(of: "bob", app: app.id) == 3)
            // Message 3: its tried push may have arrived, so it is withdrawn too, after the read's withdrawal (whose badge
            // still counts it).
            #expect(try await store.recall(Self.recall(3, noticeID: 102, at: now + 30), app: app.id)?.withdrawals == 1)
            #expect(try await store.badge(of: "bob", app: app.id) == 2)
            let queued = try await background()
            #expect(queued.map(\.status) == [.pending, .pending, .pending])
            let readJob = try #require(queued.first { $0.job.payload.contains("read") })
            let recalls = queued.filter { $0.job.payload.contains("recalled") }
            #expect(recalls.count == 2)
            #expect(recalls.allSatisfy { $0.nextAttemptAt > readJob.nextAttemptAt })
            #expect(recalls.map(\.job.payload).sorted().last == #"{"aps":{"content-available":1},"beacon":{"recalled":["3"],"badge":2}}"#)
            // A later read's withdrawal replaces the read's, not the recalls' (which name what no read does).
            try await store.queueWithdrawals([read], messageID: 1, readVersion: 2, app: app.id, spacing: 3000, now: now + 40)
            let after = try await background()
            #expect(after.filter { recalls.map(\.id).contains($0.id) }.allSatisfy { $0.status == .pending })
            #expect(after.first { $0.id == readJob.id }?.lastReason == StoredJobReason.superseded.rawValue)
        }
    }

    @Test(arguments: StoreKind.available)
    func theRecallLimitIsAnAppSetting(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            #expect(try await store.pushPolicy(app: app.id).recallLimitSeconds == PushPolicyRecord.defaultRecallLimitSeconds)
            var policy = try await store.pushPolicy(app: app.id)
            policy.recallLimitSeconds = 600
            try await store.savePushPolicy(policy, app: app.id)
            #expect(try await store.pushPolicy(app: app.id).recallLimitSeconds == 600)
        }
    }
}
