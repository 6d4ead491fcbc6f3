import BeaconAPNs
import BeaconCore
import BeaconPush
import BeaconStorage
import Foundation
import Logging
import ServiceLifecycle
import Synchronization

/// Decides, for every recipient of a stored message and each of their bound devices, whether to push (SPEC §3,
/// `PushDecision`), and renders the jobs — pushed or skipped with a reason — stored in the same transaction as the
/// message (see `PushPlan`).
struct PushPlanner: Sendable {
    let store: any BeaconStore
    let presence: any PresenceRegistry
    let clock: @Sendable () -> Int64

    /// Default lifetime at APNs (`apns-expiration` = now + this).
    static let expirationSeconds: Int64 = 24 * 3600

    func plan(for message: Message, recipients: [String], app: AppRecord) async throws -> PushPlan? {
        // Never pushable whoever receives them: not worth a record per recipient.
        guard !message.onlineOnly, message.type != .cmd, !recipients.isEmpty else { return nil }
        let configs = Dictionary(try await store.pushConfigs(app: app.id).map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        guard !configs.isEmpty else { return nil }
        let conversationScope = message.chatType == .groupchat ? "groupchat:\(message.to)" : "chat:\(message.from)"
        let (records, profiles) = try await store.pushSettings(of: recipients, scopes: ["", conversationScope], app: app.id)
        let senderNickname = try await store.user(message.from, app: app.id)?.nickname
        let templates = Dictionary(
            try await store.templates(app: app.id).map { ($0.name, PushTemplate(name: $0.name, titlePattern: $0.titlePattern, contentPattern: $0.contentPattern)) },
            uniquingKeysWith: { first, _ in first })
        var appLevel: [String: AppPushSettings] = [:]
        var conversation: [String: ConversationPushSettings] = [:]
        for record in records {
            if record.scope.isEmpty {
                appLevel[record.username] = AppPushSettings(
                    remindType: record.remindType.flatMap(RemindType.init), quietHours: record.quietHours.flatMap { try? DailyQuietHours.parse($0) },
                    silentUntil: record.silentUntil)
            } else {
                conversation[record.username] = ConversationPushSettings(
                    remindType: record.remindType.flatMap(RemindType.init), silentUntil: record.silentUntil)
            }
        }
        let policy = try await store.pushPolicy(app: app.id)
        let multiDevice = MultiDevicePolicy(rawValue: policy.multiDevice) ?? .allOffline
        let appZone = TimeZone(identifier: policy.timezone) ?? .gmt
        let strings = DisplayStrings(overrides: policy.displayStrings)
        var online: [String: Set<String>] = [:]
        for recipient in recipients {
            let devices = presence.onlineDevices(of: recipient, app: app.id)
            if !devices.isEmpty { online[recipient] = Set(devices) }
        }
        let now = clock()
        let expiration = now / 1000 + Self.expirationSeconds
        // Silent messages, and Tencent's BadgeMode 1, leave the badge as it is.
        let badgeUnchanged = message.ext["em_ignore_notification"]?.boolValue == true
            || message.ext["em_apns_ext"]?["em_push_badge_unchanged"]?.boolValue == true
        let raisesBadge = badgeUnchanged ? [] : Set(recipients.filter { online[$0] == nil })
        return PushPlan(recipients: recipients, raisesBadge: raisesBadge) { [online, appLevel, conversation] username, badge, bindings in
            let profile = profiles[username] ?? PushProfile()
            let onlineDevices = online[username] ?? []
            let context = PushContext(
                message: message, recipient: username,
                devices: bindings.map { BoundDevice(deviceID: $0.deviceID, notifier: $0.notifier, online: onlineDevices.contains($0.deviceID)) },
                anyDeviceOnline: !onlineDevices.isEmpty, policy: multiDevice, appSettings: appLevel[username] ?? AppPushSettings(),
                conversationSettings: conversation[username] ?? ConversationPushSettings(),
                timeZone: profile.timeZone.flatMap(TimeZone.init(identifier:)) ?? appZone, now: now)
            let payload = try? PayloadBuilder.build(
                PayloadInput(
                    message: message, receiver: username, badge: badge, senderNickname: senderNickname,
                    style: DisplayStyle(rawValue: profile.displayStyle) ?? .simpleBanner, strings: strings, language: profile.language,
                    templates: templates,
                    receiverTemplate: profile.template))
            return zip(bindings, PushDecision.decide(context)).map { binding, decision in
                let config = configs[binding.notifier]
                let skip = decision.skip?.rawValue ?? (config == nil ? BeaconError.Code.notifierNotFound.rawValue : nil)
                    ?? (payload == nil ? BeaconError.Code.requestTooLarge.rawValue : nil)
                // VoIP pushes go to the `.voip` topic of a configuration that has VoIP enabled.
                let voip = payload?.voip == true && config?.voip == true
                return NewPushJob(
                    username: username, deviceID: binding.deviceID, notifier: binding.notifier, deviceToken: binding.deviceToken,
                    topic: (config?.bundleID ?? "") + (voip ? APNsPushType.voip.topicSuffix : ""),
                    pushType: (voip ? APNsPushType.voip : .alert).rawValue, priority: 10, expiration: expiration,
                    collapseID: payload?.collapseID, apnsID: UUID().uuidString.lowercased(), payload: skip == nil ? payload?.json ?? "" : "",
                    skipReason: skip)
            } + (bindings.isEmpty ? [Self.skipped(username, .noBinding)] : [])
        }
    }

    private static func skipped(_ username: String, _ reason: SkipReason) -> NewPushJob {
        NewPushJob(
            username: username, deviceID: "", notifier: "", deviceToken: "", topic: "", pushType: APNsPushType.alert.rawValue, priority: 10,
            expiration: 0, collapseID: nil, apnsID: "", payload: "", skipReason: reason.rawValue)
    }
}

/// Sends stored push jobs: claims due jobs, sends them concurrently, records every attempt, retries transient
/// failures with exponential backoff and jitter until `maxAge`, and removes bindings APNs says are dead.
/// Jobs are leased, so a crash or restart resumes every unfinished one.
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
    private let wake = WakeSignal()

