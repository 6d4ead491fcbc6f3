import BeaconCore
import BeaconStorage
import BeaconTesting
import Foundation
import GRDB
import Logging
import Testing

@testable import BeaconPostgres
@testable import BeaconSQLite

/// The push side of the storage contract on every engine: configurations, bindings, the route and the job queue.
@Suite struct PushQueueConformanceTests {
    @Test(arguments: StoreKind.available)
    func pushConfigurationsAreSavedReplacedAndDeleted(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store, pushConfig: false)
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
        return try await store.recordRoute(PushRoute(messageID: id, replacing: .pendingRoute(), jobs: jobs, now: now), app: app.id)
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
            let route = PushRoute(messageID: 7, replacing: .pendingRoute(), jobs: [Self.job("bob", skip: "no_binding")], now: now)
            #expect(try await store.recordRoute(route, app: app.id))
            #expect(try await !store.recordRoute(route, app: app.id))  // decided once
            #expect(try await store.pushJobs(app: app.id, username: "bob", messageID: 7, limit: 10).count == 1)
            #expect(try await store.pendingRoutes(before: now + 1, limit: 10).isEmpty)
            // Recorders racing (the sweep and the send's own routing): one records, its jobs once.
            for id: UInt64 in 8...15 {
                _ = try await store.append(
                    [NewMessage(message: text(id, from: "alice", to: "bob"), deliveries: [Delivery(username: "bob")], routesPushes: true)],
                    app: app.id, receipt: nil)
                // Skipped jobs (PostgreSQL: one statement) and one awaiting its badge (a transaction).
                let job = id.isMultiple(of: 2) ? Self.job("bob", skip: "online") : Self.job("bob")
                let racing = PushRoute(messageID: id, replacing: .pendingRoute(), jobs: [job], now: now)
                let recorded = try await withThrowingTaskGroup(of: Bool.self) { group in
                    for _ in 0..<4 { group.addTask { try await store.recordRoute(racing, app: app.id) } }
                    return try await group.reduce(into: [Bool]()) { $0.append($1) }
                }
                #expect(recorded.filter { $0 }.count == 1)
                #expect(try await store.pushJobs(app: app.id, username: "bob", messageID: id, limit: 10).count == 1)
            }
        }
    }

    /// Creates `members` and stores message 7 from the first to the others, with a pending route.
    private static func storeGroupMessage(_ store: any BeaconStore, _ app: AppRecord, members: [String]) async throws {
        try await makeUsers(store, app, members)
        _ = try await store.append(
            [
                NewMessage(
                    message: text(7, from: members[0], to: members[1]), deliveries: members.dropFirst().map { Delivery(username: $0) },
                    routesPushes: true)
            ],
            app: app.id, receipt: nil)
    }

    @Test(arguments: StoreKind.available)
    func aRouteRecordedInPartsMovesItsProgressOnceAPart(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            let members = ["alice", "bob", "carol", "dave"]
            try await Self.storeGroupMessage(store, app, members: members)
            func record(after: String?, through: String?, _ jobs: [NewPushJob]) async throws -> Bool {
                try await store.recordRoute(
                    PushRoute(messageID: 7, replacing: .pendingRoute(after: after, through: through), jobs: jobs, now: now), app: app.id)
            }
            // A part recorded by someone else, or one that does not start where the route stands, records nothing.
            #expect(try await !record(after: "bob", through: "carol", [Self.job("carol")]))
            #expect(try await record(after: nil, through: "bob", [Self.job("bob", skip: "online")]))
            #expect(try await !record(after: nil, through: "bob", [Self.job("bob", skip: "online")]))
            #expect(try await !record(after: nil, through: nil, [Self.job("bob")]))
            // The sweep finds the route where it stands.
            let pending = try await store.pendingRoutes(before: now + 1, limit: 10)
            #expect(pending.map(\.routedThrough) == ["bob"])
            #expect(pending.first.map { RouteOrder.remaining($0.recipients, after: $0.routedThrough) } == ["carol", "dave"])
            // A part whose jobs await their badge (a transaction on PostgreSQL), then the last part, which removes the route.
            #expect(try await record(after: "bob", through: "carol", [Self.job("carol")]))
            #expect(try await !record(after: "bob", through: "carol", [Self.job("carol")]))
            #expect(try await record(after: "carol", through: nil, [Self.job("dave")]))
            #expect(try await !record(after: "carol", through: nil, [Self.job("dave")]))
            #expect(try await store.pendingRoutes(before: now + 1, limit: 10).isEmpty)
            let jobs = try await store.pushJobs(app: app.id, username: nil, messageID: 7, limit: 10)
            #expect(jobs.map(\.job.username).sorted() == ["bob", "carol", "dave"])
            #expect(jobs.filter { $0.job.username == "carol" }.map(\.job.payload) == [#"{"aps":{"alert":"x","badge":1}}"#])
        }
    }

    /// How many push contents the store holds (`PushContents`): what the contract does not show.
    private static func storedContents(_ store: any BeaconStore) async throws -> Int {
        if let sqlite = store as? SQLiteStore {
            return try await sqlite.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM push_contents") ?? -1 }
        }
        let postgres = try #require(store as? PostgresStore)
        return try await postgres.rows("SELECT COUNT(*) AS n FROM push_contents").first?["n"].decode(Int.self) ?? -1
    }

    @Test(arguments: StoreKind.available)
    func aPayloadSharedByAPartsReceiversIsStoredOnceAndEachJobGetsItsOwnBack(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            let members = ["alice", "bob", "carol", #"da"ve"#, "erin", "fred"]
            try await Self.storeGroupMessage(store, app, members: members)
            // bob has read nothing, carol twice as much to read: their badges differ.
            _ = try await store.append(text(8, from: "alice", to: "carol"), app: app.id, deliveries: [Delivery(username: "carol")])
            let hi = #"{"aps":{"alert":"hi"},"t":"#
            let yo = #"{"aps":{"alert":"yo!"},"t":"#
            func job(_ name: String, device: String = "d1", head: String = hi, badged: Bool) -> NewPushJob {
                var job = PushContentsTests.job(name, head: head, badged: badged)
                job.deviceID = device
                job.deviceToken = "\(name)-\(device)"
                return job
            }
            for (name, device) in [("bob", "d1"), ("bob", "d2"), ("carol", "d1"), ("carol", "d2"), (#"da"ve"#, "d1"), ("erin", "d1")] {
                try await store.bind(
                    PushBinding(username: name, deviceID: device, notifier: "ios", deviceToken: "\(name)-\(device)", boundAt: 1),
                    app: app.id)
            }
            // The first part's jobs await their badge (a transaction on PostgreSQL), in two renderings whose badges go at
            // different offsets; the last part's need none (one statement); erin's payload is hers alone and fred is
            // skipped: both are stored whole.
            let first = [
                job("bob", badged: true), job("bob", device: "d2", head: yo, badged: true), job("carol", badged: true),
                job("carol", device: "d2", head: yo, badged: true),
            ]
            let last = [job(#"da"ve"#, badged: false), job("erin", badged: false), job("fred", badged: false)]
            var lone = last[1]
            lone.payload = #"{"aps":{"alert":"yours"},"t":"erin"}"#
            var skipped = last[2]
            skipped.skipReason = "dnd"
            skipped.payload = ""
            let parts: [(after: String?, through: String?, jobs: [NewPushJob])] = [
                (nil, "carol", first), ("carol", nil, [last[0], job("dave2", badged: false), lone, skipped]),
            ]
            for (after, through, jobs) in parts {
                #expect(
                    try await store.recordRoute(
                        PushRoute(messageID: 7, replacing: .pendingRoute(after: after, through: through), jobs: jobs, now: now), app: app.id
                    ))
            }
            // dave2 does not hold the message: no job, and the second part's content is still stored once, for dave.
            #expect(try await Self.storedContents(store) == 3)
            let expected: [String: String] = [
                "bob/d1": first[0].payload(withBadge: 1), "bob/d2": first[1].payload(withBadge: 1),
                "carol/d1": first[2].payload(withBadge: 2),
                "carol/d2": first[3].payload(withBadge: 2), #"da"ve/d1"#: last[0].payload, "erin/d1": lone.payload, "fred/d1": "",
            ]
            #expect(expected["carol/d2"] == #"{"aps":{"alert":"yo!","badge":2},"t":"carol"}"#)
            let records = try await store.pushJobs(app: app.id, username: nil, messageID: 7, limit: 10)
            func payloads(_ jobs: [PushJob]) -> [String: String] {
                Dictionary(jobs.map { ("\($0.job.username)/\($0.job.deviceID)", $0.job.payload) }, uniquingKeysWith: { first, _ in first })
            }
            #expect(payloads(records) == expected)
            let claimed = try await store.claimPushJobs(now: now, lease: 1000, limit: 10)
            #expect(payloads(claimed) == expected.filter { $0.key != "fred/d1" })
            // A content goes once the last job that refers to it goes: deleting bob and carol leaves the first part's.
            _ = try await store.recordPushAttempts(
                claimed.map { PushAttemptOutcome(jobID: $0.id, claimToken: $0.claimToken, status: .sent, httpStatus: 200, reason: nil) },
                now: now)
            #expect(try await store.deleteUser("bob", app: app.id, now: now))
            #expect(try await Self.storedContents(store) == 3)
            let carols = try await store.pushJobs(app: app.id, username: "carol", messageID: 7, limit: 10)
            #expect(carols.map(\.job.payload).sorted() == [expected["carol/d1"] ?? "", expected["carol/d2"] ?? ""])
            #expect(try await store.deleteUser("carol", app: app.id, now: now))
            #expect(try await Self.storedContents(store) == 1)
            // Retention takes the rest with their jobs.
            _ = try await store.enforceRetention(app, now: now + 8 * 24 * 3600 * 1000)
            #expect(try await store.pushJobs(app: app.id, username: nil, messageID: 7, limit: 10).isEmpty)
            #expect(try await Self.storedContents(store) == 0)
        }
    }

    @Test(arguments: StoreKind.available)
    func racingPartsOfARouteRecordOneAndAPartMovingOnRestartsItsAge(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            let members = ["alice", "bob", "carol", "dave", "erin"]
            try await Self.storeGroupMessage(store, app, members: members)
            // Four recorders of a part, each ending it elsewhere, recorded later than the message was stored: first with
            // badged jobs (a transaction on PostgreSQL), then with jobs that need none (one statement).
            var progress: String?
            for (round, badged) in [true, false].enumerated() {
                let ends = ["bob", "carol", "dave", "erin"].map { "\($0)\(round)" }
                let recorded = try await withThrowingTaskGroup(of: String?.self) { group in
                    for end in ends {
                        let job = badged ? Self.job("erin") : Self.job("erin", skip: "online")
                        let route = PushRoute(
                            messageID: 7, replacing: .pendingRoute(after: progress, through: end), jobs: [job], now: now + 100)
                        group.addTask { try await store.recordRoute(route, app: app.id) ? end : nil }
                    }
                    return try await group.reduce(into: [String]()) { if let end = $1 { $0.append(end) } }
                }
                #expect(recorded.count == 1)
                #expect(try await store.pendingRoutes(before: now + 101, limit: 10).map(\.routedThrough) == recorded)
                // The route moved on at `now + 100`: not one the sweep takes before then.
                #expect(try await store.pendingRoutes(before: now + 100, limit: 10).isEmpty)
                progress = recorded.first
            }
            #expect(try await store.pushJobs(app: app.id, username: nil, messageID: 7, limit: 10).count == 2)
        }
    }

    @Test(arguments: StoreKind.available)
    func aPartRecordsNothingForAReceiverDeletedAndCreatedAgain(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            try await makeUsers(store, app, ["alice", "bob", "carol"])
            _ = try await store.append(
                [
                    NewMessage(
                        message: text(7, from: "alice", to: "bob"), deliveries: [Delivery(username: "bob"), Delivery(username: "carol")],
                        routesPushes: true)
                ],
                app: app.id, receipt: nil)
            // carol is deleted after the message was stored, and another carol is created before her part is recorded.
            #expect(try await store.deleteUser("carol", app: app.id, now: now))
            try await makeUsers(store, app, ["carol"])
            for (badged, id) in [(true, UInt64(7)), (false, UInt64(8))] {
                if id == 8 {
                    _ = try await store.append(
                        [
                            NewMessage(
                                message: text(8, from: "alice", to: "bob"), deliveries: [Delivery(username: "bob")], routesPushes: true)
                        ],
                        app: app.id, receipt: nil)
                }
                let jobs = badged ? [Self.job("bob"), Self.job("carol")] : [Self.job("bob", skip: "dnd"), Self.job("carol", skip: "dnd")]
                #expect(
                    try await store.recordRoute(PushRoute(messageID: id, replacing: .pendingRoute(), jobs: jobs, now: now), app: app.id))
                #expect(try await store.pushJobs(app: app.id, username: nil, messageID: id, limit: 10).map(\.job.username) == ["bob"])
            }
        }
    }

    @Test func aRouteOrdersItsRecipientsByTheirBytesEachOnce() {
        let names = ["b", "B", "a", "é", "e", "b", "Z", "ab"]
        #expect(RouteOrder.remaining(names, after: nil) == ["B", "Z", "a", "ab", "b", "e", "é"])
        #expect(RouteOrder.remaining(names, after: "a") == ["ab", "b", "e", "é"])
        #expect(RouteOrder.remaining(names, after: "é").isEmpty)
        // As the engines compare text: NFC "é" (C3 A9) after "e\u{301}" (65 CC 81), which Swift's `<` holds equal.
        #expect(RouteOrder.remaining(["\u{E9}", "e\u{301}"], after: nil) == ["e\u{301}", "\u{E9}"])
    }

    @Test(arguments: StoreKind.available)
    func anAppWithoutAPushConfigurationGetsNoPendingRoutes(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store, pushConfig: false)
            try await makeUsers(store, app, ["alice", "bob"])
            let new = [NewMessage(message: text(7, from: "alice", to: "bob"), deliveries: [Delivery(username: "bob")], routesPushes: true)]
            #expect(
                try await store.append(new, app: app.id, receipt: nil)
                    == .stored(try await store.inbox(of: "bob", app: app.id, after: 0, limit: 1), routed: [], inputs: nil))
            #expect(try await store.pendingRoutes(before: now + 1, limit: 10).isEmpty)
            // With one, the next message is routed (and one that does not route pushes is not).
            try await store.savePushConfig(
                PushConfigRecord(
                    appID: app.id, name: "ios", kind: .p8, environment: "development", bundleID: "com.x", voip: false, keyID: "K",
                    teamID: "T", sealedSecret: [1], expiresAt: nil, createdAt: now))
            let two = [
                NewMessage(message: text(8, from: "alice", to: "bob"), deliveries: [Delivery(username: "bob")], routesPushes: true),
                NewMessage(message: text(9, from: "alice", to: "bob"), deliveries: [Delivery(username: "bob")]),
            ]
            guard case .stored(_, let routed, _) = try await store.append(two, app: app.id, receipt: nil) else {
                Issue.record("expected stored")
                return
            }
            #expect(routed == [8])
            #expect(try await store.pendingRoutes(before: now + 1, limit: 10).map(\.message.id) == [8])
        }
    }

    @Test(arguments: StoreKind.available)
    func aRequiredReceiverThatDoesNotExistStoresNothing(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            try await makeUsers(store, app, ["alice", "bob"])
            let receipt = SendReceipt(scope: "rest:app", reference: "r1", now: now)
            let new = [
                NewMessage(message: text(1, from: "alice", to: "bob"), deliveries: [Delivery(username: "bob", required: true)]),
                NewMessage(message: text(2, from: "alice", to: "zed"), deliveries: [Delivery(username: "zed", required: true)]),
                NewMessage(message: text(3, from: "alice", to: "amy"), deliveries: [Delivery(username: "amy", required: true)]),
            ]
            // The first missing, in the messages' order, is named; nothing is kept, the receipt neither.
            await #expect(throws: BeaconError(.userNotFound, "user zed does not exist")) {
                try await store.append(new, app: app.id, receipt: receipt)
            }
            #expect(try await store.inbox(of: "bob", app: app.id, after: 0, limit: 10).isEmpty)
            #expect(try await store.sentMessages(scope: "rest:app", reference: "r1", app: app.id) == nil)
            #expect(try await store.pendingRoutes(before: now + 1, limit: 10).isEmpty)
            // Not required (a user's send): skipped, the rest stored.
            let relaxed = [
                NewMessage(
                    message: text(4, from: "alice", to: "zed"), deliveries: [Delivery(username: "zed"), Delivery(username: "alice")])
            ]
            guard case .stored(let entries, _, _) = try await store.append(relaxed, app: app.id, receipt: receipt) else {
                Issue.record("expected stored")
                return
            }
            #expect(entries.map(\.username) == ["alice"])
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
