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
        let header = Data(#"{"alg":"ES256","kid":"\#(keyID)"}"#.utf8).base64URLEncoded()
        let claims = Data(#"{"iss":"\#(teamID)","iat":\#(seconds)}"#.utf8).base64URLEncoded()
        let signature = try privateKey.signature(for: Data("\(header).\(claims)".utf8))
        return "\(header).\(claims).\(signature.rawRepresentation.base64URLEncoded())"
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

extension Data {
    /// Base64url without padding (RFC 7515), as JWTs use it.
    public func base64URLEncoded() -> String {
        base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// Decodes base64url, with or without padding.
    public init?(base64URLEncoded text: some StringProtocol) {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        self.init(base64Encoded: base64)
    }
}
