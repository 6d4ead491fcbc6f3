import APNsSimulator
import ArgumentParser
import BeaconCore
import BeaconPostgres
import BeaconServer
import BeaconSQLite
import BeaconStorage
import Configuration
import Foundation
import Hummingbird
import Logging
import NIOSSL
import ServiceLifecycle
import BeaconAPNs

@main
struct BeaconCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "beacon",
        abstract: "A self-hosted chat server with offline push to iOS.",
        subcommands: [
            Serve.self, AppCommand.self, Migrate.self, Backup.self, RotateKey.self, APNsSim.self, RoutesCommand.self, ConfigReferenceCommand.self,
        ])
}

/// Options every subcommand that touches the data directory shares.
struct DataOptions: ParsableArguments {
    @Option(help: Settings.dataDir.help)
    var dataDir: String?

    @Option(help: Settings.database.help)
    var database: String?

    @Option(help: ArgumentHelp("\(Settings.configFile.help.abstract) Keys: \(Settings.fileKeys)."))
    var config: String?

    /// Flags first, then `BEACON_*` environment variables, then the configuration file.
    func reader(flags: [String: ConfigValue]) async throws -> ConfigReader {
        var values = flags
        if let dataDir { values[Settings.dataDir.key ?? ""] = ConfigValue(.string(dataDir), isSecret: false) }
        // The environment variable is BEACON_DATABASE_URL (the provider below would only see BEACON_DATABASE).
        if let url = database ?? Settings.database.environment.flatMap({ ProcessInfo.processInfo.environment[$0] }) {
            values[Settings.database.key ?? ""] = ConfigValue(.string(url), isSecret: true)
        }
        var providers: [any ConfigProvider] = [
            InMemoryProvider(name: "flags", values: Dictionary(uniqueKeysWithValues: values.map { (AbsoluteConfigKey(ConfigKey($0.key)), $0.value) })),
            EnvironmentVariablesProvider().prefixKeys(with: "beacon"),
        ]
        if let file = config ?? Settings.configFile.environment.flatMap({ ProcessInfo.processInfo.environment[$0] }) {
            let location = InMemoryProvider(values: ["filePath": ConfigValue(.string(file), isSecret: false)])
            providers.append(try await FileProvider<JSONSnapshot>(config: ConfigReader(provider: location)))
        }
        return ConfigReader(providers: providers)
    }
}

