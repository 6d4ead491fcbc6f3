import BeaconCore
import BeaconStorage
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
            try await store.createConsoleSession(ConsoleSession(digest: "d3", app: app.id, createdAt: now, expiresAt: now + 9000), now: now + 2000)
            #expect(try await !store.deleteConsoleSession(digest: "d1"))
            #expect(try await store.consoleSession(digest: "d3", now: now + 2000)?.expiresAt == now + 9000)
        }
    }
}
