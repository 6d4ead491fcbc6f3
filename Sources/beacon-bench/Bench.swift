import ArgumentParser
import BeaconClient
import BeaconCore
import BeaconServer
import BeaconStorage
import BeaconTesting
import Foundation
import Synchronization

@main
struct Bench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "beacon-bench", abstract: "Beacon benchmarks: prints figures, asserts nothing.",
        subcommands: [Online.self, Idle.self, Sync.self, APNs.self, Fanout.self, Rules.self, Cluster.self])
}

/// 1,000 connected clients exchanging messages at a fixed offered rate.
struct Online: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Live delivery: throughput and end-to-end latency.")

    @Option var clients = 1000
    @Option(help: "Offered messages per second.") var rate = 2000
    @Option(help: "Seconds of sending.") var seconds = 10

    func run() async throws {
        let (clients, rate, seconds) = (clients, rate, seconds)
        try await withBenchServer { server in
            let names = (0..<clients).map { "u\($0)" }
            try await server.createUsers(names)
            var connected: [BeaconClient] = []
            for name in names { connected.append(try await server.client(name, device: "bench")) }
            let devices = connected
            print("online: \(clients) clients connected; offering \(rate) msg/s for \(seconds) s (\(rate * seconds) messages)")
            let load = try await LiveLoad.run(devices: devices, names: names, rate: rate, seconds: seconds)
            let (total, sendSeconds, elapsed, sorted) = (rate * seconds, load.sendSeconds, load.elapsed, load.latencies)
            print("sent \(total) in \(format(sendSeconds)) s; delivered \(sorted.count) in \(format(elapsed)) s")
            print(
                "delivered msg/s: \(format(Double(sorted.count) / elapsed, 0)) (offered \(rate), ratio \(format(Double(sorted.count) / elapsed / Double(rate))))"
            )
            print(
                "latency ms: p50 \(format(percentile(sorted, 0.5))) p99 \(format(percentile(sorted, 0.99))) max \(format(sorted.last ?? .nan))"
            )
            for device in devices { await device.logout() }
        }
    }
}

/// Clients sending to each other at an offered rate (sender `i mod n` to receiver `(7i + 1) mod n`), each message
/// carrying its send time so that the receiver measures the end-to-end latency.
enum LiveLoad {
    struct Result {
        var sendSeconds: Double
        var elapsed: Double
        /// Latencies of the messages received (ms), sorted.
        var latencies: [Double]
        /// The 99th percentile of the latencies of the messages sent in each second of the run (ms): where the tail is.
        var p99BySecond: [Double]
    }

    static func run(devices: [BeaconClient], names: [String], rate: Int, seconds: Int) async throws -> Result {
        let latencies = LatencyLog()
        let total = rate * seconds
        let start = monotonicNanoseconds()
        let receivers = Task {
            await withTaskGroup(of: Void.self) { group in
                for device in devices {
                    group.addTask {
                        for await message in device.messages {
                            guard case .number(let sentAt) = message.ext["t"], let latency = milliseconds(since: sentAt) else { continue }
                            let second = Int(max(0, sentAt - Double(start)) / 1e9)
                            if latencies.record(latency, sentInSecond: second) >= total { return }
                        }
                    }
                }
                await group.next()
                group.cancelAll()
            }
        }
        try await offer(from: devices, to: names, rate: rate, seconds: seconds, start: start)
        let sendSeconds = Double(monotonicNanoseconds() - start) / 1e9
        let waitLimit = Task {
            try await Task.sleep(for: .seconds(30))
            receivers.cancel()
        }
        await receivers.value
        waitLimit.cancel()
        return Result(
            sendSeconds: sendSeconds, elapsed: Double(monotonicNanoseconds() - start) / 1e9, latencies: latencies.values.sorted(),
            p99BySecond: latencies.p99BySecond)
    }
}

extension LiveLoad {
    /// Sends `rate` messages a second for `seconds` from `devices` (sender `i mod n`) to `receivers` (`(7i + 1) mod m`),
    /// from `start` (monotonic ns), each carrying its send time; returns once every send was answered.
    static func offer(from devices: [BeaconClient], to receivers: [String], rate: Int, seconds: Int, start: UInt64) async throws {
        let tick = 10  // ms
        let perTick = max(1, rate * tick / 1000)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<(rate * seconds) {
                if index % perTick == 0 {
                    let due = start + UInt64(index / perTick) * UInt64(tick) * 1_000_000
                    let now = monotonicNanoseconds()
                    if due > now { try await Task.sleep(for: .nanoseconds(Int(due - now))) }
                }
                let sender = devices[index % devices.count]
                let receiver = receivers[(index * 7 + 1) % receivers.count]
                group.addTask {
                    try await sender.send(
                        OutgoingChatMessage(to: receiver, content: .text("m\(index)"), ext: ["t": .number(Double(monotonicNanoseconds()))]))
                }
            }
            try await group.waitForAll()
        }
    }
}

final class LatencyLog: Sendable {
    private let samples = Mutex<[(second: Int?, milliseconds: Double)]>([])
    /// Adds a sample (of a message sent in that second of the run, when given); returns how many there are.
    func record(_ milliseconds: Double, sentInSecond second: Int? = nil) -> Int {
        samples.withLock { all in
            all.append((second, milliseconds))
            return all.count
        }
    }
    var values: [Double] { samples.withLock { $0.map(\.milliseconds) } }
    /// The 99th percentile of each second's samples, in order of the seconds.
    var p99BySecond: [Double] {
        let bySecond = Dictionary(
            grouping: samples.withLock { $0 }.compactMap { sample in sample.second.map { ($0, sample.milliseconds) } }
        ) {
            $0.0
        }
        return bySecond.keys.sorted().map { percentile(bySecond[$0, default: []].map(\.1).sorted(), 0.99) }
    }
}

/// A device reconnects with 10,000 stored messages.
struct Sync: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Catch-up: time for a device to receive 10,000 stored messages.")

    @Option var messages = 10_000

    func run() async throws {
        let messages = messages
        try await withBenchServer { server in
            try await server.createUsers("alice", "bob")
            guard let app = try await server.store.app(server.app) else { throw TestFailure("no app") }
            var generator = MessageIDGenerator()
            for index in 0..<messages {
                let now = Int64(Date().timeIntervalSince1970 * 1000)
                let message = Message(
                    id: generator.next(nowMilliseconds: now), from: "alice", to: "bob", chatType: .chat, type: .txt,
                    body: ["msg": .string("stored message \(index)")], timestamp: now)
                _ = try await server.store.append(message, app: app.id, deliveries: [Delivery(username: "bob")])
            }
            let start = monotonicNanoseconds()
            let bob = try await server.client("bob", device: "bench")
            var received = 0
            for await _ in bob.messages {
                received += 1
                if received == messages { break }
            }
            let elapsed = Double(monotonicNanoseconds() - start) / 1e6
            print(
                "sync: \(messages) stored messages received in \(format(elapsed, 0)) ms including login (aim 200 ms, ratio \(format(elapsed / 200)))"
            )
            print("rate: \(format(Double(messages) / elapsed * 1000, 0)) msg/s")
            await bob.logout()
        }
    }
}
