import BeaconCore
import BeaconStorage
import Foundation

/// The credentials of a freshly created app. The secret exists only here: the store keeps its hash.
public struct AppCredentials: Sendable, Codable {
    public var org: String
    public var app: String
    public var clientID: String
    public var clientSecret: String
    /// Tencent Cloud IM's SDKAppID and secret key (`TencentIdentities`), when the app has them and they were made now.
    public var sdkAppID: Int64?
    public var sdkSecretKey: String?
    /// Why the app got no Tencent identity (or kept its old key) though one was asked for: the client credentials stand,
    /// and `beacon app tencent` can give it one. Not part of the JSON.
    public var tencentFailure: String?

    enum CodingKeys: String, CodingKey {
        case org, app, clientID = "client_id", clientSecret = "client_secret", sdkAppID = "sdkappid", sdkSecretKey = "sdk_secret_key"
    }
}

/// Creating apps (the CLI, tests and demos share this).
public enum AppProvisioning {
    /// Creates app `key` with a random client id and, unless `secret` is given, a random client secret. With `box` (the
    /// server's secret key), the app also gets a Tencent identity: a random SDKAppID and secret key (`TencentIdentities`).
    public static func create(
        _ key: AppKey, in store: any BeaconStore, box: SecretBox? = nil, limits: OfflineLimits = .default,
        now: Int64 = Int64(Date().timeIntervalSince1970 * 1000), secret: String? = nil
    ) async throws -> AppCredentials {
        // Tencent's door, `/v4/{service}/{command}`, answers every path that begins with `/v4/`.
        guard key.org != "v4" else { throw BeaconError.illegal("the organization v4 is taken by Tencent's REST door (/v4/...)") }
        let clientID = "YXA6" + Credentials.randomToken(bytes: 16)
        let secret = secret ?? "YXA6" + Credentials.randomToken(bytes: 32)
        let app = try await store.createApp(
            key, clientID: clientID, clientSecretHash: Credentials.hashSecret(secret), limits: limits, now: now)
        var credentials = AppCredentials(org: key.org, app: key.name, clientID: clientID, clientSecret: secret)
        if let box { _ = await credentials.addTencentIdentity(of: app, in: store, box: box) }
        return credentials
    }

    /// Gives app `key` a new random client secret (its client id stays) and ends what the old one opened: app tokens
    /// issued until now are refused and the app's console sessions end (`BeaconStore.rotateClientSecret`). Throws
    /// `organization_application_not_found` when there is no such app.
    ///
    /// Through the store, so it works beside running servers: the node that rotates forgets its cached copy at once
    /// (`API.rotateClientSecret`); other nodes, and a server beside the CLI, may accept an old app token for at most
    /// `AppCache.lifetime` more. The old secret obtains nothing from then on (`client_credentials` reads the app afresh).
    ///
    /// With `box`, the app's Tencent secret key is replaced too (its SDKAppID and admin stay; an app without a Tencent
    /// identity gets one): UserSigs signed with the old key are refused from then on.
    public static func rotateSecret(
        _ key: AppKey, in store: any BeaconStore, box: SecretBox? = nil, now: Int64 = Int64(Date().timeIntervalSince1970 * 1000)
    ) async throws -> AppCredentials {
        guard let app = try await store.app(key) else { throw BeaconError(.appNotFound, "application \(key) does not exist") }
        let (credentials, _) = try await rotateSecret(of: app, in: store, box: box, now: now)
        return credentials
    }

    /// `rotateSecret(_:in:box:now:)` for a stored app; also the app as it now is.
    static func rotateSecret(of app: AppRecord, in store: any BeaconStore, box: SecretBox?, now: Int64) async throws -> (
        AppCredentials, AppRecord
    ) {
        let secret = "YXA6" + Credentials.randomToken(bytes: 32)
        guard var rotated = try await store.rotateClientSecret(app: app.id, newSecretHash: Credentials.hashSecret(secret), now: now) else {
            throw BeaconError(.appNotFound, "application \(app.key) does not exist")
        }
        var credentials = AppCredentials(org: app.key.org, app: app.key.name, clientID: rotated.clientID, clientSecret: secret)
        if let box, let updated = await credentials.addTencentIdentity(of: rotated, in: store, box: box) { rotated = updated }
        return (credentials, rotated)
    }
}

extension AppCredentials {
    /// Gives the app a new Tencent secret key (its SDKAppID and administrator kept; new ones when it has none) and adds it
    /// to these credentials; the app as it now is. A failure does not undo the client secret just made, which must still be
    /// shown: it is noted in `tencentFailure`, and the app keeps the Tencent identity it had.
    fileprivate mutating func addTencentIdentity(of app: AppRecord, in store: any BeaconStore, box: SecretBox) async -> AppRecord? {
        do {
            let (tencent, updated) = try await TencentIdentities.assign(
                to: app, in: store, box: box, sdkAppID: app.tencent?.sdkAppID,
                admin: app.tencent?.adminIdentifier ?? TencentIdentity.defaultAdmin)
            sdkAppID = tencent.sdkAppID
            sdkSecretKey = tencent.secretKey
            return updated
        } catch {
            tencentFailure = "\(error)"
            return nil
        }
    }
}
