import BeaconCore
import BeaconProtocol
import BeaconTesting
import Crypto
import Foundation
import HummingbirdWSClient
import Logging
import Synchronization
import Testing

/// Real `beacon serve` and `beacon apns-sim` processes: SIGTERM drains, kill -9 loses nothing acknowledged.
@Suite(.serialized) struct CrashTests {
    static let bundleID = "com.example.chat"
    static let receivers = (0..<4).map { "r\($0)" }

    /// What the load did: acknowledged sends and those whose answer the crash swallowed.
    struct Ledger: Sendable {
        /// A send: who, to whom, its order among that sender's sends, and its client reference.
        struct Send: Sendable, Hashable {
            var sender: String
            var receiver: String
            var index: Int
            var reference: String
            var overWebSocket: Bool
        }
        var acknowledged: [Send: String] = [:]
        var unanswered: [Send] = []
    }

    @Test func killMinus9UnderLoadLosesNothingAcknowledgedAndPushesEverything() async throws {
        try await Self.withBeaconProcesses { data, simulator, server, appToken in
            var faults: JSONValue = ["delay_ms": 30]  // APNs' own latency: pushes are in flight when the kill comes
            _ = try await simulator.control("PUT", "/faults", faults)
            try await Self.provision(server, simulator: simulator, appToken: appToken)
            let senderTokens = try await [server.token(Self.password("s3")), server.token(Self.password("s4"))]
            // r0 has a device online that reads and acknowledges nothing: its messages are skipped `online`, and the
            // crash leaves them unacknowledged. After the restart they must be pushed to r0's phone all the same.
            let watcherToken = try await server.token(Self.password("r0"))
            let watcher = Task {
                try await WebSocketClient.connect(
                    url: server.webSocketURL(token: watcherToken, device: "watcher"), logger: Logger(label: "test")
                ) {
                    inbound, _, _ in
                    for try await _ in inbound.messages(maxSize: 1 << 20) {}
                }
            }
            defer { watcher.cancel() }

            // Load: three REST senders (app token, Idempotency-Key) and two WebSocket senders (send ids), each to the
            // four offline receivers in turn, until the process dies.
            let ledger = Locked(Ledger())
            let load = Task {
                await withTaskGroup(of: Void.self) { group in
                    for sender in ["s0", "s1", "s2"] {
                        group.addTask { await Self.restSender(sender, server: server, appToken: appToken, ledger: ledger) }
                    }
                    for (sender, token) in zip(["s3", "s4"], senderTokens) {
                        group.addTask { await Self.webSocketSender(sender, token: token, server: server, ledger: ledger) }
                    }
                }
            }
            try await waitUntil("400 sends acknowledged", timeout: .seconds(120)) { ledger.withLock { $0.acknowledged.count } >= 400 }
            server.process.signal(SIGKILL)
            await load.value
            _ = await server.process.exitStatus(within: .seconds(10))
            let (acknowledgedAtCrash, unanswered) = ledger.withLock { ($0.acknowledged, $0.unanswered) }

            // Restart on the same directory; retry every unanswered send with its reference: each is stored once.
            let restarted = try await ServerProcess.start(dataDirectory: data, simulator: simulator)
            let retried = try await Self.retry(unanswered, server: restarted, appToken: appToken)
            var expected = acknowledgedAtCrash
            for (send, id) in retried { expected[send] = id }
            #expect(Set(expected.values).count == expected.count, "two sends got one message id")

            // Every stored message is pushed to its receiver's phone (at least once).
            faults = [:]
            _ = try await simulator.control("PUT", "/faults", faults)
            let wanted = Dictionary(uniqueKeysWithValues: expected.map { ($0.value, Self.deviceToken(for: $0.key.receiver)) })
            var pushes: [String: Int] = [:]
            // (Not thrown: what is missing is reported below.)
            try? await waitUntil("every wanted message pushed", timeout: .seconds(60), interval: .milliseconds(100)) {
                pushes = try await Self.pushesByMessage(simulator)
                return wanted.keys.allSatisfy { pushes[$0, default: 0] > 0 }
            }
            let unpushed = wanted.keys.filter { pushes[$0, default: 0] == 0 }
            #expect(unpushed.isEmpty, "\(unpushed.count) stored messages were never pushed")
            let duplicates = pushes.values.reduce(0) { $0 + max(0, $1 - 1) }
            // Documented bound (README): the pushes in flight at the crash, at most the APNs client's in-flight limit
            // (1,000 per configuration) plus one batch of unwritten outcomes (256).
            #expect(duplicates <= 1256)

            // Every receiver syncs each of its messages once, in each sender's order.
            var lost = 0
            for receiver in Self.receivers {
                let token = try await restarted.token(Self.password(receiver))
                let stored = try await restarted.storedMessages(token: token, device: "tablet")
                let ids = stored.map(\.messageID)
                #expect(Set(ids).count == ids.count, "\(receiver) got a message twice")
                #expect(zip(stored, stored.dropFirst()).allSatisfy { $0.seq < $1.seq })
                let mine = expected.filter { $0.key.receiver == receiver }
                lost += mine.values.filter { !ids.contains($0) }.count
                #expect(Set(ids) == Set(mine.values), "\(receiver): stored messages differ from the acknowledged sends")
                let position = Dictionary(uniqueKeysWithValues: stored.enumerated().map { ($1.messageID, $0) })
                for sender in Set(mine.keys.map(\.sender)) {
                    let order = mine.filter { $0.key.sender == sender }.sorted { $0.key.index < $1.key.index }.compactMap {
                        position[$0.value]
                    }
                    #expect(order == order.sorted(), "\(sender) → \(receiver) out of order")
                }
            }
            #expect(lost == 0)
            print(
                "kill -9 under load: \(acknowledgedAtCrash.count) acknowledged, \(unanswered.count) unanswered (retried, \(retried.count) stored once), "
                    + "lost \(lost), pushes \(pushes.values.reduce(0, +)) for \(wanted.count) messages, duplicated \(duplicates)")
            await restarted.process.stop()
        }
    }

