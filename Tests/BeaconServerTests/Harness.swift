import APNsSimulator
import BeaconAPNs
import BeaconClient
import BeaconCore
import BeaconPostgres
import BeaconProtocol
import BeaconSQLite
import BeaconServer
import BeaconStorage
import Crypto
import Foundation
import Hummingbird
import HummingbirdWSClient
import Logging
import NIOSSL
import ServiceLifecycle
import Synchronization
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The same key across servers of one test, so that a restarted server opens what the first one sealed.
let testSecretKey = SymmetricKey(data: Data(repeating: 7, count: 32))

/// A clock tests can move.
final class TestClock: Sendable {
    private let value = Mutex<Int64>(1_800_000_000_000)
    var now: Int64 { value.withLock { $0 } }
    func advance(seconds: Int64) { value.withLock { $0 += seconds * 1000 } }
}

struct HTTPError: Error, CustomStringConvertible {
    var description: String
}

/// A real Beacon server on 127.0.0.1 (port 0) with an app `acme/chat`, and helpers to talk to it.
struct TestBeacon: Sendable {
    let baseURL: URL
    let port: Int
    let store: any BeaconStore
    /// The app's credentials, when this run created the app.
    let credentials: AppCredentials?
    let appToken: String
    /// Every push attempt the server records, in order.
    let pushOutcomes: Collector<PushAttemptOutcome>
    /// Who is online on the server.
    let presence: any PresenceRegistry
    /// The node in its cluster (PostgreSQL), nil on SQLite.
    let clusterNode: ClusterNode?
    let directory: URL
    /// The server itself, for what tests drive directly (a cluster node's presence reconcile).
    let server: BeaconServer

    var appKey: String { "acme#chat" }

    /// `BeaconConfiguration.webhookPrivateTargets` of the servers started in this task: off as in production; tests whose
    /// webhook receiver listens on 127.0.0.1 run under `TestBeacon.$webhookPrivateTargets.withValue(true)`.
    @TaskLocal static var webhookPrivateTargets = false
    /// `BeaconConfiguration.sendLimits` of the servers started in this task: the production defaults unless a test sets them.
    @TaskLocal static var sendLimits = SendLimits()

    /// Runs `body` against a fresh server; shuts the server down afterwards. With `push`, the server pushes
    /// to that simulator (trusting what is uploaded) using `secretKey`; `directory` reuses a data directory.
    static func run<T: Sendable>(
        clock: TestClock? = nil, push: APNsSimulator? = nil, apnsRouting: APNsRouting? = nil, directory: URL? = nil,
        hooks: BeaconHooks = BeaconHooks(), logger: Logger? = nil, trustedProxies: TrustedProxies = .none,
        _ body: @Sendable (TestBeacon) async throws -> T
    ) async throws -> T {
        let directory = directory ?? FileManager.default.temporaryDirectory.appendingPathComponent("beacon-test-\(UUID().uuidString)")
        return try await withTestStore(directory: directory) { store in
            try await run(
                store: store, directory: directory, clock: clock, push: push, apnsRouting: apnsRouting, hooks: hooks, logger: logger,
                trustedProxies: trustedProxies, body)
        }
    }

    /// The store of a test server: SQLite in `directory`, or, when `BEACON_TEST_SERVER_ENGINE=postgres` (`scripts/test`
    /// runs the server suite that way too), a PostgreSQL schema named after `directory` (reused with it).
    static func withTestStore<T: Sendable>(directory: URL, _ body: @Sendable (any BeaconStore) async throws -> T) async throws -> T {
        let environment = ProcessInfo.processInfo.environment
        guard environment["BEACON_TEST_SERVER_ENGINE"] == "postgres", let base = environment["BEACON_TEST_POSTGRES_URL"] else {
            return try await body(try SQLiteStore(directory: directory.path))
        }
        let schema = "t_" + String(directory.lastPathComponent.lowercased().filter { $0.isLetter || $0.isNumber }.suffix(40))
        var logger = Logger(label: "beacon.test.postgres")
        logger.logLevel = .error
        return try await PostgresStore.withStore(url: base + (base.contains("?") ? "&" : "?") + "schema=\(schema)", logger: logger, body)
    }

