import APNsSimulator
import BeaconClient
import BeaconCore
import BeaconSQLite
import BeaconServer
import BeaconStorage
import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOSSL
import ServiceLifecycle

/// The same key across servers of one test, so that a restarted server opens what the first one sealed.
public let testSecretKey = SymmetricKey(data: Data(repeating: 7, count: 32))

/// A real Beacon server on 127.0.0.1 (port 0) with an app (`acme/chat` unless told otherwise), and helpers to talk to it.
public struct TestBeacon: Sendable {
    public let baseURL: URL
    public let port: Int
    public let store: any BeaconStore
    /// The app's key (`acme/chat` by default).
    public let app: AppKey
    /// The app's credentials, when this run created the app.
    public let credentials: AppCredentials?
    public let appToken: String
    /// Every push attempt the server records, in order.
    public let pushOutcomes: Collector<PushAttemptOutcome>
    /// Who is online on the server.
    public let presence: any PresenceRegistry
    /// The node in its cluster (PostgreSQL), nil on SQLite.
    public let clusterNode: ClusterNode?
    public let directory: URL
    /// The server itself, for what tests drive directly (a cluster node's presence reconcile).
    public let server: BeaconServer
    /// Set when `rest` goes through the router in process (`Options.restInProcess`) instead of a socket.
    private let router: (any TestClientProtocol)?

    /// The app key as the SDK takes it (`org#app`).
    public var appKey: String { "\(app.org)#\(app.name)" }

    /// `BeaconConfiguration.webhookPrivateTargets` of the servers started in this task: off as in production; tests whose
    /// webhook receiver listens on 127.0.0.1 run under `TestBeacon.$webhookPrivateTargets.withValue(true)`.
    @TaskLocal public static var webhookPrivateTargets = false
    /// `BeaconConfiguration.sendLimits` of the servers started in this task: the production defaults unless a test sets them.
    @TaskLocal public static var sendLimits = SendLimits()

    /// What a test server is started with besides its store.
    public struct Options: Sendable {
        public var app = AppKey(org: "acme", name: "chat")
        public var clock: TestClock?
        /// The simulator the server pushes to, trusting every push configuration uploaded (`APNsSimulator.trust`).
        public var push: APNsSimulator?
        public var apnsRouting: APNsRouting?
        public var hooks = BeaconHooks()
        public var logger: Logger?
        public var trustedProxies = TrustedProxies.none
        /// The key sealing push credentials; nil: push is off, as on a server without one.
        public var secretKey: SymmetricKey? = testSecretKey
        /// Whether `pushOutcomes` records the server's push attempts (the benchmarks leave the server's path as it is).
        public var recordsPushOutcomes = true
        /// `rest` calls the router in process (Hummingbird's `.router` test client) instead of the socket: for suites about
        /// what the API answers, where the socket is not the point. The server listens and runs its services all the same.
        public var restInProcess = false
        /// Anything else, set on the configuration last.
        public var configure: @Sendable (inout BeaconConfiguration) -> Void = { _ in }

        public init() {}
    }

    /// Runs `body` against a fresh server; shuts the server down afterwards. With `push`, the server pushes
    /// to that simulator (trusting what is uploaded); `directory` reuses a data directory.
    public static func run<T: Sendable>(
        clock: TestClock? = nil, push: APNsSimulator? = nil, apnsRouting: APNsRouting? = nil, directory: URL? = nil,
        hooks: BeaconHooks = BeaconHooks(), logger: Logger? = nil, trustedProxies: TrustedProxies = .none, restInProcess: Bool = false,
        _ body: @Sendable (TestBeacon) async throws -> T
    ) async throws -> T {
        var settings = Options()
        settings.restInProcess = restInProcess
        settings.clock = clock
        settings.push = push
        settings.apnsRouting = apnsRouting
        settings.hooks = hooks
        settings.logger = logger
        settings.trustedProxies = trustedProxies
        let options = settings
        let directory = directory ?? StoreKind.temporaryDirectory("beacon-test")
        return try await StoreKind.server.withStore(named: directory) { store in
            try await run(store: store, directory: directory, options: options, body)
        }
    }

    /// Runs `body` against `count` nodes sharing one fresh PostgreSQL schema, each with its own connection pool as separate
    /// processes have (needs `BEACON_TEST_POSTGRES_URL`).
    public static func runNodes<T: Sendable>(
        _ count: Int, clock: TestClock? = nil, push: APNsSimulator? = nil, hooks: BeaconHooks = BeaconHooks(),
        _ body: @Sendable ([TestBeacon]) async throws -> T
    ) async throws -> T {
        var settings = Options()
        settings.clock = clock
        settings.push = push
        settings.hooks = hooks
        let options = settings
        let directory = StoreKind.temporaryDirectory("beacon-cluster")
        return try await StoreKind.postgres.withStores(count) { stores in
            try await run(stores: stores, directory: directory, options: options, body)
        }
    }