/// The process's logger: `logLevel` (trace … critical; default `info`, or `fallbackLevel`) and `logFormat` (`text`, the
/// default, or `json`: one JSON object per line).
func makeLogger(_ config: ConfigReader, fallbackLevel: Logger.Level = .info) throws -> Logger {
    let levelText = config.value(Settings.logLevel)
    guard let level = levelText.map({ Logger.Level(rawValue: $0) }) ?? fallbackLevel else {
        throw ValidationError("logLevel must be one of \(Logger.Level.allCases.map(\.rawValue).joined(separator: ", "))")
    }
    switch config.value(Settings.logFormat) {
    case "text": LoggingSystem.bootstrap(StreamLogHandler.standardOutput)
    case "json": LoggingSystem.bootstrap { JSONLogHandler(label: $0) }
    case let other: throw ValidationError("logFormat must be text or json, not \(other)")
    }
    var logger = Logger(label: "beacon")
    logger.logLevel = level
    return logger
}

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Run the Beacon server.")

    @Option(help: Settings.host.help)
    var host: String?

    @Option(help: Settings.port.help)
    var port: Int?

    @Option(help: Settings.apnsEndpoint.help)
    var apnsEndpoint: String?

    @Option(help: Settings.apnsCA.help)
    var apnsCa: String?

    @Option(help: Settings.durability.help)
    var durability: String?

    @Option(help: Settings.nodeID.help)
    var nodeId: String?

    @Option(help: Settings.trustedProxies.help)
    var trustedProxy: String?

    @Flag(help: Settings.apnsSimulator.help)
    var apnsSimulator = false

    @Flag(help: Settings.webhookPrivateTargets.help)
    var webhookPrivateTargets = false

    @Flag(help: Settings.demo.help)
    var demo = false

    @OptionGroup var data: DataOptions

    func run() async throws {
        var flags: [String: ConfigValue] = [:]
        func flag<Value>(_ setting: Setting<Value>, _ content: ConfigContent?) {
            if let key = setting.key, let content { flags[key] = ConfigValue(content, isSecret: false) }
        }
        flag(Settings.host, host.map { .string($0) })
        flag(Settings.port, port.map { .int($0) })
        flag(Settings.apnsEndpoint, apnsEndpoint.map { .string($0) })
        flag(Settings.apnsCA, apnsCa.map { .string($0) })
        flag(Settings.nodeID, nodeId.map { .string($0) })
        flag(Settings.trustedProxies, trustedProxy.map { .string($0) })
        flag(Settings.durability, durability.map { .string($0) })
        flag(Settings.apnsSimulator, apnsSimulator || demo ? .bool(true) : nil)
        flag(Settings.webhookPrivateTargets, webhookPrivateTargets ? .bool(true) : nil)
        let config = try await data.reader(flags: flags)
        let logger = try makeLogger(config)
        _ = try Self.trustedProxies(config)  // an invalid entry stops `serve` before the store is opened
        try await withConfiguredStore(config, logger: logger, lock: .server) { store, database in
            try await serve(store, database: database, config: config, logger: logger)
        }
    }

    /// `trustedProxies`, parsed; an invalid entry is a `ValidationError` naming it.
    private static func trustedProxies(_ config: ConfigReader) throws -> TrustedProxies {
        do {
            return try TrustedProxies(parsing: config.value(Settings.trustedProxies) ?? "")
        } catch {
            throw ValidationError("trustedProxies (--trusted-proxy, BEACON_TRUSTED_PROXIES): \(error.message)")
        }
    }

    private func serve(_ store: any BeaconStore, database: ConfiguredDatabase, config: ConfigReader, logger: Logger) async throws {
        let dataDir = config.value(Settings.dataDir)
        var configuration = BeaconConfiguration(host: config.value(Settings.host), port: config.value(Settings.port))
        configuration.nodeName = config.value(Settings.nodeID)
        configuration.webhookPrivateTargets = config.value(Settings.webhookPrivateTargets)
        func rate(_ setting: Setting<Int>) throws -> SendRate? {
            let perSecond = config.value(setting)
            guard (0...1_000_000).contains(perSecond) else {
                throw ValidationError("\(setting.key ?? "") must be 0 (no limit) to 1000000 messages a second, not \(perSecond)")
            }
            return perSecond == 0 ? nil : SendRate(perSecond: perSecond, burst: perSecond * 5)
        }
        configuration.sendLimits = SendLimits(perUser: try rate(Settings.sendRatePerUser), perApp: try rate(Settings.sendRatePerApp))
        configuration.userGroupMaxUsers = config.value(Settings.userGroupMaxUsers)
        guard (2...100_000).contains(configuration.userGroupMaxUsers) else {
            throw ValidationError("userGroupMaxUsers must be 2-100000, not \(configuration.userGroupMaxUsers)")
        }
        configuration.trustedProxies = try Self.trustedProxies(config)
        if !configuration.trustedProxies.isEmpty {
            logger.info("believing X-Forwarded-For and X-Forwarded-Proto from \(configuration.trustedProxies)")
        }
        if let key = config.value(Settings.secretKey) {
            configuration.secretBox = try SecretBox(base64: key)
        } else if case .postgres = database {
            throw ValidationError(
                "with PostgreSQL the secret key sealing push credentials lives in configuration, not on this machine: set BEACON_SECRET_KEY (32 bytes, base64; e.g. openssl rand -base64 32)")
        } else {
            configuration.secretBox = try SecretBox.fromDataDirectory(dataDir, logger: logger)
        }
        var services: [any Service] = []
        var simulator: APNsSimulator?
        if config.value(Settings.apnsSimulator) {
            var simulatorLogger = logger
            simulatorLogger.logLevel = .warning
            let started = try APNsSimulator(configuration: .init(environment: .development), logger: simulatorLogger)
            simulator = started
            services.append(started)
            configuration.onPushConfiguration = { trust in
                switch trust {
                case .tokenKey(let teamID, let keyID, let publicKeyPEM):
                    try started.registerKey(teamID: teamID, keyID: keyID, publicKeyPEM: publicKeyPEM)
                case .certificateAuthorities(let pems, let topics, _):
                    for pem in pems { try started.registerCertificateAuthority(pem: pem, topics: topics) }
                }
            }
        } else if let endpoint = config.value(Settings.apnsEndpoint) {
            guard let caFile = config.value(Settings.apnsCA) else { throw ValidationError("--apns-endpoint needs --apns-ca FILE") }
            configuration.apnsRouting = try .custom(url: endpoint, caPEM: try String(contentsOfFile: caFile, encoding: .utf8))
        }
        let server = try await BeaconServer(store: store, configuration: configuration, logger: logger)
        let (ready, readySink) = AsyncStream.makeStream(of: Int.self)
        services.insert(server.makeService { readySink.yield($0) }, at: 0)
        let group = ServiceGroup(configuration: .process(services: services, logger: logger))
        logger.info("data directory \(dataDir)")
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            var ports = ready.makeAsyncIterator()
            guard let port = await ports.next() else { return }
            if let simulator {
                let endpoints = await simulator.endpoints()
                configuration.apnsRouting = .custom(
                    host: "127.0.0.1", port: endpoints.apnsPort, trustRoots: try NIOSSLCertificate.fromPEMBytes(Array(simulator.caPEM.utf8)))
                await server.setAPNsRouting(configuration.apnsRouting)
                try await server.announceStoredPushConfigurations()
                logger.notice("APNs simulator at \(endpoints.apnsURL); control API \(endpoints.controlURL) (see docs/apns-simulator.md)")
                if demo {
                    let setup = try await server.seedDemo()
                    FileHandle.standardOutput.write(Data(demoInstructions(setup, beacon: BeaconServer.url(host: configuration.host, port: port, reachableHere: true), control: endpoints.controlURL).utf8))
                }
            }
            try await tasks.waitForAll()
        }
    }

    private func demoInstructions(_ setup: DemoSetup, beacon: String, control: String) -> String {
        """

        Demo ready: app \(setup.app), users \(setup.sender) and \(setup.receiver) (password \(setup.password)); \(setup.receiver) is offline \
        with a simulated iPhone bound through push configuration \(setup.notifier).
        Send \(setup.receiver) a message:

          curl -s \(beacon)/\(setup.app.org)/\(setup.app.name)/messages/users -H 'Authorization: Bearer \(setup.appToken)' -H 'Content-Type: application/json' -d '{"from":"\(setup.sender)","to":["\(setup.receiver)"],"type":"txt","body":{"msg":"hello from the demo"}}'

        Then see the push the simulator received:

          curl -s '\(control)/deliveries?device_token=\(setup.deviceToken)'

        and Beacon's own delivery record:

          curl -s '\(beacon)/\(setup.app.org)/\(setup.app.name)/push/deliveries?username=\(setup.receiver)' -H 'Authorization: Bearer \(setup.appToken)'

        Or open the console: \(beacon)/console/ and sign in with organization \(setup.app.org), app \(setup.app.name),
          client id     \(setup.clientID)
          client secret \(setup.clientSecret ?? "(the one printed when this demo app was created)")

        """
    }
}

