import BeaconPostgres
import BeaconSQLite
import BeaconStorage
import Logging

/// Where a Beacon store lives, and how it is opened: `beacon`'s commands, the tests and `beacon-bench` open their stores
/// here (tests of one engine's own behaviour open its type directly).
public enum DatabaseLocation: Sendable, Hashable {
    /// An SQLite file (`SQLiteStore`), created 0600 if missing (its directory must exist).
    case sqlite(path: String, durability: SQLiteStore.Durability = .full)
    /// A PostgreSQL database (`PostgresStore`): `postgres://user:password@host:port/database?…`.
    case postgres(url: String)

    /// `beacon.sqlite` in a data directory, which is created readable by its owner only (0700) if missing.
    public static func sqlite(inDirectory directory: String, durability: SQLiteStore.Durability = .full) throws -> DatabaseLocation {
        try PrivateDirectory.create(directory)
        return .sqlite(path: SQLiteStore.databasePath(inDirectory: directory), durability: durability)
    }

    /// The same PostgreSQL database with Beacon's tables in `schema` (created if missing); an SQLite location as it is.
    public func inSchema(_ schema: String) -> DatabaseLocation {
        guard case .postgres(let url) = self else { return self }
        return .postgres(url: url + (url.contains("?") ? "&" : "?") + "schema=\(schema)")
    }

    /// Opens the store, brings its schema up to date, runs `body` with it, and closes it afterwards.
    public func withStore<T: Sendable>(logger: Logger, _ body: @Sendable (any BeaconStore) async throws -> T) async throws -> T {
        switch self {
        case .sqlite(let path, let durability):
            return try await body(try SQLiteStore(path: path, durability: durability))
        case .postgres(let url):
            return try await PostgresStore.withStore(url: url, logger: logger) { try await body($0) }
        }
    }
}
