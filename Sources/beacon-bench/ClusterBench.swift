import APNsSimulator
import ArgumentParser
import BeaconClient
import BeaconCore
import BeaconServer
import BeaconStorage
import BeaconTesting
import Crypto
import Foundation

/// Live delivery between clients spread over N nodes on one PostgreSQL (or one node on SQLite, for comparison).
struct Cluster: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Live delivery across nodes: latency, throughput, database transactions, letters and notifications per message.")

    @Option(help: "sqlite, or a postgres:// URL (default: BEACON_DATABASE_URL); a fresh schema is used and left behind.")
    var database: String?
    @Option(help: "Nodes in this process, each with its own connection pool (PostgreSQL only).") var nodes = 1
    @Option var clients = 300
    @Option(help: "Offered messages per second.") var rate = 500
    @Option(help: "Seconds of sending.") var seconds = 10
    @Flag(help: "An app that pushes: a push configuration (to an in-process APNs simulator) and every client's device bound.")
    var push = false
    @Flag(
        help: """
            With --push: the clients write to as many other users, bound but never connected, so that every message is \
            pushed; prints the pushes the simulator received instead of latencies.
            """)
    var offline = false

    func validate() throws {
        if offline && !push { throw ValidationError("--offline needs --push") }
    }

    func run() async throws {
        try await withBenchStores(
            database: database ?? ProcessInfo.processInfo.environment["BEACON_DATABASE_URL"] ?? "sqlite", nodes: nodes
        ) {
            stores, engine, transactions in
            // Push on, as in production; with `--push`, an app that has somewhere to push to.
            var options = TestBeacon.Options.bench(push: true)
            let simulator = push ? try APNsSimulator(logger: .init(label: "bench.sim")) : nil
            let simulatorTask = simulator.map { simulator in Task { try await simulator.run() } }
            defer { simulatorTask?.cancel() }
            options.push = simulator
            try await TestBeacon.run(stores: stores, directory: StoreKind.temporaryDirectory("beacon-bench"), options: options) {
                servers in
                try await measure(servers, engine: engine, simulator: simulator, transactions: transactions)
            }
        }
    }

    private func measure(
        _ servers: [TestBeacon], engine: String, simulator: APNsSimulator?, transactions: @Sendable () -> Int?
    ) async throws {
        let names = (0..<clients).map { "u\($0)" }
        let offlineNames = offline ? (0..<clients).map { "o\($0)" } : []
        try await servers[0].createUsers(names + offlineNames)
        if push {
            let server = servers[0]
            try await server.uploadP8(name: "ios", bundleID: "com.example.bench")
            guard let app = try await server.store.app(server.app) else { throw TestFailure("no app") }
            for (index, name) in (names + offlineNames).enumerated() {
                try await server.store.bind(
                    PushBinding(
                        username: name, deviceID: "bench", notifier: "ios", deviceToken: String(format: "%064x", index), boundAt: 0),
                    app: app.id)
            }
        }
        var connected: [BeaconClient] = []
        for (index, name) in names.enumerated() { connected.append(try await servers[index % servers.count].client(name, device: "bench")) }
        let devices = connected
        let total = rate * seconds
        let crossNode = (0..<total).filter { $0 % clients % servers.count != (($0 * 7 + 1) % clients) % servers.count }.count
        print(
            "cluster: \(engine)\(push ? ", an app that pushes" : "")\(offline ? " to offline users" : ""), \(servers.count) node(s), "
                + "\(clients) clients spread over them; offering \(rate) msg/s for \(seconds) s "
                + (offline ? "(\(total) messages, each pushed)" : "(\(total) messages, \(crossNode) between nodes)"))
        let transactionsBefore = transactions()
        let trafficBefore = servers.compactMap(\.server.clusterTraffic)
        let elapsed: Double
        if offline, let simulator {
            let pushedBefore = simulator.requestsReceived
            let start = monotonicNanoseconds()
            try await LiveLoad.offer(from: devices, to: offlineNames, rate: rate, seconds: seconds, start: start)
            // Every push the sends caused, or 30 s more at most.
            let deadline = monotonicNanoseconds() + 30_000_000_000
            while simulator.requestsReceived - pushedBefore < total, monotonicNanoseconds() < deadline {
                try await Task.sleep(for: .milliseconds(10))
            }
            elapsed = Double(monotonicNanoseconds() - start) / 1e9
            let pushed = simulator.requestsReceived - pushedBefore
            print("pushed \(pushed) of \(total) in \(format(elapsed)) s: \(format(Double(pushed) / elapsed, 0)) pushes/s")
        } else {
            let load = try await LiveLoad.run(devices: devices, names: names, rate: rate, seconds: seconds)
            let sorted = load.latencies
            elapsed = load.elapsed
            print("delivered \(sorted.count) of \(total) in \(format(elapsed)) s: \(format(Double(sorted.count) / elapsed, 0)) msg/s")
            print(
                "latency ms: p50 \(format(percentile(sorted, 0.5))) p99 \(format(percentile(sorted, 0.99))) max \(format(sorted.last ?? .nan))"
            )
            print("p99 of each second's sends (ms): \(load.p99BySecond.map { format($0, 0) }.joined(separator: " "))")
        }
        if let before = transactionsBefore, let after = transactions() {
            print("database transactions per message: \(format(Double(after - before) / Double(total)))")
        }
        let trafficAfter = servers.compactMap(\.server.clusterTraffic)
        if !trafficAfter.isEmpty {
            let letters = zip(trafficAfter, trafficBefore).map { $0.letters - $1.letters }.reduce(0, +)
            let notifications = zip(trafficAfter, trafficBefore).map { $0.notifications - $1.notifications }.reduce(0, +)
            print(
                "letters per message: \(format(Double(letters) / Double(total))); NOTIFYs per message: "
                    + "\(format(Double(notifications) / Double(total))) (\(format(Double(notifications) / elapsed, 0))/s)")
        }
        for device in devices { await device.logout() }
    }
}
