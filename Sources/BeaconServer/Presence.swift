import BeaconCore
import BeaconProtocol
import BeaconStorage
import Synchronization

/// Which devices of users are online. The push pipeline asks this before pushing; on several nodes the answer comes from
/// the shared database (`Switchboard`).
public protocol PresenceRegistry: Sendable {
    /// Device ids of each user's connected, authenticated devices (users with none are absent).
    func onlineDevices(of usernames: [String], app: Int64) async throws -> [String: Set<String>]
    /// Device ids of each user's connected devices, for users expected to have `devices` online: a registry may answer
    /// from what it holds itself for a user whose expected devices are all connected to it (their going offline, later,
    /// is seen by whoever then reads the store), and must read for the others as `onlineDevices` does.
    func onlineDevices(expecting devices: [String: Set<String>], app: Int64) async throws -> [String: Set<String>]
}

extension PresenceRegistry {
    public func onlineDevices(expecting devices: [String: Set<String>], app: Int64) async throws -> [String: Set<String>] {
        try await onlineDevices(of: Array(devices.keys), app: app)
    }
}

/// A user within an app.
struct UserKey: Hashable, Sendable {
    var app: Int64
    var username: String
}

/// The live connections of this node, by user and device. Hands stored and online-only messages to the
/// connected devices; never blocks on a slow one (see `DeviceOutbox`).
final class ConnectionRegistry: PresenceRegistry {
    private let connections = Mutex<[UserKey: [String: DeviceOutbox]]>([:])
    /// The ids of the connections registered here whose sessions have not unregistered yet (replaced ones included, until
    /// their session ends): a presence row of this node for any other connection is stale (`ClusterLink.reconcilePresence`).
    private let registered = Mutex<Set<Int64>>([])

    /// The ids of the connections registered here and not unregistered yet.
    var registeredConnections: Set<Int64> { registered.withLock { $0 } }

    /// Device ids of the user's devices connected to this node.
    func connectedDevices(of username: String, app: Int64) -> [String] {
        connections.withLock { $0[UserKey(app: app, username: username)].map { Array($0.keys) } ?? [] }
    }

    /// Devices of the app connected to this node.
    func connectedDeviceCount(app: Int64) -> Int {
        connections.withLock { table in table.reduce(0) { $0 + ($1.key.app == app ? $1.value.count : 0) } }
    }

    func onlineDevices(of usernames: [String], app: Int64) -> [String: Set<String>] {
        connections.withLock { table in
            var online: [String: Set<String>] = [:]
            for username in usernames {
                if let devices = table[UserKey(app: app, username: username)], !devices.isEmpty { online[username] = Set(devices.keys) }
            }
            return online
        }
    }

    /// Registers a device's connection; an earlier connection of the same device is told to close.
    func register(_ outbox: DeviceOutbox) {
        // Before the connection is recorded in a shared store: a reconcile that reads its row finds it here.
        registered.withLock { _ = $0.insert(outbox.connectionID) }
        let replaced = connections.withLock { table in
            table[outbox.user, default: [:]].updateValue(outbox, forKey: outbox.deviceID)
        }
        replaced?.close(reason: "replaced")
        // A device that connects while the server shuts down (after `disconnectEveryone`) is told to go at once.
        if let reason = everyoneGoes.withLock({ $0 }) { outbox.close(reason: reason) }
    }

    /// Set by `disconnectEveryone` (graceful shutdown): why every device goes.
    private let everyoneGoes = Mutex<String?>(nil)

    /// Removes the connection if it is still the registered one for its device; true if it was.
    @discardableResult
    func unregister(_ outbox: DeviceOutbox) -> Bool {
        registered.withLock { _ = $0.remove(outbox.connectionID) }
        return connections.withLock { table in
            guard table[outbox.user]?[outbox.deviceID] === outbox else { return false }
            table[outbox.user]?[outbox.deviceID] = nil
            if table[outbox.user]?.isEmpty == true { table[outbox.user] = nil }
            return true
        }
    }

    /// Hands freshly stored inbox entries to the connected devices of their users.
    func deliver(_ entries: [InboxEntry], app: Int64) {
        let byUser = Dictionary(grouping: entries, by: \.username)
        let targets = connections.withLock { table in
            byUser.compactMap { username, entries in table[UserKey(app: app, username: username)].map { ($0.values, entries) } }
        }
        for (outboxes, entries) in targets {
            for outbox in outboxes { outbox.enqueue(entries) }
        }
    }