struct AppCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "app", abstract: "Manage apps (tenants).", subcommands: [Create.self, RotateSecret.self])

    /// What `app create` and `app rotate-secret` take: the app, the output form, the data options.
    struct Target: ParsableArguments {
        @Argument(help: "The app as ORG/APP.")
        var app: String

        @Flag(help: "Print {\"org\",\"app\",\"client_id\",\"client_secret\"} as JSON.")
        var json = false

        @OptionGroup var data: DataOptions

        /// Runs `change` on the app in the configured store and prints the credentials it returns, as JSON or as text
        /// under `headline` (the secret is shown this once).
        func provision(
            headline: (AppKey) -> String, _ change: @escaping @Sendable (AppKey, any BeaconStore) async throws -> AppCredentials
        ) async throws {
            let config = try await data.reader(flags: [:])
            let key: AppKey
            do {
                key = try AppKey(parsing: app)
            } catch {
                throw ValidationError(error.message)
            }
            let credentials = try await withConfiguredStore(config, logger: try makeLogger(config, fallbackLevel: .warning)) {
                store, _ in try await change(key, store)
            }
            if json {
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.sortedKeys]
                print(String(decoding: try encoder.encode(credentials), as: UTF8.self))
            } else {
                print("\(headline(key))\nclient_id:     \(credentials.clientID)\nclient_secret: \(credentials.clientSecret)  (shown once)")
            }
        }
    }

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create an app and print its client credentials (the secret is shown only once).")

        @OptionGroup var target: Target

        func run() async throws {
            try await target.provision(headline: { "Created app \($0)" }) { key, store in
                try await AppProvisioning.create(key, in: store)
            }
        }
    }

    struct RotateSecret: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "rotate-secret",
            abstract: "Give an app a new client secret and print it (shown only once); what the old one opened ends.",
            discussion: """
                The client id stays. App tokens issued until now are refused (a running node may accept them for up to 5 \
                seconds more), every console session of the app ends, and the old secret obtains nothing more. Runs beside \
                running servers, on SQLite and PostgreSQL alike.
                """)

        @OptionGroup var target: Target

        func run() async throws {
            try await target.provision(
                headline: { "Rotated the client secret of \($0); its app tokens and console sessions have ended" }
            ) { key, store in
                try await AppProvisioning.rotateSecret(key, in: store)
            }
        }
    }
}

