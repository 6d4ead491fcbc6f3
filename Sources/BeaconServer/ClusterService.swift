import BeaconStorage
import Logging
import ServiceLifecycle

/// A node's life in a cluster, as one service with five loops:
/// - heartbeat every second (a node that finds it was declared dead stops: its claims and devices went to others);
/// - declaring dead the nodes silent for `deadAfter` (any node may; each dead node is cleaned up by one): their push claims
///   are released, the devices they held go offline (their `online` skips decided again), and every device still
///   connected reads the store once (the dead node may have stored messages it never announced);
/// - listening for wake-ups on a connection of its own, reconnected with backoff when it fails;
/// - reading the mailbox at every wake-up and at least every `pollInterval` (a lost wake-up costs latency, not a notice);
/// - waking other nodes, coalesced: the nodes that accumulate while one round trip runs go in the next.
/// On graceful shutdown (it stops after every other service of the node) it leaves, so that its claims and presence are
/// released at once rather than after `deadAfter`.
struct ClusterService: Service {
    let link: ClusterLink
    let router: PushRouter?
    let logger: Logger

    static let heartbeatInterval: Duration = .seconds(1)
    static let deadAfter: Int64 = 5000
    static let pollInterval: Duration = .milliseconds(250)
    static let lettersPerRead = 500

    /// This node was declared dead by another (it was silent too long); it must not go on serving.
    struct DeclaredDead: Error, CustomStringConvertible {
        var description: String { "this node was declared dead by the cluster (no heartbeat for 5 s); it stops so that it can be restarted" }
    }

    private var store: any ClusterStore { link.store }
    private var node: ClusterNode { link.node }

    func run() async throws {
        logger.notice("joined the cluster", metadata: ["node": "\(node.name)", "epoch": "\(node.epoch)", "slot": "\(node.slot)"])
        let mailbox = WakeSignal()
        try await withThrowingDiscardingTaskGroup { group in
            group.addTask { try await self.beat() }
            group.addTask { await self.rescue() }
            group.addTask { await self.listen(waking: mailbox) }
            group.addTask { await self.readMailbox(wokenBy: mailbox) }
            group.addTask { await self.wakeOthers() }
        }
        do {
            try await store.leaveCluster(node)
        } catch {
            logger.error("leaving the cluster failed (others declare this node dead shortly)", metadata: ["error": "\(error)"])
        }
    }

    private func beat() async throws {
        while Task.serviceShouldContinue {
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: Self.heartbeatInterval) }
            guard Task.serviceShouldContinue else { return }
            do {
                if try await !store.heartbeat(node) { throw DeclaredDead() }
            } catch let error as DeclaredDead {
                throw error
            } catch {
                logger.error("heartbeat failed", metadata: ["error": "\(error)"])
            }
        }
    }

    private func rescue() async {
        while Task.serviceShouldContinue {
            do {
                let dead = try await store.removeDeadNodes(silentFor: Self.deadAfter)
                for gone in dead.nodes {
                    logger.notice("declared a node dead", metadata: ["node": "\(gone.name)", "epoch": "\(gone.epoch)"])
                }
                if !dead.nodes.isEmpty { await link.resyncEveryone() }
                if let router, !dead.users.isEmpty {
                    var apps: [Int64: AppRecord] = [:]
                    for (appID, username) in dead.users {
                        if apps[appID] == nil { apps[appID] = try await store.app(id: appID) }
                        guard let app = apps[appID] else { continue }
                        await router.deviceWentOffline(username, app: app)
                    }
                }
            } catch {
                logger.error("declaring silent nodes dead failed", metadata: ["error": "\(error)"])
            }
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: Self.heartbeatInterval) }
        }
    }

    private func listen(waking mailbox: WakeSignal) async {
        var backoff = Duration.milliseconds(100)
        while Task.serviceShouldContinue {
            let started = ContinuousClock.now
            do {
                try await cancelWhenGracefulShutdown {
                    try await store.listenForWakeups(of: node.epoch) { mailbox.signal() }
                }
            } catch {
                if Task.serviceShouldContinue { logger.warning("the wake-up connection failed; polling until it is back", metadata: ["error": "\(error)"]) }
            }
            // A connection that lasted resets the backoff; one failing at once waits longer each time (up to 2 s).
            backoff = started.duration(to: .now) > .seconds(10) ? .milliseconds(100) : min(backoff * 2, .seconds(2))
            let pause = backoff
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: pause) }
        }
    }

    private func readMailbox(wokenBy mailbox: WakeSignal) async {
        while Task.serviceShouldContinue {
            do {
                while true {
                    let letters = try await store.takeLetters(for: node.epoch, limit: Self.lettersPerRead)
                    for letter in letters { link.receive(letter) }
                    if letters.count < Self.lettersPerRead { break }
                }
            } catch {
                logger.error("reading the mailbox failed", metadata: ["error": "\(error)"])
            }
            await cancelWhenGracefulShutdown { await mailbox.wait(upTo: Self.pollInterval) }
        }
    }

    private func wakeOthers() async {
        while Task.serviceShouldContinue {
            let nodes = await cancelWhenGracefulShutdown { await link.wakeups.take(waitingUpTo: .seconds(1)) }
            guard !nodes.isEmpty else { continue }
            do {
                try await store.wake(nodes)
            } catch {
                logger.warning("waking other nodes failed (they poll their mailboxes)", metadata: ["error": "\(error)"])
            }
        }
    }
}
