import BeaconCore

/// How to reach APNs: each app's push configurations, and which device token of which user each one pushes to.
public protocol PushConfigStore: Sendable {
    /// Creates or replaces the app's configuration named `config.name`.
    func savePushConfig(_ config: PushConfigRecord) async throws
    func pushConfig(_ name: String, app: Int64) async throws -> PushConfigRecord?
    func pushConfigs(app: Int64) async throws -> [PushConfigRecord]
    /// Deletes the configuration; false if there was none.
    func deletePushConfig(_ name: String, app: Int64) async throws -> Bool

    /// Binds `binding.deviceToken` to the device and notifier, removing the token from anyone else in the app
    /// (one device token belongs to one user at a time). With `holder` (a user's uuid), only while the name still belongs
    /// to that user: false, binding nothing, once they were deleted (a bind that raced the deletion must not bind the
    /// old phone to a new user of the name).
    func bind(_ binding: PushBinding, app: Int64, holder: String?) async throws -> Bool
    /// Removes bindings of the user's device: one notifier's, or all of them when `notifier` is nil.
    func unbind(username: String, deviceID: String, notifier: String?, app: Int64) async throws
    /// Removes every binding of the user (kick, logout everywhere).
    func unbindAll(username: String, app: Int64) async throws
    /// The bindings of many users (absent: none).
    func bindings(of usernames: [String], app: Int64) async throws -> [String: [PushBinding]]
    /// The bindings whose alert token is `deviceToken`: one user's device (a token belongs to one device at a time), under
    /// each push configuration it was bound with.
    func bindings(holding deviceToken: String, app: Int64) async throws -> [PushBinding]
    /// Removes the binding for this token and notifier unless it was made at or after `unlessBoundSince` (ms), recording a
    /// `binding_removed` webhook event (at `now`) for each. Returns whether one was removed.
    func removeBinding(deviceToken: String, notifier: String, app: Int64, unlessBoundSince: Int64?, now: Int64) async throws -> Bool
}

extension PushConfigStore {
    /// Binds whoever holds the name now.
    public func bind(_ binding: PushBinding, app: Int64) async throws {
        _ = try await bind(binding, app: app, holder: nil)
    }

    /// The user's bindings.
    public func bindings(of username: String, app: Int64) async throws -> [PushBinding] {
        try await bindings(of: [username], app: app)[username] ?? []
    }
}

/// A push configuration ("certificate" in Easemob's console): how to reach APNs for one app build.
/// `secret` is sealed by the server (AES-GCM) before it reaches the store.
public struct PushConfigRecord: Sendable, Hashable {
    public enum Kind: String, Sendable, Codable { case p12, p8 }

    public var appID: Int64
    /// The `notifier_name` devices bind with (the SDK's `apnsCertName`).
    public var name: String
    public var kind: Kind
    /// `development` or `production`.
    public var environment: String
    public var bundleID: String
    public var voip: Bool
    public var keyID: String?
    public var teamID: String?
    /// Encrypted credentials: the `.p8` PEM, or the `.p12` bytes and password.
    public var sealedSecret: [UInt8]
    /// The `.p12` certificate's expiry (ms), if any.
    public var expiresAt: Int64?
    public var createdAt: Int64

    public init(
        appID: Int64, name: String, kind: Kind, environment: String, bundleID: String, voip: Bool, keyID: String?, teamID: String?,
        sealedSecret: [UInt8], expiresAt: Int64?, createdAt: Int64
    ) {
        self.appID = appID
        self.name = name
        self.kind = kind
        self.environment = environment
        self.bundleID = bundleID
        self.voip = voip
        self.keyID = keyID
        self.teamID = teamID
        self.sealedSecret = sealedSecret
        self.expiresAt = expiresAt
        self.createdAt = createdAt
    }
}

/// A device's push binding: which token to push to through which configuration.
public struct PushBinding: Sendable, Hashable, Codable {
    public var username: String
    public var deviceID: String
    public var notifier: String
    /// The alert token (`didRegisterForRemoteNotificationsWithDeviceToken`).
    public var deviceToken: String
    /// The PushKit VoIP token of the same installation, if the app registered one: VoIP pushes go there.
    public var voipToken: String?
    public var boundAt: Int64

    public init(username: String, deviceID: String, notifier: String, deviceToken: String, voipToken: String? = nil, boundAt: Int64) {
        self.username = username
        self.deviceID = deviceID
        self.notifier = notifier
        self.deviceToken = deviceToken
        self.voipToken = voipToken
        self.boundAt = boundAt
    }
}
