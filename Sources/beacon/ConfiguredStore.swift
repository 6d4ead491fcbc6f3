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
