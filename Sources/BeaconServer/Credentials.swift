import BeaconAPNs
import BeaconCore
import Crypto
import CryptoExtras
import Foundation

/// Password and client-secret hashing.
enum Credentials {
    /// `pbkdf2-sha256$ROUNDS$SALT$HASH` (base64 parts); the round count travels with the hash.
    static func hashPassword(_ password: String, rounds: Int) throws -> String {
        let salt = SymmetricKey(size: .bits128).withUnsafeBytes { Data($0) }
        let derived = try derive(password, salt: salt, rounds: rounds)
        return "pbkdf2-sha256$\(rounds)$\(salt.base64EncodedString())$\(derived.base64EncodedString())"
    }

    static func verifyPassword(_ password: String, hash: String) -> Bool {
        let parts = hash.split(separator: "$")
        guard parts.count == 4, parts[0] == "pbkdf2-sha256", let rounds = Int(parts[1]),
            let salt = Data(base64Encoded: String(parts[2])), let expected = Data(base64Encoded: String(parts[3])),
            let derived = try? derive(password, salt: salt, rounds: rounds)
        else { return false }
        return constantTimeEqual(derived, expected)
    }

    private static func derive(_ password: String, salt: Data, rounds: Int) throws -> Data {
        try KDF.Insecure.PBKDF2.deriveKey(
            from: Array(password.utf8), salt: salt, using: .sha256, outputByteCount: 32, unsafeUncheckedRounds: rounds
        ).withUnsafeBytes { Data($0) }
    }

    /// Hex SHA-256: client secrets are 256-bit random values, so a plain digest is enough.
    static func hashSecret(_ secret: String) -> String {
        SHA256.hash(data: Array(secret.utf8)).map { String(format: "%02x", $0) }.joined()
    }

    /// A random URL-safe string with `bytes` bytes of entropy.
    static func randomToken(bytes: Int = 32) -> String {
        var generator = SystemRandomNumberGenerator()
        let raw = (0..<bytes).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        return Data(raw).base64URLEncoded()
    }

    static func constantTimeEqual(_ lhs: Data, _ rhs: Data) -> Bool {
        guard lhs.count == rhs.count else { return false }
        return zip(lhs, rhs).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) } == 0
    }
}

/// Who a bearer token speaks for.
public struct TokenClaims: Sendable, Codable, Hashable {
    /// The app the token belongs to.
    public var app: Int64
    /// The user, for user tokens; nil for app tokens.
    public var user: String?
    /// Issued at, ms.
    public var iat: Int64
    /// Expires at, ms.
    public var exp: Int64
}

/// Issues and checks bearer tokens: `base64url(claims JSON).base64url(HMAC-SHA256)`, with a server key kept
/// in the store so that tokens survive restarts and every process on the same data agrees.
struct TokenIssuer: Sendable {
    private let key: SymmetricKey

    init(keyMaterial: String) {
        key = SymmetricKey(data: Data(base64URLEncoded: keyMaterial) ?? Data(keyMaterial.utf8))
    }

    func issue(_ claims: TokenClaims) -> String {
        let payload = (try? JSONEncoder().encode(claims)) ?? Data()
        let encoded = payload.base64URLEncoded()
        let signature = Data(HMAC<SHA256>.authenticationCode(for: Array(encoded.utf8), using: key))
        return encoded + "." + signature.base64URLEncoded()
    }

    /// The claims of a well-signed, unexpired token; nil otherwise.
    func verify(_ token: String, now: Int64) -> TokenClaims? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, let signature = Data(base64URLEncoded: parts[1]),
            HMAC<SHA256>.isValidAuthenticationCode(signature, authenticating: Array(parts[0].utf8), using: key),
            let payload = Data(base64URLEncoded: parts[0]),
            let claims = try? JSONDecoder().decode(TokenClaims.self, from: payload),
            claims.exp > now
        else { return nil }
        return claims
    }
}
