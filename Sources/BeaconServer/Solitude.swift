import Synchronization

/// Whether this node is the only one in its cluster, as its heartbeats find: while it is, it reads presence from its own
/// memory instead of the shared store (a message's relay and push decision then cost no read).
///
/// Sound by a fence on the joining side. This node counts itself alone only on a heartbeat *sent* less than `fence` ago
/// that found no other node; a node that joined beside others registers no device until `fence` after its join (a
/// heartbeat of its own that finds no other node opens it at once: any node that joins later sees it). So when this
/// node reads presence from memory, every node that may hold a device joined after its last heartbeat's look, less
/// than `fence` ago, and registers its devices — which then read the store — only after this read: what this node
/// stored before is found by their first sync, what it stores after is relayed.
struct Solitude: Sendable {
    /// How old a heartbeat that found no other node may be, and how long a node that joined beside others waits before it
    /// registers a device. Heartbeats come every second: a node alone stays alone between them.
    static let fence: Duration = .seconds(2)

    /// When the latest heartbeat that found no other node was sent (nil: the latest found others, or none came yet).
    private(set) var aloneAsOf: ContinuousClock.Instant?
    /// From when devices may register here.
    private(set) var registrationsFrom: ContinuousClock.Instant

    init(joinedAt: ContinuousClock.Instant) {
        registrationsFrom = joinedAt + Self.fence
    }

    /// A heartbeat sent at `sent` found `others` other nodes (live, or silent and not yet declared dead).
    mutating func heartbeat(sentAt sent: ContinuousClock.Instant, others: Int) {
        if others == 0 {
            aloneAsOf = max(aloneAsOf ?? sent, sent)
            registrationsFrom = min(registrationsFrom, sent)
        } else {
            aloneAsOf = nil
        }
    }

    /// A heartbeat failed: whether others joined is unknown until the next one.
    mutating func heartbeatFailed() {
        aloneAsOf = nil
    }

    /// Whether presence may be read from this node's memory at `now`.
    func isAlone(at now: ContinuousClock.Instant) -> Bool {
        guard let aloneAsOf else { return false }
        return aloneAsOf.duration(to: now) < Self.fence
    }
}
