import BeaconAPNs
import BeaconCore
import BeaconPush
import BeaconStorage
import Foundation
import Logging
import ServiceLifecycle
import Synchronization

/// Sends stored push jobs: claims due jobs, sends them concurrently, records each outcome as it arrives (a few
/// milliseconds' worth per write), retries transient failures with exponential backoff and jitter until `maxAge`, and
/// removes bindings APNs says are dead. Jobs are leased and fenced by their claim token, so a crash or restart resumes
/// every unfinished one and no job is completed twice.
final class PushWorker: Service, Sendable {
    let store: any BeaconStore
    let configs: PushConfigs
    let clock: @Sendable () -> Int64
    let logger: Logger
    /// Give up on a job this long (ms) after it was created.
    let maxAge: Int64
    /// Jobs claimed per round.
    let batch: Int
    let onRecorded: (@Sendable ([PushAttemptOutcome]) -> Void)?
    /// On several nodes: claims are recorded as this node's, so that its death releases them.
    let cluster: ClusterLink?
    let metrics: BeaconMetrics
    private let wake = WakeSignal()
    private let running = Atomic<Bool>(false)
    /// When the loop last began a round (`DispatchTime` uptime, ns).
    private let lastRound = Atomic<UInt64>(0)

    /// A round that has not ended after this long is stuck: every send of a round is over `leaseMargin` before its
    /// claim's lease ends (the devices side by side; a device's later notifications start only within `sequenceBudget`
    /// of the claim), and the round then records what it got.
    static let stallAfter: Duration = .seconds(120)

    /// The worker's loop, for `GET /ready`.
    enum Health: String {
        case running, stalled, stopped
    }

    var health: Health {
        guard running.load(ordering: .relaxed) else { return .stopped }
        let since = DispatchTime.now().uptimeNanoseconds &- lastRound.load(ordering: .relaxed)
        return Duration.nanoseconds(Int64(clamping: since)) > Self.stallAfter ? .stalled : .running
    }

    static let lease: Int64 = 60_000
    /// Every send is over (answered, or timed out) this long before its claim's lease runs out, so that its outcome is
    /// recorded before another node may claim the job again: the APNs client writes no request whose answer could come
    /// later, and a job it did not write in time is handed back unsent (`APNsClient.send(_:deadline:stillWanted:)`).
    static let leaseMargin: Duration = .seconds(5)
    /// Outcomes written per transaction, at most; they are written as soon as the previous write is done.
    static let outcomesPerWrite = 256
    /// A send that waited longer than this after its claim checks its binding again before it goes.
    static let recheckAfter: Duration = .seconds(1)
    /// A device's later jobs in a claim start only this long after it; the rest are handed back, due again at once, so
    /// that a device behind a slow APNs holds its round up one send past this at most. (That one send is over before its
    /// claim's lease ends, like any send: `leaseMargin`.)
    static let sequenceBudget: Duration = .seconds(10)

    init(
        store: any BeaconStore, configs: PushConfigs, clock: @escaping @Sendable () -> Int64, logger: Logger, maxAge: Int64,
        batch: Int = 2000,
        cluster: ClusterLink? = nil, metrics: BeaconMetrics, onRecorded: (@Sendable ([PushAttemptOutcome]) -> Void)? = nil
    ) {
        self.metrics = metrics
        self.onRecorded = onRecorded
        self.cluster = cluster
        self.store = store
        self.configs = configs
        self.clock = clock
        self.logger = logger
        self.maxAge = maxAge
        self.batch = batch
    }

    /// New jobs are stored: look now rather than at the next poll.
    func jobsStored() {
        wake.signal()
    }

