import BeaconCore
import BeaconPostgres
import BeaconSQLite
import BeaconServer
import BeaconStorage
import BeaconStores
import BeaconTesting
import Foundation
import Logging

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

extension TestBeacon.Options {
    /// What the benchmarks' servers run with: app `bench/chat`, logs at error, push attempts left unrecorded, the
    /// production retention interval, and push only with `push` (the same secret key on every node then, so that tokens
    /// issued by one are valid on all).
    static func bench(push: Bool = false) -> Self {
        var options = Self()
        options.app = AppKey(org: "bench", name: "chat")
        options.secretKey = push ? testSecretKey : nil
        var logger = Logger(label: "beacon.bench")
        logger.logLevel = .error
        options.logger = logger
        options.recordsPushOutcomes = false
        options.configure = { $0.retentionInterval = BeaconConfiguration().retentionInterval }
        return options
    }
}

/// Runs `body` against a server in this process on a fresh SQLite store (durability: the server's default, full, unless
/// BEACON_DURABILITY says otherwise, to measure the price of the switch).
func withBenchServer(_ body: @Sendable (TestBeacon) async throws -> Void) async throws {
    let directory = StoreKind.temporaryDirectory("beacon-bench")
    let durability = ProcessInfo.processInfo.environment["BEACON_DURABILITY"].flatMap(SQLiteStore.Durability.init(rawValue:)) ?? .full
    try await DatabaseLocation.sqlite(inDirectory: directory.path, durability: durability).withStore(logger: StoreKind.quietLogger) {
        store in
        try await TestBeacon.run(store: store, directory: directory, options: .bench(), body)
    }
}

/// Resident set size of a process, in bytes (Linux `/proc`).
func residentBytes(pid: Int32 = getpid()) -> Int {
    guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
        let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
        let kilobytes = Int(line.split(separator: " ").dropFirst().first ?? "")
    else { return 0 }
    return kilobytes * 1024
}

/// The calling thread's kernel id (`/proc/thread-self` links to `PID/task/TID`; Glibc's `gettid` is not imported).
func threadID() -> Int32 {
    (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/thread-self")).flatMap { Int32($0.split(separator: "/").last ?? "") }
        ?? 0
}

/// CPU time (user + system, seconds) of one thread of this process (Linux `/proc`).
func threadCPUSeconds(_ thread: Int32) -> Double {
    guard let stat = try? String(contentsOfFile: "/proc/self/task/\(thread)/stat", encoding: .utf8),
        let afterName = stat.range(of: ") ", options: .backwards)
    else { return 0 }
    // After "pid (comm) " comes field 3 (state); utime and stime are fields 14 and 15, in clock ticks.
    let fields = stat[afterName.upperBound...].split(separator: " ")
    guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
    return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
}

/// CPU time (user + system, seconds) of this whole process.
func processCPUSeconds() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1e6 }
    return seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

func percentile(_ sorted: [Double], _ p: Double) -> Double {
    guard !sorted.isEmpty else { return .nan }
    return sorted[min(sorted.count - 1, Int((Double(sorted.count) * p).rounded(.up)) - 1)]
}

func monotonicNanoseconds() -> UInt64 {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
}

/// Milliseconds since `sentAt` (a `monotonicNanoseconds()` a message carried in its ext); nil for a value no send of
/// this process wrote (negative, fractional, out of range, or later than now).
func milliseconds(since sentAt: Double) -> Double? {
    guard let sent = UInt64(exactly: sentAt) else { return nil }
    let now = monotonicNanoseconds()
    return sent <= now ? Double(now - sent) / 1e6 : nil
}

func format(_ value: Double, _ digits: Int = 2) -> String { String(format: "%.\(digits)f", value) }

/// Runs `body` with `nodes` stores on one database: `sqlite` (one node, a fresh directory) or a `postgres://` URL (a fresh
/// schema, one pool per node, as separate processes have). The engine's name and a count of PostgreSQL transactions
/// run so far (nil on SQLite) come with them.
func withBenchStores(
    database: String, nodes: Int,
    _ body: @Sendable ([any BeaconStore], _ engine: String, _ transactions: @escaping @Sendable () -> Int?) async throws -> Void
) async throws {
    let location =
        database == "sqlite"
        ? try DatabaseLocation.sqlite(inDirectory: StoreKind.temporaryDirectory("beacon-bench").path)
        : DatabaseLocation.postgres(url: database).inSchema("bench_" + UUID().uuidString.lowercased().filter(\.isHexDigit))
    try await location.withStores(nodes) { stores in
        let postgres = stores.compactMap { $0 as? PostgresStore }
        let transactions: @Sendable () -> Int? = { postgres.isEmpty ? nil : postgres.map(\.transactionTimings.total).reduce(0, +) }
        try await body(stores, postgres.isEmpty ? "sqlite" : "postgres", transactions)
    }
}