    /// Runs `body` against `count` nodes sharing one fresh PostgreSQL schema, each with its own connection pool as separate
    /// processes have (needs `BEACON_TEST_POSTGRES_URL`).
    static func runNodes<T: Sendable>(
        _ count: Int, clock: TestClock? = nil, push: APNsSimulator? = nil, hooks: BeaconHooks = BeaconHooks(),
        _ body: @Sendable ([TestBeacon]) async throws -> T
    ) async throws -> T {
        let base = try #require(ProcessInfo.processInfo.environment["BEACON_TEST_POSTGRES_URL"])
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("beacon-cluster-\(UUID().uuidString)")
        let schema = "c_" + UUID().uuidString.lowercased().filter { $0.isLetter || $0.isNumber }
        let logger = {
            var logger = Logger(label: "beacon.test.postgres")
            logger.logLevel = .error
            return logger
        }()
        @Sendable func start(_ started: [TestBeacon]) async throws -> T {
            guard started.count < count else { return try await body(started) }
            return try await PostgresStore.withStore(url: base + (base.contains("?") ? "&" : "?") + "schema=\(schema)", logger: logger) {
                store in
                try await run(store: store, directory: directory, clock: clock, push: push, apnsRouting: nil, hooks: hooks) { beacon in
                    try await start(started + [beacon])
                }
            }
        }
        return try await start([])
    }

    private static func run<T: Sendable>(
        store: any BeaconStore, directory: URL, clock: TestClock?, push: APNsSimulator?, apnsRouting: APNsRouting?, hooks: BeaconHooks,
        logger: Logger? = nil, trustedProxies: TrustedProxies = .none, _ body: @Sendable (TestBeacon) async throws -> T
    ) async throws -> T {
        let logger =
            logger
            ?? {
                var logger = Logger(label: "beacon.test")
                logger.logLevel = .warning
                return logger
            }()
        let credentials =
            try await store.app(AppKey(org: "acme", name: "chat")) == nil
            ? try await AppProvisioning.create(AppKey(org: "acme", name: "chat"), in: store) : nil
        // Retention (newest 500 per conversation) would trim a test's inbox if the test outlasted one interval on a loaded
        // machine; no server test relies on its timer (the conformance suite calls it directly).
        var configuration = BeaconConfiguration(host: "127.0.0.1", port: 0, retentionInterval: .seconds(3600), passwordHashRounds: 1000)
        if let clock { configuration.clock = { clock.now } }
        configuration.webhookPrivateTargets = webhookPrivateTargets
        configuration.sendLimits = sendLimits
        configuration.trustedProxies = trustedProxies
        configuration.secretBox = SecretBox(key: testSecretKey)
        let (outcomes, outcomeSink) = AsyncStream.makeStream(of: PushAttemptOutcome.self)
        configuration.onPushAttempts = { for outcome in $0 { outcomeSink.yield(outcome) } }
        let pushOutcomes = Collector(outcomes)
        if let apnsRouting { configuration.apnsRouting = apnsRouting }
        if let push {
            let endpoints = await push.endpoints()
            configuration.apnsRouting = .custom(
                host: "127.0.0.1", port: endpoints.apnsPort, trustRoots: try NIOSSLCertificate.fromPEMBytes(Array(push.caPEM.utf8)))
            configuration.onPushConfiguration = { trust in
                switch trust {
                case .tokenKey(let teamID, let keyID, let publicKeyPEM):
                    try push.registerKey(teamID: teamID, keyID: keyID, publicKeyPEM: publicKeyPEM)
                case .certificateAuthorities(let pems, let topics, _):
                    for pem in pems { try push.registerCertificateAuthority(pem: pem, topics: topics) }
                }
            }
        }
        let server = try await BeaconServer(store: store, configuration: configuration, logger: logger, hooks: hooks)
        // As `beacon serve --apns-simulator` does: the simulator trusts configurations stored earlier.
        try await server.announceStoredPushConfigurations()
        let (ports, portSink) = AsyncStream.makeStream(of: Int.self)
        let application = server.makeService { portSink.yield($0) }
        let services = ServiceGroup(configuration: .init(services: [application], logger: logger))
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await services.run() }
            defer { group.cancelAll() }
            var iterator = ports.makeAsyncIterator()
            guard let port = await iterator.next() else { throw HTTPError(description: "server did not start") }
            let baseURL = URL(string: "http://127.0.0.1:\(port)")!
            let app = try await store.app(AppKey(org: "acme", name: "chat"))!
            let token = server.issueToken(app: app)
            let beacon = TestBeacon(
                baseURL: baseURL, port: port, store: store, credentials: credentials, appToken: token, pushOutcomes: pushOutcomes,
                presence: server.presence, clusterNode: server.clusterNode, directory: directory, server: server)
            do {
                let result = try await body(beacon)
                await services.triggerGracefulShutdown()
                try await group.waitForAll()
                return result
            } catch {
                await services.triggerGracefulShutdown()
                throw error
            }
        }
    }

    private static func requestToken(_ baseURL: URL, _ body: JSONValue) async throws -> String {
        let (status, answer) = try await rest(baseURL, "POST", "/acme/chat/token", body: body, token: nil)
        guard status == 200, let token = answer["access_token"]?.stringValue else {
            throw HTTPError(description: "token request failed: \(status) \(answer)")
        }
        return token
    }

    static func rest(
        _ baseURL: URL, _ method: String, _ path: String, body: JSONValue?, raw: Data? = nil, token: String?,
        headers: [String: String] = [:]
    ) async throws -> (Int, JSONValue) {
        var request = URLRequest(url: URL(string: baseURL.absoluteString + path)!)
        request.httpMethod = method
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        if let token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        if let raw {
            request.httpBody = raw
        } else if let body {
            request.httpBody = try JSONEncoder().encode(body)
        }
        let (data, response) = try await URLSession.shared.dataIgnoringCancellation(for: request)
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        let json = (try? JSONDecoder().decode(JSONValue.self, from: data)) ?? .string(String(decoding: data, as: UTF8.self))
        return (status, json)
    }

    /// A REST call under `/acme/chat`, with the app token unless another is given.
    func rest(_ method: String, _ path: String, _ body: JSONValue? = nil, raw: Data? = nil, token: String? = nil, anonymous: Bool = false)
        async throws -> (status: Int, json: JSONValue)
    {
        try await Self.rest(baseURL, method, "/acme/chat" + path, body: body, raw: raw, token: anonymous ? nil : (token ?? appToken))
    }

    func createUsers(_ names: String...) async throws {
        let (status, answer) = try await rest("POST", "/users", .array(names.map { ["username": .string($0), "password": "pw"] }))
        guard status == 200 else { throw HTTPError(description: "user creation failed: \(answer)") }
    }

    func userToken(_ username: String) async throws -> String {
        try await Self.requestToken(baseURL, ["grant_type": "password", "username": .string(username), "password": "pw"])
    }

    func createGroup(owner: String, members: [String]) async throws -> String {
        let (status, answer) = try await rest(
            "POST", "/chatgroups", ["groupname": "team", "owner": .string(owner), "members": .array(members.map(JSONValue.string))])
        guard status == 200, let id = answer["data"]?["groupid"]?.stringValue else {
            throw HTTPError(description: "group creation failed: \(answer)")
        }
        return id
    }

    /// A logged-in SDK client with collectors for its messages and events.
    func connect(_ username: String, device: String = "phone") async throws -> TestDevice {
        let client = BeaconClient(options: BeaconOptions(appKey: appKey, serverURL: baseURL, deviceID: device))
        let device = TestDevice(client: client)
        try await client.login(username: username, password: "pw")
        return device
    }
}

