import BeaconAPNs
import BeaconCore
import BeaconPush
import BeaconStorage
import Crypto
import Foundation
import Logging
import ServiceLifecycle
import Synchronization

/// Decides pushes for stored messages (SPEC §3) — after they are stored, never before: a message is stored with a
/// pending route, then routed, so presence is read once the message is visible to every device's sync.
///
/// - `route` samples presence (or takes what the message's delivery read), reads the receivers' settings and bindings
///   (or takes those its append read), renders each receiver's payload outside any transaction, then records the jobs (pushed or skipped with a reason) in
///   short transactions, a part of the recipients each, that also move the pending route's progress on (the last
///   removes it), so each recipient's pushes are decided once.
/// - `deviceWentOffline` decides again the messages a device was online for but never acknowledged (its socket died
///   under them), unless another device of the user acknowledged them. A route that recorded `online` skips reads presence
///   again afterwards (from memory for devices connected to this node): a device that went offline in between (on any
///   node) may have looked for skips before they were recorded, so the route decides them again itself.
/// - As a service, it routes the routes of more than one part that sends hand on, and what a crash left pending (or
///   what waited too long in its queue), so no push accepted with a message is lost.
final class PushRouter: Service, Sendable {
    let store: any BeaconStore
    let presence: any PresenceRegistry
    let clock: @Sendable () -> Int64
    let logger: Logger
    /// Told when jobs were stored.
    let jobsStored: @Sendable () -> Void
    let metrics: BeaconMetrics
    /// Called between a route's presence reading and its recording (tests hold a route there to race it).
    let afterPresence: (@Sendable (UInt64) async throws -> Void)?

    /// Default lifetime at APNs (`apns-expiration` = now + this).
    static let expirationSeconds: Int64 = 24 * 3600
    /// A pending route that has not moved on for this long was left by a crash, a failed routing or a full queue, or is
    /// late: the sweeper takes it (a part that someone else records first is not recorded twice).
    static let sweepAge: Int64 = 2000
    /// Messages decided again per offline device, at most.
    static let rerouteLimit = 1000
    /// How often the `online` skips of devices now offline are looked for, beyond those a device's leaving decides again.
    static let redecideInterval: Duration = .seconds(60)
    /// Routes handed on waiting for the router's tasks, at most; beyond, the sweep takes them.
    static let handedOnLimit = 256
    /// Routes handed on routed at once.
    static let concurrentHandedOn = 4
    /// Recipients decided and recorded at a time (`route`).
    let partSize: Int
    /// Routes handed on by sends (`route(handingOn:)`), for `routeHandedOn`.
    private let handedOn = AsyncStream.makeStream(of: HandedOn.self, bufferingPolicy: .bufferingOldest(PushRouter.handedOnLimit))

    init(
        store: any BeaconStore, presence: any PresenceRegistry, clock: @escaping @Sendable () -> Int64, logger: Logger,
        afterPresence: (@Sendable (UInt64) async throws -> Void)? = nil, metrics: BeaconMetrics, partSize: Int,
        jobsStored: @escaping @Sendable () -> Void
    ) {
        self.partSize = max(partSize, 1)
        self.metrics = metrics
        self.store = store
        self.presence = presence
        self.clock = clock
        self.logger = logger
        self.afterPresence = afterPresence
        self.jobsStored = jobsStored
    }

