import APNsSimulator
import ArgumentParser
import AsyncHTTPClient
import BeaconAPNs
import BeaconCore
import BeaconServer
import BeaconStorage
import BeaconTesting
import Crypto
import Foundation
import NIOCore
import NIOPosix
import NIOSSL

/// CPU seconds (user + system) used by this process, or by its reaped children.
func cpuSeconds(children: Bool = false) -> Double {
    var usage = rusage()
    getrusage(children ? RUSAGE_CHILDREN.rawValue : RUSAGE_SELF.rawValue, &usage)
    return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
}

/// Notifications per second into the simulator: Beacon's client beside h2load (the ceiling) and aioapns (a peer).
struct APNs: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "apns", abstract: "APNs client throughput vs h2load and aioapns, same simulator.")

    @Option var notifications = 50_000
    @Option var connections = 4
    @Option(help: "Notifications for the slower aioapns run.") var aioapnsNotifications = 10_000

    func run() async throws {
        let simulator = try await SimulatorProcess.start(in: FileManager.default.temporaryDirectory)
        defer { simulator.process.signal(SIGKILL) }
        guard let port = URL(string: simulator.apnsURL)?.port else { throw TestFailure("no port in \(simulator.apnsURL)") }
        let caFile = simulator.caFile
        let key = APNsSigningKey(teamID: "BENCHTEAM1", keyID: "BENCHKEY01", privateKey: P256.Signing.PrivateKey())
        _ = try await simulator.control(
            "POST", "/keys",
            [
                "team_id": .string(key.teamID), "key_id": .string(key.keyID),
                "public_key_pem": .string(key.privateKey.publicKey.pemRepresentation),
            ])
        let token = String(repeating: "ab", count: 32)
        let payload = #"{"aps":{"alert":{"body":"You have a new message"},"badge":1,"sound":"default"},"f":"alice","t":"bob","m":"1"}"#
        let roots = try NIOSSLCertificate.fromPEMFile(caFile)
        print("apns: \(notifications) notifications into `beacon apns-sim` over loopback TLS/HTTP/2, \(connections) connections")

        // Beacon's client.
        let client = APNsClient(
            credentials: .token(key), endpoint: APNsEndpoint(host: "127.0.0.1", port: port, trustRoots: roots),
            configuration: .init(connections: connections, maxInFlight: 1000, requestTimeout: .seconds(30)))
        // Warm up.
        _ = try await client.send(APNsNotification(deviceToken: token, topic: "com.example.bench", payload: Array(payload.utf8)))
        let cpuBefore = cpuSeconds()
        let start = monotonicNanoseconds()
        // A fixed number of senders, each sending its share in turn (as a push worker does).
        let senders = 1000
        try await withThrowingTaskGroup(of: Void.self) { group in
            for sender in 0..<senders {
                group.addTask {
                    for _ in stride(from: sender, to: notifications, by: senders) {
                        _ = try await client.send(
                            APNsNotification(deviceToken: token, topic: "com.example.bench", priority: 10, payload: Array(payload.utf8)))
                    }
                }
            }
            try await group.waitForAll()
        }
        let beaconSeconds = Double(monotonicNanoseconds() - start) / 1e9
        let beaconCPU = (cpuSeconds() - cpuBefore) / Double(notifications) * 1e6
        await client.shutdown()
        let beaconRate = Double(notifications) / beaconSeconds
        print("beacon APNsClient: \(format(beaconRate, 0)) notifications/s, client CPU \(format(beaconCPU, 1)) µs/notification")

        // The alternative the issue asked to measure: AsyncHTTPClient (HTTP/2, one JWT for the client) with the
        // same concurrency.
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.trustRoots = .certificates(roots)
        var ahcConfiguration = HTTPClient.Configuration(tlsConfiguration: tls)
        ahcConfiguration.httpVersion = .automatic
        let http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: ahcConfiguration)
        let bearer = "bearer " + (try key.token(issuedAt: Int64(Date().timeIntervalSince1970)))
        func ahcSend() async throws {
            var request = HTTPClientRequest(url: "https://127.0.0.1:\(port)/3/device/\(token)")
            request.method = .POST
            request.headers.add(name: "apns-topic", value: "com.example.bench")
            request.headers.add(name: "apns-push-type", value: "alert")
            request.headers.add(name: "apns-priority", value: "10")
            request.headers.add(name: "apns-id", value: UUID().uuidString.lowercased())
            request.headers.add(name: "authorization", value: bearer)
            request.body = .bytes(ByteBuffer(string: payload))
            let response = try await http.execute(request, timeout: .seconds(30))
            guard response.status == .ok else { throw TestFailure("AsyncHTTPClient: \(response.status)") }
        }
        try await ahcSend()
        let ahcCPUBefore = cpuSeconds()
        let ahcStart = monotonicNanoseconds()
        let ahcFailures = await withTaskGroup(of: [String].self) { group in
            for sender in 0..<senders {
                group.addTask {
                    var failures: [String] = []
                    for _ in stride(from: sender, to: notifications, by: senders) {
                        do { try await ahcSend() } catch { failures.append("\(error)") }
                    }
                    return failures
                }
            }
            var all: [String] = []
            for await failures in group { all += failures }
            return all
        }
        let ahcRate = Double(notifications) / (Double(monotonicNanoseconds() - ahcStart) / 1e9)
        let ahcCPU = (cpuSeconds() - ahcCPUBefore) / Double(notifications) * 1e6
        try await http.shutdown()
        print(
            "AsyncHTTPClient:   \(format(ahcRate, 0)) notifications/s, client CPU \(format(ahcCPU, 1)) µs/notification"
                + (ahcFailures.isEmpty ? "" : " (\(ahcFailures.count) of \(notifications) failed, e.g. \(ahcFailures[0].prefix(120)))"))

        // h2load: the same request, the same simulator.
        let payloadFile = FileManager.default.temporaryDirectory.appendingPathComponent("bench-payload.json")
        try payload.write(to: payloadFile, atomically: true, encoding: .utf8)
        let jwt = try key.token(issuedAt: Int64(Date().timeIntervalSince1970))
        let childCPUBefore = cpuSeconds(children: true)
        let h2load = try await runToExit(
            URL(fileURLWithPath: "/usr/bin/h2load"),
            [
                "-n", String(notifications), "-c", String(connections), "-m", "100", "-t", "1", "-d", payloadFile.path,
                "-H", "apns-topic: com.example.bench", "-H", "apns-push-type: alert", "-H", "authorization: bearer \(jwt)",
                "https://127.0.0.1:\(port)/3/device/\(token)",
            ], timeout: .seconds(600))
        let h2Text = String(decoding: h2load.output, as: UTF8.self)
        let h2CPU = (cpuSeconds(children: true) - childCPUBefore) / Double(notifications) * 1e6
        let h2Rate =
            h2Text.split(separator: "\n").first { $0.hasPrefix("finished in") }
            .flatMap { line in
                line.split(separator: ",").dropFirst().first.flatMap {
                    Double($0.trimmingCharacters(in: .whitespaces).split(separator: " ")[0])
                }
            } ?? .nan
        let h2Status = h2Text.split(separator: "\n").first { $0.contains("status codes:") }.map(String.init) ?? "?"
        print(
            "h2load:            \(format(h2Rate, 0)) notifications/s, CPU \(format(h2CPU, 1)) µs/notification (\(h2Status.trimmingCharacters(in: .whitespaces)))"
        )

        // aioapns, pointed at the simulator.
        let keyFile = FileManager.default.temporaryDirectory.appendingPathComponent("bench-key.p8")
        try key.privateKey.pemRepresentation.write(to: keyFile, atomically: true, encoding: .utf8)
        let script = """
            import asyncio, ssl, sys, time
            from aioapns import APNs, NotificationRequest
            from aioapns.connection import APNsDevelopmentClientProtocol
            APNsDevelopmentClientProtocol.APNS_SERVER = "127.0.0.1"
            APNsDevelopmentClientProtocol.APNS_PORT = \(port)
            async def main():
                context = ssl.create_default_context(cafile="\(caFile)")
                apns = APNs(key=open("\(keyFile.path)").read(), key_id="\(key.keyID)", team_id="\(key.teamID)", topic="com.example.bench",
                            use_sandbox=True, ssl_context=context, max_connections=10)
                payload = {"aps": {"alert": {"body": "You have a new message"}, "badge": 1, "sound": "default"}, "f": "alice", "t": "bob", "m": "1"}
                n = int(sys.argv[1])
                sem = asyncio.Semaphore(1000)
                ok = 0
                async def one():
                    nonlocal ok
                    async with sem:
                        r = await apns.send_notification(NotificationRequest(device_token="\(token)", message=payload))
                        ok += r.is_successful
                await one()
                start = time.time()
                await asyncio.gather(*(one() for _ in range(n)))
                print(f"{n / (time.time() - start):.0f} {ok}")
            asyncio.run(main())
            """
        let pythonCPUBefore = cpuSeconds(children: true)
        let python = try await runToExit(
            URL(fileURLWithPath: "/usr/bin/env"), ["python3", "-c", script, String(aioapnsNotifications)], timeout: .seconds(600))
        let pythonText = String(decoding: python.output, as: UTF8.self)
        let pythonCPU = (cpuSeconds(children: true) - pythonCPUBefore) / Double(aioapnsNotifications) * 1e6
        let parts = pythonText.split(separator: " ")
        let aioRate = parts.first.flatMap { Double($0.trimmingCharacters(in: .whitespacesAndNewlines)) } ?? .nan
        print(
            "aioapns:           \(format(aioRate, 0)) notifications/s, CPU \(format(pythonCPU, 1)) µs/notification (\(parts.dropFirst().first.map { $0.trimmingCharacters(in: .whitespacesAndNewlines) } ?? "?") accepted of \(aioapnsNotifications))"
        )
        print("ratio beacon / h2load:  \(format(beaconRate / h2Rate)) (aim ≥ 0.8; client CPU aim ≤ 20 µs/notification)")
        print("ratio beacon / AsyncHTTPClient: \(format(beaconRate / ahcRate))")
        print("ratio beacon / aioapns: \(format(beaconRate / aioRate)) (aim ≥ 10)")
    }
}