/// An SDK client whose incoming messages and events are recorded for assertions.
struct TestDevice: Sendable {
    let client: BeaconClient
    let messages: Collector<Message>
    let events: Collector<ConnectionEvent>
    let reads: Collector<ReadState>

    init(client: BeaconClient) {
        self.client = client
        messages = Collector(client.messages)
        events = Collector(client.events)
        reads = Collector(client.reads)
    }

    func send(to: String, _ text: String, chatType: ChatType = .chat, ext: [String: JSONValue] = [:], onlineOnly: Bool = false) async throws
        -> Message
    {
        try await client.send(OutgoingChatMessage(to: to, chatType: chatType, content: .text(text), ext: ext, onlineOnly: onlineOnly))
    }

    /// The texts received until (and without) `sentinel`, which must arrive.
    func texts(until sentinel: String) async throws -> [String] {
        let all = try await messages.wait { $0.contains { $0.content == .text(sentinel) } }
        let texts = all.compactMap { message -> String? in
            if case .text(let text) = message.content { return text }
            return nil
        }
        return Array(texts.prefix { $0 != sentinel })
    }
}

/// Records everything an async sequence yields and lets tests wait for a condition, with a generous
/// timeout so that a broken build fails instead of hanging.
final class Collector<Element: Sendable>: Sendable {
    private struct State {
        var items: [Element] = []
        var waiters: [(id: Int, condition: @Sendable ([Element]) -> Bool, continuation: CheckedContinuation<[Element], any Error>)] = []
        var nextID = 0
    }
    private let state = Mutex(State())

    init(_ stream: some AsyncSequence<Element, Never> & Sendable) {
        Task { [weak self] in
            for await item in stream { self?.append(item) }
        }
    }

    var items: [Element] { state.withLock { $0.items } }