    /// Decides and records the pushes of a message stored with a pending route, from its recipients after `progress`
    /// (`PendingRoute.routedThrough`) on, `partSize` recipients at a time in `RouteOrder`: each part is recorded with the
    /// route's progress, so a group's first pushes leave while the rest is decided, and a crash resumes after the last
    /// part recorded. Safe to call twice: each part is recorded once, and a call that finds its part recorded stops.
    /// `online`, when given, is the recipients' presence read after the message was stored (by its delivery); otherwise
    /// presence is read here. (A device online then and offline by its part is skipped, then decided again at once as
    /// having gone offline since: one that acknowledged the message live is not pushed it.) `inputs`, when given, are the
    /// recipients' routing inputs read with the message's append (`RoutingInputsRequest`); otherwise each part reads its
    /// own. With `handingOn`, a route of
    /// more than one part is left to the router's own tasks (a send is answered without waiting for a large group's
    /// pushes; if they never get to it, the pending route's sweep does). Stops between parts when the service stops: the
    /// rest is the sweep's at the next start.
    func route(
        _ message: Message, recipients: [String], app: AppRecord, online: [String: Set<String>]? = nil, inputs: RoutingInputs? = nil,
        after progress: String? = nil, handingOn: Bool = false
    ) async throws {
        let remaining = RouteOrder.remaining(recipients, after: progress)
        if handingOn, remaining.count > partSize {
            switch handedOn.continuation.yield(HandedOn(message: message, recipients: remaining, app: app, after: progress, online: online))
            {
            case .enqueued: break
            case .dropped, .terminated:
                logger.warning("the router's queue is full or closed: its sweep routes the message", metadata: ["message": "\(message.id)"])
            @unknown default: break
            }
            return
        }
        var start = 0
        var after = progress
        while Task.serviceShouldContinue {
            let end = min(start + partSize, remaining.count)
            let part = Array(remaining[start..<end])
            let through = end < remaining.count ? part.last : nil
            guard try await route(message, part: part, app: app, online: online, inputs: inputs, after: after, through: through),
                let through
            else {
                return
            }
            (start, after) = (end, through)
        }
    }

    /// Decides and records one part of a route: false when it was recorded by someone else (or the route is gone).
    private func route(
        _ message: Message, part: [String], app: AppRecord, online: [String: Set<String>]?, inputs: RoutingInputs?, after: String?,
        through: String?
    ) async throws -> Bool {
        let decided = try await decide(message, for: part, app: app, onlyDevices: nil, online: online, inputs: inputs)
        if let afterPresence { try await afterPresence(message.id) }
        let route = PushRoute(
            messageID: message.id, replacing: .pendingRoute(after: after, through: through), jobs: decided.jobs, now: clock())
        guard try await store.recordRoute(route, app: app.id) else { return false }
        metrics.pushDecisions(decided.jobs, redecided: false)
        if decided.jobs.contains(where: { $0.skipReason == nil }) { jobsStored() }
        for username in try await wentOfflineSince(decided) {
            await deviceWentOffline(username, app: app)
        }
        return true
    }

    /// A route its message's send left to the router's tasks (`route(handingOn:)`).
    struct HandedOn: Sendable {
        var message: Message
        var recipients: [String]
        var app: AppRecord
        var after: String?
        /// The delivery's presence.
        var online: [String: Set<String>]?
    }

    /// Routes what sends handed on, `concurrentHandedOn` at a time (one large group does not hold up the others), until the
    /// service stops.
    private func routeHandedOn() async {
        await withTaskGroup(of: Void.self) { group in
            var running = 0
            for await route in handedOn.stream {
                guard Task.serviceShouldContinue else { break }
                if running == Self.concurrentHandedOn {
                    await group.next()
                    running -= 1
                }
                running += 1
                group.addTask {
                    do {
                        try await self.route(
                            route.message, recipients: route.recipients, app: route.app, online: route.online, after: route.after)
                    } catch  where !Task.isCancelled {
                        // The pending route keeps its progress: the sweep routes the rest shortly.
                        self.logger.error(
                            "routing a large message's pushes failed", metadata: ["message": "\(route.message.id)", "error": "\(error)"])
                    } catch {}
                }
            }
        }
    }

    /// The users with `online` skips in `decided` who, by presence read now, would have been pushed: a device of theirs
    /// went offline after the decision read presence.
    private func wentOfflineSince(_ decided: Decided) async throws -> [String] {
        let skipped = Dictionary(grouping: decided.jobs.filter { $0.skipReason == SkipReason.online.rawValue }, by: \.username)
        guard !skipped.isEmpty else { return [] }
        // The decision is recorded: a device connected to this node now finds it when it leaves, so a user whose devices
        // online for the decision all still are here needs no read.
        let online = try await presence.onlineDevices(
            expecting: Dictionary(uniqueKeysWithValues: skipped.keys.map { ($0, decided.online[$0] ?? []) }), app: decided.app)
        return skipped.compactMap { username, jobs in
            let devices = online[username] ?? []
            let offline = decided.policy == .allOffline ? devices.isEmpty : jobs.contains { !devices.contains($0.deviceID) }
            return offline ? username : nil
        }.sorted()
    }