struct APNsSim: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "apns-sim",
        abstract: "Run a local APNs simulator (TLS + HTTP/2) with a control API; prints one JSON line when ready.")

    @Option(help: "Host to listen on.") var host = "127.0.0.1"
    @Option(help: "APNs port (0 picks a free one).") var port = 0
    @Option(help: "Control API port (0 picks a free one).") var controlPort = 0
    @Option(help: "Where to write the CA certificate (PEM) that clients must trust.") var caOut: String?
    @Option(help: "The environment to play: development or production.") var environment = "development"
    @Option(help: "Streams per connection once authenticated.") var maxConcurrentStreams = 1000

    func run() async throws {
        guard let environment = APNsEnvironment(rawValue: environment) else {
            throw ValidationError("--environment must be development or production")
        }
        var logger = Logger(label: "beacon.apns-sim")
        logger.logLevel = .warning
        let simulator = try APNsSimulator(
            configuration: .init(
                host: host, port: port, controlPort: controlPort, environment: environment, maxConcurrentStreams: maxConcurrentStreams),
            logger: logger)
        let caFile = caOut ?? FileManager.default.temporaryDirectory.appendingPathComponent("beacon-apns-sim-ca.pem").path
        try simulator.caPEM.write(toFile: caFile, atomically: true, encoding: .utf8)
        let services = ServiceGroup(configuration: .process(services: [simulator], logger: logger))
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await services.run() }
            let endpoints = await simulator.endpoints()
            let line = ["apns_url": endpoints.apnsURL, "control_url": endpoints.controlURL, "ca_file": caFile]
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            FileHandle.standardOutput.write(try encoder.encode(line) + Data("\n".utf8))
            try await group.waitForAll()
        }
    }
}

extension ServiceGroupConfiguration {
    /// A process's services: SIGTERM and SIGINT shut them down gracefully, for at most 15 s (a connection that never
    /// closes, say a client reconnecting during shutdown, must not keep the process alive); then what remains is
    /// cancelled. (No cancellation limit: the library would trap when it runs out, and every wait that can outlive a
    /// cancellation, an APNs request or reconnect, has its own bound.)
    static func process(services: [any Service], logger: Logger) -> ServiceGroupConfiguration {
        var configuration = ServiceGroupConfiguration(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        configuration.maximumGracefulShutdownDuration = .seconds(15)
        return configuration
    }
}

/// Which database a command runs on.
enum ConfiguredDatabase: Sendable {
    case sqlite(path: String?)
    case postgres(url: String)

    /// `database` from the configuration: absent or `sqlite:PATH` (PATH empty: in the data directory), or a PostgreSQL URL.
    init(_ value: String?) throws {
        guard let value, !value.isEmpty else {
            self = .sqlite(path: nil)
            return
        }
        if value.hasPrefix("sqlite:") {
            let path = String(value.dropFirst("sqlite:".count))
            self = .sqlite(path: path.isEmpty ? nil : path)
        } else if value.hasPrefix("postgres://") || value.hasPrefix("postgresql://") {
            self = .postgres(url: value)
        } else {
            throw ValidationError("--database must be sqlite:PATH or postgres://user:password@host:5432/database")
        }
    }
}

/// Opens the configured store (schema brought up to date), runs `body` with it, and closes it. With `lock`, the embedded
/// database's `ServeLock` is taken first (before any migration) and held until `body` returns.
func withConfiguredStore<T: Sendable>(
    _ config: ConfigReader, logger: Logger, lock: ServeLock.Mode? = nil,
    _ body: @Sendable (any BeaconStore, ConfiguredDatabase) async throws -> T
) async throws -> T {
    let database = try ConfiguredDatabase(config.value(Settings.database))
    switch database {
    case .sqlite(let path):
        let durabilityName = config.value(Settings.durability)
        guard let durability = SQLiteStore.Durability(rawValue: durabilityName) else {
            throw ValidationError("--durability must be full or normal, not '\(durabilityName)'")
        }
        let databasePath: String
        if let path {
            databasePath = path
        } else {
            let directory = config.value(Settings.dataDir)
            try PrivateDirectory.create(directory)
            databasePath = SQLiteStore.databasePath(inDirectory: directory)
        }
        let held = try lock.map { try ServeLock(database: databasePath, mode: $0) }
        defer { withExtendedLifetime(held) {} }
        let store = try SQLiteStore(path: databasePath, durability: durability)
        return try await body(store, database)
    case .postgres(let url):
        return try await PostgresStore.withStore(url: url, logger: logger) { try await body($0, database) }
    }
}

struct Migrate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Bring the database's schema up to date and exit (serve does it too, at start; processes starting together take turns).")

