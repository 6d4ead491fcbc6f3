import BeaconCore
import BeaconPush
import BeaconStorage
import Logging
import Synchronization

/// One message to send, before ids and timestamps are assigned.
struct OutgoingMessage: Sendable {
    var from: String
    var chatType: ChatType
    var type: MessageType
    var body: JSONValue
    var ext: [String: JSONValue]
    var onlineOnly: Bool
    /// The device it was sent from (nil for REST): that device gets no copy back.
    var originDevice: String?
    /// Whether the sender's other devices get a copy (always for devices; groups and `sync_device` for REST).
    /// Only for senders that are users.
    var copyToSender: Bool
}

/// One target's message as the sender learns it: its id and server timestamp.
struct SentMessage: Sendable, Hashable {
    var target: String
    var id: UInt64
    var timestamp: Int64
}

/// Validates, numbers, stores and dispatches messages: the one path every send takes, REST or WebSocket.
/// Store first, then route: every message is stored (all targets of one send in one transaction) before anyone
/// gets it live and before its pushes are decided.
final class MessageService: Sendable {
    let store: any BeaconStore
    let switchboard: Switchboard
    let router: PushRouter?
    let metrics: BeaconMetrics
    private let clock: @Sendable () -> Int64
    private let ids: Mutex<MessageIDGenerator>
    private let limiter: SendLimiter
    private let logger: Logger

    init(
        store: any BeaconStore, switchboard: Switchboard, router: PushRouter?, node: UInt16, clock: @escaping @Sendable () -> Int64,
        metrics: BeaconMetrics, limits: SendLimits = SendLimits(), logger: Logger
    ) {
        self.limiter = SendLimiter(limits)
        self.metrics = metrics
        self.store = store
        self.switchboard = switchboard
        self.router = router
        self.clock = clock
        self.ids = Mutex(MessageIDGenerator(node: node))
        self.logger = logger
    }

    func now() -> Int64 { clock() }

    func nextID() -> (id: UInt64, timestamp: Int64) {
        let now = clock()
        return (ids.withLock { $0.next(nowMilliseconds: now) }, now)
    }

    /// Checks that every target exists (and, with `enforceMembership`, that the sender is in each group), so that nothing is
    /// stored when any target is wrong. Returns each target's recipients (the peer, or the group's members).
    func validateTargets(_ targets: [String], for outgoing: OutgoingMessage, app: AppRecord, enforceMembership: Bool) async throws
        -> [String: [String]]
    {
        try Validation.validateContent(type: outgoing.type, body: outgoing.body, ext: outgoing.ext)
        // The sender's own push fields must leave room for a payload APNs accepts (413 otherwise, before anything is stored).
        if outgoing.ext["em_apns_ext"] != nil || outgoing.ext["em_push_ext"] != nil || outgoing.ext["em_push_template"] != nil {
            let probe = Message(
                id: UInt64.max >> 1, from: outgoing.from, to: targets.first ?? "", chatType: outgoing.chatType, type: outgoing.type,
                body: outgoing.body, ext: outgoing.ext, timestamp: 0)
            // As an alert (4 KB), even for a call: a receiver without a VoIP token gets one.
            _ = try PayloadBuilder.build(
                PayloadInput(message: probe, receiver: String(repeating: "x", count: 64), badge: 99_999, allowsVoIP: false))
        }
        switch outgoing.chatType {
        case .chat:
            guard !targets.isEmpty, targets.count <= Validation.maxUserTargets else {
                throw BeaconError.illegal("to must name 1-\(Validation.maxUserTargets) users")
            }
            // A stored message finds out whether each peer exists as it is stored (`Delivery.required`); one only delivered
            // to online devices asks first.
            let existing = outgoing.onlineOnly ? try await store.existingUsers(targets, app: app.id) : Set(targets)
            // A user (`enforceMembership`) is not told which names exist: a message to one that does not reaches nobody but
            // the sender's own devices, and is answered like any other. The app is told (`user_not_found`).
            if !enforceMembership, let missing = targets.first(where: { !existing.contains($0) }) {
                throw BeaconError(.userNotFound, "user \(missing) does not exist")
            }
            return Dictionary(targets.map { ($0, existing.contains($0) ? [$0] : []) }, uniquingKeysWith: { first, _ in first })
        case .groupchat:
            guard !targets.isEmpty, targets.count <= Validation.maxGroupTargets else {
                throw BeaconError.illegal("to must name 1-\(Validation.maxGroupTargets) groups")
            }
            var recipients: [String: [String]] = [:]
            for target in targets {
                guard try await store.group(target, app: app.id) != nil else {
                    throw BeaconError(.groupNotFound, "group \(target) does not exist")
                }
                let members = try await store.groupMembers(target, app: app.id)
                if enforceMembership, !members.contains(outgoing.from) {
                    throw BeaconError(.forbidden, "\(outgoing.from) is not a member of group \(target)")
                }
                recipients[target] = members.filter { $0 != outgoing.from }
            }
            return recipients
        }
    }

    /// The routing inputs to read with a send's append: those of its message that routes pushes, when it is the only one and
    /// has at most `inputsWithAppendLimit` recipients. (A larger group's inputs would be read while the append holds its
    /// members' rows; the router reads them after, an extra round trip spread over many pushes.)
    private func inputsRequest(_ new: [NewMessage]) -> RoutingInputsRequest? {
        let routing = new.filter(\.routesPushes)
        guard router != nil, routing.count == 1, let message = routing.first?.message else { return nil }
        let recipients = routing[0].deliveries.map(\.username).filter { $0 != message.from }
        guard recipients.count <= Self.inputsWithAppendLimit else { return nil }
        return RoutingInputsRequest(
            messageID: message.id, sender: message.from, recipients: recipients, scopes: RoutingContext.scopes(of: message))
    }

