import BeaconAPNs
import BeaconCore
import BeaconStorage
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
        // An account without a password (`noPassword`) costs the same time as a missing one: a login tells neither apart.
        let usable = hash.flatMap { $0 == noPassword ? nil : $0 }
        return try await hashingPool.runIfActive {
            verifyPassword(password, hash: usable ?? decoy) && usable != nil
        }
    }

    /// The stored hash of an account without a password (imported through Tencent's door): no password matches it.
    static let noPassword = "none"

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
    /// App tokens: the client secret they were issued for (`secretTag(of:)`), so that a token of a rotated secret opens
    /// nothing even when issued in the same millisecond as the rotation, or by a node whose clock is behind. Absent from
    /// user tokens and from app tokens of earlier versions (those are refused by `AppRecord.tokensValidAfter` alone).
    public var sec: String? = nil

    /// An app token's longest lifetime (seconds): a longer `ttl`, or a longer configured default, is cut to it.
    static let maxAppTokenLifetime = 7 * 24 * 3600
    /// A user token's longest lifetime (seconds).
    static let maxUserTokenLifetime = 60 * 24 * 3600

    /// What an app token carries of the app's current client secret: the first 16 hex digits of the stored SHA-256 of
    /// the secret (which tell nothing usable about the secret itself).
    static func secretTag(of app: AppRecord) -> String {
        String(app.clientSecretHash.prefix(16))
    }

    /// Whether this app token is still good for `app`: issued after the last rotation of its client secret, (when it
    /// says) for the current secret, and for at most `maxAppTokenLifetime` (an app token of an earlier version, issued
    /// for longer, is refused).
    func isCurrent(for app: AppRecord) -> Bool {
        let (span, overflow) = exp.subtractingReportingOverflow(iat)
        return iat >= app.tokensValidAfter && (sec == nil || sec == Self.secretTag(of: app)) && !overflow
            && span <= Int64(Self.maxAppTokenLifetime) * 1000
    }
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

/// Failed password logins, counted per user and per client address (`API.origin(of:context:)`) over a window: past the
/// limit, logins are refused (`too_many_requests`) until the window has passed, whether the password is right or not.
///
/// What it keeps stays bounded without ever forgetting a count that still matters, so that no flood can reset the
/// counters an attacker wants gone (before, 100,000 entries wiped the whole table, and a username of any length was a key):
/// - A username no user can have (`Validation.validateUsername`) is refused at once, as a wrong password is, before
///   anything is counted or hashed: a user key is at most 64 bytes.
/// - Entries expire by time, never by number: every quarter window one sweep (under the lock, O(entries), so amortised to
///   nothing per login) drops the entries whose window has passed and that have no attempt in flight.
/// - User entries are never dropped while they count. Their number is bounded by the failed logins of one window and a
///   quarter, each of which cost a PBKDF2 run on the hashing pool.
/// - Address entries are capped per app (`Limits.maxAddresses`: one tenant's flood does not lift the limit for the
///   others). Past the cap, a new address is not counted at all (its attempts
///   still count against their user) rather than refused: an attacker who reached the cap holds that many addresses and
///   already escapes a per-address limit, so not counting one more gives nothing away, whereas refusing would lock out
///   every new client — the denial this throttle must not hand out. Addresses already counted keep their counts. An IPv6
///   address counts as its /64 (what one host or site is commonly given), so one client cannot bring 2^64 fresh addresses.
final class LoginThrottle: Sendable {
    struct Limits: Sendable {
        var perUser = 10
        var perAddress = 50
        /// Milliseconds.
        var window: Int64 = 5 * 60 * 1000
        /// Addresses counted at most at once (about 100 bytes each).
        var maxAddresses = 100_000
    }

    /// What `begin` counted, for `end`.
    struct Attempt: Sendable {
        fileprivate let user: UserKey
        /// Nil when the attempt has no address, or came from a new one past `Limits.maxAddresses`.
        fileprivate let address: AddressKey?
    }

    fileprivate struct UserKey: Hashable, Sendable {
        var app: Int64
        var username: String
    }

    fileprivate struct AddressKey: Hashable, Sendable {
        var app: Int64
        /// IPv4: the address; IPv6: its /64.
        var network: NetworkAddress
    }

    private struct Failures {
        var count = 0
        var since: Int64
        /// Attempts being checked now: they count against the limit until their outcome is known, so that a burst of
        /// parallel guesses cannot all pass the check before the first failure is recorded.
        var inFlight = 0

        func isOver(_ limit: Int, now: Int64, window: Int64) -> Bool {
            (now - since < window ? count : 0) + inFlight >= limit
        }

        func isExpired(now: Int64, window: Int64) -> Bool {
            inFlight == 0 && now - since >= window
        }
    }

