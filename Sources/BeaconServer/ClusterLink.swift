import BeaconCore
import BeaconStorage
import Foundation
import Logging
import Synchronization

/// This node's link to the others through the shared database: presence, and notices for the nodes holding the devices
/// concerned. New stored messages go in notifications (coalesced: those queued while one round trip runs go in the next);
/// other notices, and those too large for a notification, are posted to the nodes' mailboxes, each node woken by a
/// notification. `ClusterService` sends the notifications, and acts on what arrives in the order it arrives.
final class ClusterLink: Sendable {
    let store: any ClusterStore
    let node: ClusterNode
    let local: ConnectionRegistry
    let clock: @Sendable () -> Int64
    let logger: Logger
    /// Notifications to send, sent together by `ClusterService`.
    let notifications = PendingNotifications()
    private let posted = Atomic<Int>(0)
    /// Wakes `ClusterService`'s resync loop.
    let resyncs = WakeSignal()
    private let resyncWanted = Atomic<Bool>(false)
    private let lastHeartbeat = Atomic<Int64>(ContinuousClock.now.nanosecondsSinceStart)
    private let healthySince = Atomic<Int64>(ContinuousClock.now.nanosecondsSinceStart)
    /// Whether this node is the only one, and from when its devices may register (`Solitude`).
    private let solitude = Mutex(Solitude(joinedAt: .now))
    /// `BeaconHooks.beforePresenceRemoval`.
    let beforePresenceRemoval: (@Sendable (String, String) async throws -> Void)?
    /// `BeaconHooks.afterHeartbeat`.
    let afterHeartbeat: (@Sendable () async -> Void)?
    /// `BeaconHooks.beforeListening`.
    let beforeListening: (@Sendable () async -> Void)?
    /// `BeaconHooks.dropsNotification`.
    let dropsNotification: (@Sendable () -> Bool)?
    /// `BeaconHooks.beforeActing`.
    let beforeActing: (@Sendable (Int64, @escaping @Sendable () -> [NodeSignal]) async -> Void)?
    /// Presence rows whose removal failed, tried again by `ClusterService` with backoff (`retryFailedRemovals`).
    private let failedRemovals = Mutex<[FailedRemoval]>([])

    /// A presence row whose removal failed: tried again until removed, found gone, or left to the periodic reconcile.
    struct FailedRemoval: Sendable {
        var device: DeviceKey
        var connection: Int64
        /// Attempts made so far.
        var attempts: Int
        var due: ContinuousClock.Instant
    }

    /// A failed removal is tried again after this long, then twice as long after each further failure.
    static let removalBackoff: Duration = .milliseconds(250)
    /// Attempts after which a removal is left to the periodic reconcile (`ClusterService.reconcileInterval`).
    static let removalAttempts = 6
    /// Failed removals kept for trying again, at most (beyond, the reconcile removes the rows).
    static let removalsKept = 10_000

    /// Letters posted to other nodes so far.
    var lettersPosted: Int { posted.load(ordering: .relaxed) }

    init(
        store: any ClusterStore, node: ClusterNode, local: ConnectionRegistry, clock: @escaping @Sendable () -> Int64, logger: Logger,
        beforePresenceRemoval: (@Sendable (String, String) async throws -> Void)? = nil,
        afterHeartbeat: (@Sendable () async -> Void)? = nil, beforeListening: (@Sendable () async -> Void)? = nil,
        dropsNotification: (@Sendable () -> Bool)? = nil,
        beforeActing: (@Sendable (Int64, @escaping @Sendable () -> [NodeSignal]) async -> Void)? = nil
    ) {
        self.store = store
        self.node = node
        self.local = local
        self.clock = clock
        self.logger = logger
        self.beforePresenceRemoval = beforePresenceRemoval
        self.afterHeartbeat = afterHeartbeat
        self.beforeListening = beforeListening
        self.dropsNotification = dropsNotification
        self.beforeActing = beforeActing
    }

