import BeaconAPNs
import BeaconCore
import BeaconStorage
import Crypto
import Foundation
import NIOSSL
import Synchronization
import X509

/// `POST /{org}/{app}/push/certificates`.
struct PushConfigUpload: Decodable {
    var name: String
    var kind: PushConfigRecord.Kind
    /// The `.p12` (base64) or `.p8` (PEM text or base64).
    var file: String
    var password: String?
    var keyID: String?
    var teamID: String?
    var environment: APNsEnvironment
    var bundleID: String
    var voip: Bool?

    enum CodingKeys: String, CodingKey {
        case name, kind, file, password, keyID = "key_id", teamID = "team_id", environment, bundleID = "bundle_id", voip
    }
}

/// What the API shows of a configuration: never the secret.
struct PushConfigView: Codable, Sendable {
    var name: String
    var kind: String
    var environment: String
    var bundleID: String
    var voip: Bool
    var keyID: String?
    var teamID: String?
    /// ISO 8601, `.p12` only.
    var expires: String?
    var created: Int64

    enum CodingKeys: String, CodingKey {
        case name, kind, environment, bundleID = "bundle_id", voip, keyID = "key_id", teamID = "team_id", expires, created
    }

    init(_ record: PushConfigRecord) {
        name = record.name
        kind = record.kind.rawValue
        environment = record.environment
        bundleID = record.bundleID
        voip = record.voip
        keyID = record.keyID
        teamID = record.teamID
        expires = record.expiresAt.map { ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: Double($0) / 1000)) }
        created = record.createdAt
    }
}

/// The sealed part of a configuration.
private struct PushSecret: Codable {
    var p8: String?
    var p12: String?
    var password: String?
}

/// The secret key cannot open a stored secret: it is not the key the secrets were sealed with.
public struct WrongSecretKey: Error, CustomStringConvertible {
    public var app: String
    /// What could not be opened: `push configuration 'NAME'`, `the push-result webhook` or `the Tencent secret key`.
    public var sealed: String
    public var description: String {
        "the secret key cannot open \(sealed) of app \(app): every node, and every command beside them, must run with the "
            + "key it was sealed with (BEACON_SECRET_KEY, or DATA_DIR/secret.key), or what it seals fails for every device or request"
    }
}

/// Validates and stores push configurations, and turns them into APNs clients.
final class PushConfigs: Sendable {
    let store: any BeaconStore
    let box: SecretBox
    private let routing: Mutex<APNsRouting>
    private let clients = Mutex<[String: (createdAt: Int64, client: APNsClient)]>([:])

    init(store: any BeaconStore, box: SecretBox, routing: APNsRouting) {
        self.store = store
        self.box = box
        self.routing = Mutex(routing)
    }

    /// Throws `WrongSecretKey` unless `box` opens every stored secret — push configurations, webhook secrets, Tencent secret
    /// keys (checked at start, before serving).
    static func checkOpens(store: any BeaconStore, box: SecretBox) async throws {
        for app in try await store.allApps() {
            for config in try await store.pushConfigs(app: app.id) {
                do {
                    _ = try box.open(config.sealedSecret)
                } catch {
                    throw WrongSecretKey(app: "\(app.key)", sealed: "push configuration '\(config.name)'")
                }
            }
            if let webhook = try await store.webhook(app: app.id) {
                do {
                    _ = try box.open(webhook.config.sealedSecret)
                } catch {
                    throw WrongSecretKey(app: "\(app.key)", sealed: "the push-result webhook")
                }
            }
            if let tencent = app.tencent, (try? box.open(tencent.sealedKey)) == nil {
                throw WrongSecretKey(app: "\(app.key)", sealed: "the Tencent secret key")
            }
        }
    }

    /// Points future pushes elsewhere (the in-process simulator learns its port only once it runs).
    func setRouting(_ routing: APNsRouting) async {
        self.routing.withLock { $0 = routing }
        await shutdown()
    }

