import BeaconCore
import BeaconStorage
import Foundation
import GRDB

extension SQLiteStore {
    /// Writes a consistent, compacted copy of the database file `database` to `path` (`VACUUM INTO`) while a server
    /// keeps using it: one snapshot read on a connection of its own, so writers never wait for it. The database is
    /// opened read-only — nothing is created, migrated or written there, whichever version the running server is — and
    /// must exist. Fails if `path` exists.
    public static func backup(database: String, to path: String) async throws {
        guard FileManager.default.fileExists(atPath: database) else {
            throw BeaconError(.illegalArgument, "there is no database at \(database) (check --data-dir or --database)")
        }
        var configuration = Configuration()
        configuration.readonly = true
        configuration.busyMode = .timeout(10)
        let source = try DatabaseQueue(path: database, configuration: configuration)
        defer { try? source.close() }
        guard try await source.read({ db in try db.tableExists("grdb_migrations") && db.tableExists("apps") }) else {
            throw BeaconError(.illegalArgument, "\(database) is not a Beacon database")
        }
        // Created empty first, exclusively and private (0600): the copy holds password hashes and sealed credentials.
        let descriptor = open(path, O_CREAT | O_EXCL | O_WRONLY, 0o600)
        guard descriptor >= 0 else {
            throw BeaconError(
                .illegalArgument, "cannot create \(path) (a backup never overwrites a file): \(String(cString: strerror(errno)))")
        }
        close(descriptor)
        do {
            // Outside a transaction: SQLite runs VACUUM in its own.
            try source.inDatabase { db in try db.execute(sql: "VACUUM INTO ?", arguments: [path]) }
        } catch {
            try? FileManager.default.removeItem(atPath: path)
            throw error
        }
    }
}