    func onlineDevices(of usernames: [String], app: Int64) async throws -> [String: Set<String>] {
        if isAlone { return local.onlineDevices(of: usernames, app: app) }
        return try await store.connections(of: usernames, app: app).mapValues { Set($0.keys) }
    }

    /// Whether this node is the only one now: presence is then read from its memory (`Solitude`).
    var isAlone: Bool { solitude.withLock { $0.isAlone(at: .now) } }

    /// Whether devices may register here now (`/ready` says not ready until they may).
    var registrationsOpen: Bool { solitude.withLock { $0.registrationsFrom <= .now } }

    /// Waits (at most `Solitude.registrationFence`, in one sleep) until devices may register here: a node that joined
    /// beside others waits until none of them can still count itself alone. A node alone knows it before it serves
    /// (`Beacon` beats once right after joining), so its devices never wait.
    private func awaitRegistrations() async throws {
        let wait = solitude.withLock { ContinuousClock.now.duration(to: $0.registrationsFrom) }
        if wait > .zero { try await Task.sleep(for: wait) }
    }

    /// The node is about to leave the cluster: a node joining from now on finds nobody, so this one stops reading
    /// presence from memory.
    func leaving() {
        solitude.withLock { $0.leave() }
    }

    /// This node was declared dead: it takes no more connections (it is about to stop).
    struct NodeGone: Error, CustomStringConvertible {
        var description: String { "this node is no longer a live member of the cluster" }
    }

    /// Records the connection as the device's current one; false when a connection the device opened later (on another
    /// node) is already recorded: this one is stale and must close.
    func connected(_ outbox: DeviceOutbox) async throws -> Bool {
        try await awaitRegistrations()
        let device = DeviceKey(app: outbox.user.app, username: outbox.user.username, deviceID: outbox.deviceID)
        let openedAgo = outbox.opened.duration(to: .now).components
        switch try await store.connect(
            device, node: node.epoch, connection: outbox.connectionID,
            openedAgo: openedAgo.seconds * 1000 + openedAgo.attoseconds / 1_000_000_000_000_000)
        {
        case .connected(let replaced?) where replaced.node != node.epoch:
            await post(
                [
                    replaced.node: .closeDevice(
                        app: device.app, username: device.username, deviceID: device.deviceID, connection: replaced.id, reason: "replaced")
                ])
            return true
        case .connected:
            return true  // nothing replaced, or an earlier connection here, which the local registry closed
        case .superseded:
            return false
        case .nodeGone:
            throw NodeGone()
        }
    }

    /// Removes the connection's presence row; true if the device went offline. A removal that fails (the database
    /// restarting, the pool saturated) is tried again in the background rather than holding the session's end: until the
    /// row goes, the device counts as online for the other nodes (its pushes decided there are skipped as `online`); a
    /// node alone answers presence from memory, where it is gone already.
    func disconnected(_ outbox: DeviceOutbox) async -> Bool {
        let device = DeviceKey(app: outbox.user.app, username: outbox.user.username, deviceID: outbox.deviceID)
        do {
            return try await removePresence(device, connection: outbox.connectionID)
        } catch {
            logger.error(
                "recording that a device went offline failed; trying again in the background",
                metadata: ["user": "\(device.username)", "error": "\(error)"])
            queueRetry(
                FailedRemoval(device: device, connection: outbox.connectionID, attempts: 1, due: ContinuousClock.now + Self.removalBackoff))
            return false
        }
    }

    private func removePresence(_ device: DeviceKey, connection: Int64) async throws -> Bool {
        try await beforePresenceRemoval?(device.username, device.deviceID)
        return try await store.disconnect(device, node: node.epoch, connection: connection)
    }

    private func queueRetry(_ removal: FailedRemoval) {
        let kept = failedRemovals.withLock { pending in
            guard pending.count < Self.removalsKept else { return false }
            pending.append(removal)
            return true
        }
        if !kept {
            logger.error(
                "too many presence removals to try again; the periodic reconcile removes the rest",
                metadata: ["user": "\(removal.device.username)"])
        }
    }

