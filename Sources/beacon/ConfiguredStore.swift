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
    let location: DatabaseLocation
    switch database {
    case .sqlite(let path):
        let durabilityName = config.value(Settings.durability)
        guard let durability = SQLiteStore.Durability(rawValue: durabilityName) else {
            throw ValidationError("--durability must be full or normal, not '\(durabilityName)'")
        }
        location =
            if let path { .sqlite(path: path, durability: durability) } else {
                try .sqlite(inDirectory: config.value(Settings.dataDir), durability: durability)
            }
    case .postgres(let url):
        location = .postgres(url: url)
    }
    guard case .sqlite(let path, _) = location, let lock else {
        return try await location.withStore(logger: logger) { try await body($0, database) }
    }
    let held = try ServeLock(database: path, mode: lock)
    defer { withExtendedLifetime(held) {} }
    return try await location.withStore(logger: logger) { try await body($0, database) }
}

/// The server's secret key as configured: `secret-key` (BEACON_SECRET_KEY), or on SQLite the data directory's key file
/// (created when missing). PostgreSQL's nodes share one: it must be configured.
func configuredSecretBox(_ config: ConfigReader, database: ConfiguredDatabase, logger: Logger) throws -> SecretBox {
    if let key = config.value(Settings.secretKey) { return try SecretBox(base64: key) }
    if case .postgres = database {
        throw ValidationError(
            "with PostgreSQL the secret key sealing push credentials lives in configuration, not on this machine: set BEACON_SECRET_KEY (32 bytes, base64; e.g. openssl rand -base64 32)"
        )
    }
    return try SecretBox.fromDataDirectory(config.value(Settings.dataDir), logger: logger)
}

/// The server's secret key for a command beside the server (`app create`, `app rotate-secret`, `app tencent`), when there
/// is one: `secret-key` (BEACON_SECRET_KEY), or on SQLite the data directory's key file — never created here, so that a
/// command run without the server's configuration cannot seal with a key the server does not have. Nil when none is found.
/// A key that cannot open what is already stored is refused, naming what it cannot open.
func existingSecretBox(_ config: ConfigReader, database: ConfiguredDatabase, store: any BeaconStore) async throws -> SecretBox? {
    let box: SecretBox?
    if let key = config.value(Settings.secretKey) {
        box = try SecretBox(base64: key)
    } else if case .sqlite = database {
        box = try SecretBox.existing(inDataDirectory: config.value(Settings.dataDir))
    } else {
        box = nil
    }
    if let box { try await box.checkOpensStoredSecrets(in: store) }
    return box
}
