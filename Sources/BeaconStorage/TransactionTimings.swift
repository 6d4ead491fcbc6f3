import Synchronization

/// How long a store's transactions take: one histogram per kind, kept by the store and read when metrics are scraped
/// (`beacon_store_transaction_duration_seconds`). The store has no metrics system of its own: the server that exposes
/// metrics may be one of several sharing a process, and a store outlives none of them.
public final class TransactionTimings: Sendable {
    /// What a store ran.
    public enum Kind: String, Sendable, CaseIterable {
        /// Reads only (SQLite: a snapshot read; PostgreSQL: several reads on one connection).
        case read
        /// A transaction (SQLite: on the single writer, its wait included; PostgreSQL: several statements, read-only
        /// ones too, deadlock retries and the wait for a pool connection included).
        case write
        /// One statement that commits on its own (PostgreSQL: most reads, and writes of one statement; the wait for a pool
        /// connection included).
        case statement
    }

    /// Upper bounds of the buckets, in seconds; a last bucket takes everything slower.
    public static let bucketBounds: [Double] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

    /// Durations recorded so far for one kind.
    public struct Histogram: Sendable, Equatable {
        /// Per bucket (not cumulative), in the order of `bucketBounds`, then the slower-than-all bucket.
        public var bucketCounts = [Int](repeating: 0, count: TransactionTimings.bucketBounds.count + 1)
        public var count = 0
        /// In seconds.
        public var sum = 0.0
    }

    private let histograms = Mutex([Kind: Histogram]())

    public init() {}

    /// Runs `body`, recording how long it took (also when it throws).
    public func time<T>(_ kind: Kind, _ body: () async throws -> T) async rethrows -> T {
        let start = ContinuousClock.now
        defer { record(kind, start.duration(to: .now)) }
        return try await body()
    }

    /// Records one duration.
    public func record(_ kind: Kind, _ duration: Duration) {
        let seconds = Double(duration.components.seconds) + Double(duration.components.attoseconds) * 1e-18
        let bucket = Self.bucketBounds.firstIndex { seconds <= $0 } ?? Self.bucketBounds.count
        histograms.withLock { histograms in
            histograms[kind, default: Histogram()].bucketCounts[bucket] += 1
            histograms[kind, default: Histogram()].count += 1
            histograms[kind, default: Histogram()].sum += seconds
        }
    }

    /// The histograms now, by kind (kinds never run are absent).
    public func snapshot() -> [Kind: Histogram] {
        histograms.withLock { $0 }
    }

    /// Transactions and statements recorded so far, of every kind.
    public var total: Int {
        histograms.withLock { $0.values.reduce(0) { $0 + $1.count } }
    }
}