    /// Tries again the failed removals that are due (each conditional on its connection, so a device that connected again
    /// meanwhile stays online); returns the devices that thereby went offline. A removal failing `removalAttempts` times
    /// is left to the periodic reconcile.
    func retryFailedRemovals() async -> [DeviceKey] {
        let now = ContinuousClock.now
        let due = failedRemovals.withLock { pending in
            let due = pending.filter { $0.due <= now }
            pending.removeAll { $0.due <= now }
            return due
        }
        var offline: [DeviceKey] = []
        for var removal in due {
            do {
                if try await removePresence(removal.device, connection: removal.connection) { offline.append(removal.device) }
            } catch {
                removal.attempts += 1
                if removal.attempts >= Self.removalAttempts {
                    logger.error(
                        "recording that a device went offline failed again; the periodic reconcile removes its presence",
                        metadata: ["user": "\(removal.device.username)", "error": "\(error)"])
                } else {
                    removal.due = ContinuousClock.now + Self.removalBackoff * (1 << (removal.attempts - 1))
                    queueRetry(removal)
                }
            }
        }
        return offline
    }

    /// Removes this node's presence rows whose connections have ended here (a removal that failed for good, or was cut
    /// short): the store reads the rows, then compares them with the connections registered here at that moment, so a
    /// connection registering meanwhile is never removed. Returns the devices that went offline.
    func reconcilePresence() async throws -> [DeviceKey] {
        try await store.reconcilePresence(node: node.epoch, live: { [local] in local.registeredConnections })
    }

    /// Hands freshly stored entries to the other nodes holding connected devices of their users, in notifications (those
    /// that do not fit in one are posted). Returns the devices of those users online on any node, as read for it, or nil
    /// when it failed.
    @discardableResult
    func relay(_ entries: [InboxEntry], app: Int64) async -> [String: Set<String>]? {
        let users = Array(Set(entries.map(\.username)))
        if isAlone { return local.onlineDevices(of: users, app: app) }
        var online: [String: Set<String>]?
        await withRetries("finding the nodes of connected devices") {
            var usersByNode: [Int64: Set<String>] = [:]
            let connections = try await store.connections(of: users, app: app)
            for (username, devices) in connections {
                for connection in devices.values where connection.node != node.epoch {
                    usersByNode[connection.node, default: []].insert(username)
                }
            }
            var carried: [Letter] = []
            var tooLarge: [Int64: ClusterNotice] = [:]
            for (target, users) in usersByNode {
                if let notification = Self.notification(handing: entries.filter { users.contains($0.username) }, to: target, app: app) {
                    carried.append(notification)
                } else {
                    tooLarge[target] = .fetch(app: app, users: users.sorted())
                }
            }
            try await postOnce(tooLarge)
            notifications.add(carried)
            online = connections.mapValues { Set($0.keys) }
        }
        return online
    }

    /// The notification that hands `entries` to `node`: the entries themselves when they fit, else their users' names
    /// (their devices read the store); nil when even the names do not fit (a letter, then).
    static func notification(handing entries: [InboxEntry], to node: Int64, app: Int64) -> Letter? {
        let encoder = JSONEncoder()
        let handed = ClusterNotice.deliver(app: app, entries: entries.map(RelayedEntry.init))
        if let body = try? encoder.encode(handed), body.count < Letter.notificationLimit {
            return Letter(node: node, body: String(decoding: body, as: UTF8.self))
        }
        let named = ClusterNotice.fetch(app: app, users: Set(entries.map(\.username)).sorted())
        if let body = try? encoder.encode(named), body.count < Letter.notificationLimit {
            return Letter(node: node, body: String(decoding: body, as: UTF8.self))
        }
        return nil
    }

    /// Posts `notice` to every other node holding a connected device of `usernames`.
    func relay(_ notice: ClusterNotice, to usernames: [String], app: Int64) async {
        guard !isAlone else { return }
        await withRetries("finding the nodes of connected devices") {
            let nodes = Set(try await store.connections(of: usernames, app: app).values.flatMap { $0.values.map(\.node) })
            try await postOnce(Dictionary(uniqueKeysWithValues: nodes.subtracting([node.epoch]).map { ($0, notice) }))
        }
    }