    /// Hands an online-only message to the connected devices of `usernames`, except the device it came from.
    func deliverOnline(_ message: Message, to usernames: [String], app: Int64, exceptDevice origin: String?) {
        let outboxes = connections.withLock { table in
            usernames.flatMap { username in table[UserKey(app: app, username: username)]?.values.map { $0 } ?? [] }
        }
        for outbox in outboxes where !(outbox.user.username == message.from && outbox.deviceID == origin) {
            outbox.enqueueOnline(message)
        }
    }

    /// Queues frames for every connected device of the user; a device that stopped reading its answers is closed
    /// (`overloaded`: what it missed comes again when it reconnects).
    func send(_ frames: [ServerFrame], toDevicesOf username: String, app: Int64) {
        let outboxes = connections.withLock { $0[UserKey(app: app, username: username)].map { Array($0.values) } ?? [] }
        for outbox in outboxes where !frames.allSatisfy({ outbox.reply($0, aboutTheUser: true) }) {
            outbox.close(reason: "overloaded")
        }
    }

    /// Closes every connection of the user.
    func disconnectAll(of username: String, app: Int64, reason: String) {
        let outboxes = connections.withLock { $0[UserKey(app: app, username: username)].map { Array($0.values) } ?? [] }
        for outbox in outboxes { outbox.close(reason: reason) }
    }

    /// Closes the device's connection if it is still `connection` (another node took the device over), or whichever
    /// it has when `connection` is nil.
    func disconnect(_ device: DeviceKey, connection: Int64?, reason: String) {
        let outbox = connections.withLock { $0[UserKey(app: device.app, username: device.username)]?[device.deviceID] }
        if let outbox, connection == nil || outbox.connectionID == connection { outbox.close(reason: reason) }
    }

    /// Tells every connected device to read what the store holds after its position, 500 devices every 50 ms, so that the
    /// reads do not all queue for the database at once.
    func fetchForEveryone() async {
        let outboxes = connections.withLock { $0.values.flatMap(\.values) }
        for (index, outbox) in outboxes.enumerated() {
            if index > 0, index % 500 == 0 { try? await Task.sleep(for: .milliseconds(50)) }
            outbox.fetchFromStore()
        }
    }

    /// Tells the connected devices of the users to read their new messages from the store (they were stored on
    /// another node).
    func fetch(for usernames: [String], app: Int64) {
        let outboxes = connections.withLock { table in
            usernames.flatMap { table[UserKey(app: app, username: $0)]?.values.map { $0 } ?? [] }
        }
        for outbox in outboxes { outbox.fetchFromStore() }
    }

    /// Device sessions running, their cleanup (cursor flush, push re-decisions) included.
    private let sessions = Atomic<Int>(0)

    func sessionBegan() { sessions.add(1, ordering: .relaxed) }
    func sessionEnded() { sessions.subtract(1, ordering: .relaxed) }

    /// Whether every device session has ended, cleanup included.
    var isIdle: Bool { sessions.load(ordering: .relaxed) == 0 }

    /// The open device sockets, to close at shutdown those that did not close when told to.
    private let sockets = Mutex<[ObjectIdentifier: DeviceSocket]>([:])

    func socketOpened(_ socket: DeviceSocket, of connection: DeviceConnection) {
        sockets.withLock { $0[ObjectIdentifier(connection)] = socket }
    }

    func socketClosed(of connection: DeviceConnection) {
        sockets.withLock { _ = $0.removeValue(forKey: ObjectIdentifier(connection)) }
    }

    /// Whether any device socket is still open.
    var hasOpenSockets: Bool { sockets.withLock { !$0.isEmpty } }

    /// Closes every device socket still open, without a word.
    func closeEverySocket() {
        for socket in sockets.withLock({ Array($0.values) }) { socket.channel.close(promise: nil) }
    }

    /// Tells every device to go, and every device that registers from now on (graceful shutdown).
    func disconnectEveryone(reason: String) {
        everyoneGoes.withLock { $0 = reason }
        let outboxes = connections.withLock { $0.values.flatMap(\.values) }
        for outbox in outboxes { outbox.close(reason: reason) }
    }
}

/// Everything waiting to be written to one device's WebSocket, bounded so that a slow reader never holds up
/// senders: when too many stored messages pile up, they are dropped from memory and re-read from the store
/// (where they are safe) once the device catches up.
final class DeviceOutbox: Sendable {
    let user: UserKey
    let deviceID: String
    /// Unique across the cluster: tells this connection from the device's earlier and later ones.
    let connectionID = Int64.random(in: 1...Int64.max)
    /// When the device opened it: of two connections of one device on different nodes, the later wins.
    let opened = ContinuousClock.now
    /// Called whenever something is queued or asked for (`DeviceConnection` writes then); gone once finished.
    private let listener = Mutex<(@Sendable () -> Void)?>(nil)
    private let state = Mutex(Pending())
    private let limit: Int
    /// The highest `seq` written (or about to be) to the device: it may acknowledge nothing beyond.
    private let sentThrough = Atomic<Int64>(0)

