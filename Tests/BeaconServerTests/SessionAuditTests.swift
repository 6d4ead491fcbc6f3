import BeaconCore
import BeaconStorage
import BeaconTesting
import Logging
import Synchronization
import Testing

@testable import BeaconServer

/// `SessionAudit` checks the tokens of a node's busy sessions against their users' rows in one round: a token that holds
/// is marked with an instant before the read, one that no longer does has its session closed, on either engine.
@Suite struct SessionAuditTests {
    static let now: Int64 = 1_800_000_000_000

    @Test(arguments: StoreKind.available)
    func aRoundMarksTheTokensThatHoldAndClosesTheOthers(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            let created = try await store.createUsers(
                ["alice", "bob", "carol", "dave", "erin"].map { NewUser(username: $0, passwordHash: "h") }, app: app.id, now: Self.now)
            let uuid = Dictionary(uniqueKeysWithValues: created.map { ($0.username, $0.uuid) })
            #expect(try await store.deleteUser("bob", app: app.id, now: Self.now))  // deleted
            #expect(try await store.deleteUser("carol", app: app.id, now: Self.now))  // deleted, then created again
            _ = try await store.createUsers([NewUser(username: "carol", passwordHash: "h")], app: app.id, now: Self.now)
            try await store.revokeTokens(of: "dave", app: app.id, before: Self.now + 1)  // revoked after the token was issued
            // Another app's alice: its own row, whatever this app's says.
            let other = try await store.createApp(
                AppKey(org: "acme", name: "other"), clientID: "other", clientSecretHash: "h", limits: .default, now: Self.now)

            let reads = Reads(store)
            let audit = SessionAudit(store: reads, clock: { Self.now + 10 }, interval: .seconds(1), logger: Logger(label: "test"))
            let closed = Mutex<Set<String>>([])
            let sessions = [
                ("alice", app.id, Self.now + 60_000), ("bob", app.id, Self.now + 60_000), ("carol", app.id, Self.now + 60_000),
                ("dave", app.id, Self.now + 60_000),
                ("erin", app.id, Self.now + 10),  // expired at the audit's clock
                ("alice", other.id, Self.now + 60_000),  // no such user in that app
            ].map { username, appID, expiresAt in
                Session(
                    name: appID == app.id ? username : "other/\(username)",
                    credential: SessionCredential(
                        app: appID, username: username, uuid: uuid[username] ?? "", issuedAt: Self.now, expiresAt: expiresAt))
            }
            for session in sessions {
                audit.watch(ObjectIdentifier(session), session.credential) { _ = closed.withLock { $0.insert(session.name) } }
            }
            await audit.round()

            #expect(closed.withLock { $0 } == ["bob", "carol", "dave", "erin", "other/alice"])
            let mark = try #require(audit.verifiedAt(ObjectIdentifier(sessions[0])))
            // Never later than the read it stands for.
            let readsBegan = reads.began.withLock { $0 }
            #expect(readsBegan.count == 2)
            let aliceRead = try #require(readsBegan.first { $0.app == app.id })
            #expect(mark <= aliceRead.instant)
            for session in sessions.dropFirst() { #expect(audit.verifiedAt(ObjectIdentifier(session)) == nil) }
        }
    }

    /// A round whose read fails marks and closes nothing (the sessions check for themselves once their marks age); a
    /// session watched again with another token while its user was read is not marked with that read.
    @Test(arguments: StoreKind.available)
    func aFailedReadMarksNothingAndAReplacedSessionWaitsForTheNextRound(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            let alice = try #require(
                try await store.createUsers([NewUser(username: "alice", passwordHash: "h")], app: app.id, now: Self.now).first)
            let reads = Reads(store)
            let audit = SessionAudit(store: reads, clock: { Self.now }, interval: .seconds(1), logger: Logger(label: "test"))
            let first = SessionCredential(
                app: app.id, username: "alice", uuid: alice.uuid, issuedAt: Self.now, expiresAt: Self.now + 60_000)
            let session = Session(name: "alice", credential: first)
            let closed = Atomic<Int>(0)
            audit.watch(ObjectIdentifier(session), first) { closed.add(1, ordering: .relaxed) }

            reads.failing.withLock { $0 = true }
            await audit.round()
            #expect(audit.verifiedAt(ObjectIdentifier(session)) == nil && closed.load(ordering: .relaxed) == 0)

            reads.failing.withLock { $0 = false }
            var replacement = first
            replacement.issuedAt += 1
            let second = replacement
            reads.during.withLock { $0 = { audit.watch(ObjectIdentifier(session), second) { closed.add(1, ordering: .relaxed) } } }
            await audit.round()
            #expect(audit.verifiedAt(ObjectIdentifier(session)) == nil && closed.load(ordering: .relaxed) == 0)

            reads.during.withLock { $0 = nil }
            await audit.round()
            #expect(audit.verifiedAt(ObjectIdentifier(session)) != nil)
        }
    }

    /// A watched session's key object, kept alive by the test as a session's outbox is by the session.
    private final class Session: Sendable {
        let name: String
        let credential: SessionCredential
        init(name: String, credential: SessionCredential) {
            self.name = name
            self.credential = credential
        }
    }

    /// The store, its `users(named:)` reads timed, failed or interrupted on demand.
    private final class Reads: UserStore {
        let store: any BeaconStore
        /// When each read began, by app.
        let began = Mutex<[(app: Int64, instant: ContinuousClock.Instant)]>([])
        let failing = Mutex(false)
        let during = Mutex<(@Sendable () -> Void)?>(nil)

        init(_ store: any BeaconStore) { self.store = store }

        func users(named usernames: [String], app: Int64) async throws -> [UserRecord] {
            began.withLock { $0.append((app, .now)) }
            if failing.withLock({ $0 }) { throw BeaconError(.internalError, "the read failed") }
            let users = try await store.users(named: usernames, app: app)
            during.withLock { $0 }?()
            return users
        }

        func createUsers(_ users: [NewUser], app: Int64, now: Int64) async throws -> [UserRecord] {
            try await store.createUsers(users, app: app, now: now)
        }
        func user(_ username: String, app: Int64) async throws -> UserRecord? { try await store.user(username, app: app) }
        func users(app: Int64, after: String?, prefix: String?, limit: Int) async throws -> [UserRecord] {
            try await store.users(app: app, after: after, prefix: prefix, limit: limit)
        }
        func existingUsers(_ usernames: [String], app: Int64) async throws -> Set<String> {
            try await store.existingUsers(usernames, app: app)
        }
        func updateUser(_ username: String, app: Int64, changes: UserChanges, now: Int64) async throws -> UserRecord? {
            try await store.updateUser(username, app: app, changes: changes, now: now)
        }
        func revokeTokens(of username: String, app: Int64, before instant: Int64) async throws {
            try await store.revokeTokens(of: username, app: app, before: instant)
        }
        func deleteUser(_ username: String, app: Int64, now: Int64) async throws -> Bool {
            try await store.deleteUser(username, app: app, now: now)
        }
    }

    private func makeApp(_ store: any BeaconStore) async throws -> AppRecord {
        try await store.createApp(AppKey(org: "acme", name: "chat"), clientID: "id", clientSecretHash: "h", limits: .default, now: Self.now)
    }
}