    /// A device of the user went offline: the messages the user's devices were online for and that none of them
    /// acknowledged are decided again, as if they had just arrived (badge included).
    func deviceWentOffline(_ username: String, app: AppRecord) async {
        do {
            let policy = MultiDevicePolicy(rawValue: try await store.pushPolicy(app: app.id).multiDevice) ?? .allOffline
            var rerouted = false
            // Page by page: each recorded route removes the skips it replaces, so the next page holds the rest.
            while Task.serviceShouldContinue {
                let online = try await presence.onlineDevices(of: [username], app: app.id)[username] ?? []
                if policy == .allOffline, !online.isEmpty { break }
                let skips = try await store.unacknowledgedOnlineSkips(of: username, app: app.id, limit: Self.rerouteLimit)
                var recorded = 0
                for skip in skips {
                    let devices = skip.devices.filter { !online.contains($0.deviceID) }
                    guard !devices.isEmpty else { continue }
                    let decided = try await decide(skip.message, for: [username], app: app, onlyDevices: Set(devices))
                    guard !decided.jobs.isEmpty else { continue }  // no push configuration left: the skips stay
                    let route = PushRoute(
                        messageID: skip.message.id, replacing: .onlineSkips(username: username, devices: devices), jobs: decided.jobs,
                        now: clock())
                    if try await store.recordRoute(route, app: app.id) {
                        recorded += 1
                        metrics.pushDecisions(decided.jobs, redecided: true)
                    }
                }
                rerouted = rerouted || recorded > 0
                // A page that was not full was the last; one where nothing could be recorded would come back unchanged.
                if skips.count < Self.rerouteLimit || recorded == 0 { break }
            }
            if rerouted { jobsStored() }
        } catch {
            logger.error("deciding pushes for a device that went offline failed", metadata: ["user": "\(username)", "error": "\(error)"])
        }
    }

    /// Routes what was left pending (a crash between storing and routing, or a failed routing), then keeps watching.
    /// Beside it, at start and then every minute, decides again the `online` skips nobody acknowledged whose devices are
    /// offline: at start, their connections ended with the previous process (kill -9 or power loss) without going offline
    /// here; later, a re-decision that failed (the database was unreachable when the device left, or when its node died).
    func run() async throws {
        await withDiscardingTaskGroup { group in
            group.addTask { await self.routeHandedOn() }
            group.addTask {
                while Task.serviceShouldContinue {
                    await self.redecideOfflineSkips()
                    try? await cancelWhenGracefulShutdown { try await Task.sleep(for: Self.redecideInterval) }
                }
            }
            while Task.serviceShouldContinue {
                do {
                    try await sweep()
                } catch {
                    logger.error("routing pending messages failed", metadata: ["error": "\(error)"])
                }
                try? await cancelWhenGracefulShutdown { try await Task.sleep(for: .seconds(1)) }
            }
            handedOn.continuation.finish()
            group.cancelAll()
        }
    }

    private func redecideOfflineSkips() async {
        do {
            var apps: [Int64: AppRecord] = [:]
            for (appID, username) in try await store.usersWithUnacknowledgedOnlineSkips(limit: 100_000) {
                guard Task.serviceShouldContinue else { return }
                if apps[appID] == nil { apps[appID] = try await store.app(id: appID) }
                guard let app = apps[appID] else { continue }
                await deviceWentOffline(username, app: app)
            }
        } catch {
            logger.error("deciding the pushes of devices the last run left online failed", metadata: ["error": "\(error)"])
        }
    }

    /// Routes every pending route that has not moved on for `sweepAge`.
    func sweep() async throws {
        var apps: [Int64: AppRecord] = [:]
        while true {
            let pending = try await store.pendingRoutes(before: clock() - Self.sweepAge, limit: 100)
            var routed = 0
            for route in pending {
                if apps[route.app] == nil { apps[route.app] = try await store.app(id: route.app) }
                guard let app = apps[route.app] else { continue }
                do {
                    try await self.route(route.message, recipients: route.recipients, app: app, after: route.routedThrough)
                    routed += 1
                } catch {
                    // One route that cannot be decided now must not hold up the others; it is tried at the next sweep.
                    // The message's id, never its body.
                    logger.error("routing a pending message failed", metadata: ["message": "\(route.message.id)", "error": "\(error)"])
                }
            }
            // A page of routes that cannot be decided (their app is gone) would come back forever.
            if pending.count < 100 || routed == 0 || !Task.serviceShouldContinue { return }
        }
    }