    /// Checks an upload as APNs would need it; returns the record to store.
    func validate(_ upload: PushConfigUpload, app: Int64, now: Int64) throws -> PushConfigRecord {
        guard (1...64).contains(upload.name.utf8.count),
            upload.name.utf8.allSatisfy({
                $0.isASCIIAlphanumeric || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: ".")
            })
        else { throw BeaconError.illegal("name must be 1-64 of letters, digits, '_', '-' or '.'") }
        // An Apple bundle id: letters, digits, '-' and '.'; it becomes the apns-topic header.
        guard (1...155).contains(upload.bundleID.utf8.count),
            upload.bundleID.utf8.allSatisfy({ $0.isASCIIAlphanumeric || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: ".") })
        else { throw BeaconError.illegal("bundle_id must be 1-155 of letters, digits, '-' or '.'") }
        var secret = PushSecret()
        var expiresAt: Int64?
        switch upload.kind {
        case .p8:
            guard let keyID = upload.keyID, !keyID.isEmpty, let teamID = upload.teamID, !teamID.isEmpty else {
                throw BeaconError.illegal("a p8 configuration needs key_id and team_id")
            }
            let pem =
                upload.file.contains("BEGIN")
                ? upload.file : Data(base64Encoded: upload.file).map { String(decoding: $0, as: UTF8.self) } ?? ""
            do {
                _ = try APNsSigningKey(teamID: teamID, keyID: keyID, pem: pem)
            } catch {
                throw BeaconError(.invalidP8Key, "the p8 file is not a P-256 private key in PEM (PKCS#8) form")
            }
            secret.p8 = pem
        case .p12:
            guard let bytes = Data(base64Encoded: upload.file, options: .ignoreUnknownCharacters), !bytes.isEmpty else {
                throw BeaconError(.invalidP12File, "file must be the base64 of a .p12 file")
            }
            let bundle: NIOSSLPKCS12Bundle
            do {
                bundle = try NIOSSLPKCS12Bundle(buffer: [UInt8](bytes), passphrase: Array((upload.password ?? "").utf8))
            } catch {
                let text = "\(error)".uppercased()
                if text.contains("PASSWORD") || text.contains("DECRYPT") || text.contains("MAC") {
                    throw BeaconError(.invalidP12Password, "the p12 password is wrong")
                }
                throw BeaconError(.invalidP12File, "the p12 file cannot be read")
            }
            if let leaf = bundle.certificateChain.first, let certificate = try? Certificate(derEncoded: leaf.toDERBytes()) {
                expiresAt = Int64(certificate.notValidAfter.timeIntervalSince1970 * 1000)
                if certificate.notValidAfter.timeIntervalSince1970 * 1000 < Double(now) {
                    throw BeaconError(
                        .certificateExpired, "the certificate expired on \(ISO8601DateFormatter().string(from: certificate.notValidAfter))")
                }
            }
            secret.p12 = bytes.base64EncodedString()
            secret.password = upload.password ?? ""
        }
        return PushConfigRecord(
            appID: app, name: upload.name, kind: upload.kind, environment: upload.environment.rawValue, bundleID: upload.bundleID,
            voip: upload.voip ?? false, keyID: upload.kind == .p8 ? upload.keyID : nil, teamID: upload.kind == .p8 ? upload.teamID : nil,
            sealedSecret: try box.seal(Array(try JSONEncoder().encode(secret))), expiresAt: expiresAt, createdAt: now)
    }

    /// The APNs client for a configuration: one pool per configuration, built once however many pushes ask for it
    /// at the same moment, and rebuilt when the configuration is replaced (the old pool finishes what it has in flight).
    func client(for config: PushConfigRecord) throws -> APNsClient {
        let key = "\(config.appID)/\(config.name)"
        let (client, replaced) = try clients.withLock { table -> (APNsClient, APNsClient?) in
            if let cached = table[key], cached.createdAt == config.createdAt { return (cached.client, nil) }
            let client = APNsClient(
                credentials: try credentials(of: config),
                endpoint: routing.withLock { $0 }.endpoint(for: APNsEnvironment(rawValue: config.environment) ?? .production))
            defer { table[key] = (config.createdAt, client) }
            return (client, table[key]?.client)
        }
        replaced?.retire()
        return client
    }

    private func credentials(of config: PushConfigRecord) throws -> APNsCredentials {
        let secret = try JSONDecoder().decode(PushSecret.self, from: Data(try box.open(config.sealedSecret)))
        if let pem = secret.p8, let keyID = config.keyID, let teamID = config.teamID {
            return .token(try APNsSigningKey(teamID: teamID, keyID: keyID, pem: pem))
        }
        if let p12 = secret.p12.flatMap({ Data(base64Encoded: $0) }) {
            return try .certificate(p12: [UInt8](p12), password: secret.password ?? "")
        }
        throw BeaconConfigurationError("push configuration \(config.name) has no usable secret")
    }

    /// What an APNs stand-in must trust to accept pushes made with this configuration.
    func trust(for config: PushConfigRecord) throws -> PushTrust {
        let secret = try JSONDecoder().decode(PushSecret.self, from: Data(try box.open(config.sealedSecret)))
        let environment = APNsEnvironment(rawValue: config.environment) ?? .production
        if let pem = secret.p8, let keyID = config.keyID, let teamID = config.teamID {
            let key = try APNsSigningKey(teamID: teamID, keyID: keyID, pem: pem)
            return .tokenKey(teamID: teamID, keyID: keyID, publicKeyPEM: key.privateKey.publicKey.pemRepresentation)
        }
        guard let p12 = secret.p12.flatMap({ Data(base64Encoded: $0) }) else {
            throw BeaconConfigurationError("push configuration \(config.name) has no usable secret")
        }
        let bundle = try NIOSSLPKCS12Bundle(buffer: [UInt8](p12), passphrase: Array((secret.password ?? "").utf8))
        // Trust the issuers the bundle carries; a bundle with only its leaf is trusted as its own anchor.
        let anchors = bundle.certificateChain.count > 1 ? Array(bundle.certificateChain.dropFirst()) : bundle.certificateChain
        let pems = try anchors.map { try Certificate(derEncoded: try $0.toDERBytes()).serializeAsPEM().pemString }
        return .certificateAuthorities(pems: pems, topics: [config.bundleID], environment: environment)
    }

    func shutdown() async {
        let all = clients.withLock { table in
            defer { table.removeAll() }
            return table.values.map(\.client)
        }
        for client in all { await client.shutdown() }
    }
}

