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
