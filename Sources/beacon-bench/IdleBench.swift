import ArgumentParser
import BeaconClient
import BeaconCore
import BeaconTesting
import Foundation
import Synchronization

/// RSS of a separate `beacon serve` process per WebSocket connection, most of them idle, some active: the latency of the
/// active ones while the others hold their connections.
struct Idle: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Memory per connection of a beacon serve process, and the latency of the active ones among them.")

    @Option(help: "Connections measured, the active ones included (this process and the server each need one descriptor a connection).")
    var connections = 10_000
    @Option(help: "Of the connections, how many receive one message a second (as 10 devices of each of active/10 users).")
    var active = 1000
    @Option(help: "Seconds of active traffic (at most 3,600).") var seconds = 10
    @Option(help: "The beacon executable (default: next to this one).") var beacon: String?

    /// Devices per active user: a message to the user reaches each of them.
    static let devicesPerActiveUser = 10

    func run() async throws {
        guard (1...1_000_000).contains(connections), (1...3600).contains(seconds) else {
            throw ValidationError("--connections must be from 1 to 1,000,000, --seconds from 1 to 3,600")
        }
        guard connections >= active, active == 0 || active >= 2 * Self.devicesPerActiveUser, active % Self.devicesPerActiveUser == 0
        else {
            throw ValidationError(
                "--active must be 0 or a multiple of \(Self.devicesPerActiveUser) from \(2 * Self.devicesPerActiveUser), at most --connections"
            )
        }
        let directory = StoreKind.temporaryDirectory("beacon-idle")
        let executable = beacon.map { URL(fileURLWithPath: $0) } ?? BeaconProcess.executable
        let created = try await runToExit(executable, ["app", "create", "acme/chat", "--json", "--data-dir", directory.path])
        guard created.status == 0 else { throw TestFailure("beacon app create exited with \(created.status)") }
        let credentials = try JSONDecoder().decode(JSONValue.self, from: created.output)
        let serve = try await ServerProcess.start(dataDirectory: directory, simulator: nil, executable: executable)
        defer { serve.process.signal(SIGKILL) }
        let baseURL = serve.baseURL
        let appToken = try await serve.token(
            [
                "grant_type": "client_credentials", "client_id": credentials["client_id"] ?? "",
                "client_secret": credentials["client_secret"] ?? "",
            ])
        _ = try await serve.rest("POST", "/users", ["username": "idle", "password": "pw"], token: appToken)
        let idleToken = try await serve.token(["grant_type": "password", "username": "idle", "password": "pw"])
        let activeUsers = (0..<active / Self.devicesPerActiveUser).map { "act\($0)" }
        for batch in stride(from: 0, to: activeUsers.count, by: 50) {
            let users = activeUsers[batch..<min(batch + 50, activeUsers.count)].map {
                JSONValue.object(["username": .string($0), "password": "pw"])
            }
            _ = try await serve.rest("POST", "/users", .array(users), token: appToken)
        }
        var activeTokens: [String] = []
        for name in activeUsers {
            activeTokens.append(try await serve.token(["grant_type": "password", "username": .string(name), "password": "pw"]))
        }

        /// Connects `count` devices, 200 at a time: device `device(i)` of the user `login(i)` names; returned in index order.
        func connect(
            _ count: Int, device: @escaping @Sendable (Int) -> String, login: @escaping @Sendable (Int) -> (token: String, username: String)
        )
            async throws -> [BeaconClient]
        {
            try await withThrowingTaskGroup(of: (Int, BeaconClient).self) { group in
                var clients: [(Int, BeaconClient)] = []
                var (started, running) = (0, 0)
                while started < count || running > 0 {
                    while started < count && running < 200 {
                        let index = started
                        group.addTask {
                            let client = BeaconClient(
                                options: BeaconOptions(
                                    appKey: "acme#chat", serverURL: baseURL, deviceID: device(index), storage: MemoryStorage()))
                            let (token, username) = login(index)
                            try await client.login(token: token, username: username)
                            return (index, client)
                        }
                        started += 1
                        running += 1
                    }
                    if let client = try await group.next() {
                        clients.append(client)
                        running -= 1
                    }
                }
                return clients.sorted { $0.0 < $1.0 }.map(\.1)  // in index order, whatever order they connected in
            }
        }
        // Warm up with a few connections so that one-time allocations are not counted per connection.
        let warmUp = try await connect(100, device: { "w\($0)" }, login: { _ in (idleToken, "idle") })
        try await Task.sleep(for: .seconds(1))
        let before = residentBytes(pid: serve.process.child.processIdentifier)
        let idle = try await connect(connections - active, device: { "d\($0)" }, login: { _ in (idleToken, "idle") })
        let perUser = Self.devicesPerActiveUser
        let tokens = activeTokens
        let busy = try await connect(
            active, device: { "a\($0)" }, login: { (tokens[$0 / perUser], "act\($0 / perUser)") })
        try await Task.sleep(for: .seconds(2))
        let after = residentBytes(pid: serve.process.child.processIdentifier)
        let perConnection = Double(after - before) / Double(connections)
        print("idle: \(connections) connections (+100 warm-up) to a separate beacon serve process, \(active) of them active")
        print("server RSS before \(before / 1024 / 1024) MiB, after \(after / 1024 / 1024) MiB")
        print("RSS per connection: \(format(perConnection / 1024, 1)) KiB (aim 20 KiB, ratio \(format(perConnection / 20_480)))")
        if !activeUsers.isEmpty {
            let (latencies, failedSends) = try await Self.exchange(busy, users: activeUsers, seconds: seconds)
            print(
                "active: \(active) connections (\(activeUsers.count) users × \(perUser) devices) each receiving a message a second for "
                    + "\(seconds) s: \(latencies.count) of \(active * seconds) delivered"
                    + (failedSends == 0 ? "" : " (\(failedSends) sends failed or were cut short)"))
            print(
                "active latency ms: p50 \(format(percentile(latencies, 0.5))) p99 \(format(percentile(latencies, 0.99))) "
                    + "max \(format(latencies.last ?? .nan)) (aim p99 ≤ 20 ms, ratio \(format(percentile(latencies, 0.99) / 20)))")
        }
        _ = (warmUp, idle)  // held open until here
    }

    /// Each active user sends a message a second to the next user, spread over the second; each of the receiver's devices
    /// measures the time from the send (the message carries it). Returns the latencies (ms), sorted, and how many sends
    /// failed or had not ended when the wait for the deliveries did.
    static func exchange(_ devices: [BeaconClient], users: [String], seconds: Int) async throws -> (latencies: [Double], failedSends: Int) {
        let latencies = LatencyLog()
        let expected = devices.count * seconds
        let receivers = Task {
            await withTaskGroup(of: Void.self) { group in
                for (index, device) in devices.enumerated() {
                    let username = users[index / devicesPerActiveUser]
                    group.addTask {
                        // A message the user sent reaches their other devices too: only what others sent them counts.
                        for await message in device.messages where message.to == username && message.from != username {
                            guard case .number(let sentAt) = message.ext["t"], let latency = milliseconds(since: sentAt) else { continue }
                            _ = latencies.record(latency)
                        }
                    }
                }
            }
        }
        defer { receivers.cancel() }
        try await Task.sleep(for: .milliseconds(200))  // the receivers are listening
        // Sends are not awaited one by one: one that waits for a reconnect must not hold up the schedule or the report.
        let unfinished = Count()
        var sends: [Task<Void, Never>] = []
        defer { for send in sends { send.cancel() } }
        let start = monotonicNanoseconds()
        for second in 0..<seconds {
            for (index, user) in users.enumerated() {
                let due = start + UInt64(second) * 1_000_000_000 + UInt64(index) * 1_000_000_000 / UInt64(users.count)
                let now = monotonicNanoseconds()
                if due > now { try await Task.sleep(for: .nanoseconds(Int(due - now))) }
                let sender = devices[index * devicesPerActiveUser]
                let receiver = users[(index + 1) % users.count]
                unfinished.add(1)
                sends.append(
                    Task {
                        let message = OutgoingChatMessage(
                            to: receiver, content: .text("\(user) \(second)"), ext: ["t": .number(Double(monotonicNanoseconds()))])
                        if (try? await sender.send(message)) != nil { unfinished.add(-1) }
                    })
            }
        }
        // Until every delivery is in, for 30 s at most.
        let deadline = monotonicNanoseconds() + 30_000_000_000
        while latencies.values.count < expected, monotonicNanoseconds() < deadline { try await Task.sleep(for: .milliseconds(20)) }
        receivers.cancel()
        await receivers.value
        return (latencies.values.sorted(), unfinished.value)
    }
}

/// A count several tasks change.
final class Count: Sendable {
    private let count = Mutex(0)
    func add(_ amount: Int) { count.withLock { $0 += amount } }
    var value: Int { count.withLock { $0 } }
}