    @Test func sigtermTellsDevicesAndExitsCleanly() async throws {
        try await Self.withBeaconProcesses { _, simulator, server, appToken in
            // The simulator's control API refuses a delay its timers cannot hold (before: the next answer trapped it).
            let refused = try await REST.call(
                simulator.controlURL, "PUT", "/faults", body: ["delay_ms": 10_000_000_000_000], token: nil)
            #expect(refused.0 == 400)
            #expect(try await simulator.control("GET", "/deliveries")["count"] == 0)

            let created = try await server.rest("POST", "/users", ["username": "bob", "password": "pw"], token: appToken)
            #expect(created.status == 200)
            let token = try await server.token(Self.password("bob"))
            let frames = Mutex<[ServerFrame]>([])
            let device = Task {
                try await WebSocketClient.connect(url: server.webSocketURL(token: token, device: "phone"), logger: Logger(label: "test")) {
                    inbound, _, _ in
                    for try await message in inbound.messages(maxSize: 1 << 20) {
                        guard case .text(let text) = message, let frame = try? JSONDecoder().decode(ServerFrame.self, from: Data(text.utf8))
                        else { continue }
                        frames.withLock { $0.append(frame) }
                    }
                }
            }
            try await waitUntil("connected and synced", timeout: .seconds(30)) {
                frames.withLock { $0.contains { if case .synced = $0 { true } else { false } } }
            }
            server.process.signal(SIGTERM)
            let status = await server.process.exitStatus(within: .seconds(30))
            await server.process.stop()  // if it did not exit, its socket closes now and the device's read ends
            _ = try? await device.value
            #expect(frames.withLock { $0.contains(.closing(reason: "shutdown")) }, "\(frames.withLock { $0 })")
            #expect(status == 0)
        }
    }

    // MARK: Steps

