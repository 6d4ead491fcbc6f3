import BeaconCore
import BeaconStorage
import BeaconTesting
import Testing

/// Rotating an app's client secret on every store kind: the new hash, the instant before which app tokens are refused and
/// the end of the app's console sessions, together; another app untouched.
@Suite struct AppCredentialsConformanceTests {
    @Test(arguments: StoreKind.available)
    func rotatingTheSecretRevokesAppTokensAndEndsTheAppsConsoleSessions(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            #expect(app.tokensValidAfter == 0)
            let other = try await store.createApp(
                AppKey(org: "acme", name: "other"), clientID: "i2", clientSecretHash: "h2", limits: .default, now: now)
            for (digest, owner) in [("a1", app.id), ("a2", app.id), ("o1", other.id)] {
                try await store.createConsoleSession(
                    ConsoleSession(digest: digest, app: owner, createdAt: now, expiresAt: now + 10_000), now: now)
            }

            let rotated = try #require(try await store.rotateClientSecret(app: app.id, newSecretHash: "new-hash", now: now + 5))
            #expect(rotated.clientSecretHash == "new-hash")
            #expect(rotated.tokensValidAfter == now + 5)
            #expect(
                rotated.clientID == app.clientID && rotated.key == app.key && rotated.limits == app.limits
                    && rotated.createdAt == app.createdAt)
            #expect(try await store.app(id: app.id) == rotated)
            #expect(try await store.app(AppKey(org: "acme", name: "chat")) == rotated)
            #expect(try await store.allApps().first { $0.id == app.id } == rotated)
            #expect(try await store.consoleSession(digest: "a1", now: now) == nil)
            #expect(try await store.consoleSession(digest: "a2", now: now) == nil)
            // Another app keeps its secret and its sessions.
            #expect(try await store.app(id: other.id) == other)
            #expect(try await store.consoleSession(digest: "o1", now: now)?.app == other.id)

            // The instant never moves back (a CLI whose clock is behind the last rotation's).
            let again = try #require(try await store.rotateClientSecret(app: app.id, newSecretHash: "newer", now: now))
            #expect(again.clientSecretHash == "newer" && again.tokensValidAfter == now + 5)
            // No such app: nothing changes.
            #expect(try await store.rotateClientSecret(app: 987_654, newSecretHash: "x", now: now + 9) == nil)
            #expect(try await store.app(id: other.id) == other)

            // `rotate-key` ends every app's sessions.
            #expect(try await store.deleteAllConsoleSessions() == 1)
            #expect(try await store.consoleSession(digest: "o1", now: now) == nil)
            #expect(try await store.deleteAllConsoleSessions() == 0)
        }
    }

    @Test(arguments: StoreKind.available)
    func aTencentIdentityIsStoredFoundByItsSDKAppIDAndUniqueToOneApp(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            #expect(app.tencent == nil)
            let other = try await store.createApp(
                AppKey(org: "acme", name: "other"), clientID: "i2", clientSecretHash: "h2", limits: .default, now: now)
            let identity = TencentIdentity(sdkAppID: 1_400_000_123, sealedKey: [1, 2, 3, 0, 255], adminIdentifier: "boss")
            let updated = try #require(try await store.setTencentIdentity(identity, app: app.id))
            #expect(updated.tencent == identity && updated.clientSecretHash == app.clientSecretHash)
            #expect(try await store.app(tencentAppID: 1_400_000_123) == updated)
            #expect(try await store.app(id: app.id)?.tencent == identity)
            #expect(try await store.app(tencentAppID: 1_400_000_124) == nil)
            // Another app cannot take the SDKAppID; the first keeps it.
            await #expect(throws: BeaconError.self) {
                try await store.setTencentIdentity(TencentIdentity(sdkAppID: 1_400_000_123, sealedKey: [9]), app: other.id)
            }
            #expect(try await store.app(id: other.id)?.tencent == nil)
            // Replacing it (a rotated key) keeps it findable; a rotated client secret keeps it.
            let rotatedKey = TencentIdentity(sdkAppID: 1_400_000_123, sealedKey: [4, 5], adminIdentifier: "boss")
            #expect(try await store.setTencentIdentity(rotatedKey, app: app.id)?.tencent == rotatedKey)
            #expect(try await store.rotateClientSecret(app: app.id, newSecretHash: "h3", now: now + 1)?.tencent == rotatedKey)
            #expect(try await store.setTencentIdentity(identity, app: 987_654) == nil)
        }
    }
}
