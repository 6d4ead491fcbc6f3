import BeaconStorage
import BeaconStores
import Foundation
import Logging

/// The engines tests and benchmarks run on: SQLite always, PostgreSQL when `BEACON_TEST_POSTGRES_URL` names a server
/// (`scripts/test` starts a throwaway one). Each store gets a place of its own: a temporary directory, or a schema.
public enum StoreKind: String, Sendable, CaseIterable {
    case sqlite
    case postgres

    /// The PostgreSQL server tests may use (`BEACON_TEST_POSTGRES_URL`).
    public static var postgresURL: String? { ProcessInfo.processInfo.environment["BEACON_TEST_POSTGRES_URL"] }

    public static var available: [StoreKind] { postgresURL == nil ? [.sqlite] : [.sqlite, .postgres] }

    /// The engine of the server suite's stores: PostgreSQL when `BEACON_TEST_SERVER_ENGINE=postgres` (`scripts/test` runs
    /// the suite that way too) and a server is named, else SQLite.
    public static var server: StoreKind {
        ProcessInfo.processInfo.environment["BEACON_TEST_SERVER_ENGINE"] == "postgres" && postgresURL != nil ? .postgres : .sqlite
    }

    /// Runs `body` with a fresh, empty store, removed afterwards (SQLite) or left in a schema of its own (PostgreSQL).
    public func withStore<T: Sendable>(_ body: @Sendable (any BeaconStore) async throws -> T) async throws -> T {
        let directory = Self.temporaryDirectory("beacon-store")
        defer { try? FileManager.default.removeItem(at: directory) }
        return try await withStore(named: directory, body)
    }

    /// Runs `body` with the store that belongs to `directory`: SQLite in it, or a PostgreSQL schema named after it (open the
    /// same directory again to open the same store).
    public func withStore<T: Sendable>(named directory: URL, _ body: @Sendable (any BeaconStore) async throws -> T) async throws -> T {
        try await location(for: directory).withStore(logger: Self.quietLogger, body)
    }

    /// Runs `body` with `count` stores on one fresh database, each with its own connection pool as separate processes
    /// have: nodes of a cluster (PostgreSQL; SQLite serves one node).
    public func withStores<T: Sendable>(_ count: Int, _ body: @Sendable ([any BeaconStore]) async throws -> T) async throws -> T {
        try await location(for: Self.temporaryDirectory("beacon-nodes")).withStores(count, logger: Self.quietLogger, body)
    }

    /// Where the store of `directory` lives.
    public func location(for directory: URL) throws -> DatabaseLocation {
        switch self {
        case .sqlite:
            return try .sqlite(inDirectory: directory.path)
        case .postgres:
            guard let url = Self.postgresURL else { throw TestFailure("PostgreSQL tests need BEACON_TEST_POSTGRES_URL") }
            return DatabaseLocation.postgres(url: url).inSchema(Self.schema(for: directory))
        }
    }

    /// A PostgreSQL URL whose schema no other test uses, for tests that open the database themselves.
    public static func freshPostgresURL() throws -> String {
        guard case .postgres(let url) = try StoreKind.postgres.location(for: temporaryDirectory("beacon-store")) else {
            throw TestFailure("no PostgreSQL location")
        }
        return url
    }

    /// A PostgreSQL schema name for a directory: `t_` and the last 40 letters and digits of its name.
    public static func schema(for directory: URL) -> String {
        "t_" + String(directory.lastPathComponent.lowercased().filter { $0.isASCII && ($0.isLetter || $0.isNumber) }.suffix(40))
    }

    /// A directory in the temporary one that nothing else uses (not created).
    public static func temporaryDirectory(_ prefix: String) -> URL {
        FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString)")
    }

    public static let quietLogger = {
        var logger = Logger(label: "beacon.test.store")
        logger.logLevel = .error
        return logger
    }()
}

extension DatabaseLocation {
    /// Runs `body` with `count` stores on this database, each with its own connection pool as separate processes have:
    /// nodes of a cluster (PostgreSQL; SQLite serves one node).
    public func withStores<T: Sendable>(
        _ count: Int, logger: Logger = StoreKind.quietLogger, _ body: @Sendable ([any BeaconStore]) async throws -> T
    ) async throws -> T {
        if case .sqlite = self, count != 1 { throw TestFailure("SQLite serves one node") }
        @Sendable func open(_ stores: [any BeaconStore]) async throws -> T {
            guard stores.count < count else { return try await body(stores) }
            return try await withStore(logger: logger) { try await open(stores + [$0]) }
        }
        return try await open([])
    }
}
