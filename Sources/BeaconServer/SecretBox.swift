import BeaconStorage
import Crypto
import Foundation
import Logging

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

    /// The key in `directory/secret.key`, if there is one. A file that exists but cannot be read is an error, never
    /// "no key": a new key written over it would lock every stored secret away.
    public static func existing(inDataDirectory directory: String) throws -> SecretBox? {
        let path = keyFile(inDataDirectory: directory)
        guard FileManager.default.fileExists(atPath: path) else { return nil }
        return try read(keyFile: path)
    }

    /// The key in a file (base64, surrounding white space ignored).
    public static func read(keyFile path: String) throws -> SecretBox {
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw BeaconConfigurationError(
                "cannot read the secret key in \(path) (\(error.localizedDescription)); check its owner and mode")
        }
        return try SecretBox(base64: text.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// Writes a new random key to `path` (created 0600, never over an existing file, flushed to disk) and returns it.
    public static func create(keyFile path: String) throws -> SecretBox {
        let key = SymmetricKey(size: .bits256)
        try writeKeyFile(path, text: key.withUnsafeBytes { Data($0).base64EncodedString() }, exclusive: true)
        return SecretBox(key: key)
    }

    /// Writes `text` to `path` 0600 and flushes it: `exclusive` refuses an existing file; otherwise the file is
    /// replaced in one step (a rename, then the directory flushed), keeping the owner of the file it replaces.
    public static func writeKeyFile(_ path: String, text: String, exclusive: Bool) throws {
        let target = exclusive ? path : path + ".new"
        if !exclusive { unlink(target) }
        let descriptor = Glibc.open(target, O_CREAT | O_EXCL | O_WRONLY, 0o600)
        guard descriptor >= 0 else { throw BeaconConfigurationError("cannot create \(target): \(String(cString: strerror(errno)))") }
        defer { close(descriptor) }
        var previous = stat()
        if !exclusive, stat(path, &previous) == 0, fchown(descriptor, previous.st_uid, previous.st_gid) != 0 {
            throw BeaconConfigurationError("cannot give \(target) the owner of \(path): \(String(cString: strerror(errno)))")
        }
        let bytes = Array(text.utf8)
        guard write(descriptor, bytes, bytes.count) == bytes.count, fsync(descriptor) == 0 else {
            throw BeaconConfigurationError("cannot write \(target): \(String(cString: strerror(errno)))")
        }
        if !exclusive {
            guard rename(target, path) == 0 else {
                throw BeaconConfigurationError("cannot replace \(path): \(String(cString: strerror(errno)))")
            }
        }
        let directory = Glibc.open(
            (path as NSString).deletingLastPathComponent.isEmpty ? "." : (path as NSString).deletingLastPathComponent, O_RDONLY)
        if directory >= 0 {
            fsync(directory)
            close(directory)
        }
    }

    /// The key in `directory/secret.key`, created (0600) if missing.
    public static func fromDataDirectory(_ directory: String, logger: Logger) throws -> SecretBox {
        if let existing = try existing(inDataDirectory: directory) { return existing }
        let path = keyFile(inDataDirectory: directory)
        try PrivateDirectory.create(directory)
        let box = try create(keyFile: path)
        logger.warning("no secret key configured (BEACON_SECRET_KEY): generated one at \(path); keep it safe and back it up")
        return box
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
    /// Throws `WrongSecretKey` unless this key opens every stored secret (what `serve` checks at start): a command about to
    /// seal with it checks first that it is the server's.
    public func checkOpensStoredSecrets(in store: any BeaconStore) async throws {
        try await PushConfigs.checkOpens(store: store, box: self)
    }

    /// Seals every stored secret — push credentials, webhook secrets, Tencent secret keys — with `new` instead of this key (`beacon
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
                guard let sealed = try resealed(config.sealedSecret, app: app, what: "push configuration '\(config.name)'") else {
                    continue
                }
                config.sealedSecret = sealed
                try await store.savePushConfig(config)
                count += 1
            }
            if var tencent = app.tencent, let sealed = try resealed(tencent.sealedKey, app: app, what: "the Tencent secret key") {
                tencent.sealedKey = sealed
                _ = try await store.setTencentIdentity(tencent, app: app.id)
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