    func run() async throws {
        lastRound.store(DispatchTime.now().uptimeNanoseconds, ordering: .relaxed)
        running.store(true, ordering: .relaxed)
        defer { running.store(false, ordering: .relaxed) }
        // Alone on its store, this process is the only one pushing: claims of an earlier process died with it. (On several
        // nodes, the claims of a dead node are released when it is declared dead.)
        if cluster == nil {
            do {
                try await store.releasePushClaims()
            } catch {
                logger.error("releasing earlier push claims failed", metadata: ["error": "\(error)"])
            }
        }
        while Task.serviceShouldContinue {
            lastRound.store(DispatchTime.now().uptimeNanoseconds, ordering: .relaxed)
            let worked: Bool
            do {
                worked = try await runOnce()
            } catch {
                logger.error("push worker round failed", metadata: ["error": "\(error)"])
                worked = false
            }
            if !worked {
                // Sleep until the next retry is due (at most a second, so that other nodes' jobs are seen too), or new jobs.
                let due = (try? await store.nextPushJobDue()).flatMap { $0 } ?? Int64.max
                let wait = Duration.milliseconds(max(10, min(due.subtractingReportingOverflow(clock()).partialValue, 1000)))
                try? await cancelWhenGracefulShutdown { await self.wake.wait(upTo: wait) }
            }
        }
        await configs.shutdown()
    }

    /// Claims and sends one batch; false if there was nothing due.
    func runOnce() async throws -> Bool {
        // A node that could not beat for a while may be declared dead any moment, its claims released to others.
        if let cluster, !cluster.isSafelyAlive { return false }
        // Read before the claim, whose lease the store dates from `clock()` read afterwards: the lease ends no earlier
        // than `claimStarted + lease`.
        let claimStarted = ContinuousClock.now
        let jobs =
            if let cluster {
                try await cluster.store.claimPushJobs(now: clock(), lease: Self.lease, limit: batch, node: cluster.node.epoch)
            } else {
                try await store.claimPushJobs(now: clock(), lease: Self.lease, limit: batch)
            }
        guard !jobs.isEmpty else { return false }
        let claimedAt = ContinuousClock.now
        let sendBy = claimStarted + Duration.milliseconds(Self.lease) - Self.leaseMargin
        // Each configuration is read once per batch.
        var configurationsRead: [String: PushConfigRecord?] = [:]
        for job in jobs where configurationsRead["\(job.appID)/\(job.job.notifier)"] == nil {
            configurationsRead["\(job.appID)/\(job.job.notifier)"] = .some(try await store.pushConfig(job.job.notifier, app: job.appID))
        }
        let configurations = configurationsRead
        let outcomes = OutcomeBuffer()
        let unsent = await withTaskGroup(of: [PushJob].self) { group in
            group.addTask {
                await self.record(outcomes)
                return []
            }
            // Devices in parallel; each device's pushes one after another, in the order they were recorded. Sent at once,
            // they could reach APNs in either order (over either connection), and the phone would show whichever came last:
            // an older badge, the older message on top.
            let unsent = await withTaskGroup(of: [PushJob].self) { sends in
                for sequence in Dictionary(grouping: jobs, by: { "\($0.appID) \($0.job.topic) \($0.job.deviceToken)" }).values {
                    sends.addTask {
                        await self.sendInOrder(
                            sequence, configurations: configurations, claimedAt: claimedAt, sendBy: sendBy, outcomes: outcomes)
                    }
                }
                return await sends.reduce(into: []) { $0 += $1 }
            }
            outcomes.finish()
            return await group.reduce(into: unsent) { $0 += $1 }
        }
        do {
            try await store.returnUnsentPushJobs(unsent)
        } catch {
            // Their claim's lease runs out and they are due again then.
            logger.error("handing back unsent push jobs failed", metadata: ["error": "\(error)", "count": "\(unsent.count)"])
        }
        return true
    }