/// One group message to 10,000 offline members, each with a binding: time until the simulator holds every push.
struct Fanout: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fanout", abstract: "Group fan-out through the whole push path into the simulator.")

    @Option var members = 10_000
    @Option(help: "sqlite (default), or a postgres:// URL (a fresh schema is used and left behind).") var database = "sqlite"
    @Option(help: "Nodes in this process sharing the PostgreSQL database (each pushes).") var nodes = 1

    func run() async throws {
        // The simulator answers on a thread of its own, so that its share of the two cores can be told apart.
        // (Not shut down: it lives as long as this benchmark process.)
        let simulatorLoops = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let simulatorThread = try await simulatorLoops.next().submit { threadID() }.get()
        let simulator = try APNsSimulator(configuration: .init(eventLoopGroup: simulatorLoops), logger: .init(label: "bench.sim"))
        let simulatorTask = Task { try await simulator.run() }
        defer { simulatorTask.cancel() }
        let members = self.members
        try await withBenchStores(database: database, nodes: nodes) { stores, engine, transactions in
            var options = TestBeacon.Options.bench(push: true)
            options.push = simulator
            try await TestBeacon.run(stores: stores, directory: StoreKind.temporaryDirectory("beacon-bench"), options: options) { servers in
                try await Self.measure(
                    servers, members: members, simulator: simulator, simulatorThread: simulatorThread, engine: engine,
                    transactions: transactions)
            }
        }
    }

    private static func measure(
        _ servers: [TestBeacon], members: Int, simulator: APNsSimulator, simulatorThread: Int32, engine: String,
        transactions: @Sendable () -> Int?
    ) async throws {
        let server = servers[0]
        guard let app = try await server.store.app(server.app) else { throw TestFailure("no app") }
        let names = (0..<members).map { "m\($0)" }
        _ = try await server.store.createUsers(names.map { NewUser(username: $0, passwordHash: "-") }, app: app.id, now: 0)
        try await server.uploadP8(name: "ios", bundleID: "com.example.bench")
        for (index, name) in names.enumerated() {
            try await server.store.bind(
                PushBinding(username: name, deviceID: "phone", notifier: "ios", deviceToken: String(format: "%064x", index), boundAt: 0),
                app: app.id)
        }
        try await server.store.createGroup(
            GroupRecord(appID: app.id, id: "g1", name: "all", description: "", owner: names[0], maxUsers: 100_000, createdAt: 0),
            members: names)
        print("fanout: \(engine), \(servers.count) node(s); 1 group message to \(members - 1) offline members with bindings")
        let transactionsBefore = transactions()
        let simulatorCPUBefore = threadCPUSeconds(simulatorThread)
        let processCPUBefore = processCPUSeconds()
        let start = monotonicNanoseconds()
        let startedAt = Int64(Date().timeIntervalSince1970 * 1000)
        let answer = try await server.rest(
            "POST", "/messages/chatgroups", ["from": .string(names[0]), "to": ["g1"], "type": "txt", "body": ["msg": "to everyone"]]
        ).json
        let stored = Double(monotonicNanoseconds() - start) / 1e6
        guard answer["data"]?["g1"] != nil else { throw TestFailure("send failed: \(answer)") }
        let expected = members - 1
        while simulator.deliveries().count < expected {
            try await Task.sleep(for: .milliseconds(5))
            if Double(monotonicNanoseconds() - start) / 1e9 > 120 { break }
        }
        let elapsed = Double(monotonicNanoseconds() - start) / 1e9
        let delivered = simulator.deliveries().count
        print(
            "stored and acknowledged after \(format(stored, 0)) ms; simulator holds \(delivered) of \(expected) after \(format(elapsed)) s")
        print(
            "end-to-end pushes/s: \(format(Double(delivered) / elapsed, 0)) (aim ≥ 15,000, ratio \(format(Double(delivered) / elapsed / 15_000)))"
        )
        // When the pushes arrived (the simulator's clock, ms after the send began): storing and pushing apart.
        let arrivals = simulator.deliveries().map { $0.receivedAt - startedAt }.sorted()
        if !arrivals.isEmpty {
            let at = { (share: Double) in arrivals[min(arrivals.count - 1, Int(Double(arrivals.count) * share))] }
            print(
                "pushes in the simulator after (ms from the send): first \(arrivals[0]), 10 % \(at(0.1)), half \(at(0.5)), 90 % \(at(0.9)), last \(arrivals[arrivals.count - 1])"
            )
        }
        let simulatorCPU = threadCPUSeconds(simulatorThread) - simulatorCPUBefore
        let processCPU = processCPUSeconds() - processCPUBefore
        print(
            "CPU over those \(format(elapsed)) s: the whole process \(format(processCPU)) s (\(format(processCPU / elapsed / 2 * 100, 0)) % of the two cores), "
                + "of which the in-process simulator \(format(simulatorCPU)) s (\(format(simulatorCPU / elapsed / 2 * 100, 0)) % of the two cores); "
                + "without it: \(format(Double(delivered) / max(processCPU - simulatorCPU, 0.001), 0)) pushes per CPU-second")
        if let before = transactionsBefore, let after = transactions() {
            print("database transactions: \(after - before) (\(format(Double(after - before) / Double(expected), 3)) per push)")
        }
    }
}
