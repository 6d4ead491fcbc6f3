import BeaconStorage
import Logging
import ServiceLifecycle
import Synchronization

/// What a device session's token says of its user, and whether it still opens the account.
struct SessionCredential: Sendable, Hashable {
    var app: Int64
    var username: String
    /// The account the token was issued to (`TokenClaims.uid`).
    var uuid: String
    /// When the token was issued and when it expires (ms).
    var issuedAt: Int64
    var expiresAt: Int64

    /// Whether the token still opens `user` (the name's holder as stored now, nil when there is none) at `now`: the same
    /// account, its tokens not revoked since this one was issued, the token not expired — what the upgrade's
    /// authentication checked of the store and the clock.
    func holds(for user: UserRecord?, now: Int64) -> Bool {
        guard let user else { return false }
        return user.acceptsToken(of: uuid, issuedAt: issuedAt) && now < expiresAt
    }
}

extension UserRecord {
    /// Whether a user token issued to account `uid` at `issuedAt` (ms) still opens this account: the same account (a user
    /// deleted and created again under the name is another, with another uuid), its tokens not revoked since.
    func acceptsToken(of uid: String?, issuedAt: Int64) -> Bool {
        uid == uuid && issuedAt >= tokensValidAfter
    }
}

/// Checks the tokens of this node's busy device sessions against their users' rows, all of them at once: a round, then
/// `interval`'s wait, then the next; a round reads each app's users of the sessions that asked within `busyFor` (one
/// statement per `pageSize` users), instead of one read per session and second (`DeviceSession.stillSignedIn`). A
/// session whose token no longer holds is closed (`kicked`); one whose token holds is marked with the instant its app's
/// read began, which it takes for a check of its own made then. A read that fails marks nothing, and a slow one only
/// marks that are old already: past `DeviceSession.reauthenticateAfter`, those sessions check for themselves.
final class SessionAudit: Service, Sendable {
    private struct Watched {
        var credential: SessionCredential
        var close: @Sendable () -> Void
        /// When the session last asked (`verifiedAt`).
        var askedAt: ContinuousClock.Instant
        /// The start of the last round that found its token holding.
        var verifiedAt: ContinuousClock.Instant?
    }

    /// A session that has not asked for this long (an idle device) is left out of the rounds until it asks again.
    static let busyFor: Duration = .seconds(10)
    static let pageSize = 1000

    let store: any UserStore
    let clock: @Sendable () -> Int64
    let interval: Duration
    let logger: Logger
    private let watched = Mutex<[ObjectIdentifier: Watched]>([:])

    /// `interval`: the wait after each round (`BeaconHooks.sessionAuditInterval`).
    init(store: any UserStore, clock: @escaping @Sendable () -> Int64, interval: Duration, logger: Logger) {
        self.store = store
        self.clock = clock
        self.interval = interval
        self.logger = logger
    }

    /// Audits the session known by `key` from the next round on; `close` ends it when its token no longer holds.
    func watch(_ key: ObjectIdentifier, _ credential: SessionCredential, close: @escaping @Sendable () -> Void) {
        watched.withLock { $0[key] = Watched(credential: credential, close: close, askedAt: .now) }
    }

    func forget(_ key: ObjectIdentifier) {
        _ = watched.withLock { $0.removeValue(forKey: key) }
    }

    /// The start of the last round that found the session's token holding (nil: none yet, or not watched); keeps the
    /// session in the rounds for `busyFor` more.
    func verifiedAt(_ key: ObjectIdentifier) -> ContinuousClock.Instant? {
        watched.withLock { watched in
            watched[key]?.askedAt = .now
            return watched[key]?.verifiedAt
        }
    }

    func run() async throws {
        // A round that hangs on the store does not hold the shutdown up: it is cancelled with the wait.
        while Task.serviceShouldContinue {
            try? await cancelWhenGracefulShutdown { [interval] in
                await self.round()
                try await Task.sleep(for: interval)
            }
        }
    }

    /// One round: the busy sessions' users read, app by app, and each session marked or closed.
    func round() async {
        let busy = watched.withLock { watched in
            let now = ContinuousClock.now
            return watched.compactMap { key, entry in entry.askedAt.duration(to: now) < Self.busyFor ? (key, entry.credential) : nil }
        }
        for (app, sessions) in Dictionary(grouping: busy, by: \.1.app) {
            guard Task.serviceShouldContinue else { return }
            let usernames = Array(Set(sessions.map(\.1.username)))
            // Before the read: a mark is never later than what the read saw.
            let start = ContinuousClock.now
            var users: [String: UserRecord] = [:]
            do {
                for page in stride(from: 0, to: usernames.count, by: Self.pageSize) {
                    let names = Array(usernames[page..<min(page + Self.pageSize, usernames.count)])
                    for user in try await store.users(named: names, app: app) { users[user.username] = user }
                }
            } catch {
                // Unmarked, their marks age: past `DeviceSession.reauthenticateAfter`, each session checks for itself again.
                if !Task.isCancelled {
                    logger.warning("auditing device sessions failed", metadata: ["app": "\(app)", "error": "\(error)"])
                }
                continue
            }
            let now = clock()
            let closes = watched.withLock { watched in
                sessions.compactMap { key, credential -> (@Sendable () -> Void)? in
                    // Only the session that was read: one watched again since, with another token, waits for the next round.
                    guard let entry = watched[key], entry.credential == credential else { return nil }
                    if credential.holds(for: users[credential.username], now: now) {
                        watched[key]?.verifiedAt = start
                        return nil
                    }
                    watched.removeValue(forKey: key)
                    return entry.close
                }
            }
            for close in closes { close() }
        }
    }
}
