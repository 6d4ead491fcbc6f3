import BeaconCore
import Synchronization

/// A rate with a burst: a token bucket of `burst` tokens refilled at `perSecond` tokens a second.
public struct SendRate: Sendable, Equatable {
    public var perSecond: Int
    public var burst: Int

    public init(perSecond: Int, burst: Int) {
        self.perSecond = perSecond
        self.burst = burst
    }
}

/// How fast messages may be sent, counted in deliveries (one per recipient's inbox: a group message to 200 members
/// counts 200): per sending user (user tokens and devices) and per app (every send, app tokens too), so that neither
/// many small sends nor a few to large groups let one sender or one tenant hold the writer, and no one user can take
/// more than their share of their app's. Past either, a send is refused with `too_many_requests` before anything is
/// stored. Nil: unlimited.
public struct SendLimits: Sendable, Equatable {
    public var perUser: SendRate?
    public var perApp: SendRate?

    public init(
        perUser: SendRate? = SendRate(perSecond: 2_000, burst: 10_000), perApp: SendRate? = SendRate(perSecond: 20_000, burst: 100_000)
    ) {
        self.perUser = perUser
        self.perApp = perApp
    }

    /// No limit at all.
    public static let unlimited = SendLimits(perUser: nil, perApp: nil)
}

/// Token buckets by key, in memory (each node counts its own sends). A bucket that has refilled completely is the same
/// as none, so full buckets are dropped once the table grows: it holds about one entry per recently active sender.
final class TokenBuckets: Sendable {
    private struct Bucket {
        /// Tokens, in thousandths (integer arithmetic: no rounding drift).
        var milliTokens: Int64
        var updatedAt: Int64
    }

    /// The burst and the refill, clamped once so that no configured rate can overflow the arithmetic: thousandths of a
    /// token, and thousandths per millisecond (= tokens per second).
    private let capacity: Int64
    private let refillPerMillisecond: Int64
    private let buckets = Mutex<[String: Bucket]>([:])
    /// Buckets kept now (for tests).
    var count: Int { buckets.withLock { $0.count } }
    /// Past this many entries, full buckets are dropped before a new one is added.
    private static let pruneAbove = 10_000
    /// Rates, bursts and costs beyond this count as this.
    private static let maxRate = 1_000_000_000

    init(rate: SendRate) {
        capacity = Int64(min(max(rate.burst, 1), Self.maxRate)) * 1000
        refillPerMillisecond = Int64(min(max(rate.perSecond, 0), Self.maxRate))
    }

    /// A cost in thousandths of a token (negative counts as nothing, beyond `maxRate` as that).
    private static func milliTokens(_ cost: Int) -> Int64 {
        Int64(min(max(cost, 0), maxRate)) * 1000
    }

    /// Gives back `cost` tokens `take` took (a send refused further on), up to the burst.
    func give(_ cost: Int, key: String) {
        let (capacity, returned) = (capacity, Self.milliTokens(cost))
        buckets.withLock { table in
            guard var bucket = table[key] else { return }
            bucket.milliTokens = min(capacity, bucket.milliTokens + returned)
            table[key] = bucket
        }
    }

    /// Milliseconds from `start` to `end`: 0 when the clock went back, `Int64.max` when the difference does not fit.
    private static func elapsed(from start: Int64, to end: Int64) -> Int64 {
        let (difference, overflow) = end.subtractingReportingOverflow(start)
        return overflow ? (end > start ? .max : 0) : max(difference, 0)
    }

    /// Takes `cost` tokens from `key`'s bucket at `now` (ms) — a cost beyond the burst counts as the burst — or false,
    /// taking nothing, when it holds fewer.
    func take(_ cost: Int, key: String, now: Int64) -> Bool {
        let (capacity, refillPerMillisecond, wanted) = (capacity, refillPerMillisecond, Self.milliTokens(cost))
        return buckets.withLock { table in
            var bucket = table[key] ?? Bucket(milliTokens: capacity, updatedAt: now)
            let (refill, overflow) = Self.elapsed(from: bucket.updatedAt, to: now).multipliedReportingOverflow(by: refillPerMillisecond)
            bucket.milliTokens = overflow ? capacity : min(capacity, bucket.milliTokens + min(refill, capacity))
            bucket.updatedAt = max(now, bucket.updatedAt)
            // A send larger than the whole burst goes when the bucket is full (it empties it): refused forever otherwise.
            guard bucket.milliTokens >= min(wanted, capacity) else {
                table[key] = bucket
                return false
            }
            bucket.milliTokens -= min(wanted, capacity)
            if table[key] == nil, table.count >= Self.pruneAbove {
                let full = table.compactMap { key, other in
                    let (refill, overflow) = Self.elapsed(from: other.updatedAt, to: now).multipliedReportingOverflow(
                        by: refillPerMillisecond)
                    return overflow || refill >= capacity - other.milliTokens ? key : nil
                }
                for key in full { table[key] = nil }
            }
            table[key] = bucket
            return true
        }
    }
}

/// `SendLimits` applied: the user's bucket and the app's.
final class SendLimiter: Sendable {
    private let perUser: TokenBuckets?
    private let perApp: TokenBuckets?

    init(_ limits: SendLimits) {
        perUser = limits.perUser.map(TokenBuckets.init)
        perApp = limits.perApp.map(TokenBuckets.init)
    }

    /// Takes `deliveries` from the bucket of `user` (nil: the app itself) and from the app's, or throws
    /// `too_many_requests` having taken nothing. A send starts with one (`deliveries: 1`, before it reads anything, so
    /// that even refused sends are paced) and takes the rest once its recipients are known.
    func admit(app: Int64, user: String?, deliveries: Int, now: Int64) throws(BeaconError) {
        guard deliveries > 0 else { return }
        let userKey = user.map { "\(app)/\($0)" }
        if let user, let userKey, let perUser, !perUser.take(deliveries, key: userKey, now: now) {
            throw BeaconError(.tooManyRequests, "\(user) is sending too fast; slow down")
        }
        if let perApp, !perApp.take(deliveries, key: String(app), now: now) {
            if let userKey { perUser?.give(deliveries, key: userKey) }
            throw BeaconError(.tooManyRequests, "this app is sending too fast; slow down")
        }
    }

    /// Gives back `deliveries` that `admit` took for a send refused further on (nothing stored).
    func refund(app: Int64, user: String?, deliveries: Int) {
        guard deliveries > 0 else { return }
        if let user { perUser?.give(deliveries, key: "\(app)/\(user)") }
        perApp?.give(deliveries, key: String(app))
    }
}
