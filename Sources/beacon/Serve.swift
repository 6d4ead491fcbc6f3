import APNsSimulator
import ArgumentParser
import BeaconAPNs
import BeaconCore
import BeaconPostgres
import BeaconSQLite
import BeaconServer
import BeaconStorage
import Configuration
import Foundation
import Hummingbird
import Logging
import NIOSSL
import ServiceLifecycle

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
        // An invalid proxy entry stops `serve` before the store is opened; the other settings are read once it is.
        do {
            _ = try BeaconConfiguration.trustedProxies(config)
        } catch {
            throw ValidationError(error.description)  // a usage error, as a bad flag is
        }
        try await withConfiguredStore(config, logger: logger, lock: .server) { store, database in
            try await serve(store, database: database, config: config, logger: logger)
        }
    }

    private func serve(_ store: any BeaconStore, database: ConfiguredDatabase, config: ConfigReader, logger: Logger) async throws {
        var configuration: BeaconConfiguration
        do {
            configuration = try BeaconConfiguration(reader: config)
        } catch {
            throw ValidationError(error.description)
        }
        let dataDir = config.value(Settings.dataDir)
        if !configuration.trustedProxies.isEmpty {
            logger.info("believing X-Forwarded-For and X-Forwarded-Proto from \(configuration.trustedProxies)")
        }
        configuration.secretBox = try configuredSecretBox(config, database: database, logger: logger)
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
        services.insert(contentsOf: server.makeServices { readySink.yield($0) }, at: 0)
        let group = ServiceGroup(configuration: .process(services: services, logger: logger))
        logger.info("data directory \(dataDir)")
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            var ports = ready.makeAsyncIterator()
            guard let port = await ports.next() else { return }
            if let simulator {
                let endpoints = await simulator.endpoints()
                configuration.apnsRouting = .custom(
                    host: "127.0.0.1", port: endpoints.apnsPort, trustRoots: try NIOSSLCertificate.fromPEMBytes(Array(simulator.caPEM.utf8))
                )
                await server.setAPNsRouting(configuration.apnsRouting)
                try await server.announceStoredPushConfigurations()
                logger.notice("APNs simulator at \(endpoints.apnsURL); control API \(endpoints.controlURL) (see docs/apns-simulator.md)")
                if demo {
                    let setup = try await server.seedDemo()
                    FileHandle.standardOutput.write(
                        Data(
                            demoInstructions(
                                setup, beacon: BeaconServer.url(host: configuration.host, port: port, reachableHere: true),
                                control: endpoints.controlURL
                            ).utf8))
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
