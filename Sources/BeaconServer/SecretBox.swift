import Crypto
import Foundation
import Logging
import BeaconStorage

/// Seals push credentials at rest with AES-GCM. The key comes from configuration (32 bytes, base64); without one,
/// a key is generated in the data directory (mode 0600) and a warning is logged.
public struct SecretBox: Sendable {
    private let key: SymmetricKey

    public init(key: SymmetricKey) {
        self.key = key
    }

    /// A key from base64 text.
    public init(base64 text: String) throws {
        guard let data = Data(base64Encoded: text), data.count == 32 else {
            throw BeaconConfigurationError("the secret key must be 32 bytes, base64-encoded")
        }
        self.init(key: SymmetricKey(data: data))
    }

    /// The key in `directory/secret.key`, created (0600) if missing.
    public static func fromDataDirectory(_ directory: String, logger: Logger) throws -> SecretBox {
        let path = (directory as NSString).appendingPathComponent("secret.key")
        if let text = try? String(contentsOfFile: path, encoding: .utf8) {
            return try SecretBox(base64: text.trimmingCharacters(in: .whitespacesAndNewlines))
        }
        let key = SymmetricKey(size: .bits256)
        let text = key.withUnsafeBytes { Data($0).base64EncodedString() }
        try PrivateDirectory.create(directory)
        guard FileManager.default.createFile(atPath: path, contents: Data(text.utf8), attributes: [.posixPermissions: 0o600]) else {
            throw BeaconConfigurationError("could not write \(path)")
        }
        logger.warning("no secret key configured (BEACON_SECRET_KEY): generated one at \(path); keep it safe and back it up")
        return SecretBox(key: key)
    }

    /// A key for another purpose, derived from this one (HKDF-SHA256): nodes sharing the secret key share it, and it
    /// is never stored anywhere.
    public func derivedKey(for purpose: String) -> SymmetricKey {
        HKDF<SHA256>.deriveKey(inputKeyMaterial: key, info: Array("beacon \(purpose)".utf8), outputByteCount: 32)
    }

    public func seal(_ plaintext: [UInt8]) throws -> [UInt8] {
        guard let combined = try AES.GCM.seal(plaintext, using: key).combined else {
            throw BeaconConfigurationError("AES-GCM produced no combined box")
        }
        return [UInt8](combined)
    }

    public func open(_ sealed: [UInt8]) throws -> [UInt8] {
        [UInt8](try AES.GCM.open(AES.GCM.SealedBox(combined: sealed), using: key))
    }
}

/// A configuration value is unusable.
public struct BeaconConfigurationError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
