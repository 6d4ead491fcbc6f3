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

    /// The key file of a data directory.
    public static func keyFile(inDataDirectory directory: String) -> String {
        (directory as NSString).appendingPathComponent("secret.key")
    }

    /// The key in `directory/secret.key`, if there is one.
    public static func existing(inDataDirectory directory: String) throws -> SecretBox? {
        guard let text = try? String(contentsOfFile: keyFile(inDataDirectory: directory), encoding: .utf8) else { return nil }
        return try SecretBox(base64: text.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// The key in `directory/secret.key`, created (0600) if missing.
    public static func fromDataDirectory(_ directory: String, logger: Logger) throws -> SecretBox {
        if let existing = try existing(inDataDirectory: directory) { return existing }
        let path = keyFile(inDataDirectory: directory)
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

extension SecretBox {
    /// Seals every stored secret — push credentials and webhook secrets — with `new` instead of this key (`beacon
    /// rotate-key`). A secret `new` already opens is left as it is, so a rotation cut short can simply run again; one
    /// that neither key opens stops it, naming it. Re-setting a webhook resets its failure count; its waiting events stay.
    /// Returns how many secrets were sealed again.
    public func resealStoredSecrets(in store: any BeaconStore, with new: SecretBox, now: Int64) async throws -> Int {
        /// The secret sealed with `new`, or nil when it already is.
        func resealed(_ sealed: [UInt8], app: AppRecord, what: String) throws -> [UInt8]? {
            if (try? new.open(sealed)) != nil { return nil }
            guard let plaintext = try? self.open(sealed) else { throw WrongSecretKey(app: "\(app.key)", sealed: what) }
            return try new.seal(plaintext)
        }
        var count = 0
        for app in try await store.allApps() {
            for var config in try await store.pushConfigs(app: app.id) {
                guard let sealed = try resealed(config.sealedSecret, app: app, what: "push configuration '\(config.name)'") else { continue }
                config.sealedSecret = sealed
                try await store.savePushConfig(config)
                count += 1
            }
            if var webhook = try await store.webhook(app: app.id)?.config,
                let sealed = try resealed(webhook.sealedSecret, app: app, what: "the push-result webhook")
            {
                webhook.sealedSecret = sealed
                _ = try await store.setWebhook(webhook, app: app.id, now: now)
                count += 1
            }
        }
        return count
    }
}

/// A configuration value is unusable.
public struct BeaconConfigurationError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