    private func post(_ notices: [Int64: ClusterNotice]) async {
        await withRetries("posting to other nodes") { try await postOnce(notices) }
    }

    private func postOnce(_ notices: [Int64: ClusterNotice]) async throws {
        guard !notices.isEmpty else { return }
        let encoder = JSONEncoder()
        try await post(
            letters: try notices.map { Letter(node: $0.key, body: String(decoding: try encoder.encode($0.value), as: UTF8.self)) },
            wakingAtOnce: notices.values.contains(where: \.closesConnections))
    }

    /// Posts the letters to their nodes' mailboxes, then wakes the nodes: with the queued notifications, or at once. A close
    /// is woken at once, before its caller goes on: a node acts on what arrives in the order it arrives, so a user deleted
    /// here is closed there before a message to a new user of the name, sent afterwards, is handed over.
    private func post(letters: [Letter], wakingAtOnce: Bool = false) async throws {
        try await store.post(letters)
        posted.add(letters.count, ordering: .relaxed)
        let wakeups = Set(letters.map(\.node)).sorted().map(Letter.wakeup)
        if wakingAtOnce {
            do {
                try await store.notify(wakeups)
                notifications.noteSent(wakeups.count)
                return
            } catch {
                logger.warning("waking other nodes failed; queued again", metadata: ["error": "\(error)"])
            }
        }
        notifications.add(wakeups)
    }

    /// What became of a batch of notifications.
    enum Sending: Equatable {
        case sent
        /// The round trip failed; its notices went to the mailboxes, its wake-ups are queued again first.
        case postedInstead
        /// The round trip failed, and nothing else was done: the batch is queued again first (to be paced).
        case failed
    }

    /// Sends queued notifications (`ClusterService`). When the round trip fails, the notices among them are posted as
    /// letters (the outcome is unknown: a node may get a notice twice, which delivers nothing twice), and the wake-ups go
    /// again ahead of everything queued since, so that no notice queued after them arrives first; when posting fails too,
    /// or there were only wake-ups, the whole batch goes again first.
    @discardableResult
    func send(_ batch: [Letter]) async -> Sending {
        do {
            try await store.notify(batch)
            notifications.noteSent(batch.count)
            return .sent
        } catch {
            let notices = batch.filter { !$0.body.isEmpty }
            logger.warning(
                "sending notifications to other nodes failed; posting their notices instead",
                metadata: ["notices": "\(notices.count)", "error": "\(error)"])
            guard !notices.isEmpty else {
                notifications.addFirst(batch)
                return .failed
            }
            do {
                try await store.post(notices)
                posted.add(notices.count, ordering: .relaxed)
                notifications.addFirst(Set(batch.map(\.node)).sorted().map(Letter.wakeup))
                return .postedInstead
            } catch {
                logger.warning("posting them failed too; trying again", metadata: ["error": "\(error)"])
                notifications.addFirst(batch)
                return .failed
            }
        }
    }

    /// Runs `body` up to three times, 100 then 200 ms apart: a device on another node counts as online (its push is skipped)
    /// while a notice for it cannot reach its node, so a passing database hiccup must not cost the notice. Stored messages
    /// are never lost either way: the device reads them at its next sync or reconnect.
    private func withRetries(_ what: String, _ body: () async throws -> Void) async {
        for attempt in 1...3 {
            do {
                return try await body()
            } catch {
                if attempt == 3 {
                    logger.error("\(what) failed", metadata: ["error": "\(String(reflecting: error))"])
                } else {
                    try? await Task.sleep(for: .milliseconds(100 * attempt))
                }
            }
        }
    }