    private struct Table {
        var users: [UserKey: Failures] = [:]
        /// By app, then address.
        var addresses: [Int64: [NetworkAddress: Failures]] = [:]
        var lastSweep: Int64?
    }

    private let table = Mutex(Table())
    private let limits: Limits

    init(limits: Limits = Limits()) {
        self.limits = limits
    }

    /// Starts an attempt, or throws `too_many_requests` when the user or the address failed too often lately (attempts
    /// in flight count as failures until they end), or `invalid_grant` for a username no user can have (nothing is
    /// counted then). Every attempt started must be ended with `end`.
    func begin(app: Int64, username: String, address: NetworkAddress?, now: Int64) throws -> Attempt {
        guard (try? Validation.validateUsername(username)) != nil else {
            throw BeaconError(.invalidGrant, "username or password is wrong")
        }
        let user = UserKey(app: app, username: username)
        let address = address.map { AddressKey(app: app, network: $0.isIPv4 ? $0 : $0.masked(to: 64)) }
        let limits = self.limits
        let attempt = table.withLock { table -> Attempt? in
            Self.sweep(&table, now: now, window: limits.window)
            if table.users[user]?.isOver(limits.perUser, now: now, window: limits.window) == true { return nil }
            let known = address.flatMap { table.addresses[app]?[$0.network] }
            if known?.isOver(limits.perAddress, now: now, window: limits.window) == true { return nil }
            Self.start(&table.users, user, now: now, window: limits.window)
            var counted: AddressKey?
            if let address, known != nil || (table.addresses[app]?.count ?? 0) < limits.maxAddresses {
                Self.start(&table.addresses[app, default: [:]], address.network, now: now, window: limits.window)
                counted = address
            }
            return Attempt(user: user, address: counted)
        }
        guard let attempt else { throw BeaconError(.tooManyRequests, "too many failed logins; try again in a few minutes") }
        return attempt
    }

    /// Ends an attempt `begin` admitted: a failure counts; a success forgets the user's failures.
    func end(_ attempt: Attempt, now: Int64, succeeded: Bool) {
        let window = limits.window
        table.withLock { table in
            Self.finish(&table.users, attempt.user, now: now, window: window, succeeded: succeeded, forgetOnSuccess: true)
            if let address = attempt.address {
                Self.finish(
                    &table.addresses[address.app, default: [:]], address.network, now: now, window: window, succeeded: succeeded,
                    forgetOnSuccess: false)
                if table.addresses[address.app]?.isEmpty == true { table.addresses[address.app] = nil }
            }
        }
    }

    /// Entries kept now, users and addresses (for tests).
    var entryCounts: (users: Int, addresses: Int) {
        table.withLock { ($0.users.count, $0.addresses.values.reduce(0) { $0 + $1.count }) }
    }

    /// Drops expired entries, at most once every quarter window (and whenever the clock went back).
    private static func sweep(_ table: inout Table, now: Int64, window: Int64) {
        if let last = table.lastSweep, now >= last, now - last < max(1, window / 4) { return }
        table.lastSweep = now
        removeExpired(&table.users, now: now, window: window)
        for app in Array(table.addresses.keys) {
            removeExpired(&table.addresses[app, default: [:]], now: now, window: window)
            if table.addresses[app]?.isEmpty == true { table.addresses[app] = nil }
        }
    }

    /// Removes in place (not `Dictionary.filter`, which builds a copy and, for a table of 200,000 entries, crashed a loaded
    /// test process inside the standard library's temporary bitset).
    private static func removeExpired<Key: Hashable>(_ entries: inout [Key: Failures], now: Int64, window: Int64) {
        let expired = entries.compactMap { $0.value.isExpired(now: now, window: window) ? $0.key : nil }
        for key in expired { entries[key] = nil }
    }

    private static func start<Key: Hashable>(_ entries: inout [Key: Failures], _ key: Key, now: Int64, window: Int64) {
        var entry = entries[key] ?? Failures(since: now)
        if now - entry.since >= window { (entry.count, entry.since) = (0, now) }
        entry.inFlight += 1
        entries[key] = entry
    }

    private static func finish<Key: Hashable>(
        _ entries: inout [Key: Failures], _ key: Key, now: Int64, window: Int64, succeeded: Bool, forgetOnSuccess: Bool
    ) {
        guard var entry = entries[key] else { return }
        entry.inFlight = max(0, entry.inFlight - 1)
        if !succeeded {
            if now - entry.since >= window { (entry.count, entry.since) = (0, now) }
            entry.count += 1
        } else if forgetOnSuccess {
            entry.count = 0
        }
        entries[key] = entry.count == 0 && entry.inFlight == 0 ? nil : entry
    }
}