    @OptionGroup var data: DataOptions

    func run() async throws {
        let config = try await data.reader(flags: [:])
        let logger = try makeLogger(config)
        try await withConfiguredStore(config, logger: logger) { _, database in
            switch database {
            case .sqlite: print("SQLite schema up to date")
            case .postgres: print("PostgreSQL schema up to date")
            }
        }
    }
}

struct RoutesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "routes", abstract: "Print every HTTP route the server answers, one `METHOD /path` line each, and exit.")

    func run() async throws {
        // A server on a throwaway store: only its router is built, nothing listens.
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("beacon-routes-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        var logger = Logger(label: "beacon")
        logger.logLevel = .error
        let server = try await BeaconServer(store: try SQLiteStore(directory: directory.path), configuration: BeaconConfiguration(), logger: logger)
        for route in server.routeDescriptions() { print(route) }
    }
}

struct Backup: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Copy the embedded SQLite database to FILE while the server runs (VACUUM INTO: one consistent snapshot, compacted).",
        discussion: "With PostgreSQL, back up with pg_dump or your provider's snapshots instead (docs/deploy.md).")

    @Argument(help: "The file to write; it must not exist.")
    var file: String

    @OptionGroup var data: DataOptions

    func run() async throws {
        let config = try await data.reader(flags: [:])
        guard case .sqlite(let path) = try ConfiguredDatabase(config.value(Settings.database)) else {
            throw ValidationError("beacon backup copies the embedded SQLite database; back PostgreSQL up with pg_dump (docs/deploy.md)")
        }
        // Not through `withConfiguredStore`: opening the store would create a missing database, or migrate the live one.
        try await SQLiteStore.backup(database: path ?? SQLiteStore.databasePath(inDirectory: config.value(Settings.dataDir)), to: file)
        print("backed up to \(file)")
    }
}

struct RotateKey: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rotate-key",
        abstract: "Seal every stored push credential and webhook secret with a new secret key (every node stopped).",
        discussion: """
            The current key is the configured one (BEACON_SECRET_KEY, else DATA_DIR/secret.key). The new one is read from \
            --new-key-file, which is created (0600) with a fresh random key when it does not exist — before anything is \
            sealed with it, so that an interrupted run can be run again with the same file. With DATA_DIR/secret.key, that \
            file is replaced by the new key at the end (same owner); otherwise set BEACON_SECRET_KEY to the new key on every \
            node. Tokens are signed with a key derived from the secret key, and console sessions are ended: everyone signs in again.
            """)

    @Option(help: "The new key (base64): read if the file exists, else generated into it (0600). Keep it.")
    var newKeyFile: String

    @Flag(help: "PostgreSQL: confirms that every node is stopped (a running node could not open what is sealed again).")
    var allNodesStopped = false

    @OptionGroup var data: DataOptions

    func run() async throws {
        let config = try await data.reader(flags: [:])
        let logger = try makeLogger(config, fallbackLevel: .warning)
        let dataDir = config.value(Settings.dataDir)
        let database = try ConfiguredDatabase(config.value(Settings.database))
        let keyInFile = config.value(Settings.secretKey) == nil
        let current: SecretBox
        if let text = config.value(Settings.secretKey) {
            current = try SecretBox(base64: text)
        } else if case .postgres = database {
            throw ValidationError("with PostgreSQL the current key is BEACON_SECRET_KEY")
        } else if let existing = try SecretBox.existing(inDataDirectory: dataDir) {
            current = existing
        } else {
            throw ValidationError("no current key: set BEACON_SECRET_KEY, or --data-dir to the directory holding secret.key")
        }
        var serverLock: ServeLock?
        switch database {
        case .sqlite(let path):
            // Held until the end: no server starts on the database meanwhile.
            serverLock = try ServeLock(database: path ?? SQLiteStore.databasePath(inDirectory: dataDir), mode: .maintenance)
        case .postgres:
            guard allNodesStopped else {
                throw ValidationError("stop every node first, then confirm it with --all-nodes-stopped (a running node could not open what is sealed again)")
            }
        }
        defer { withExtendedLifetime(serverLock) {} }
        let new: SecretBox
        if FileManager.default.fileExists(atPath: newKeyFile) {
            new = try SecretBox.read(keyFile: newKeyFile)
        } else {
            new = try SecretBox.create(keyFile: newKeyFile)
            print("generated a new key in \(newKeyFile): keep it, it is the new secret key")
        }
        let (count, sessions) = try await withConfiguredStore(config, logger: logger) { store, _ -> (Int, Int) in
            let count = try await current.resealStoredSecrets(in: store, with: new, now: Int64(Date().timeIntervalSince1970 * 1000))
            // Tokens end with the old key (they are signed with a key derived from it); console sessions are stored, so
            // they are ended here: everyone signs in again.
            return (count, try await store.deleteAllConsoleSessions())
        }
        print("sealed \(count) stored secret(s) with the new key")
        print("ended \(sessions) console session(s)")
        guard keyInFile else {
            print("now set BEACON_SECRET_KEY to the key in \(newKeyFile) on every node and start them")
            return
        }
        let path = SecretBox.keyFile(inDataDirectory: dataDir)
        try SecretBox.writeKeyFile(path, text: try String(contentsOfFile: newKeyFile, encoding: .utf8), exclusive: false)
        print("\(path) now holds the new key")
    }
}