    static let lease: Int64 = 60_000

    init(
        store: any BeaconStore, configs: PushConfigs, clock: @escaping @Sendable () -> Int64, logger: Logger, maxAge: Int64, batch: Int = 2000,
        onRecorded: (@Sendable ([PushAttemptOutcome]) -> Void)? = nil
    ) {
        self.onRecorded = onRecorded
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
        while !Task.isShuttingDownGracefully {
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
                let wait = Duration.milliseconds(max(10, min(due - clock(), 1000)))
                try? await cancelWhenGracefulShutdown { await self.wake.wait(upTo: wait) }
            }
        }
        await configs.shutdown()
    }

    /// Claims and sends one batch; false if there was nothing due.
    func runOnce() async throws -> Bool {
        let jobs = try await store.claimPushJobs(now: clock(), lease: Self.lease, limit: batch)
        guard !jobs.isEmpty else { return false }
        // Each configuration is read once per batch.
        var configurations: [String: PushConfigRecord?] = [:]
        for job in jobs where configurations["\(job.appID)/\(job.job.notifier)"] == nil {
            configurations["\(job.appID)/\(job.job.notifier)"] = .some(try await store.pushConfig(job.job.notifier, app: job.appID))
        }
        let outcomes = await withTaskGroup(of: PushAttemptOutcome.self) { group in
            for job in jobs {
                let config = configurations["\(job.appID)/\(job.job.notifier)"] ?? nil
                group.addTask { await self.attempt(job, config: config) }
            }
            var outcomes: [PushAttemptOutcome] = []
            for await outcome in group { outcomes.append(outcome) }
            return outcomes
        }
        try await store.recordPushAttempts(outcomes, now: clock())
        onRecorded?(outcomes)
        return true
    }

    private func attempt(_ job: PushJob, config: PushConfigRecord?) async -> PushAttemptOutcome {
        guard let config else {
            return PushAttemptOutcome(jobID: job.id, status: .failed, httpStatus: nil, reason: BeaconError.Code.notifierNotFound.rawValue)
        }
        let client: APNsClient
        do {
            client = try configs.client(for: config)
        } catch {
            return retryOrGiveUp(job, httpStatus: nil, reason: "configuration: \(error)")
        }
        let notification = APNsNotification(
            deviceToken: job.job.deviceToken, topic: job.job.topic, pushType: APNsPushType(rawValue: job.job.pushType) ?? .alert,
            priority: job.job.priority, expiration: job.job.expiration, collapseID: job.job.collapseID,
            apnsID: UUID(uuidString: job.job.apnsID) ?? UUID(), payload: Array(job.job.payload.utf8))
        do {
            _ = try await client.send(notification)
            return PushAttemptOutcome(jobID: job.id, status: .sent, httpStatus: 200, reason: nil)
        } catch {
            switch error {
            case .rejected(let status, let reason, _, let timestamp) where !error.isTransient:
                await removeDeadBinding(job, reason: reason, timestamp: timestamp)
                return PushAttemptOutcome(jobID: job.id, status: .failed, httpStatus: status, reason: reason?.rawValue)
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
                deviceToken: job.job.deviceToken, notifier: job.job.notifier, app: job.appID, unlessBoundSince: unlessBoundSince)
            {
                logger.info(
                    "removed push binding", metadata: ["user": "\(job.job.username)", "device": "\(job.job.deviceID)", "reason": "\(reason!)"])
            }
        } catch {
            logger.error("could not remove a dead binding", metadata: ["error": "\(error)"])
        }
    }

    private func retryOrGiveUp(_ job: PushJob, httpStatus: Int?, reason: String?) -> PushAttemptOutcome {
        let now = clock()
        guard now - job.createdAt < maxAge else {
            return PushAttemptOutcome(jobID: job.id, status: .expired, httpStatus: httpStatus, reason: reason)
        }
        return PushAttemptOutcome(
            jobID: job.id, status: .pending, httpStatus: httpStatus, reason: reason, nextAttemptAt: now + Self.backoff(attempt: job.attempts))
    }

    /// Milliseconds before attempt `attempt + 1`: 1 s doubling to 10 min, ±20 % jitter.
    static func backoff(attempt: Int, random: Double = Double.random(in: 0.8...1.2)) -> Int64 {
        let base = min(1000 * pow(2, Double(max(attempt - 1, 0))), 600_000)
        return Int64(base * random)
    }
}

/// A wake-up that can be awaited with a limit; signals while nobody waits are kept (at most one).
final class WakeSignal: Sendable {
    private struct State {
        var pending = false
        var waiter: CheckedContinuation<Void, Never>?
        /// The current wait was cancelled before it could park.
        var cancelled = false
    }
    private let state = Mutex(State())

    func signal() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard let waiter = state.waiter else {
                state.pending = true
                return nil
            }
            state.waiter = nil
            return waiter
        }
        waiter?.resume()
    }

    /// Returns at the next signal, or after `limit`, or on cancellation.
    func wait(upTo limit: Duration) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.waitForSignal() }
            group.addTask { try? await Task.sleep(for: limit) }
            await group.next()
            group.cancelAll()
        }
    }

    private func waitForSignal() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let ready = state.withLock { state -> Bool in
                    if state.cancelled {
                        state.cancelled = false
                        return true
                    }
                    if state.pending {
                        state.pending = false
                        return true
                    }
                    state.waiter = continuation
                    return false
                }
                if ready { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
                guard let waiter = state.waiter else {
                    state.cancelled = true
                    return nil
                }
                state.waiter = nil
                return waiter
            }
            waiter?.resume()
        }
    }
}
