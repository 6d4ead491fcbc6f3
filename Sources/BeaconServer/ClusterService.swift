import BeaconStorage
import Logging
import ServiceLifecycle

/// A node's life in a cluster, as one service with eight loops:
/// - heartbeat every second (a node that finds it was declared dead stops: its claims and devices went to others; one
///   whose heartbeats fail claims no pushes after `safeSilence`);
/// - declaring dead the nodes silent for `deadAfter` (any node whose own heartbeats have succeeded for that long: after
///   an outage everyone is late; each dead node is cleaned up by one): their push claims
///   are released, the devices they held go offline (their `online` skips decided again), and every device still
///   connected reads the store once (the dead node may have stored messages it never announced);
/// - listening for notifications on a connection of its own, reconnected with backoff when it fails or falls silent (its
///   own probe unheard; notifications sent while it did not listen are lost: once it listens again, every device here
///   reads the store once);
/// - acting on what arrives in the order it arrives (`Arrivals`): a notice carried by a notification, or the mailbox read
///   at a wake-up, and at least every `pollInterval` (a lost wake-up costs latency, not a letter);
/// - sending notifications to other nodes, coalesced: those queued while one round trip runs go in the next (a failed
///   round trip's notices are posted as letters, its wake-ups sent again first, paced);
/// - making every device here read the store once when a node died (paced, coalesced);
/// - trying again, with backoff, the presence removals that failed when a device disconnected;
/// - every `reconcileInterval`, removing this node's presence rows whose connections have ended (the floor under those
///   retries: a stale row would keep its user's devices skipped as `online`).
/// On graceful shutdown (it stops after every other service of the node) it leaves, so that its claims and presence are
/// released at once rather than after `deadAfter`.
struct ClusterService: Service {
    let link: ClusterLink
    let router: PushRouter?
    let logger: Logger

    static let heartbeatInterval: Duration = .seconds(1)
    static let deadAfter: Int64 = 5000
    /// A node whose last heartbeat is older than this claims no pushes (others may declare it dead at `deadAfter`).
    static let safeSilence: Duration = .seconds(4)
    static let pollInterval: Duration = .milliseconds(250)
    static let lettersPerRead = 500
    /// How often a node removes its presence rows whose connections have ended: once the database answers, the longest
    /// a stale row lasts.
    static let reconcileInterval: Duration = .seconds(30)
    /// How often failed presence removals are looked at (each is tried again when its backoff is over).
    static let removalRetryInterval: Duration = .milliseconds(250)

    /// This node was declared dead by another (it was silent too long); it must not go on serving.
    struct DeclaredDead: Error, CustomStringConvertible {
        var description: String {
            "this node was declared dead by the cluster (no heartbeat for 5 s); it stops so that it can be restarted"
        }
    }

    private var store: any ClusterStore { link.store }
    private var node: ClusterNode { link.node }

    func run() async throws {
        logger.notice("joined the cluster", metadata: ["node": "\(node.name)", "epoch": "\(node.epoch)", "slot": "\(node.slot)"])
        let arrivals = Arrivals()
        try await withThrowingDiscardingTaskGroup { group in
            group.addTask { try await self.beat() }
            group.addTask { await self.rescue() }
            group.addTask { await self.listen(into: arrivals) }
            group.addTask { await self.act(on: arrivals) }
            group.addTask { await self.notifyOthers() }
            group.addTask { await self.resyncDevices() }
            group.addTask { await self.retryRemovals() }
            group.addTask { await self.reconcile() }
        }
        link.leaving()
        // What this node stored but could not announce: the others must declare it dead (then their devices read the store).
        // Wake-ups alone may stay unsent: their letters are read at the next poll.
        guard !link.notifications.holdsNotices else {
            logger.error("stopping with notices unsent: the other nodes declare this node dead shortly")
            return
        }
        do {
            try await store.leaveCluster(node)
        } catch {
            logger.error("leaving the cluster failed (others declare this node dead shortly)", metadata: ["error": "\(error)"])
        }
    }