/// The embedded database's server lock: `serve` holds it (`flock`, exclusive, on `DATABASE.lock` beside the database
/// file, the path with its links resolved) for as long as it runs, and so does a command that must not run beside a
/// server (`rotate-key`): a second server on the same file — two containers on one volume, a manual `serve` beside the
/// systemd unit, a path through a link — refuses to start instead of sharing the push queue, the message-id slot and
/// presence with the first. Commands that only read or add (`app create`, `backup`) take no lock. The kernel drops the
/// lock when the process ends, kill -9 included. The database file itself is locked too, as servers before this lock
/// file locked it (shared): a rolling upgrade does not start a new server beside an old one; where that lock cannot be
/// taken at all (`flock` on a network file system may refuse it on a read-only descriptor), the lock file alone holds.
/// (The lock file is apart because closing a descriptor of the database file drops the process's SQLite `fcntl` locks:
/// that descriptor is never closed once taken, but left to the process's end — after the store, whose background work
/// may outlive `serve`.)
final class ServeLock: Sendable {
    /// Who takes the lock: the message a second taker sees names the first.
    enum Mode: Sendable {
        case server
        case maintenance
    }

    private let lockFile: Int32

    init(database: String, mode: Mode) throws {
        let database = Self.resolved(database)
        let busy: String
        switch mode {
        case .server:
            busy = "another beacon serve (or rotate-key) is using \(database): one server per embedded database; several nodes share PostgreSQL (docs/scaling.md)"
        case .maintenance:
            busy = "a server runs on \(database): stop it first"
        }
        let path = database + ".lock"
        lockFile = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard lockFile >= 0 else { throw ValidationError("cannot open \(path): \(String(cString: strerror(errno)))") }
        guard flock(lockFile, LOCK_EX | LOCK_NB) == 0 else {
            let reason = errno
            close(lockFile)
            throw ValidationError(reason == EWOULDBLOCK ? busy : "cannot lock \(path): \(String(cString: strerror(reason)))")
        }
        // The database file, for servers of earlier versions (their shared lock). Taken before the store opens it.
        let file = FileManager.default.fileExists(atPath: database) ? open(database, O_RDONLY | O_CLOEXEC) : -1
        if file >= 0, flock(file, LOCK_EX | LOCK_NB) != 0 {
            let reason = errno
            close(file)  // the store has not opened the file yet: no SQLite lock of this process is dropped
            guard reason != EWOULDBLOCK else {
                close(lockFile)
                throw ValidationError(busy)
            }
        }
        // Otherwise `file` stays open, and locked, until the process ends (see above).
    }

    deinit { close(lockFile) }

    /// `path` with the links of its directory (and of itself, when it exists) resolved: one database, one lock.
    static func resolved(_ path: String) -> String {
        let url = URL(fileURLWithPath: path)
        if FileManager.default.fileExists(atPath: path) { return url.resolvingSymlinksInPath().path }
        return url.deletingLastPathComponent().resolvingSymlinksInPath().appendingPathComponent(url.lastPathComponent).path
    }
}
