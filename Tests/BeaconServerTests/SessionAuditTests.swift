import BeaconCore
import BeaconStorage
import BeaconTesting
import Logging
import Synchronization
import Testing

@testable import BeaconServer

/// `SessionAudit` checks the tokens of a node's busy sessions against their users' rows in one round: a token that holds
/// is marked with the round's start, one that no longer does has its session closed, on either engine.
@Suite struct SessionAuditTests {
    static let now: Int64 = 1_800_000_000_000

    @Test(arguments: StoreKind.available)
    func aRoundMarksTheTokensThatHoldAndClosesTheOthers(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await store.createApp(
                AppKey(org: "acme", name: "chat"), clientID: "id", clientSecretHash: "hash", limits: .default, now: Self.now)
            let created = try await store.createUsers(
                ["alice", "bob", "carol", "dave", "erin"].map { NewUser(username: $0, passwordHash: "h") }, app: app.id, now: Self.now)
            let uuid = Dictionary(uniqueKeysWithValues: created.map { ($0.username, $0.uuid) })
            #expect(try await store.deleteUser("bob", app: app.id, now: Self.now))  // deleted
            #expect(try await store.deleteUser("carol", app: app.id, now: Self.now))  // deleted, then created again
            _ = try await store.createUsers([NewUser(username: "carol", passwordHash: "h")], app: app.id, now: Self.now)
            try await store.revokeTokens(of: "dave", app: app.id, before: Self.now + 1)  // revoked after the token was issued

            let audit = SessionAudit(store: store, clock: { Self.now + 10 }, logger: Logger(label: "test"))
            let closed = Mutex<Set<String>>([])
            // One key object per session, kept alive as the outbox is by a real session.
            let sessions = [
                ("alice", Self.now + 60_000), ("bob", Self.now + 60_000), ("carol", Self.now + 60_000), ("dave", Self.now + 60_000),
                ("erin", Self.now + 10),  // expired at the audit's clock
            ].map { username, expiresAt in
                (
                    key: Key(), username: username,
                    credential: SessionCredential(
                        app: app.id, username: username, uuid: uuid[username] ?? "", issuedAt: Self.now, expiresAt: expiresAt)
                )
            }
            for session in sessions {
                audit.watch(ObjectIdentifier(session.key), session.credential) { _ = closed.withLock { $0.insert(session.username) } }
                #expect(audit.verifiedAt(ObjectIdentifier(session.key)) == nil)  // no round yet
            }
            let beforeRound = ContinuousClock.now
            await audit.round()

            #expect(closed.withLock { $0 } == ["bob", "carol", "dave", "erin"])
            let alice = try #require(audit.verifiedAt(ObjectIdentifier(sessions[0].key)))
            #expect(alice >= beforeRound)
            for session in sessions.dropFirst() { #expect(audit.verifiedAt(ObjectIdentifier(session.key)) == nil) }
            // A forgotten session is not read, marked or closed again.
            audit.forget(ObjectIdentifier(sessions[0].key))
            #expect(try await store.deleteUser("alice", app: app.id, now: Self.now))
            await audit.round()
            #expect(audit.verifiedAt(ObjectIdentifier(sessions[0].key)) == nil)
            #expect(!closed.withLock { $0.contains("alice") })
            withExtendedLifetime(sessions) {}
        }
    }

    private final class Key: Sendable {}
}
