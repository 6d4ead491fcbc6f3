import BeaconCore
import BeaconStorage
import Foundation

/// The credentials of a freshly created app. The secret exists only here: the store keeps its hash.
public struct AppCredentials: Sendable, Codable {
    public var org: String
    public var app: String
    public var clientID: String
    public var clientSecret: String

    enum CodingKeys: String, CodingKey {
        case org, app, clientID = "client_id", clientSecret = "client_secret"
    }
}

/// Creating apps (the CLI, tests and demos share this).
public enum AppProvisioning {
    /// Creates app `key` with a random client id and, unless `secret` is given, a random client secret.
    public static func create(
        _ key: AppKey, in store: any BeaconStore, limits: OfflineLimits = .default,
        now: Int64 = Int64(Date().timeIntervalSince1970 * 1000), secret: String? = nil
    ) async throws -> AppCredentials {
        let clientID = "YXA6" + Credentials.randomToken(bytes: 16)
        let secret = secret ?? "YXA6" + Credentials.randomToken(bytes: 32)
        _ = try await store.createApp(key, clientID: clientID, clientSecretHash: Credentials.hashSecret(secret), limits: limits, now: now)
        return AppCredentials(org: key.org, app: key.name, clientID: clientID, clientSecret: secret)
    }

    /// Gives app `key` a new random client secret (its client id stays) and ends what the old one opened: app tokens
    /// issued until now are refused and the app's console sessions end (`BeaconStore.rotateClientSecret`). Throws
    /// `organization_application_not_found` when there is no such app.
    ///
    /// Through the store, so it works beside running servers: the node that rotates forgets its cached copy at once
    /// (`API.rotateClientSecret`); other nodes, and a server beside the CLI, may accept an old app token for at most
    /// `AppCache.lifetime` more. The old secret obtains nothing from then on (`client_credentials` reads the app afresh).
    public static func rotateSecret(
        _ key: AppKey, in store: any BeaconStore, now: Int64 = Int64(Date().timeIntervalSince1970 * 1000)
    ) async throws -> AppCredentials {
        guard let app = try await store.app(key) else { throw BeaconError(.appNotFound, "application \(key) does not exist") }
        let (credentials, _) = try await rotateSecret(of: app, in: store, now: now)
        return credentials
    }

    /// `rotateSecret(_:in:now:)` for a stored app; also the app as it now is.
    static func rotateSecret(of app: AppRecord, in store: any BeaconStore, now: Int64) async throws -> (AppCredentials, AppRecord) {
        let secret = "YXA6" + Credentials.randomToken(bytes: 32)
        guard let rotated = try await store.rotateClientSecret(app: app.id, newSecretHash: Credentials.hashSecret(secret), now: now) else {
            throw BeaconError(.appNotFound, "application \(app.key) does not exist")
        }
        return (AppCredentials(org: app.key.org, app: app.key.name, clientID: rotated.clientID, clientSecret: secret), rotated)
    }
}
