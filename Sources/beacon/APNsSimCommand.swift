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
