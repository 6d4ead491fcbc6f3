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

/// The embedded database's server lock: `serve` holds it (`flock`, exclusive, on `DATABASE.lock` beside the database
/// file, the path with its links resolved) for as long as it runs, and so does a command that must not run beside a
/// server (`rotate-key`): a second server on the same file — two containers on one volume, a manual `serve` beside the
/// systemd unit, a path through a link — refuses to start instead of sharing the push queue, the message-id slot and
/// presence with the first. Commands that only read or add (`app create`, `backup`) take no lock. The kernel drops the
/// lock when the process ends, kill -9 included. The database file itself is locked too, as servers before this lock
/// file locked it (shared): a rolling upgrade does not start a new server beside an old one; where that lock cannot be
/// taken at all (`flock` on a network file system may refuse it on a read-only descriptor), the lock file alone holds.
/// (The lock file is apart because closing a descriptor of the database file drops the process's SQLite `fcntl` locks:
/// that descriptor is never closed once taken, but left to the process's end — after the store, whose background work
/// may outlive `serve`.)
final class ServeLock: Sendable {
    /// Who takes the lock: the message a second taker sees names the first.
    enum Mode: Sendable {
        case server
        case maintenance
    }

    private let lockFile: Int32

    init(database: String, mode: Mode) throws {
        let database = Self.resolved(database)
        let busy: String
        switch mode {
        case .server:
            busy =
                "another beacon serve (or rotate-key) is using \(database): one server per embedded database; several nodes share PostgreSQL (docs/scaling.md)"
        case .maintenance:
            busy = "a server runs on \(database): stop it first"
        }
        let path = database + ".lock"
        lockFile = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard lockFile >= 0 else { throw ValidationError("cannot open \(path): \(String(cString: strerror(errno)))") }
        guard flock(lockFile, LOCK_EX | LOCK_NB) == 0 else {
            let reason = errno
            close(lockFile)
            throw ValidationError(reason == EWOULDBLOCK ? busy : "cannot lock \(path): \(String(cString: strerror(reason)))")
        }
        // The database file, for servers of earlier versions (their shared lock). Taken before the store opens it.
        let file = FileManager.default.fileExists(atPath: database) ? open(database, O_RDONLY | O_CLOEXEC) : -1
        if file >= 0, flock(file, LOCK_EX | LOCK_NB) != 0 {
            let reason = errno
            close(file)  // the store has not opened the file yet: no SQLite lock of this process is dropped
            guard reason != EWOULDBLOCK else {
                close(lockFile)
                throw ValidationError(busy)
            }
        }
        // Otherwise `file` stays open, and locked, until the process ends (see above).
    }

    deinit { close(lockFile) }

    /// `path` with the links of its directory (and of itself, when it exists) resolved: one database, one lock.
    static func resolved(_ path: String) -> String {
        let url = URL(fileURLWithPath: path)
        if FileManager.default.fileExists(atPath: path) { return url.resolvingSymlinksInPath().path }
        return url.deletingLastPathComponent().resolvingSymlinksInPath().appendingPathComponent(url.lastPathComponent).path
    }
}