    private func beat() async throws {
        while Task.serviceShouldContinue {
            do {
                let sent = ContinuousClock.now
                guard let others = try await store.heartbeat(node) else { throw DeclaredDead() }
                link.noteHeartbeat(sentAt: sent, others: others)
            } catch let error as DeclaredDead {
                throw error
            } catch {
                link.noteHeartbeatFailed()
                logger.error("heartbeat failed", metadata: ["error": "\(String(reflecting: error))"])
            }
            await link.afterHeartbeat?()
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: Self.heartbeatInterval) }
        }
    }

    private func rescue() async {
        while Task.serviceShouldContinue {
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: Self.heartbeatInterval) }
            // After an outage (of the database, or of this node's contact with it) the others' heartbeats are late too.
            guard Task.serviceShouldContinue, link.hasBeatenSteadily(for: .milliseconds(Self.deadAfter)) else { continue }
            do {
                // nil: this node was declared dead itself; its heartbeat loop finds out and stops the node.
                guard let dead = try await store.removeDeadNodes(silentFor: Self.deadAfter, by: node) else { continue }
                for gone in dead.nodes {
                    let died = dead.died.contains(gone)
                    logger.notice(
                        died ? "declared a node dead" : "a node left", metadata: ["node": "\(gone.name)", "epoch": "\(gone.epoch)"])
                }
                // A node that left gracefully announced everything it stored; one that died may not have.
                if !dead.died.isEmpty { await link.resyncEveryone() }
                await takeOffline(dead.users)
            } catch {
                logger.error("declaring silent nodes dead failed", metadata: ["error": "\(String(reflecting: error))"])
            }
        }
    }

    /// The devices of these users were on a dead node: what they were online for is decided again (each user on their
    /// own, so that one failure does not skip the others; the router's periodic pass catches what still fails).
    private func takeOffline(_ users: [(app: Int64, username: String)]) async {
        guard let router else { return }
        var apps: [Int64: AppRecord] = [:]
        for (appID, username) in users {
            do {
                if apps[appID] == nil { apps[appID] = try await store.app(id: appID) }
                guard let app = apps[appID] else { continue }
                await router.deviceWentOffline(username, app: app)
            } catch {
                logger.error("deciding again for a dead node's device failed", metadata: ["user": "\(username)", "error": "\(error)"])
            }
        }
    }

    private func retryRemovals() async {
        while Task.serviceShouldContinue {
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: Self.removalRetryInterval) }
            guard Task.serviceShouldContinue else { return }
            let offline = await link.retryFailedRemovals()
            if !offline.isEmpty { await takeOffline(Self.users(of: offline)) }
        }
    }

    private func reconcile() async {
        while Task.serviceShouldContinue {
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: Self.reconcileInterval) }
            guard Task.serviceShouldContinue else { return }
            do {
                try await reconcilePresence()
            } catch {
                logger.error("removing the presence of ended connections failed", metadata: ["error": "\(String(reflecting: error))"])
            }
        }
    }

    /// Removes this node's presence rows whose connections have ended (`ClusterLink.reconcilePresence`), then decides
    /// again the pushes of the devices that thereby went offline.
    func reconcilePresence() async throws {
        let removed = try await link.reconcilePresence()
        guard !removed.isEmpty else { return }
        logger.warning("removed the presence of connections that had ended", metadata: ["devices": "\(removed.count)"])
        await takeOffline(Self.users(of: removed))
    }

    /// The users of `devices`, each once.
    private static func users(of devices: [DeviceKey]) -> [(app: Int64, username: String)] {
        var seen: Set<UserKey> = []
        var users: [(app: Int64, username: String)] = []
        for device in devices where seen.insert(UserKey(app: device.app, username: device.username)).inserted {
            users.append((app: device.app, username: device.username))
        }
        return users
    }

    private func resyncDevices() async {
        while Task.serviceShouldContinue {
            await cancelWhenGracefulShutdown { await link.resyncs.wait(upTo: .seconds(1)) }
            if link.takeResyncRequest() { await link.local.fetchForEveryone() }
        }
    }

    private func listen(into arrivals: Arrivals) async {
        var backoff = Duration.milliseconds(100)
        while Task.serviceShouldContinue {
            await link.beforeListening?()
            let started = ContinuousClock.now
            do {
                try await cancelWhenGracefulShutdown { try await listenWhileHeard(into: arrivals) }
            } catch {
                if Task.serviceShouldContinue {
                    logger.warning("the notification connection failed; polling until it is back", metadata: ["error": "\(error)"])
                }
            }
            // A connection that lasted resets the backoff; one failing at once waits longer each time (up to 2 s).
            backoff = started.duration(to: .now) > .seconds(10) ? .milliseconds(100) : min(backoff * 2, .seconds(2))
            let pause = backoff
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: pause) }
        }
    }

    /// The notification connection did not hear this node's own probe, or never began listening.
    struct ListenerSilent: Error, CustomStringConvertible {
        var description: String { "the notification connection did not hear this node's probe, or LISTEN did not complete" }
    }

    /// How long the notification connection may hear nothing before this node sends itself a wake-up (a probe).
    static let listenerProbeAfter: Duration = .seconds(2)
    /// How long after a probe's round trip ended it must have arrived; also how long a probe may take to be sent.
    static let listenerProbeGrace: Duration = .seconds(3)
    /// How long a connection may take to begin listening (the pool's lease and the LISTEN).
    static let listenerStartLimit: Duration = .seconds(10)

    /// Listens until the connection fails or falls silent. A half-open connection (its peer gone without a word, as after
    /// a middlebox dropped it) would otherwise wait forever, and every notification for this node would be lost meanwhile:
    /// the pool checks only the connections it holds idle. So once listening, when nothing arrived for
    /// `listenerProbeAfter`, this node wakes itself through another connection; when that probe was sent but has not
    /// arrived `listenerProbeGrace` after its round trip ended, or listening did not begin within `listenerStartLimit`, the
    /// listening connection is closed, and the next one's `.listening` makes every device here read the store. A probe
    /// that could not be sent (the pool or the database slow or down, which the heartbeat answers for) proves nothing and
    /// is tried again.
    private func listenWhileHeard(into arrivals: Arrivals) async throws {
        arrivals.noteListening()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                try await store.listen(for: node.epoch) { signal in
                    if signal != .listening, link.dropsNotification?() == true { return }
                    arrivals.add(signal)
                }
            }
            group.addTask {
                let started = ContinuousClock.now
                // A probe sent and not heard yet: anything heard after `sending` counts; the grace runs from `sent`.
                var probed: (sending: ContinuousClock.Instant, sent: ContinuousClock.Instant)?
                while true {
                    try await Task.sleep(for: .seconds(1))
                    guard let heard = arrivals.lastHeard else {
                        if started.duration(to: .now) >= Self.listenerStartLimit { throw ListenerSilent() }
                        continue
                    }
                    if let probe = probed {
                        if heard >= probe.sending {
                            probed = nil
                        } else if probe.sent.duration(to: .now) >= Self.listenerProbeGrace {
                            throw ListenerSilent()
                        } else {
                            continue
                        }
                    }
                    guard heard.duration(to: .now) >= Self.listenerProbeAfter else { continue }
                    let probe = [Letter.wakeup(node.epoch)]
                    let sending = ContinuousClock.now
                    if (try? await withTimeout(Self.listenerProbeGrace, { try await store.notify(probe) })) != nil {
                        probed = (sending, ContinuousClock.now)
                    }
                }
            }
            // The first to end ends both: the listening connection failed (it throws), or fell silent.
            try await group.next()
            group.cancelAll()
        }
    }

    private func act(on arrivals: Arrivals) async {
        var lastRead: ContinuousClock.Instant?
        while Task.serviceShouldContinue {
            await link.beforeActing?(node.epoch) { arrivals.waiting }
            let signals = await cancelWhenGracefulShutdown { await arrivals.take(waitingUpTo: Self.pollInterval) }
            let due = lastRead.map { $0.duration(to: .now) >= Self.pollInterval } ?? true
            let steps = Arrivals.steps(for: signals, mailboxDue: due)
            acting: for (index, step) in steps.enumerated() {
                switch step {
                case .readMailbox:
                    lastRead = .now
                    if await readMailbox() { continue }
                    // What arrived after the wake-up waits for the letters it announced (a close before a message).
                    arrivals.putBack(steps[index...])
                    try? await cancelWhenGracefulShutdown { try await Task.sleep(for: Self.pollInterval) }
                    break acting
                case .receive(let notice):
                    link.receive(notice)
                case .resync:
                    link.requestResync()
                }
            }
        }
    }

    /// Reads the whole mailbox and acts on its letters; false when a read failed.
    private func readMailbox() async -> Bool {
        do {
            while true {
                let letters = try await store.takeLetters(for: node.epoch, limit: Self.lettersPerRead)
                for letter in letters { link.receive(letter) }
                if letters.count < Self.lettersPerRead { return true }
            }
        } catch {
            logger.error("reading the mailbox failed", metadata: ["error": "\(error)"])
            return false
        }
    }

    private func notifyOthers() async {
        var backoff = Duration.zero
        while Task.serviceShouldContinue {
            let batch = await cancelWhenGracefulShutdown { await link.notifications.take(waitingUpTo: .seconds(1)) }
            guard !batch.isEmpty else { continue }
            if await link.send(batch) != .failed {
                backoff = .zero
            } else {
                // What goes again first (`ClusterLink.send`) is paced, 250 ms doubling to 2 s.
                backoff = min(max(backoff * 2, .milliseconds(250)), .seconds(2))
                let pause = backoff
                try? await cancelWhenGracefulShutdown { try await Task.sleep(for: pause) }
            }
        }
        // What was queued before the node stops goes out before it leaves (a node that left is taken to have announced
        // everything it stored), unless sending fails.
        while case let batch = await link.notifications.take(waitingUpTo: .zero), !batch.isEmpty, await link.send(batch) == .sent {}
    }
}