    // MARK: Deciding

    /// Every bound device of every recipient, pushed or skipped with a reason; `onlyDevices` limits it to those devices.
    /// One message's push decisions.
    struct Decided {
        var app: Int64
        var policy: MultiDevicePolicy = .allOffline
        var jobs: [NewPushJob] = []
        /// The receivers' devices online for the decision.
        var online: [String: Set<String>] = [:]
    }

    private func decide(
        _ message: Message, for recipients: [String], app: AppRecord, onlyDevices: Set<SkippedDevice>?,
        online known: [String: Set<String>]? = nil, inputs read: RoutingInputs? = nil
    ) async throws -> Decided {
        guard PushDecision.mayPush(message), !recipients.isEmpty else { return Decided(app: app.id) }
        let inputs: RoutingInputs
        if let read {
            inputs = read
        } else {
            inputs = try await store.routingInputs(
                sender: message.from, recipients: recipients, scopes: RoutingContext.scopes(of: message), app: app.id)
        }
        let configs = Dictionary(inputs.notifiers.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        guard !configs.isEmpty else { return Decided(app: app.id) }
        let context = RoutingContext(message: message, inputs: inputs)
        var bindings = inputs.bindings
        if let onlyDevices {
            bindings = bindings.mapValues {
                $0.filter { onlyDevices.contains(SkippedDevice(deviceID: $0.deviceID, notifier: $0.notifier)) }
            }
        }
        // Presence is read after the message was stored, so a device that connects from here on syncs it.
        let online: [String: Set<String>]
        if let known { online = known } else { online = try await presence.onlineDevices(of: recipients, app: app.id) }
        let now = clock()
        var jobs: [NewPushJob] = []
        var payloads = MessagePayloads()
        for recipient in recipients {
            let bound = bindings[recipient] ?? []
            let onlineDevices = online[recipient] ?? []
            guard !bound.isEmpty else {
                if onlyDevices == nil { jobs.append(Self.skipped(recipient, .noBinding)) }
                continue
            }
            let decisions = PushDecision.decide(context.pushContext(for: recipient, bindings: bound, online: onlineDevices, now: now))
            for (binding, decision) in zip(bound, decisions) {
                jobs.append(
                    job(
                        for: binding, skip: decision.skip, recipient: recipient, context: context, payloads: &payloads, configs: configs,
                        now: now))
            }
        }
        return Decided(app: app.id, policy: context.policy, jobs: jobs, online: online)
    }

    private func job(
        for binding: PushBinding, skip: SkipReason?, recipient: String, context: RoutingContext, payloads: inout MessagePayloads,
        configs: [String: Notifier], now: Int64
    ) -> NewPushJob {
        let config = configs[binding.notifier]
        var skipReason = skip?.rawValue ?? (config == nil ? BeaconError.Code.notifierNotFound.rawValue : nil)
        // A call goes as VoIP to the device's VoIP token when it has one and the configuration allows VoIP; otherwise the
        // device gets an ordinary alert (real APNs refuses a VoIP push to an alert token).
        var payload = skipReason == nil ? context.payload(for: recipient, allowsVoIP: true, using: &payloads) : nil
        var token = binding.deviceToken
        if let built = payload, built.voip {
            if config?.voip == true, let voipToken = binding.voipToken {
                token = voipToken
            } else {
                payload = context.payload(for: recipient, allowsVoIP: false, using: &payloads)
            }
        }
        if skipReason == nil, payload == nil { skipReason = BeaconError.Code.requestTooLarge.rawValue }
        let voip = payload?.voip == true
        return NewPushJob(
            username: recipient, deviceID: binding.deviceID, notifier: binding.notifier, deviceToken: token,
            topic: (config?.bundleID ?? "") + (voip ? APNsPushType.voip.topicSuffix : ""),
            pushType: voip ? .voip : .alert, priority: .immediate, expiration: now / 1000 + Self.expirationSeconds,
            // A duplicate after a crash replaces the first notification instead of adding a second one.
            collapseID: Self.collapseID(key: payload?.collapseID, sender: context.message.from, messageID: context.message.id),
            apnsID: .random(),
            payload: skipReason == nil ? payload?.withoutBadge ?? "" : "", badgeOffset: skipReason == nil ? payload?.badgeOffset : nil,
            skipReason: skipReason)
    }

    /// A notification's `apns-collapse-id`: its message's id, or, for the sender's `em_push_collapse_key`, a digest of the
    /// sender and the key (43 base64url characters), so that a sender can replace only its own notifications — never
    /// another sender's, whose message ids and keys it may know. The two forms cannot meet: a message id is decimal digits.
    static func collapseID(key: String?, sender: String, messageID: UInt64) -> String {
        guard let key else { return String(messageID) }
        return Data(SHA256.hash(data: Array("\(sender)\u{0}\(key)".utf8))).base64URLEncoded()
    }

    private static func skipped(_ username: String, _ reason: SkipReason) -> NewPushJob {
        NewPushJob(
            username: username, deviceID: "", notifier: "", deviceToken: "", topic: "", pushType: .alert, priority: .immediate,
            expiration: 0, collapseID: nil, apnsID: nil, payload: "", skipReason: reason.rawValue)
    }
}

/// What deciding and rendering one message's pushes reads from the store, once per message.
struct RoutingContext {
    let message: Message
    let policy: MultiDevicePolicy
    let appZone: TimeZone
    let strings: DisplayStrings
    let templates: [String: PushTemplate]
    let senderNickname: String?
    let profiles: [String: PushProfile]
    let appLevel: [String: AppPushSettings]
    let conversation: [String: ConversationPushSettings]
    /// The settings scopes a message's routing reads: the app level and the message's conversation.
    static func scopes(of message: Message) -> [String] {
        ["", message.chatType == .groupchat ? "groupchat:\(message.to)" : "chat:\(message.from)"]
    }