    /// Runs `body` against a server on each store (nodes, when the stores share a database); shuts them down afterwards.
    public static func run<T: Sendable>(
        stores: [any BeaconStore], directory: URL, options: Options, _ body: @Sendable ([TestBeacon]) async throws -> T
    ) async throws -> T {
        @Sendable func start(_ started: [TestBeacon]) async throws -> T {
            guard started.count < stores.count else { return try await body(started) }
            return try await run(store: stores[started.count], directory: directory, options: options) { try await start(started + [$0]) }
        }
        return try await start([])
    }

    /// Runs `body` against a server on `store` (its app created unless it exists); shuts the server down afterwards.
    public static func run<T: Sendable>(
        store: any BeaconStore, directory: URL, options: Options, _ body: @Sendable (TestBeacon) async throws -> T
    ) async throws -> T {
        let logger =
            options.logger
            ?? {
                var logger = Logger(label: "beacon.test")
                logger.logLevel = .warning
                return logger
            }()
        let box = options.secretKey.map { SecretBox(key: $0) }
        let credentials = try await store.app(options.app) == nil ? try await AppProvisioning.create(options.app, in: store, box: box) : nil
        // Retention (newest 500 per conversation) would trim a test's inbox if the test outlasted one interval on a loaded
        // machine; no server test relies on its timer (the conformance suite calls it directly).
        var configuration = BeaconConfiguration(host: "127.0.0.1", port: 0, retentionInterval: .seconds(3600), passwordHashRounds: 1000)
        if let clock = options.clock { configuration.clock = { clock.now } }
        configuration.webhookPrivateTargets = webhookPrivateTargets
        configuration.sendLimits = sendLimits
        configuration.trustedProxies = options.trustedProxies
        configuration.secretBox = box
        let (outcomes, outcomeSink) = AsyncStream.makeStream(of: PushAttemptOutcome.self)
        if options.recordsPushOutcomes {
            configuration.onPushAttempts = { for outcome in $0 { outcomeSink.yield(outcome) } }
        } else {
            outcomeSink.finish()
        }
        let pushOutcomes = Collector(outcomes)
        if let apnsRouting = options.apnsRouting { configuration.apnsRouting = apnsRouting }
        if let push = options.push {
            configuration.apnsRouting = try await push.routing()
            configuration.onPushConfiguration = { try push.trust($0) }
        }
        options.configure(&configuration)
        let server = try await BeaconServer(store: store, configuration: configuration, logger: logger, hooks: options.hooks)
        // As `beacon serve --apns-simulator` does: the simulator trusts configurations stored earlier.
        try await server.announceStoredPushConfigurations()
        let (ports, portSink) = AsyncStream.makeStream(of: Int.self)
        let services = ServiceGroup(configuration: .init(services: server.makeServices { portSink.yield($0) }, logger: logger))
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                // (A server that fails before it listens ends the wait for its port.)
                defer { portSink.finish() }
                try await services.run()
            }
            defer { group.cancelAll() }
            var iterator = ports.makeAsyncIterator()
            guard let port = await iterator.next() else {
                _ = try await group.next()  // the server's own error, when it failed before it listened
                throw TestFailure("server did not start")
            }
            guard let baseURL = URL(string: "http://127.0.0.1:\(port)"), let app = try await store.app(options.app) else {
                throw TestFailure("app \(options.app) vanished")
            }
            @Sendable func beacon(_ router: (any TestClientProtocol)?) -> TestBeacon {
                TestBeacon(
                    baseURL: baseURL, port: port, store: store, app: options.app, credentials: credentials,
                    appToken: server.issueToken(app: app), pushOutcomes: pushOutcomes, presence: server.presence,
                    clusterNode: server.clusterNode, directory: directory, server: server, router: router)
            }
            do {
                let result =
                    options.restInProcess
                    ? try await server.buildApplication().test(.router) { try await body(beacon($0)) } : try await body(beacon(nil))
                await services.triggerGracefulShutdown()
                try await group.waitForAll()
                return result
            } catch {
                await services.triggerGracefulShutdown()
                throw error
            }
        }
    }

    /// A REST call under the app (`/acme/chat` + `path`), with the app token unless another is given.
    public func rest(
        _ method: String, _ path: String, _ body: JSONValue? = nil, raw: Data? = nil, token: String? = nil, anonymous: Bool = false
    ) async throws -> (status: Int, json: JSONValue) {
        let path = "/\(app.org)/\(app.name)" + path
        let token = anonymous ? nil : (token ?? appToken)
        guard let router else { return try await REST.call(baseURL, method, path, body: body, raw: raw, token: token) }
        var headers: HTTPFields = [.contentType: "application/json"]
        if let token { headers[.authorization] = "Bearer \(token)" }
        let bytes = try raw ?? body.map { try JSONEncoder().encode($0) }
        guard let method = HTTPRequest.Method(rawValue: method) else { throw TestFailure("not an HTTP method: \(method)") }
        let answer = try await router.execute(uri: path, method: method, headers: headers, body: bytes.map { ByteBuffer(bytes: $0) })
        let data = Data(answer.body.readableBytesView)
        let json = (try? JSONDecoder().decode(JSONValue.self, from: data)) ?? .string(String(decoding: data, as: UTF8.self))
        return (Int(answer.status.code), json)
    }

    /// Creates users with password `pw`.
    public func createUsers(_ names: String...) async throws {
        try await createUsers(names)
    }

    /// Creates users with password `pw`, 60 per request (the REST API's limit).
    public func createUsers(_ names: [String]) async throws {
        for start in stride(from: 0, to: names.count, by: 60) {
            let chunk = names[start..<min(start + 60, names.count)]
            let (status, answer) = try await rest("POST", "/users", .array(chunk.map { ["username": .string($0), "password": "pw"] }))
            guard status == 200 else { throw TestFailure("user creation failed: \(answer)") }
        }
    }

    /// A user token for `username` (password `pw`).
    public func userToken(_ username: String) async throws -> String {
        try await REST.token(
            baseURL, app: "\(app.org)/\(app.name)", ["grant_type": "password", "username": .string(username), "password": "pw"])
    }

    public func createGroup(owner: String, members: [String]) async throws -> String {
        let (status, answer) = try await rest(
            "POST", "/chatgroups", ["groupname": "team", "owner": .string(owner), "members": .array(members.map(JSONValue.string))])
        guard status == 200, let id = answer["data"]?["groupid"]?.stringValue else { throw TestFailure("group creation failed: \(answer)") }
        return id
    }

    /// A logged-in SDK client (password `pw`) with collectors for its messages and events.
    public func connect(_ username: String, device: String = "phone") async throws -> TestDevice {
        let client = makeClient(device: device)
        let device = TestDevice(client: client)
        try await client.login(username: username, password: "pw")
        return device
    }

    /// A logged-in SDK client (password `pw`) whose streams nothing else reads.
    public func client(_ username: String, device: String = "phone") async throws -> BeaconClient {
        let client = makeClient(device: device)
        try await client.login(username: username, password: "pw")
        return client
    }

    private func makeClient(device: String) -> BeaconClient {
        BeaconClient(options: BeaconOptions(appKey: appKey, serverURL: baseURL, deviceID: device, storage: MemoryStorage()))
    }

    /// Uploads a token-auth (`.p8`) push configuration named `name`.
    public func uploadP8(
        name: String = "ios-dev", bundleID: String = "com.example.chat", environment: String = "development", voip: Bool = false
    ) async throws {
        let (status, answer) = try await rest(
            "POST", "/push/certificates",
            [
                "name": .string(name), "kind": "p8", "file": .string(P256.Signing.PrivateKey().pemRepresentation), "key_id": "KEY0000001",
                "team_id": "TEAM000001", "environment": .string(environment), "bundle_id": .string(bundleID), "voip": .bool(voip),
            ])
        guard status == 200 else { throw TestFailure("upload failed: \(answer)") }
    }

    /// Binds `token` to the user's device through `notifier`.
    public func bind(_ username: String, device: String = "iphone", token: String, notifier: String = "ios-dev") async throws -> (
        Int, JSONValue
    ) {
        try await rest(
            "PUT", "/users/\(username)/push/binding",
            ["device_id": .string(device), "device_token": .string(token), "notifier_name": .string(notifier)])
    }

    /// The app's push delivery records for a user.
    public func deliveries(of username: String) async throws -> [JSONValue] {
        try await rest("GET", "/push/deliveries?username=\(username)").json["entities"]?.arrayValue ?? []
    }

    /// Waits until the user's delivery records satisfy `condition` (at most 60 s: a bound for a broken build, which a
    /// loaded machine's retries and APNs timeouts stay well inside); returns them.
    @discardableResult
    public func deliveries(of username: String, until condition: ([JSONValue]) -> Bool) async throws -> [JSONValue] {
        var records: [JSONValue] = []
        try await waitUntil(
            "delivery records of \(username) matching; last seen: \(records)", timeout: .seconds(60), interval: .milliseconds(20)
        ) {
            records = try await deliveries(of: username)
            return condition(records)
        }
        return records
    }
}
