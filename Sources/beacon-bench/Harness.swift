import BeaconClient
import BeaconCore
import BeaconPostgres
import BeaconSQLite
import BeaconServer
import BeaconStorage
import Foundation
import Logging
import ServiceLifecycle

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// A Beacon server started in this process on a free port, with app `bench/chat`.
struct BenchServer {
    let store: any BeaconStore
    let server: BeaconServer
    let baseURL: URL
    let appToken: String
    private let services: ServiceGroup
    private let task: Task<Void, any Error>

    /// A server on a fresh SQLite store.
    static func start(configure: (inout BeaconConfiguration) -> Void = { _ in }) async throws -> BenchServer {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("beacon-bench-\(UUID().uuidString)")
        // The server's default (full) unless BEACON_DURABILITY says otherwise, to measure the price of the switch.
        let durability = ProcessInfo.processInfo.environment["BEACON_DURABILITY"].flatMap(SQLiteStore.Durability.init(rawValue:)) ?? .full
        return try await start(store: try SQLiteStore(directory: directory.path, durability: durability), configure: configure)
    }

    /// A server on `store`, creating app `bench/chat` unless it exists (its app token is then issued by the server).
    static func start(store: any BeaconStore, configure: (inout BeaconConfiguration) -> Void = { _ in }) async throws -> BenchServer {
        var logger = Logger(label: "beacon.bench")
        logger.logLevel = .error
        let existing = try await store.app(AppKey(org: "bench", name: "chat"))
        let credentials = existing == nil ? try await AppProvisioning.create(AppKey(org: "bench", name: "chat"), in: store) : nil
        var configuration = BeaconConfiguration(host: "127.0.0.1", port: 0, passwordHashRounds: 1000)
        configure(&configuration)
        let server = try await BeaconServer(store: store, configuration: configuration, logger: logger)
        let (ports, portSink) = AsyncStream.makeStream(of: Int.self)
        let services = ServiceGroup(configuration: .init(services: [server.makeService { portSink.yield($0) }], logger: logger))
        let task = Task { try await services.run() }
        var iterator = ports.makeAsyncIterator()
        let port = await iterator.next()!
        let baseURL = URL(string: "http://127.0.0.1:\(port)")!
        let token =
            if let credentials {
                try await REST.token(
                    baseURL, app: "bench/chat",
                    [
                        "grant_type": "client_credentials", "client_id": .string(credentials.clientID),
                        "client_secret": .string(credentials.clientSecret),
                    ])
            } else if let existing {
                server.issueToken(app: existing)
            } else {
                throw BenchError("app bench/chat vanished")
            }
        return BenchServer(store: store, server: server, baseURL: baseURL, appToken: token, services: services, task: task)
    }

    func stop() async {
        await services.triggerGracefulShutdown()
        _ = await task.result
    }

    func createUsers(_ names: [String]) async throws {
        for chunk in stride(from: 0, to: names.count, by: 60).map({ Array(names[$0..<min($0 + 60, names.count)]) }) {
            _ = try await REST.call(
                baseURL, "POST", "/bench/chat/users", .array(chunk.map { ["username": .string($0), "password": "pw"] }), token: appToken)
        }
    }

    func client(_ username: String, device: String = "bench") async throws -> BeaconClient {
        let client = BeaconClient(options: BeaconOptions(appKey: "bench#chat", serverURL: baseURL, deviceID: device))
        try await client.login(username: username, password: "pw")
        return client
    }
}

enum REST {
    static func call(_ baseURL: URL, _ method: String, _ path: String, _ body: JSONValue?, token: String?) async throws -> JSONValue {
        var request = URLRequest(url: URL(string: baseURL.absoluteString + path)!)
        request.httpMethod = method
        if let token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        if let body { request.httpBody = try JSONEncoder().encode(body) }
        let (data, _) = try await URLSession.shared.data(for: request)
        return try JSONDecoder().decode(JSONValue.self, from: data)
    }

    static func token(_ baseURL: URL, app: String, _ body: JSONValue) async throws -> String {
        let answer = try await call(baseURL, "POST", "/\(app)/token", body, token: nil)
        guard let token = answer["access_token"]?.stringValue else { throw BenchError("no token: \(answer)") }
        return token
    }
}

struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
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

func format(_ value: Double, _ digits: Int = 2) -> String { String(format: "%.\(digits)f", value) }

/// Runs `body` with `nodes` stores on one database: `sqlite` (one node, a fresh directory) or a `postgres://` URL (a fresh
/// schema, one pool per node, as separate processes have). The engine's name and a count of PostgreSQL transactions
/// run so far (nil on SQLite) come with them.
func withBenchStores(
    database: String, nodes: Int,
    _ body: @Sendable ([any BeaconStore], _ engine: String, _ transactions: @escaping @Sendable () -> Int?) async throws -> Void
) async throws {
    if database == "sqlite" {
        guard nodes == 1 else { throw BenchError("SQLite serves one node") }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("beacon-bench-\(UUID().uuidString)")
        return try await body([try SQLiteStore(directory: directory.path)], "sqlite", { nil })
    }
    let url = database + (database.contains("?") ? "&" : "?") + "schema=bench_" + UUID().uuidString.lowercased().filter(\.isHexDigit)
    let logger = {
        var logger = Logger(label: "beacon.bench")
        logger.logLevel = .error
        return logger
    }()
    @Sendable func open(_ stores: [PostgresStore]) async throws {
        guard stores.count < nodes else {
            return try await body(stores, "postgres", { stores.map(\.transactionTimings.total).reduce(0, +) })
        }
        try await PostgresStore.withStore(url: url, logger: logger) { try await open(stores + [$0]) }
    }
    try await open([])
}