    struct Pending {
        /// Answers to the device's frames, and frames about its user (read state, badge: `aboutTheUser`).
        var replies: [(frame: ServerFrame, aboutTheUser: Bool)] = []
        var stored: [InboxEntry] = []
        var onlineOnly: [Message] = []
        /// Stored messages were dropped (or the device asked to sync): read the store instead.
        var mustFetch = false
        /// The sync starts again from the device's acknowledged cursor (its `sync` frame).
        var fromAcknowledged = false
        var announceSynced = false
        var closeReason: String?
        /// Kicked, whether or not it was the first reason to close.
        var kicked = false

        /// Whether anything here tells the device of its user's account: messages, or frames about the user.
        var readsForTheUser: Bool { !stored.isEmpty || mustFetch || !onlineOnly.isEmpty || replies.contains { $0.aboutTheUser } }
    }

    init(user: UserKey, deviceID: String, limit: Int) {
        self.user = user
        self.deviceID = deviceID
        self.limit = limit
    }

    /// Sets what a wake-up calls.
    func onWake(_ listener: @escaping @Sendable () -> Void) {
        self.listener.withLock { $0 = listener }
    }

    private func wake() {
        listener.withLock { $0 }?()
    }

    func enqueue(_ entries: [InboxEntry]) {
        state.withLock { pending in
            if pending.mustFetch { return }
            pending.stored.append(contentsOf: entries)
            if pending.stored.count > limit {
                pending.stored.removeAll()
                pending.mustFetch = true
            }
        }
        wake()
    }

    func enqueueOnline(_ message: Message) {
        // Online-only messages are best effort: a device that is this far behind loses the oldest.
        state.withLock { pending in
            pending.onlineOnly.append(message)
            if pending.onlineOnly.count > limit { pending.onlineOnly.removeFirst() }
        }
        wake()
    }

    /// Queues a direct answer (sent, error, pong), or with `aboutTheUser` a frame about the user's account that goes to
    /// each of its devices (read state, badge). Returns false when the device has stopped reading them.
    @discardableResult
    func reply(_ frame: ServerFrame, aboutTheUser: Bool = false) -> Bool {
        let accepted = state.withLock { pending in
            guard pending.replies.count < limit else { return false }
            pending.replies.append((frame, aboutTheUser))
            return true
        }
        wake()
        return accepted
    }

    /// Asks the writer to read what the store holds after the device's position (messages stored on another node).
    func fetchFromStore() {
        state.withLock { pending in
            pending.stored.removeAll()
            pending.mustFetch = true
        }
        wake()
    }

    /// Asks the writer to read everything after the device's position (or, `fromAcknowledged`, after what it
    /// acknowledged) from the store, then say `synced`.
    func requestSync(fromAcknowledged: Bool = false) {
        state.withLock { pending in
            pending.stored.removeAll()
            pending.mustFetch = true
            pending.fromAcknowledged = pending.fromAcknowledged || fromAcknowledged
            pending.announceSynced = true
        }
        wake()
    }

    /// Closes the connection; the first reason given is the one the device is told. A kick (`DeviceSession.kicked`) is
    /// noted whenever it comes (`wasKicked`).
    func close(reason: String) {
        state.withLock { state in
            state.closeReason = state.closeReason ?? reason
            state.kicked = state.kicked || reason == DeviceSession.kicked
        }
        wake()
    }

    /// Whether the connection was told to close (kicked, replaced, logged out, overloaded).
    var isClosing: Bool { closeReason != nil }
    /// Why the connection is to close (nil: it is not).
    var closeReason: String? { state.withLock { $0.closeReason } }
    /// Whether the connection was kicked, first or after another reason: nothing about its user goes to it any more.
    var wasKicked: Bool { state.withLock { $0.kicked } }

    /// The writer is about to send everything up to `seq` (the device may acknowledge it from now on).
    func noteSending(through seq: Int64) {
        sentThrough.max(seq, ordering: .relaxed)
    }

    /// Whether the device may acknowledge `seq`: only what it was sent.
    func mayAcknowledge(_ seq: Int64) -> Bool {
        seq <= sentThrough.load(ordering: .relaxed)
    }

    /// Wakes nobody any more.
    func finish() {
        listener.withLock { $0 = nil }
    }

    /// Takes everything pending.
    func take() -> Pending {
        state.withLock { pending in
            let taken = pending
            pending = Pending(closeReason: pending.closeReason, kicked: pending.kicked)
            return taken
        }
    }
}
