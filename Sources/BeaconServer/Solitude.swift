/// Whether this node is the only one in its cluster, as its heartbeats find: while it is, it reads presence from its own
/// memory instead of the shared store (a message's relay and push decision then cost no read).
///
/// Sound by a fence on the joining side. This node counts itself alone only on a heartbeat *sent* less than
/// `aloneWindow` ago that found no other node; a node that joined beside others registers no device until
/// `registrationFence` (longer, so that the two nodes' clocks need not run exactly alike) after its join — a heartbeat of
/// its own that finds no other node opens it at once: any node that joins later sees it. So when this node reads
/// presence from memory, every node that may hold a device joined after its last heartbeat's look, and registers its
/// devices — which then read the store — only after this read: what this node stored before is found by their first
/// sync, what it stores after is relayed.
struct Solitude: Sendable {
    /// How old a heartbeat that found no other node may be. Heartbeats come every second: a node alone stays alone
    /// between them.
    static let aloneWindow: Duration = .seconds(2)
    /// How long a node that joined beside others waits before it registers a device.
    static let registrationFence: Duration = .seconds(3)

    /// When the latest heartbeat that found no other node was sent (nil: the latest found others, or none came yet).
    private(set) var aloneAsOf: ContinuousClock.Instant?
    /// From when devices may register here.
    private(set) var registrationsFrom: ContinuousClock.Instant
    /// Set when the node leaves: a node joining from then on finds nobody, so this one must not count itself alone.
    private(set) var left = false

    init(joinedAt: ContinuousClock.Instant) {
        registrationsFrom = joinedAt + Self.registrationFence
    }

    /// A heartbeat sent at `sent` found `others` other nodes (live, or silent and not yet declared dead). Heartbeats come
    /// one after another, each sent after the one before was answered.
    mutating func heartbeat(sentAt sent: ContinuousClock.Instant, others: Int) {
        if others == 0 {
            aloneAsOf = left ? nil : sent
            registrationsFrom = min(registrationsFrom, sent)
        } else {
            aloneAsOf = nil
        }
    }

    /// A heartbeat failed: whether others joined is unknown until the next one.
    mutating func heartbeatFailed() {
        aloneAsOf = nil
    }

    /// The node is leaving the cluster: it is never alone again.
    mutating func leave() {
        left = true
        aloneAsOf = nil
    }

    /// Whether presence may be read from this node's memory at `now`.
    func isAlone(at now: ContinuousClock.Instant) -> Bool {
        guard let aloneAsOf else { return false }
        return aloneAsOf.duration(to: now) < Self.aloneWindow
    }
}