    /// Sends one device's jobs (of one app and topic) one after another; returns those it did not send: once
    /// `sequenceBudget` has passed since the claim, the worker is cancelled, or its node may be declared dead, and from
    /// one that could not be written before `sendBy` on.
    private func sendInOrder(
        _ sequence: [PushJob], configurations: [String: PushConfigRecord?], claimedAt: ContinuousClock.Instant,
        sendBy: ContinuousClock.Instant, outcomes: OutcomeBuffer
    ) async -> [PushJob] {
        for (index, job) in sequence.enumerated() {
            if index > 0,
                Task.isCancelled || claimedAt.duration(to: .now) > Self.sequenceBudget || cluster.map({ !$0.isSafelyAlive }) == true
            {
                return Array(sequence[index...])
            }
            let config = configurations["\(job.appID)/\(job.job.notifier)"] ?? nil
            guard let outcome = await attempt(job, config: config, claimedAt: claimedAt, sendBy: sendBy) else {
                return Array(sequence[index...])
            }
            outcomes.add(outcome)
        }
        return []
    }

    /// Writes outcomes as they arrive: whatever came in while the previous write ran goes in the next one.
    private func record(_ outcomes: OutcomeBuffer) async {
        while let batch = await outcomes.next(upTo: Self.outcomesPerWrite) {
            do {
                try await store.recordPushAttempts(batch, now: clock())
                onRecorded?(batch)
            } catch {
                // The claim's lease runs out and the jobs are tried again: at-least-once.
                logger.error("recording push outcomes failed", metadata: ["error": "\(error)", "count": "\(batch.count)"])
            }
        }
    }

    /// Sends one job; nil when it was not written before `sendBy` (it is handed back, its attempt not counted).
    private func attempt(
        _ job: PushJob, config: PushConfigRecord?, claimedAt: ContinuousClock.Instant, sendBy: ContinuousClock.Instant
    ) async -> PushAttemptOutcome? {
        guard let config else {
            return PushAttemptOutcome(
                jobID: job.id, claimToken: job.claimToken, status: .failed, httpStatus: nil,
                reason: BeaconError.Code.notifierNotFound.rawValue)
        }
        let client: APNsClient
        do {
            client = try configs.client(for: config)
        } catch {
            return retryOrGiveUp(job, httpStatus: nil, reason: "configuration: \(error)")
        }
        // Every job recorded pending has an apns-id (`PushRouter`, `ReadService`): one without is damaged, not sent.
        guard let apnsID = job.job.apnsID else {
            return PushAttemptOutcome(
                jobID: job.id, claimToken: job.claimToken, status: .failed, httpStatus: nil, reason: BeaconError.Code.internalError.rawValue
            )
        }
        let notification = APNsNotification(
            deviceToken: job.job.deviceToken, topic: job.job.topic, pushType: APNsPushType(job.job.pushType),
            priority: job.job.priority.rawValue, expiration: job.job.expiration, collapseID: job.job.collapseID, apnsID: apnsID,
            payload: Array(job.job.payload.utf8))
        // The claim checked the binding; a send that then waited (APNs slow or unreachable) checks it again, so that a
        // token unbound or moved to another user meanwhile is not pushed to.
        let stillBound: @Sendable () async -> Bool = { [store] in
            guard claimedAt.duration(to: .now) > Self.recheckAfter else { return true }
            return (try? await store.bindingHolds(for: job)) ?? true
        }
        let sentAt = ContinuousClock.now
        do {
            _ = try await client.send(notification, deadline: sendBy, stillWanted: stillBound)
            metrics.apnsLatency.record(duration: sentAt.duration(to: .now))
            metrics.apnsRequest(status: 200, reason: nil)
            return PushAttemptOutcome(jobID: job.id, claimToken: job.claimToken, status: .sent, httpStatus: 200, reason: nil)
        } catch {
            switch error {
            case .rejected(let status, let reason, _, _):
                metrics.apnsLatency.record(duration: sentAt.duration(to: .now))
                metrics.apnsRequest(status: status, reason: reason)
            case .withdrawn, .invalidRequest, .deadlinePassed:
                break  // never went to APNs
            default:
                metrics.apnsLatency.record(duration: sentAt.duration(to: .now))
                metrics.apnsRequest(status: nil, reason: nil)
            }
            switch error {
            case .deadlinePassed:
                // Written now, it could still be in flight when the lease runs out and another node sends it again.
                logger.warning("a push was handed back unsent: its claim's lease was running out", metadata: ["job": "\(job.id)"])
                return nil
            case .withdrawn:
                // As the claim records it.
                return PushAttemptOutcome(
                    jobID: job.id, claimToken: job.claimToken, status: .skipped, httpStatus: nil,
                    reason: StoredJobReason.bindingChanged.rawValue)
            case .invalidRequest(let why):
                logger.error("a push cannot be sent", metadata: ["job": "\(job.id)", "why": "\(why)"])
                return PushAttemptOutcome(
                    jobID: job.id, claimToken: job.claimToken, status: .failed, httpStatus: nil, reason: "invalid_request")
            case .rejected(let status, let reason, _, let timestamp) where !error.isTransient:
                await removeDeadBinding(job, reason: reason, timestamp: timestamp)
                return PushAttemptOutcome(
                    jobID: job.id, claimToken: job.claimToken, status: .failed, httpStatus: status, reason: reason?.rawValue)
            case .rejected(let status, let reason, _, _):
                return retryOrGiveUp(job, httpStatus: status, reason: reason?.rawValue)
            default:
                return retryOrGiveUp(job, httpStatus: nil, reason: error.description)
            }
        }
    }