    private func append(_ item: Element) {
        let ready = state.withLock { state -> [(CheckedContinuation<[Element], any Error>, [Element])] in
            state.items.append(item)
            let items = state.items
            let (done, waiting) = (state.waiters.filter { $0.condition(items) }, state.waiters.filter { !$0.condition(items) })
            state.waiters = waiting
            return done.map { ($0.continuation, items) }
        }
        for (continuation, items) in ready { continuation.resume(returning: items) }
    }

    /// Waits until `condition` holds for everything received so far; returns it.
    @discardableResult
    func wait(timeout: Duration = .seconds(20), until condition: @escaping @Sendable ([Element]) -> Bool) async throws -> [Element] {
        let id = state.withLock { state in
            state.nextID += 1
            return state.nextID
        }
        let timer = Task {
            try await Task.sleep(for: timeout)
            self.fail(id)
        }
        defer { timer.cancel() }
        return try await withCheckedThrowingContinuation { continuation in
            let items: [Element]? = state.withLock { state in
                if condition(state.items) { return state.items }
                state.waiters.append((id, condition, continuation))
                return nil
            }
            if let items { continuation.resume(returning: items) }
        }
    }

    func wait(count: Int) async throws -> [Element] {
        try await wait { $0.count >= count }
    }

    private func fail(_ id: Int) {
        let waiter = state.withLock { state -> CheckedContinuation<[Element], any Error>? in
            guard let index = state.waiters.firstIndex(where: { $0.id == id }) else { return nil }
            return state.waiters.remove(at: index).continuation
        }
        waiter?.resume(throwing: HTTPError(description: "timed out; received so far: \(items)"))
    }
}

extension Collector where Element == ConnectionEvent {
    /// Waits for the `n`th `.synced` event.
    func synced(_ n: Int = 1) async throws {
        try await wait { $0.filter { if case .synced = $0 { true } else { false } }.count >= n }
    }
}

/// Runs `body` with a started APNs simulator (cancelled afterwards).
func withSimulator<T: Sendable>(_ body: @Sendable (APNsSimulator) async throws -> T) async throws -> T {
    var logger = Logger(label: "beacon.test.sim")
    logger.logLevel = .warning
    let simulator = try APNsSimulator(configuration: .init(environment: .development), logger: logger)
    return try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await simulator.run() }
        defer { group.cancelAll() }
        _ = await simulator.endpoints()
        return try await body(simulator)
    }
}

/// A Beacon server pushing to a fresh simulator.
func withPushBeacon<T: Sendable>(
    clock: TestClock? = nil, hooks: BeaconHooks = BeaconHooks(), _ body: @Sendable (TestBeacon, APNsSimulator) async throws -> T
) async throws -> T {
    try await withSimulator { simulator in
        try await TestBeacon.run(clock: clock, push: simulator, hooks: hooks) { beacon in try await body(beacon, simulator) }
    }
}

/// A device speaking the WebSocket protocol frame by frame (no SDK: it acknowledges nothing unless told to).
final class RawDevice: Sendable {
    let frames: Collector<ServerFrame>
    private let outgoing: AsyncStream<String>.Continuation
    private let task: Task<Void, any Error>

