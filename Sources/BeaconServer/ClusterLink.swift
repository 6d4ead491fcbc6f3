import BeaconCore
import BeaconProtocol
import BeaconStorage
import Foundation
import Logging
import Synchronization

/// What one node tells another through its mailbox.
enum ClusterNotice: Codable, Sendable {
    /// New stored messages for these users' devices, handed over as they are (a device that finds a gap reads the store).
    case deliver(app: Int64, entries: [RelayedEntry])
    /// New stored messages for these users: their devices read them from the store (too many to hand over).
    case fetch(app: Int64, users: [String])
    /// An online-only message (never stored) for these users' devices.
    case online(app: Int64, message: Message, to: [String], exceptDevice: String?)
    /// Frames for every connected device of the user (read markers).
    case frames(app: Int64, username: String, frames: [ServerFrame])
    /// Close every connection of the user (kicked, deleted).
    case closeUser(app: Int64, username: String, reason: String)
    /// Close this connection of the device (it connected to another node), or whichever it has when nil (kicked).
    case closeDevice(app: Int64, username: String, deviceID: String, connection: Int64?, reason: String)
    /// A node died: messages it stored may never have been announced, so every connected device reads the store.
    case resync
}

extension Message {
    /// Whether a letter may carry the message itself (at most 64 of them): a text or a small custom body.
    var isSmallEnoughToRelay: Bool {
        guard let encoded = try? JSONEncoder().encode(self) else { return false }
        return encoded.count <= 4096
    }
}

/// An inbox entry as a letter carries it.
struct RelayedEntry: Codable, Sendable {
    var username: String
    var seq: Int64
    var message: Message
    var originDevice: String?

    init(_ entry: InboxEntry) {
        (username, seq, message, originDevice) = (entry.username, entry.seq, entry.message, entry.originDevice)
    }

    var entry: InboxEntry { InboxEntry(username: username, seq: seq, message: message, originDevice: originDevice) }
}

/// This node's link to the others through the shared database: presence, and notices posted to the mailboxes of the nodes
/// holding the devices concerned, each node woken by a coalesced notification (`ClusterService` reads its own mailbox).
final class ClusterLink: Sendable {
    let store: any ClusterStore
    let node: ClusterNode
    let local: ConnectionRegistry
    let clock: @Sendable () -> Int64
    let logger: Logger
    /// Nodes to wake, sent together by `ClusterService`.
    let wakeups = PendingWakeups()
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
        afterHeartbeat: (@Sendable () async -> Void)? = nil
    ) {
        self.store = store
        self.node = node
        self.local = local
        self.clock = clock
        self.logger = logger
        self.beforePresenceRemoval = beforePresenceRemoval
        self.afterHeartbeat = afterHeartbeat
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

    /// A letter hands over at most this many entries; beyond, it names the users and their devices read the store.
    static let entriesPerLetter = 64

    /// Hands freshly stored entries to the other nodes holding connected devices of their users. Returns the devices of
    /// those users online on any node, as read for it, or nil when it failed.
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
            // Large messages are not copied into letters either: a letter stays small whatever the message.
            let small = entries.allSatisfy { $0.message.isSmallEnoughToRelay }
            try await postOnce(
                usersByNode.mapValues { users in
                    let mine = entries.filter { users.contains($0.username) }
                    return small && mine.count <= Self.entriesPerLetter
                        ? .deliver(app: app, entries: mine.map(RelayedEntry.init)) : .fetch(app: app, users: users.sorted())
                })
            online = connections.mapValues { Set($0.keys) }
        }
        return online
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
        let letters = try notices.map { Letter(node: $0.key, body: String(decoding: try encoder.encode($0.value), as: UTF8.self)) }
        try await store.post(letters)
        posted.add(letters.count, ordering: .relaxed)
        wakeups.add(Set(notices.keys))
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

    /// Acts on a letter from this node's mailbox.
    func receive(_ body: String) {
        let notice: ClusterNotice
        do {
            notice = try JSONDecoder().decode(ClusterNotice.self, from: Data(body.utf8))
        } catch {
            logger.error("a mailbox letter could not be read", metadata: ["error": "\(error)"])
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

/// Nodes waiting to be woken: whatever accumulates while one wake-up is sent goes in the next (coalescing).
final class PendingWakeups: Sendable {
    private let nodes = Mutex<Set<Int64>>([])
    private let signal = WakeSignal()
    private let sent = Atomic<Int>(0)

    /// Wake-ups sent so far (one notification per node per round).
    var notificationsSent: Int { sent.load(ordering: .relaxed) }

    /// Counts a round of wake-ups that went out.
    func noteSent(_ count: Int) { sent.add(count, ordering: .relaxed) }

    func add(_ more: Set<Int64>) {
        nodes.withLock { $0.formUnion(more) }
        signal.signal()
    }

    /// The nodes to wake, waiting up to `limit` for some.
    func take(waitingUpTo limit: Duration) async -> Set<Int64> {
        await signal.wait(upTo: limit)
        return nodes.withLock { nodes in
            defer { nodes = [] }
            return nodes
        }
    }
}

extension ContinuousClock.Instant {
    /// Nanoseconds since an arbitrary fixed point (the first call), to keep an instant in an atomic.
    var nanosecondsSinceStart: Int64 {
        let elapsed = processStart.duration(to: self).components
        return elapsed.seconds * 1_000_000_000 + elapsed.attoseconds / 1_000_000_000
    }
}

private let processStart = ContinuousClock.now