/// What a stand-in for APNs (the simulator) must trust for one push configuration.
public enum PushTrust: Sendable {
    case tokenKey(teamID: String, keyID: String, publicKeyPEM: String)
    case certificateAuthorities(pems: [String], topics: [String], environment: APNsEnvironment)
}

/// Where pushes go: Apple, or one endpoint (the simulator) for both environments.
public enum APNsRouting: Sendable {
    case apple
    case custom(host: String, port: Int, trustRoots: [NIOSSLCertificate])

    func endpoint(for environment: APNsEnvironment) -> APNsEndpoint {
        switch self {
        case .apple: .apple(environment)
        case .custom(let host, let port, let roots): APNsEndpoint(host: host, port: port, trustRoots: roots)
        }
    }

    /// From `--apns-endpoint https://host:port` and the PEM of the CA to trust.
    public static func custom(url: String, caPEM: String) throws -> APNsRouting {
        guard let components = URLComponents(string: url), let host = components.host else {
            throw BeaconConfigurationError("--apns-endpoint must be a URL like https://127.0.0.1:2197")
        }
        let roots = try NIOSSLCertificate.fromPEMBytes(Array(caPEM.utf8))
        return .custom(host: host, port: components.port ?? 443, trustRoots: roots)
    }
}

extension UInt8 {
    var isASCIIAlphanumeric: Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(self) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(self)
            || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(self)
    }
}
