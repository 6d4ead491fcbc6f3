import BeaconCore
import BeaconStorage
import BeaconTesting
import Foundation
import Testing

/// A deleted user is a stranger to the next holder of the name: nothing the store keeps by name reaches them.
@Suite struct IdentityConformanceTests {
    private static func job(_ username: String) -> NewPushJob {
        NewPushJob(
            username: username, deviceID: "d1", notifier: "ios", deviceToken: "aa", topic: "t", pushType: .alert, priority: .immediate,
            expiration: 0,
            collapseID: nil, apnsID: UUID(), payload: #"{"aps":{"alert":"x"}}"#, badgeOffset: 19)
    }

    /// `users(named:)` gives each named user that exists as `user(_:app:)` does, the holder of the name now, of that app only.
    @Test(arguments: StoreKind.available)
    func usersByNameAreTheNamesCurrentHolders(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            let other = try await store.createApp(
                AppKey(org: "acme", name: "other"), clientID: "other", clientSecretHash: "hash", limits: .default, now: now)
            try await makeUsers(store, app, ["alice", "bob", "carol"])
            try await makeUsers(store, other, ["dave"])
            #expect(try await store.deleteUser("bob", app: app.id, now: now))
            #expect(try await store.deleteUser("carol", app: app.id, now: now))
            try await makeUsers(store, app, ["carol"])
            try await store.revokeTokens(of: "alice", app: app.id, before: now + 5)
            // SQLite reads the names in chunks of 500: more than one.
            let names = ["alice", "bob", "carol", "dave", "alice"] + (0..<600).map { "ghost\($0)" }
            let found = try await store.users(named: names, app: app.id).sorted { $0.username < $1.username }
            var expected: [UserRecord] = []
            for name in ["alice", "carol"] { expected.append(try #require(try await store.user(name, app: app.id))) }
            #expect(found == expected)
            #expect(found.first?.tokensValidAfter == now + 5)
            #expect(try await store.users(named: [], app: app.id).isEmpty)
        }
    }

    @Test(arguments: StoreKind.available)
    func aDeletedUsersPushRecordsCursorsAndClaimsDoNotReachTheNextHolderOfTheName(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            try await makeUsers(store, app, ["alice", "bob"])
            let old = try #require(try await store.user("bob", app: app.id))
            try await store.bind(PushBinding(username: "bob", deviceID: "d1", notifier: "ios", deviceToken: "aa", boundAt: 1), app: app.id)
            _ = try await store.append(
                [NewMessage(message: text(1, from: "alice", to: "bob"), deliveries: [Delivery(username: "bob")], routesPushes: true)],
                app: app.id, receipt: nil)
            #expect(
                try await store.recordRoute(
                    PushRoute(messageID: 1, replacing: .pendingRoute(), jobs: [Self.job("bob")], now: now), app: app.id))
            let claimed = try #require(try await store.claimPushJobs(now: now, lease: 60_000, limit: 10).first)
            #expect(try await store.bindingHolds(for: claimed))

            #expect(try await store.deleteUser("bob", app: app.id, now: now))
            try await makeUsers(store, app, ["bob"])
            // The phone is bound again by the new bob while the old bob's push is still claimed: it is not his.
            try await store.bind(PushBinding(username: "bob", deviceID: "d1", notifier: "ios", deviceToken: "aa", boundAt: 2), app: app.id)
            #expect(try await !store.bindingHolds(for: claimed))
            #expect(try await store.pushJobs(app: app.id, username: "bob", messageID: nil, limit: 10).isEmpty)
            #expect(
                try await store.recordPushAttempts(
                    [PushAttemptOutcome(jobID: claimed.id, claimToken: claimed.claimToken, status: .sent, httpStatus: 200, reason: nil)],
                    now: now) == 0)
            #expect(try await store.pushJobs(app: app.id, username: "bob", messageID: nil, limit: 10).isEmpty)

            // An acknowledgement of the old bob's device, flushed late, is not written for the new bob.
            try await store.acknowledge(
                [DeviceCursor(app: app.id, username: "bob", userID: old.uuid, device: "old-phone", seq: 1)], now: now)
            #expect(try await store.devices(of: "bob", app: app.id).isEmpty)
            let new = try #require(try await store.user("bob", app: app.id))
            try await store.acknowledge([DeviceCursor(app: app.id, username: "bob", userID: new.uuid, device: "phone", seq: 0)], now: now)
            #expect(try await store.devices(of: "bob", app: app.id).map(\.deviceID) == ["phone"])
        }
    }

    /// Writes that raced the deletion write nothing for the next holder of the name: a bind made with the old user's uuid,
    /// and the push jobs of a route decided before the deletion and recorded after it.
    @Test(arguments: StoreKind.available)
    func writesThatRacedADeletionDoNotReachTheNextHolderOfTheName(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            try await makeUsers(store, app, ["alice", "bob"])
            let old = try #require(try await store.user("bob", app: app.id))
            let phone = PushBinding(username: "bob", deviceID: "d1", notifier: "ios", deviceToken: "aa", boundAt: 1)
            #expect(try await store.bind(phone, app: app.id, holder: old.uuid))
            _ = try await store.append(
                [NewMessage(message: text(1, from: "alice", to: "bob"), deliveries: [Delivery(username: "bob")], routesPushes: true)],
                app: app.id, receipt: nil)

            #expect(try await store.deleteUser("bob", app: app.id, now: now))
            #expect(try await !store.bind(phone, app: app.id, holder: old.uuid))
            #expect(
                try await store.recordRoute(
                    PushRoute(messageID: 1, replacing: .pendingRoute(), jobs: [Self.job("bob")], now: now), app: app.id))
            try await makeUsers(store, app, ["bob"])
            #expect(try await store.bindings(of: "bob", app: app.id).isEmpty)
            #expect(try await store.pushJobs(app: app.id, username: "bob", messageID: nil, limit: 10).isEmpty)
            #expect(try await store.claimPushJobs(now: now, lease: 60_000, limit: 10).isEmpty)
            let new = try #require(try await store.user("bob", app: app.id))
            #expect(try await store.bind(phone, app: app.id, holder: new.uuid))
            #expect(try await store.bindings(of: "bob", app: app.id).count == 1)
        }
    }

    /// A console sign-in whose secret was rotated between its check and its session creates no session.
    @Test(arguments: StoreKind.available)
    func aConsoleSessionIsCreatedOnlyWhileTheCheckedSecretIsCurrent(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            let session = ConsoleSession(digest: "d", app: app.id, createdAt: now, expiresAt: now + 10_000)
            #expect(try await !store.createConsoleSession(session, now: now, secretHash: "another"))
            #expect(try await store.consoleSession(digest: "d", now: now) == nil)
            #expect(try await store.createConsoleSession(session, now: now, secretHash: app.clientSecretHash))
            #expect(try await store.consoleSession(digest: "d", now: now) != nil)
        }
    }

    @Test(arguments: StoreKind.available)
    func aDeletedOwnersGroupsGoToTheirLongestStandingMemberOrAreDissolved(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            try await makeUsers(store, app, ["alice", "bob", "carol", "dave"])
            func group(_ id: String, members: [String]) async throws {
                try await store.createGroup(
                    GroupRecord(appID: app.id, id: id, name: id, description: "", owner: "alice", maxUsers: 200, createdAt: now),
                    members: members)
            }
            try await group("team", members: ["dave", "carol"])
            try await group("solo", members: [])
            // carol joined before dave: she is the longest-standing member, whatever the names' order.
            #expect(try await store.removeGroupMember("dave", group: "team", app: app.id))
            #expect(try await store.addGroupMember("dave", group: "team", app: app.id, now: now + 1))
            try await group("tie", members: ["dave", "bob"])

            #expect(try await store.deleteUser("alice", app: app.id, now: now + 2))
            #expect(try await store.group("team", app: app.id)?.owner == "carol")
            #expect(try await store.group("tie", app: app.id)?.owner == "bob")  // joined together: by name
            #expect(try await store.group("solo", app: app.id) == nil)
            #expect(try await store.groupMembers("team", app: app.id) == ["carol", "dave"])

            try await makeUsers(store, app, ["alice"])
            #expect(try await store.group("team", app: app.id)?.owner == "carol")
            #expect(try await !store.groupMembers("team", app: app.id).contains("alice"))
        }
    }
}