    init(message: Message, inputs: RoutingInputs) {
        var appLevel: [String: AppPushSettings] = [:]
        var conversation: [String: ConversationPushSettings] = [:]
        for record in inputs.settings {
            if record.scope.isEmpty {
                appLevel[record.username] = AppPushSettings(
                    remindType: record.remindType.flatMap(RemindType.init),
                    quietHours: record.quietHours.flatMap { try? DailyQuietHours.parse($0) },
                    silentUntil: record.silentUntil)
            } else {
                conversation[record.username] = ConversationPushSettings(
                    remindType: record.remindType.flatMap(RemindType.init), silentUntil: record.silentUntil)
            }
        }
        self.message = message
        self.policy = MultiDevicePolicy(rawValue: inputs.policy.multiDevice) ?? .allOffline
        self.appZone = TimeZone(identifier: inputs.policy.timezone) ?? .gmt
        self.strings = DisplayStrings(overrides: inputs.policy.displayStrings)
        self.templates = Dictionary(
            inputs.templates.map {
                ($0.name, PushTemplate(name: $0.name, titlePattern: $0.titlePattern, contentPattern: $0.contentPattern))
            },
            uniquingKeysWith: { first, _ in first })
        self.senderNickname = inputs.senderNickname
        self.profiles = inputs.profiles
        self.appLevel = appLevel
        self.conversation = conversation
    }

    func pushContext(for recipient: String, bindings: [PushBinding], online: Set<String>, now: Int64) -> PushContext {
        PushContext(
            message: message, recipient: recipient,
            devices: bindings.map { BoundDevice(deviceID: $0.deviceID, notifier: $0.notifier, online: online.contains($0.deviceID)) },
            anyDeviceOnline: !online.isEmpty, policy: policy, appSettings: appLevel[recipient] ?? AppPushSettings(),
            conversationSettings: conversation[recipient] ?? ConversationPushSettings(),
            timeZone: profiles[recipient]?.timeZone.flatMap(TimeZone.init(identifier:)) ?? appZone, now: now)
    }

    /// The receiver's payload, its badge left for the store to fill in; nil when it cannot fit APNs' limit. `payloads`
    /// holds this message's renderings, shared by receivers who see the same notification.
    func payload(for recipient: String, allowsVoIP: Bool, using payloads: inout MessagePayloads) -> BuiltPayload? {
        let profile = profiles[recipient] ?? PushProfile()
        return try? payloads.build(
            PayloadInput(
                message: message, receiver: recipient, badge: 0, senderNickname: senderNickname,
                style: DisplayStyle(rawValue: profile.displayStyle) ?? .simpleBanner, strings: strings, language: profile.language,
                templates: templates, receiverTemplate: profile.template, allowsVoIP: allowsVoIP))
    }
}
