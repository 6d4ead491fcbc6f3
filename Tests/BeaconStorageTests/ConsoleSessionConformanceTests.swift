import BeaconCore
import BeaconStorage
import BeaconTesting
import Testing

/// Console sessions on every store kind: found until they expire, ended by sign-out, expired ones forgotten.
@Suite struct ConsoleSessionConformanceTests {
    @Test(arguments: StoreKind.available)
    func sessionsOpenUntilTheyExpireOrEnd(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            let session = ConsoleSession(digest: "d1", app: app.id, createdAt: now, expiresAt: now + 1000)
            try await store.createConsoleSession(session, now: now)
            #expect(try await store.consoleSession(digest: "d1", now: now + 1000) == session)
            #expect(try await store.consoleSession(digest: "d1", now: now + 1001) == nil)
            #expect(try await store.consoleSession(digest: "nope", now: now) == nil)
            // A digest is one session: a second one with it is refused.
            await #expect(throws: (any Error).self) { try await store.createConsoleSession(session, now: now) }

            // Signing out ends it; a second sign-out finds nothing.
            try await store.createConsoleSession(ConsoleSession(digest: "d2", app: app.id, createdAt: now, expiresAt: now + 5000), now: now)
            #expect(try await store.deleteConsoleSession(digest: "d2"))
            #expect(try await !store.deleteConsoleSession(digest: "d2"))
            #expect(try await store.consoleSession(digest: "d2", now: now) == nil)

            // A new session forgets the expired ones (d1's digest may be used again).
            try await store.createConsoleSession(
                ConsoleSession(digest: "d3", app: app.id, createdAt: now, expiresAt: now + 9000), now: now + 2000)
            #expect(try await !store.deleteConsoleSession(digest: "d1"))
            #expect(try await store.consoleSession(digest: "d3", now: now + 2000)?.expiresAt == now + 9000)
        }
    }
}

/// Listing users, as the console's user search and `GET /{org}/{app}/users` page through them.
@Suite struct UserListingConformanceTests {
    @Test(arguments: StoreKind.available)
    func usersArePagedInBytewiseOrderAndFoundByPrefix(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            let names = ["bob", "Bob", "alice", "bobby", "b_b", "carol", "bé"]
            _ = try await store.createUsers(names.map { NewUser(username: $0, passwordHash: "h") }, app: app.id, now: now)
            let other = try await store.createApp(
                AppKey(org: "acme", name: "other"), clientID: "i2", clientSecretHash: "h2", limits: .default, now: now)
            _ = try await store.createUsers([NewUser(username: "bob", passwordHash: "h")], app: other.id, now: now)

            let sorted = names.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
            #expect(try await store.users(app: app.id, after: nil, prefix: nil, limit: 100).map(\.username) == sorted)
            let first = try await store.users(app: app.id, after: nil, prefix: nil, limit: 3).map(\.username)
            #expect(first == Array(sorted.prefix(3)))
            #expect(
                try await store.users(app: app.id, after: first.last, prefix: nil, limit: 100).map(\.username) == Array(sorted.dropFirst(3))
            )
            // Prefixes are literal (no pattern characters) and case-sensitive.
            #expect(try await store.users(app: app.id, after: nil, prefix: "bo", limit: 100).map(\.username) == ["bob", "bobby"])
            #expect(try await store.users(app: app.id, after: nil, prefix: "b_", limit: 100).map(\.username) == ["b_b"])
            #expect(try await store.users(app: app.id, after: "bob", prefix: "bo", limit: 100).map(\.username) == ["bobby"])
            #expect(try await store.users(app: app.id, after: nil, prefix: "z", limit: 100).isEmpty)
            #expect(try await store.users(app: app.id, after: nil, prefix: nil, limit: 0).isEmpty)
        }
    }
}

/// The console's overview figures.
@Suite struct AppActivityConformanceTests {
    private static func job(_ device: String, skip: String? = nil) -> NewPushJob {
        NewPushJob(
            username: "bob", deviceID: device, notifier: "ios", deviceToken: "t-\(device)", topic: "t", pushType: .alert,
            priority: .immediate,
            expiration: 0, collapseID: nil, apnsID: fixedAPNsID(device), payload: #"{"aps":{}}"#, skipReason: skip)
    }

    @Test(arguments: StoreKind.available)
    func activityCountsUsersMessagesAndPushOutcomesSinceAMoment(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            try await makeUsers(store, app, ["alice", "bob"])
            // Real, time-ordered ids: messages are counted by id.
            for time in [now - 10_000, now, now + 5] {
                let id = MessageIDGenerator.firstID(atOrAfter: time) + 7
                _ = try await store.append(
                    [
                        NewMessage(
                            message: text(id, from: "alice", to: "bob", at: time), deliveries: [Delivery(username: "bob")],
                            routesPushes: true)
                    ],
                    app: app.id, receipt: nil)
                #expect(
                    try await store.recordRoute(
                        PushRoute(
                            messageID: id, replacing: .pendingRoute(), jobs: [Self.job("phone"), Self.job("pad", skip: "dnd")], now: time),
                        app: app.id))
            }
            let activity = try await store.activity(app: app.id, since: now)
            #expect(activity.users == 2)
            #expect(activity.messages == 2)
            #expect(
                activity.pushes == [
                    AppActivity.Outcome(status: "pending", reason: "", count: 2),
                    AppActivity.Outcome(status: "skipped", reason: "dnd", count: 2),
                ])
            #expect(try await store.activity(app: app.id, since: now + 6) == AppActivity(users: 2, messages: 0, pushes: []))
        }
    }
}
