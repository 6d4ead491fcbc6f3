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
