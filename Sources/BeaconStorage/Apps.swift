import BeaconCore

/// Apps (tenants), their credentials, and what the server keeps for itself (settings, migrations).
public protocol AppStore: Sendable {
    // MARK: Server-wide settings

    /// The value stored under `name`, storing `makeValue()` first if there is none (atomic across processes).
    func setting(_ name: String, orInsert makeValue: @Sendable () -> String) async throws -> String

    // MARK: Apps

    /// Creates an app; fails with `duplicate` if `key` exists.
    func createApp(_ key: AppKey, clientID: String, clientSecretHash: String, limits: OfflineLimits, now: Int64) async throws -> AppRecord
    func app(_ key: AppKey) async throws -> AppRecord?
    func app(id: Int64) async throws -> AppRecord?
    /// Replaces the app's client secret (its hash) and ends everything the old one opened, in one transaction: app
    /// tokens issued before `now` are refused from then on (`tokensValidAfter`, which never moves back) and every console
    /// session of the app is deleted. Returns the app as it now is, or nil when there is none.
    func rotateClientSecret(app: Int64, newSecretHash: String, now: Int64) async throws -> AppRecord?
    /// Gives the app its Tencent Cloud IM identity (`TencentIdentity`), replacing any it had. Returns the app as it now is,
    /// nil when there is none; fails with `duplicate` when another app has the SDKAppID.
    func setTencentIdentity(_ identity: TencentIdentity, app: Int64) async throws -> AppRecord?
    /// The app whose Tencent SDKAppID is `sdkAppID`.
    func app(tencentAppID sdkAppID: Int64) async throws -> AppRecord?
    /// The schema migrations this version knows that the database has not recorded as applied (`GET /ready`: a store
    /// that answers this is reachable and, with none pending, migrated).
    func pendingMigrations() async throws -> [String]
    func allApps() async throws -> [AppRecord]
}

/// A tenant as stored.
public struct AppRecord: Sendable, Hashable {
    public var id: Int64
    public var key: AppKey
    public var clientID: String
    /// SHA-256 of the client secret, hex. The secret itself is shown once and never stored.
    public var clientSecretHash: String
    public var limits: OfflineLimits
    public var createdAt: Int64
    /// App tokens issued before this instant (ms) are refused: set when the client secret is rotated
    /// (`BeaconStore.rotateClientSecret`). 0 for an app whose secret never was.
    public var tokensValidAfter: Int64
    /// Its Tencent Cloud IM identity, for Tencent's REST door and UserSig logins; nil until it is given one.
    public var tencent: TencentIdentity?

    public init(
        id: Int64, key: AppKey, clientID: String, clientSecretHash: String, limits: OfflineLimits, createdAt: Int64,
        tokensValidAfter: Int64 = 0, tencent: TencentIdentity? = nil
    ) {
        self.id = id
        self.key = key
        self.clientID = clientID
        self.clientSecretHash = clientSecretHash
        self.limits = limits
        self.createdAt = createdAt
        self.tokensValidAfter = tokensValidAfter
        self.tencent = tencent
    }
}

/// An app as Tencent Cloud IM knows it: its SDKAppID, the secret key its UserSigs are signed with, and the identifier
/// of its administrator (the only one that may call Tencent's REST door).
public struct TencentIdentity: Sendable, Hashable {
    /// Tencent's SDKAppID: unique in the database.
    public var sdkAppID: Int64
    /// The secret key, sealed with the server's secret key (it must be read back to check a UserSig's HMAC).
    public var sealedKey: [UInt8]
    public var adminIdentifier: String

    /// Tencent's default administrator.
    public static let defaultAdmin = "administrator"

    public init(sdkAppID: Int64, sealedKey: [UInt8], adminIdentifier: String = Self.defaultAdmin) {
        self.sdkAppID = sdkAppID
        self.sealedKey = sealedKey
        self.adminIdentifier = adminIdentifier
    }
}
