import BeaconStorage
import Logging
import ServiceLifecycle
import Synchronization

/// Device acknowledgements, batched: acks are recorded in memory and written to the store in one transaction
/// every `interval`, when a device disconnects, before offline counts are read, and at shutdown.
/// A crash can lose at most one interval of acks, which only means a device sees those messages again
/// (it drops `seq`s it already has).
final class CursorBook: Sendable {
    private struct Key: Hashable {
        var app: Int64
        var username: String
        /// The user's uuid: a cursor flushed after its user was deleted is not written for a new user of the name.
        var userID: String
        var device: String
    }

    private let pending = Mutex<[Key: Int64]>([:])
    private let store: any BeaconStore
    private let clock: @Sendable () -> Int64

    init(store: any BeaconStore, clock: @escaping @Sendable () -> Int64) {
        self.store = store
        self.clock = clock
    }

    func advance(_ user: UserIdentity, device: String, app: Int64, to seq: Int64) {
        pending.withLock { table in
            let key = Key(app: app, username: user.username, userID: user.uuid, device: device)
            table[key] = max(table[key] ?? 0, seq)
        }
    }

    /// The device's cursor: the store's, or a newer one not yet written.
    func cursor(of user: UserIdentity, device: String, app: Int64) async throws -> Int64 {
        let unwritten = pending.withLock { $0[Key(app: app, username: user.username, userID: user.uuid, device: device)] } ?? 0
        return max(unwritten, try await store.cursor(of: user.username, device: device, app: app))
    }

    /// Writes the pending acks of `username` (every user when nil).
    func flush(username: String? = nil, app: Int64? = nil) async throws {
        let taken = pending.withLock { table -> [Key: Int64] in
            guard let username else {
                defer { table.removeAll() }
                return table
            }
            let mine = table.filter { $0.key.username == username && $0.key.app == app }
            for key in mine.keys { table[key] = nil }
            return mine
        }
        guard !taken.isEmpty else { return }
        do {
            try await store.acknowledge(
                taken.map {
                    DeviceCursor(app: $0.key.app, username: $0.key.username, userID: $0.key.userID, device: $0.key.device, seq: $0.value)
                }, now: clock())
        } catch {
            // Put them back (unless newer ones arrived) so that the next flush retries.
            pending.withLock { table in
                for (key, seq) in taken { table[key] = max(table[key] ?? 0, seq) }
            }
            throw error
        }
    }
}

/// A user as a session knows them: the name, and the uuid that tells this user from a later one of the same name.
struct UserIdentity: Sendable, Hashable {
    var username: String
    var uuid: String
}

/// Flushes the `CursorBook` periodically and once more at shutdown.
struct CursorFlushService: Service {
    let book: CursorBook
    let interval: Duration
    let logger: Logger

    func run() async throws {
        while Task.serviceShouldContinue {
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: interval) }
            do {
                try await book.flush()
            } catch {
                logger.error("writing device cursors failed", metadata: ["error": "\(error)"])
            }
        }
    }
}
