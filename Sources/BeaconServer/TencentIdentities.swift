import BeaconCore
import BeaconStorage

/// Apps' Tencent Cloud IM identities (`TencentIdentity`): made or imported, sealed with the server's secret key, opened to
/// check a UserSig.
public enum TencentIdentities {
    /// SDKAppIDs Beacon hands out: in Tencent's range (≥ 1400000000) and below 2^31, as Tencent's own are.
    static let sdkAppIDs: ClosedRange<Int64> = 1_400_000_000...2_147_483_647

    /// An identity as made, with its secret key in the clear (shown once).
    public struct Made: Sendable {
        public var sdkAppID: Int64
        public var secretKey: String
        public var adminIdentifier: String
    }

    /// Gives `app` a Tencent identity and returns it with the app as it now is. `sdkAppID` nil: a random free one (tried
    /// again on a collision). `secretKey` nil: 32 random bytes as 64 lowercase hex digits, as Tencent's are.
    public static func assign(
        to app: AppRecord, in store: any BeaconStore, box: SecretBox, sdkAppID: Int64? = nil, secretKey: String? = nil,
        admin: String = TencentIdentity.defaultAdmin
    ) async throws -> (Made, AppRecord) {
        // Tencent's SDKAppIDs are 32-bit (and a UserSig's fields are read up to 2^40).
        if let sdkAppID, !(1...Int64(UInt32.max)).contains(sdkAppID) {
            throw BeaconError.illegal("the SDKAppID must be an integer from 1 to \(UInt32.max)")
        }
        let secretKey = secretKey ?? randomSecretKey()
        try validate(secretKey: secretKey)
        try Validation.validateUsername(admin)
        // The administrator is the backend: an account of that name would make a user's UserSig an administrator's.
        if try await store.user(admin, app: app.id) != nil {
            throw BeaconError(.duplicate, "\(admin) is an account of \(app.key): choose another administrator identifier")
        }
        let sealed = try box.seal(Array(secretKey.utf8))
        for attempt in 1...5 {
            let id = sdkAppID ?? Int64.random(in: sdkAppIDs)
            do {
                guard
                    let updated = try await store.setTencentIdentity(
                        TencentIdentity(sdkAppID: id, sealedKey: sealed, adminIdentifier: admin), app: app.id)
                else { throw BeaconError(.appNotFound, "application \(app.key) does not exist") }
                return (Made(sdkAppID: id, secretKey: secretKey, adminIdentifier: admin), updated)
            } catch let error as BeaconError where error.code == .duplicate && sdkAppID == nil && attempt < 5 {
                continue
            }
        }
        throw BeaconError(.internalError, "no free SDKAppID found")
    }

    /// A secret key that Tencent's generators accept: 1-128 printable ASCII characters, no space (Tencent's are 64 hex
    /// digits). The HMAC is keyed with the text itself, so it is kept exactly as given.
    static func validate(secretKey: String) throws {
        guard (1...128).contains(secretKey.utf8.count), secretKey.utf8.allSatisfy({ (0x21...0x7e).contains($0) }) else {
            throw BeaconError.illegal("the secret key must be 1-128 printable ASCII characters without spaces")
        }
    }

    static func randomSecretKey() -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<32).map { _ in UInt8.random(in: .min ... .max, using: &generator) }.lowercaseHex
    }

    /// The app's secret key in the clear.
    static func secretKey(of identity: TencentIdentity, box: SecretBox) throws -> String {
        String(decoding: try box.open(identity.sealedKey), as: UTF8.self)
    }
}
