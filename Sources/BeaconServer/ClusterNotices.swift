import BeaconCore
import BeaconProtocol
import BeaconStorage
import Synchronization

/// What one node tells another: carried by a notification, or posted to its mailbox.
enum ClusterNotice: Codable, Sendable {
    /// New stored messages for these users' devices, handed over as they are (a device that finds a gap reads the store).
    case deliver(app: Int64, entries: [RelayedEntry])
    /// New stored messages for these users: their devices read them from the store (too large to hand over).
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

    /// Whether the notice closes connections.
    var closesConnections: Bool {
        switch self {
        case .closeUser, .closeDevice: true
        case .deliver, .fetch, .online, .frames, .resync: false
        }
    }
}

/// An inbox entry as a notice carries it.
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

/// Notifications waiting to be sent, in order: whatever accumulates while one round trip runs goes in the next
/// (coalescing). A wake-up already waiting is not queued twice.
final class PendingNotifications: Sendable {
    private struct Queue {
        var waiting: [Letter] = []
        var wakeups: Set<Int64> = []
    }
    private let queue = Mutex(Queue())
    private let signal = WakeSignal()
    private let sent = Atomic<Int>(0)

    /// Notifications sent in one round trip, at most.
    static let batchLimit = 1000

    /// Notifications sent so far.
    var notificationsSent: Int { sent.load(ordering: .relaxed) }

    /// Counts notifications that went out.
    func noteSent(_ count: Int) { sent.add(count, ordering: .relaxed) }

    func add(_ notifications: [Letter]) {
        guard !notifications.isEmpty else { return }
        queue.withLock { queue in
            for notification in notifications where !notification.body.isEmpty || queue.wakeups.insert(notification.node).inserted {
                queue.waiting.append(notification)
            }
        }
        signal.signal()
    }

    /// Queues notifications ahead of everything waiting (those of a round trip that failed: a notice queued after them
    /// must not arrive first). A wake-up already waiting moves ahead with them.
    func addFirst(_ notifications: [Letter]) {
        guard !notifications.isEmpty else { return }
        let woken = Set(notifications.filter(\.body.isEmpty).map(\.node))
        queue.withLock { queue in
            queue.waiting.removeAll { $0.body.isEmpty && woken.contains($0.node) }
            var seen: Set<Int64> = []
            let first = notifications.filter { !$0.body.isEmpty || seen.insert($0.node).inserted }
            queue.waiting.insert(contentsOf: first, at: 0)
            queue.wakeups.formUnion(woken)
        }
        signal.signal()
    }

    /// Whether nothing waits to be sent.
    var isEmpty: Bool { queue.withLock { $0.waiting.isEmpty } }

    /// Whether a notice (not only wake-ups) waits to be sent.
    var holdsNotices: Bool { queue.withLock { $0.waiting.contains { !$0.body.isEmpty } } }

    /// The next notifications to send (at most `batchLimit`), waiting up to `limit` for some.
    func take(waitingUpTo limit: Duration) async -> [Letter] {
        await signal.wait(upTo: limit)
        let (batch, more) = queue.withLock { queue in
            let batch = Array(queue.waiting.prefix(Self.batchLimit))
            queue.waiting.removeFirst(batch.count)
            for notification in batch where notification.body.isEmpty { queue.wakeups.remove(notification.node) }
            return (batch, !queue.waiting.isEmpty)
        }
        if more { signal.signal() }
        return batch
    }
}

/// What arrived on this node's channel, acted on in the order it arrived: a notice carried by a notification only once
/// the letters of every wake-up that came before it were read (a close posted before a message was relayed is acted on
/// first).
final class Arrivals: Sendable {
    private let queue = Mutex<[NodeSignal]>([])
    private let signal = WakeSignal()
    /// When something last arrived since listening began (`ContinuousClock.Instant.nanosecondsSinceStart`), or `.min`
    /// while not listening yet.
    private let heard = Atomic<Int64>(.min)

    /// One thing to do, in order.
    enum Step: Hashable {
        case readMailbox
        case receive(String)
        /// Every device here reads the store once (notifications may have been lost while nobody listened).
        case resync
    }

    func add(_ arrived: NodeSignal) {
        heard.store(ContinuousClock.now.nanosecondsSinceStart, ordering: .relaxed)
        queue.withLock { $0.append(arrived) }
        signal.signal()
    }

    /// What waits to be taken.
    var waiting: [NodeSignal] { queue.withLock { $0 } }

    /// A new listening connection is being opened: nothing has been heard on it yet.
    func noteListening() {
        heard.store(.min, ordering: .relaxed)
    }

    /// When something last arrived on the current connection (`.listening` first), nil before that.
    var lastHeard: ContinuousClock.Instant? {
        let at = heard.load(ordering: .relaxed)
        return at == .min ? nil : ContinuousClock.Instant.fromNanosecondsSinceStart(at)
    }

    /// Puts steps not taken back ahead of whatever arrived since, as the signals they came from (a mailbox read that
    /// failed is tried again before any later notice is acted on).
    func putBack(_ steps: ArraySlice<Step>) {
        let signals = steps.map { step -> NodeSignal in
            switch step {
            case .readMailbox: .wakeup
            case .receive(let notice): .notice(notice)
            case .resync: .listening
            }
        }
        queue.withLock { $0.insert(contentsOf: signals, at: 0) }
        signal.signal()
    }

    /// What arrived since the last call, waiting up to `limit` for something.
    func take(waitingUpTo limit: Duration) async -> [NodeSignal] {
        await signal.wait(upTo: limit)
        return queue.withLock { queue in
            defer { queue = [] }
            return queue
        }
    }

    /// The steps that act on `signals` in order; `mailboxDue`: the mailbox is read first whatever arrived (polling).
    /// Wake-ups in a row need one read, before the next notice; the resync after listening again comes after that read,
    /// so that closes posted meanwhile are acted on first.
    static func steps(for signals: [NodeSignal], mailboxDue: Bool) -> [Step] {
        var steps: [Step] = []
        var mustRead = mailboxDue
        var mustResync = false
        for arrived in signals {
            switch arrived {
            case .wakeup:
                mustRead = true
            case .listening:
                mustRead = true
                mustResync = true
            case .notice(let notice):
                if mustRead { steps.append(.readMailbox) }
                mustRead = false
                steps.append(.receive(notice))
            }
        }
        if mustRead { steps.append(.readMailbox) }
        if mustResync { steps.append(.resync) }
        return steps
    }
}
