import APNsSimulator
import ArgumentParser
import BeaconAPNs
import BeaconCore
import BeaconPostgres
import BeaconSQLite
import BeaconServer
import BeaconStorage
import BeaconStores
import Configuration
import Foundation
import Hummingbird
import Logging
import NIOSSL
import ServiceLifecycle

struct RoutesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "routes", abstract: "Print every HTTP route the server answers, one `METHOD /path` line each, and exit.")

    func run() async throws {
        // A server on a throwaway store: only its router is built, nothing listens.
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("beacon-routes-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let logger = {
            var logger = Logger(label: "beacon")
            logger.logLevel = .error
            return logger
        }()
        try await DatabaseLocation.sqlite(inDirectory: directory.path).withStore(logger: logger) { store in
            let server = try await BeaconServer(store: store, configuration: BeaconConfiguration(), logger: logger)
            for route in server.routeDescriptions() { print(route) }
        }
    }
}