    /// Recipients of a message whose routing inputs its append reads, at most (`inputsRequest`).
    static let inputsWithAppendLimit = 100

    /// A stored send's answer: its message ids by target.
    private static func sentMessages(_ ids: [String: UInt64]) -> [SentMessage] {
        ids.sorted { $0.key < $1.key }.map {
            SentMessage(target: $0.key, id: $0.value, timestamp: MessageIDGenerator.timestamp(of: $0.value))
        }
    }

    /// Sends to every target, all or nothing; returns each target's message. A `receipt` already stored answers the
    /// first send's messages and stores nothing. `enforceMembership` marks a send by a user (a user token or a device),
    /// counted against that user's rate as well as the app's (`SendLimits`).
    func send(_ outgoing: OutgoingMessage, to targets: [String], app: AppRecord, enforceMembership: Bool, receipt: SendReceipt? = nil)
        async throws -> [SentMessage]
    {
        let sender = enforceMembership ? outgoing.from : nil
        let recipients: [String: [String]]
        let moreDeliveries: Int
        do {
            // One delivery first, before any read (a refused send is paced too), the rest once the recipients are known.
            try limiter.admit(app: app.id, user: sender, deliveries: 1, now: clock())
            recipients = try await validateTargets(targets, for: outgoing, app: app, enforceMembership: enforceMembership)
            moreDeliveries = recipients.values.reduce(0) { $0 + max($1.count, 1) } - 1
            try limiter.admit(app: app.id, user: sender, deliveries: moreDeliveries, now: clock())
        } catch let error as BeaconError where error.code == .tooManyRequests {
            // A retry of a stored send is answered with its messages, as promised, however fast its sender goes.
            guard let receipt, let earlier = try await store.sentMessages(scope: receipt.scope, reference: receipt.reference, app: app.id)
            else { throw error }
            return Self.sentMessages(earlier)
        }
        var seen: Set<String> = []
        let messages = targets.filter { seen.insert($0).inserted }.map { target in
            let (id, timestamp) = nextID()
            return (
                Message(
                    id: id, from: outgoing.from, to: target, chatType: outgoing.chatType, type: outgoing.type, body: outgoing.body,
                    ext: outgoing.ext, timestamp: timestamp, onlineOnly: outgoing.onlineOnly),
                recipients[target] ?? []
            )
        }
        if outgoing.onlineOnly {
            for (message, recipients) in messages {
                let copyToSender = outgoing.copyToSender && !recipients.contains(outgoing.from)
                await switchboard.deliverOnline(
                    message, to: recipients + (copyToSender ? [outgoing.from] : []), app: app.id, exceptDevice: outgoing.originDevice)
            }
            return messages.map { SentMessage(target: $0.0.to, id: $0.0.id, timestamp: $0.0.timestamp) }
        }
        // An app's peers must exist (`user_not_found`, nothing stored); a user's send is not told (see `validateTargets`).
        let required = outgoing.chatType == .chat && !enforceMembership
        let new = messages.map { message, recipients in
            var deliveries = recipients.map { Delivery(username: $0, required: required) }
            if outgoing.copyToSender && !recipients.contains(outgoing.from) {
                deliveries.append(Delivery(username: outgoing.from, originDevice: outgoing.originDevice))
            }
            let routesPushes = router != nil && PushDecision.mayPush(message) && !recipients.isEmpty
            return NewMessage(message: message, deliveries: deliveries, routesPushes: routesPushes)
        }
        let inputsRequest = inputsRequest(new)
        let appended: AppendResult
        do {
            appended = try await store.append(new, app: app.id, receipt: receipt, readingInputs: inputsRequest)
        } catch let error as BeaconError where error.code == .userNotFound {
            // Found out by the append (an app's send to a peer that does not exist): paced like a refused send, one delivery.
            limiter.refund(app: app.id, user: sender, deliveries: moreDeliveries)
            throw error
        }
        switch appended {
        case .repeated(let earlier):
            return Self.sentMessages(earlier)
        case .stored(let entries, let routed, let inputs):
            metrics.messagesStored(messages.map { (type: $0.0.type.rawValue, chatType: $0.0.chatType.rawValue) })
            let online = await switchboard.deliver(entries, app: app.id)
            if let router, !routed.isEmpty {
                // The recipients that exist: those given an inbox entry.
                let stored = Dictionary(grouping: entries, by: \.message.id).mapValues { Set($0.map(\.username)) }
                for (message, recipients) in messages where routed.contains(message.id) {
                    do {
                        let existing = recipients.filter { $0 != message.from && stored[message.id]?.contains($0) == true }
                        try await router.route(
                            message, recipients: existing, app: app, online: online,
                            inputs: message.id == inputsRequest?.messageID ? inputs : nil, handingOn: true)
                    } catch {
                        // The message is stored with its pending route: the router's sweep decides its pushes shortly.
                        logger.error("routing a stored message failed", metadata: ["message": "\(message.id)", "error": "\(error)"])
                    }
                }
            }
            return messages.map { SentMessage(target: $0.0.to, id: $0.0.id, timestamp: $0.0.timestamp) }
        }
    }
}