    /// Acts on a notice, from this node's mailbox or carried by a notification.
    func receive(_ body: String) {
        let notice: ClusterNotice
        do {
            notice = try JSONDecoder().decode(ClusterNotice.self, from: Data(body.utf8))
        } catch {
            logger.error("a notice from another node could not be read", metadata: ["error": "\(error)"])
            return
        }
        switch notice {
        case .deliver(let app, let entries):
            local.deliver(entries.map(\.entry), app: app)
        case .fetch(let app, let users):
            local.fetch(for: users, app: app)
        case .online(let app, let message, let usernames, let origin):
            local.deliverOnline(message, to: usernames, app: app, exceptDevice: origin)
        case .frames(let app, let username, let frames):
            local.send(frames, toDevicesOf: username, app: app)
        case .closeUser(let app, let username, let reason):
            local.disconnectAll(of: username, app: app, reason: reason)
        case .closeDevice(let app, let username, let deviceID, let connection, let reason):
            local.disconnect(DeviceKey(app: app, username: username, deviceID: deviceID), connection: connection, reason: reason)
        case .resync:
            requestResync()
        }
    }

    /// A node died (this one declared it): it may have stored messages it never announced to the devices connected
    /// elsewhere (killed between its commit and its notices), so every device on every live node reads the store once.
    func resyncEveryone() async {
        await withRetries("asking the other nodes to resynchronize their devices") {
            let others = try await store.liveNodes().map(\.epoch).filter { $0 != node.epoch }
            try await postOnce(Dictionary(uniqueKeysWithValues: others.map { ($0, ClusterNotice.resync) }))
        }
        requestResync()
    }

    /// Asks `ClusterService` to make every device here read the store once (coalesced: many requests, one pass).
    func requestResync() {
        resyncWanted.store(true, ordering: .relaxed)
        resyncs.signal()
    }

    /// Whether a resync was asked for since the last call.
    func takeResyncRequest() -> Bool {
        resyncWanted.exchange(false, ordering: .relaxed)
    }

    /// Records a successful heartbeat, sent at `sent` (what the others saw is at least that recent).
    func noteHeartbeat(sentAt sent: ContinuousClock.Instant, others: Int) {
        let at = sent.nanosecondsSinceStart
        lastHeartbeat.store(at, ordering: .relaxed)
        _ = healthySince.compareExchange(expected: .min, desired: at, ordering: .relaxed)
        solitude.withLock { $0.heartbeat(sentAt: sent, others: others) }
    }

    /// Records a failed heartbeat: contact with the database is broken.
    func noteHeartbeatFailed() {
        healthySince.store(.min, ordering: .relaxed)
        solitude.withLock { $0.heartbeatFailed() }
    }

    /// Whether heartbeats have succeeded without a failure for `duration`: after an outage every node's heartbeat is late,
    /// and a node must not declare the others dead before they had the same chance to beat again.
    func hasBeatenSteadily(for duration: Duration) -> Bool {
        let since = healthySince.load(ordering: .relaxed)
        guard since != .min else { return false }
        return ContinuousClock.now.nanosecondsSinceStart - since >= Int64(duration.components.seconds) * 1_000_000_000
    }

    /// Whether this node's last heartbeat is recent enough that no other node can have declared it dead: a node that
    /// cannot beat stops claiming pushes (another node may be about to release and send them).
    var isSafelyAlive: Bool {
        ContinuousClock.now.nanosecondsSinceStart - lastHeartbeat.load(ordering: .relaxed) < Int64(
            ClusterService.safeSilence.components.seconds) * 1_000_000_000
    }
}

extension ContinuousClock.Instant {
    /// Nanoseconds since an arbitrary fixed point (the first call), to keep an instant in an atomic.
    var nanosecondsSinceStart: Int64 {
        let elapsed = processStart.duration(to: self).components
        return elapsed.seconds * 1_000_000_000 + elapsed.attoseconds / 1_000_000_000
    }

    /// The instant `nanosecondsSinceStart` stands for.
    static func fromNanosecondsSinceStart(_ nanoseconds: Int64) -> ContinuousClock.Instant {
        processStart.advanced(by: .nanoseconds(nanoseconds))
    }
}

private let processStart = ContinuousClock.now
