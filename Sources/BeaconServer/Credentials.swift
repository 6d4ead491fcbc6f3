import BeaconAPNs
import BeaconCore
import Crypto
import CryptoExtras
import Foundation
import NIOCore
import NIOPosix
import Synchronization

/// Password and client-secret hashing.
enum Credentials {
    /// PBKDF2 runs here, never on an event loop: at most half the cores hash at once, so requests keep flowing while
    /// a 60-user `POST /users` or a burst of logins is hashed.
    static let hashingPool: NIOThreadPool = {
        let pool = NIOThreadPool(numberOfThreads: max(1, System.coreCount / 2))
        pool.start()
        return pool
    }()

    /// `hashPassword` on the hashing pool.
    static func hashPasswordOffLoop(_ password: String, rounds: Int) async throws -> String {
        try await hashingPool.runIfActive { try hashPassword(password, rounds: rounds) }
    }

    /// Checks a login on the hashing pool. An unknown user (`hash` nil) costs the same PBKDF2 run as a known one, so
    /// timing does not tell which usernames exist.
    static func verifyPasswordOffLoop(_ password: String, hash: String?, rounds: Int) async throws -> Bool {
        let decoy = "pbkdf2-sha256$\(rounds)$AAAAAAAAAAAAAAAAAAAAAA==$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
        return try await hashingPool.runIfActive {
            verifyPassword(password, hash: hash ?? decoy) && hash != nil
        }
    }

    /// `pbkdf2-sha256$ROUNDS$SALT$HASH` (base64 parts); the round count travels with the hash.
    static func hashPassword(_ password: String, rounds: Int) throws -> String {
        let salt = SymmetricKey(size: .bits128).withUnsafeBytes { Data($0) }
        let derived = try derive(password, salt: salt, rounds: rounds)
        return "pbkdf2-sha256$\(rounds)$\(salt.base64EncodedString())$\(derived.base64EncodedString())"
    }

    static func verifyPassword(_ password: String, hash: String) -> Bool {
        let parts = hash.split(separator: "$")
        guard parts.count == 4, parts[0] == "pbkdf2-sha256", let rounds = Int(parts[1]), (1...10_000_000).contains(rounds),
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
        SHA256.hash(data: Array(secret.utf8)).lowercaseHex
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
    /// The user's uuid: a user deleted and created again under the same name is another user, whom old tokens
    /// do not open.
    public var uid: String?
    /// Issued at, ms.
    public var iat: Int64
    /// Expires at, ms.
    public var exp: Int64
}

/// Issues and checks bearer tokens: `base64url(claims JSON).base64url(HMAC-SHA256)`, with a key derived from the
/// server's secret key, so that tokens survive restarts and every process with that key agrees.
struct TokenIssuer: Sendable {
    private let key: SymmetricKey

    init(key: SymmetricKey) {
        self.key = key
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

/// Failed password logins, counted per user and per address over a sliding window: past the limit, logins are
/// refused (`too_many_requests`) until the window has passed, whether the password is right or not.
final class LoginThrottle: Sendable {
    struct Limits: Sendable {
        var perUser = 10
        var perAddress = 50
        /// Milliseconds.
        var window: Int64 = 5 * 60 * 1000
    }

    private struct Failures {
        var count = 0
        var since: Int64
        /// Attempts being checked now: they count against the limit until their outcome is known, so that a burst of
        /// parallel guesses cannot all pass the check before the first failure is recorded.
        var inFlight = 0
    }
    private let failures = Mutex<[String: Failures]>([:])
    private let limits: Limits
    /// Entries kept at most; the oldest are forgotten first.
    private static let capacity = 100_000

    init(limits: Limits = Limits()) {
        self.limits = limits
    }

    private static func keys(app: Int64, username: String, address: String?) -> [(String, KeyPath<Limits, Int>)] {
        [("u/\(app)/\(username)", \.perUser)] + (address.map { [("a/\(app)/\($0)", \.perAddress)] } ?? [])
    }

    /// Starts an attempt, or throws `too_many_requests` when the user or the address failed too often lately (attempts
    /// in flight count as failures until they end). Every attempt started must be ended with `end`.
    func begin(app: Int64, username: String, address: String?, now: Int64) throws {
        let admitted = failures.withLock { table -> Bool in
            if table.count >= Self.capacity {
                table = table.filter { now - $0.value.since < limits.window || $0.value.inFlight > 0 }
                if table.count >= Self.capacity { table.removeAll() }  // a flood of addresses: start counting afresh
            }
            let keys = Self.keys(app: app, username: username, address: address)
            for (key, limit) in keys {
                guard let entry = table[key] else { continue }
                let recent = now - entry.since < limits.window ? entry.count : 0
                if recent + entry.inFlight >= limits[keyPath: limit] { return false }
            }
            for (key, _) in keys {
                var entry = table[key] ?? Failures(since: now)
                if now - entry.since >= limits.window { (entry.count, entry.since) = (0, now) }
                entry.inFlight += 1
                table[key] = entry
            }
            return true
        }
        if !admitted { throw BeaconError(.tooManyRequests, "too many failed logins; try again in a few minutes") }
    }

    /// Ends an attempt `begin` admitted: a failure counts; a success forgets the user's failures.
    func end(app: Int64, username: String, address: String?, now: Int64, succeeded: Bool) {
        failures.withLock { table in
            for (key, _) in Self.keys(app: app, username: username, address: address) {
                guard var entry = table[key] else { continue }
                entry.inFlight = max(0, entry.inFlight - 1)
                if !succeeded {
                    if now - entry.since >= limits.window { (entry.count, entry.since) = (0, now) }
                    entry.count += 1
                } else if key.hasPrefix("u/") {
                    entry.count = 0
                }
                table[key] = entry.count == 0 && entry.inFlight == 0 ? nil : entry
            }
        }
    }
}
