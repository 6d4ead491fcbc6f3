import Crypto
import Foundation
import NIOSSL

/// A `.p8` token-signing key: ES256 (P-256) with its key id and team id.
public struct APNsSigningKey: Sendable {
    public var teamID: String
    public var keyID: String
    public var privateKey: P256.Signing.PrivateKey

    public init(teamID: String, keyID: String, privateKey: P256.Signing.PrivateKey) {
        self.teamID = teamID
        self.keyID = keyID
        self.privateKey = privateKey
    }

    /// From the PEM text of an Apple `.p8` file (PKCS#8 `BEGIN PRIVATE KEY`).
    public init(teamID: String, keyID: String, pem: String) throws {
        self.init(teamID: teamID, keyID: keyID, privateKey: try P256.Signing.PrivateKey(pemRepresentation: pem))
    }

    /// A provider token: header `{alg, kid}`, claims `{iss, iat}` with `iat` in whole seconds.
    public func token(issuedAt seconds: Int64) throws -> String {
        let header = base64URL(Data(#"{"alg":"ES256","kid":"\#(keyID)"}"#.utf8))
        let claims = base64URL(Data(#"{"iss":"\#(teamID)","iat":\#(seconds)}"#.utf8))
        let signature = try privateKey.signature(for: Data("\(header).\(claims)".utf8))
        return "\(header).\(claims).\(base64URL(signature.rawRepresentation))"
    }
}

/// How Beacon proves itself to APNs.
public enum APNsCredentials: Sendable {
    /// Token auth: a JWT per connection, refreshed every ~50 minutes.
    case token(APNsSigningKey)
    /// Certificate auth: a TLS client certificate.
    case certificate(chain: [NIOSSLCertificate], key: NIOSSLPrivateKey)

    /// Certificate credentials from a `.p12` file's bytes and its password.
    public static func certificate(p12: [UInt8], password: String) throws -> APNsCredentials {
        let bundle = try NIOSSLPKCS12Bundle(buffer: p12, passphrase: Array(password.utf8))
        return .certificate(chain: bundle.certificateChain, key: bundle.privateKey)
    }
}

/// Where to connect: Apple's hosts, or a custom endpoint (the simulator) with its own trust roots.
public struct APNsEndpoint: Sendable {
    public var host: String
    public var port: Int
    /// Extra trust roots (PEM certificates). Nil uses the system's.
    public var trustRoots: [NIOSSLCertificate]?

    public init(host: String, port: Int = 443, trustRoots: [NIOSSLCertificate]? = nil) {
        self.host = host
        self.port = port
        self.trustRoots = trustRoots
    }

    public static func apple(_ environment: APNsEnvironment) -> APNsEndpoint {
        APNsEndpoint(host: environment.host, port: 443)
    }
}

func base64URL(_ data: some DataProtocol) -> String {
    Data(data).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        .replacingOccurrences(of: "=", with: "")
}