    /// 410 (unless re-bound after APNs' timestamp), BadDeviceToken and DeviceTokenNotForTopic end a binding.
    private func removeDeadBinding(_ job: PushJob, reason: APNsReason?, timestamp: Int64?) async {
        let unlessBoundSince: Int64?
        switch reason {
        case .unregistered?, .expiredToken?: unlessBoundSince = timestamp
        case .badDeviceToken?, .deviceTokenNotForTopic?: unlessBoundSince = nil
        default: return
        }
        do {
            if try await store.removeBinding(
                deviceToken: job.job.deviceToken, notifier: job.job.notifier, app: job.appID, unlessBoundSince: unlessBoundSince,
                now: clock())
            {
                metrics.bindingsRemoved.increment()
                logger.info(
                    "removed push binding",
                    metadata: ["user": "\(job.job.username)", "device": "\(job.job.deviceID)", "reason": "\(reason!)"])
            }
        } catch {
            logger.error("could not remove a dead binding", metadata: ["error": "\(error)"])
        }
    }

    private func retryOrGiveUp(_ job: PushJob, httpStatus: Int?, reason: String?) -> PushAttemptOutcome {
        let now = clock()
        // A creation time so far back that the age overflows (a damaged row) is past any limit.
        let age = now.subtractingReportingOverflow(job.createdAt)
        guard !age.overflow, age.partialValue < maxAge else {
            return PushAttemptOutcome(jobID: job.id, claimToken: job.claimToken, status: .expired, httpStatus: httpStatus, reason: reason)
        }
        metrics.pushRetries.increment()
        return PushAttemptOutcome(
            jobID: job.id, claimToken: job.claimToken, status: .pending, httpStatus: httpStatus, reason: reason,
            nextAttemptAt: now + Self.backoff(attempt: job.attempts))
    }

    /// Milliseconds before attempt `attempt + 1`: 1 s doubling to 10 min, ±20 % jitter.
    static func backoff(attempt: Int, random: Double = Double.random(in: 0.8...1.2)) -> Int64 {
        let base = min(1000 * pow(2, Double(max(attempt - 1, 0))), 600_000)
        return Int64(base * random)
    }
}

extension APNsPushType {
    /// The APNs push type of a stored job's kind.
    init(_ type: PushType) {
        switch type {
        case .alert: self = .alert
        case .voip: self = .voip
        case .background: self = .background
        }
    }
}