    /// `beacon apns-sim`, an app made with `beacon app create`, and `beacon serve` on a fresh data directory.
    static func withBeaconProcesses(
        _ body: (_ data: URL, SimulatorProcess, ServerProcess, _ appToken: String) async throws -> Void
    ) async throws {
        try await withTemporaryDirectory { directory in
            let simulator = try await SimulatorProcess.start(in: directory)
            defer { Task { await simulator.process.stop() } }
            let data = directory.appendingPathComponent("data")
            let credentials = try await createApp(data)
            let server = try await ServerProcess.start(dataDirectory: data, simulator: simulator)
            defer { Task { await server.process.stop() } }
            let appToken = try await server.token(
                ["grant_type": "client_credentials", "client_id": .string(credentials.id), "client_secret": .string(credentials.secret)])
            try await body(data, simulator, server, appToken)
        }
    }

    static func password(_ username: String) -> JSONValue {
        ["grant_type": "password", "username": .string(username), "password": "pw"]
    }

    static func deviceToken(for receiver: String) -> String {
        String(SHA256.hash(data: Data(receiver.utf8)).map { String(format: "%02x", $0) }.joined())
    }

    /// `beacon app create`, as an operator runs it.
    static func createApp(_ data: URL, environment: [String: String] = [:]) async throws -> (id: String, secret: String) {
        let create = try await BeaconProcess(["app", "create", "acme/chat", "--json", "--data-dir", data.path], environment: environment)
        let line = try await create.line(containing: "client_secret")
        _ = await create.exitStatus(within: .seconds(30))
        let json = try JSONDecoder().decode(JSONValue.self, from: Data(line.utf8))
        return (try #require(json["client_id"]?.stringValue), try #require(json["client_secret"]?.stringValue))
    }

    /// Users, a p8 configuration the simulator trusts, and a bound phone per receiver.
    static func provision(_ server: ServerProcess, simulator: SimulatorProcess, appToken: String) async throws {
        let users = (0..<5).map { "s\($0)" } + receivers
        let created = try await server.rest(
            "POST", "/users", .array(users.map { ["username": .string($0), "password": "pw"] }), token: appToken)
        #expect(created.status == 200)
        let key = P256.Signing.PrivateKey()
        _ = try await simulator.control(
            "POST", "/keys", ["team_id": "TEAM000001", "key_id": "KEY0000001", "public_key_pem": .string(key.publicKey.pemRepresentation)])
        let upload = try await server.rest(
            "POST", "/push/certificates",
            [
                "name": "ios", "kind": "p8", "file": .string(key.pemRepresentation), "key_id": "KEY0000001", "team_id": "TEAM000001",
                "environment": "development", "bundle_id": .string(bundleID),
            ], token: appToken)
        #expect(upload.status == 200)
        for receiver in receivers {
            _ = try await simulator.control(
                "POST", "/tokens", ["device_token": .string(deviceToken(for: receiver)), "topic": .string(bundleID)])
            let bound = try await server.rest(
                "PUT", "/users/\(receiver)/push/binding",
                ["device_id": "iphone", "device_token": .string(deviceToken(for: receiver)), "notifier_name": "ios"], token: appToken)
            #expect(bound.status == 200)
        }
    }

    static func restSender(_ sender: String, server: ServerProcess, appToken: String, ledger: Locked<Ledger>) async {
        // Until cancelled, or until a send fails (its server was killed). A request in flight when the sender is cancelled
        // still completes (requests are not cancelled with their task: see `dataIgnoringCancellation`).
        for index in 0... {
            guard !Task.isCancelled else { return }
            let receiver = receivers[index % receivers.count]
            let send = Ledger.Send(sender: sender, receiver: receiver, index: index, reference: "\(sender)-\(index)", overWebSocket: false)
            guard let id = try? await restSend(send, server: server, appToken: appToken) else {
                ledger.withLock { $0.unanswered.append(send) }
                return
            }
            ledger.withLock { $0.acknowledged[send] = id }
        }
    }

    static func restSend(_ send: Ledger.Send, server: ServerProcess, appToken: String) async throws -> String {
        let (status, answer) = try await server.rest(
            "POST", "/messages/users",
            ["from": .string(send.sender), "to": [.string(send.receiver)], "type": "txt", "body": ["msg": .string(send.reference)]],
            token: appToken, headers: ["Idempotency-Key": send.reference])
        guard status == 200, let id = answer["data"]?[send.receiver]?.stringValue else {
            throw TestFailure("\(status) \(answer)")
        }
        return id
    }

    static func webSocketSender(_ sender: String, token: String, server: ServerProcess, ledger: Locked<Ledger>) async {
        let next = Mutex(0)
        let inFlight = Mutex<Ledger.Send?>(nil)
        _ = try? await WebSocketClient.connect(url: server.webSocketURL(token: token, device: "sender"), logger: Logger(label: "test")) {
            inbound, outbound, _ in
            var frames = inbound.messages(maxSize: 1 << 20).makeAsyncIterator()
            while true {
                let index = next.withLock { value in
                    defer { value += 1 }
                    return value
                }
                let receiver = receivers[index % receivers.count]
                let send = Ledger.Send(
                    sender: sender, receiver: receiver, index: index, reference: "\(sender)-\(index)", overWebSocket: true)
                inFlight.withLock { $0 = send }
                try await outbound.write(.text(frame(send)))
                guard let id = try await sentID(for: send.reference, in: &frames) else { return }
                inFlight.withLock { $0 = nil }
                ledger.withLock { $0.acknowledged[send] = id }
            }
        }
        if let unanswered = inFlight.withLock({ $0 }) { ledger.withLock { $0.unanswered.append(unanswered) } }
    }

    static func frame(_ send: Ledger.Send) -> String {
        let request = ClientFrame.send(
            .init(id: send.reference, to: send.receiver, chatType: .chat, type: .txt, body: ["msg": .string(send.reference)]))
        return String(decoding: (try? JSONEncoder().encode(request)) ?? Data(), as: UTF8.self)
    }

    /// Reads frames until the `sent` answering `reference`; nil when the connection ends first.
    static func sentID(for reference: String, in frames: inout WebSocketInboundMessageStream.AsyncIterator) async throws -> String? {
        while let message = try await frames.next() {
            guard case .text(let text) = message, let frame = try? JSONDecoder().decode(ServerFrame.self, from: Data(text.utf8)) else {
                continue
            }
            if case .sent(reference, let id, _) = frame { return id }
            if case .error(reference?, let code, let description) = frame { throw TestFailure("\(code): \(description)") }
        }
        return nil
    }

    /// Sends again what the crash left unanswered, with the same references.
    static func retry(_ sends: [Ledger.Send], server: ServerProcess, appToken: String) async throws -> [Ledger.Send: String] {
        var stored: [Ledger.Send: String] = [:]
        for send in sends where !send.overWebSocket {
            stored[send] = try await restSend(send, server: server, appToken: appToken)
        }
        let overWebSocket = sends.filter(\.overWebSocket)
        for send in overWebSocket {
            let token = try await server.token(password(send.sender))
            let answer = Mutex<String?>(nil)
            try await WebSocketClient.connect(url: server.webSocketURL(token: token, device: "sender"), logger: Logger(label: "test")) {
                inbound, outbound, _ in
                var frames = inbound.messages(maxSize: 1 << 20).makeAsyncIterator()
                try await outbound.write(.text(frame(send)))
                let id = try await sentID(for: send.reference, in: &frames)
                answer.withLock { $0 = id }
                try await outbound.close(.normalClosure, reason: nil)
            }
            stored[send] = answer.withLock { $0 }
        }
        return stored
    }

    /// The simulator's deliveries counted by message (the collapse id Beacon derives from the message id).
    static func pushesByMessage(_ simulator: SimulatorProcess) async throws -> [String: Int] {
        let answer = try await simulator.control("GET", "/deliveries")
        var counts: [String: Int] = [:]
        for delivery in answer["deliveries"]?.arrayValue ?? [] {
            if let id = delivery["payload"]?["m"]?.stringValue { counts[id, default: 0] += 1 }
        }
        return counts
    }
}
