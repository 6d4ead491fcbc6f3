import BeaconAPNs
import BeaconCore
import BeaconStorage
import Crypto
import Foundation

/// What `beacon serve --demo` set up.
public struct DemoSetup: Sendable {
    public var app: AppKey
    public var appToken: String
    public var sender: String
    public var receiver: String
    public var password: String
    public var notifier: String
    public var deviceToken: String
    /// The app's client credentials, to sign in to the console (nil: the demo app was created by an older version with
    /// a random secret, printed then).
    public var clientID: String
    public var clientSecret: String?
}

extension BeaconServer {
    /// Seeds app `demo/chat`: users `alice` and `bob` (password `demo`), a token-auth push configuration
    /// (`demo-apns`, a fresh P-256 key) and a bound simulated iPhone for bob, who stays offline.
    /// Idempotent: an existing demo app is reused and its configuration and binding renewed. The app's client secret is
    /// derived from the secret key, so every start can print it (for the console) without storing it.
    public func seedDemo() async throws -> DemoSetup {
        guard let pushConfigs, let box = configuration.secretBox else {
            throw BeaconConfigurationError("the demo needs push (a secret key)")
        }
        let key = AppKey(org: "demo", name: "chat")
        let now = configuration.clock()
        let secret = "YXA6" + box.derivedKey(for: "demo client secret").withUnsafeBytes { Array($0) }.lowercaseHex
        if try await store.app(key) == nil {
            _ = try await AppProvisioning.create(key, in: store, box: box, now: now, secret: secret)
        }
        guard let app = try await store.app(key) else { throw BeaconConfigurationError("demo app missing") }
        let setup = DemoSetup(
            app: key, appToken: issueToken(app: app), sender: "alice", receiver: "bob", password: "demo", notifier: "demo-apns",
            deviceToken: String(repeating: "0d", count: 32), clientID: app.clientID,
            clientSecret: Credentials.hashSecret(secret) == app.clientSecretHash ? secret : nil)
        let existing = try await store.existingUsers([setup.sender, setup.receiver], app: app.id)
        let missing = [setup.sender, setup.receiver].filter { !existing.contains($0) }
        if !missing.isEmpty {
            _ = try await store.createUsers(
                try missing.map { NewUser(username: $0, passwordHash: try Credentials.hashPassword(setup.password, rounds: 10_000)) },
                app: app.id, now: now)
        }
        let upload = PushConfigUpload(
            name: setup.notifier, kind: .p8, file: P256.Signing.PrivateKey().pemRepresentation, password: nil, keyID: "DEMOKEY001",
            teamID: "DEMOTEAM01", environment: .development, bundleID: "com.example.beacon.demo", voip: false)
        let record = try pushConfigs.validate(upload, app: app.id, now: now)
        try await store.savePushConfig(record)
        try configuration.onPushConfiguration?(try pushConfigs.trust(for: record))
        try await store.bind(
            PushBinding(
                username: setup.receiver, deviceID: "bob-iphone", notifier: setup.notifier, deviceToken: setup.deviceToken, boundAt: now),
            app: app.id)
        return setup
    }
}
