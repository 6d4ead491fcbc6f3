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
}