    /// `query` is added to the upgrade URL (e.g. `&reads_since=3`).
    init(beacon: TestBeacon, token: String, device: String, query: String = "") {
        let (frames, frameSink) = AsyncStream.makeStream(of: ServerFrame.self)
        let (outgoing, outgoingSink) = AsyncStream.makeStream(of: String.self)
        self.frames = Collector(frames)
        self.outgoing = outgoingSink
        task = Task {
            defer { frameSink.finish() }
            try await WebSocketClient.connect(
                url: "ws://127.0.0.1:\(beacon.port)/acme/chat/ws?device_id=\(device)&access_token=\(token)\(query)",
                logger: Logger(label: "test")
            ) { inbound, outbound, _ in
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        for await text in outgoing { try await outbound.write(.text(text)) }
                        try await outbound.close(.normalClosure, reason: nil)
                    }
                    for try await message in inbound.messages(maxSize: 1 << 20) {
                        guard case .text(let text) = message, let frame = try? JSONDecoder().decode(ServerFrame.self, from: Data(text.utf8))
                        else {
                            continue
                        }
                        frameSink.yield(frame)
                    }
                    group.cancelAll()
                }
            }
        }
    }

    /// Connects `username`'s device and waits for `synced`.
    static func connect(_ beacon: TestBeacon, _ username: String, device: String, query: String = "") async throws -> RawDevice {
        let raw = RawDevice(beacon: beacon, token: try await beacon.userToken(username), device: device, query: query)
        try await raw.frames.wait { $0.contains { if case .synced = $0 { true } else { false } } }
        return raw
    }

    func send(_ text: String) {
        outgoing.yield(text)
    }

    /// Closes the connection (a clean close) and waits until it is gone: at most 30 s, after which the test fails and the
    /// connection is cancelled (a connection that does not end is a bug to see, not a run to hang; seen once in CI). The
    /// server may take up to 25 s to end a failed session: 10 s for its clean-up, 15 s for the close handshake.
    func close() async {
        outgoing.finish()
        // Waiting for another task cannot be cancelled, and a connection may ignore cancellation: the first of the two
        // ends the wait, whatever the other does.
        let (ended, endedSink) = AsyncStream.makeStream(of: Bool.self)
        let waiter = Task { [task] in
            _ = try? await task.value
            endedSink.yield(true)
        }
        let timer = Task {
            guard (try? await Task.sleep(for: .seconds(30))) != nil else { return }
            endedSink.yield(false)
        }
        // Nil: the caller was cancelled, which is not the connection's fault.
        guard let inTime = await ended.first(where: { _ in true }) else {
            timer.cancel()
            return
        }
        timer.cancel()
        if !inTime {
            task.cancel()
            waiter.cancel()
            Issue.record("the connection did not end within 30 s of its close; frames received: \(frames.items)")
        }
    }

    /// The stored messages received, by `seq`.
    var stored: [(seq: Int64, text: String?)] { Self.stored(in: frames.items) }

    /// The stored messages among `frames`.
    static func stored(in frames: [ServerFrame]) -> [(seq: Int64, text: String?)] {
        frames.compactMap { frame in
            if case .message(let seq?, let message) = frame { return (seq, message.body["msg"]?.stringValue) }
            return nil
        }
    }
}

/// A gate a hook waits at until the test opens it.
final class Gate: Sendable {
    private let state = Mutex<(open: Bool, waiters: [CheckedContinuation<Void, Never>], arrived: Int)>((false, [], 0))

    /// Called by the hook: counts the arrival and waits until the gate opens.
    func pass() async {
        await withCheckedContinuation { continuation in
            let open = state.withLock { state in
                state.arrived += 1
                if !state.open { state.waiters.append(continuation) }
                return state.open
            }
            if open { continuation.resume() }
        }
    }

    var arrived: Int { state.withLock { $0.arrived } }

    func open() {
        let waiters = state.withLock { state in
            state.open = true
            defer { state.waiters.removeAll() }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Waits until `count` hooks have arrived (polling; bounded).
    func waitForArrivals(_ count: Int) async throws {
        for _ in 0..<2000 where arrived < count { try await Task.sleep(for: .milliseconds(10)) }
        guard arrived >= count else { throw HTTPError(description: "only \(arrived) of \(count) arrived at the gate") }
    }
}

extension TestBeacon {
    /// Uploads a token-auth (`.p8`) push configuration named `name`.
    func uploadP8(name: String = "ios-dev", bundleID: String = "com.example.chat", environment: String = "development", voip: Bool = false)
        async throws
    {
        let (status, answer) = try await rest(
            "POST", "/push/certificates",
            [
                "name": .string(name), "kind": "p8", "file": .string(P256.Signing.PrivateKey().pemRepresentation), "key_id": "KEY0000001",
                "team_id": "TEAM000001", "environment": .string(environment), "bundle_id": .string(bundleID), "voip": .bool(voip),
            ])
        guard status == 200 else { throw HTTPError(description: "upload failed: \(answer)") }
    }

    /// Binds `token` to the user's device through `notifier`.
    func bind(_ username: String, device: String = "iphone", token: String, notifier: String = "ios-dev") async throws -> (Int, JSONValue) {
        try await rest(
            "PUT", "/users/\(username)/push/binding",
            ["device_id": .string(device), "device_token": .string(token), "notifier_name": .string(notifier)])
    }

    /// The app's push delivery records for a user.
    func deliveries(of username: String) async throws -> [JSONValue] {
        try await rest("GET", "/push/deliveries?username=\(username)").json["entities"]?.arrayValue ?? []
    }

    /// Waits (polling, bounded) until the user's delivery records satisfy `condition`; returns them.
    @discardableResult
    func deliveries(of username: String, until condition: ([JSONValue]) -> Bool) async throws -> [JSONValue] {
        for _ in 0..<1000 {
            let records = try await deliveries(of: username)
            if condition(records) { return records }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw HTTPError(description: "delivery records of \(username) never matched: \(try await deliveries(of: username))")
    }
}
