import BeaconCore
import BeaconPush
import BeaconStorage
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

/// Validates, numbers, stores and dispatches messages: the one path every send takes, REST or WebSocket.
final class MessageService: Sendable {
    let store: any BeaconStore
    let registry: ConnectionRegistry
    let planner: PushPlanner
    let pushWorker: PushWorker?
    private let clock: @Sendable () -> Int64
    private let ids: Mutex<MessageIDGenerator>

    init(
        store: any BeaconStore, registry: ConnectionRegistry, pushWorker: PushWorker?, node: UInt16,
        clock: @escaping @Sendable () -> Int64
    ) {
        self.store = store
        self.registry = registry
        self.pushWorker = pushWorker
        self.planner = PushPlanner(store: store, presence: registry, clock: clock)
        self.clock = clock
        self.ids = Mutex(MessageIDGenerator(node: node))
    }

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
            _ = try PayloadBuilder.build(PayloadInput(message: probe, receiver: String(repeating: "x", count: 64), badge: 99_999))
        }
        switch outgoing.chatType {
        case .chat:
            guard !targets.isEmpty, targets.count <= Validation.maxUserTargets else {
                throw BeaconError.illegal("to must name 1-\(Validation.maxUserTargets) users")
            }
            let existing = try await store.existingUsers(targets, app: app.id)
            if let missing = targets.first(where: { !existing.contains($0) }) {
                throw BeaconError(.userNotFound, "user \(missing) does not exist")
            }
            return Dictionary(targets.map { ($0, [$0]) }, uniquingKeysWith: { first, _ in first })
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

    /// Sends to each target in turn; returns each target's message.
    func send(_ outgoing: OutgoingMessage, to targets: [String], app: AppRecord, enforceMembership: Bool) async throws -> [(String, Message)] {
        let recipients = try await validateTargets(targets, for: outgoing, app: app, enforceMembership: enforceMembership)
        var sent: [(String, Message)] = []
        for target in targets {
            sent.append((target, try await deliver(outgoing, to: target, recipients: recipients[target] ?? [], app: app)))
        }
        return sent
    }

    /// Stores (unless online-only) and dispatches one message. Returns once it is stored.
    private func deliver(_ outgoing: OutgoingMessage, to target: String, recipients: [String], app: AppRecord) async throws -> Message {
        let (id, timestamp) = nextID()
        let message = Message(
            id: id, from: outgoing.from, to: target, chatType: outgoing.chatType, type: outgoing.type, body: outgoing.body,
            ext: outgoing.ext, timestamp: timestamp, onlineOnly: outgoing.onlineOnly)
        let copyToSender = outgoing.copyToSender && !recipients.contains(outgoing.from)
        if outgoing.onlineOnly {
            registry.deliverOnline(
                message, to: recipients + (copyToSender ? [outgoing.from] : []), app: app.id, exceptDevice: outgoing.originDevice)
            return message
        }
        var deliveries = recipients.map { Delivery(username: $0) }
        if copyToSender {
            deliveries.append(Delivery(username: outgoing.from, originDevice: outgoing.originDevice))
        }
        let pushes = pushWorker == nil ? nil : try await planner.plan(for: message, recipients: recipients, app: app)
        let entries = try await store.append(message, app: app.id, deliveries: deliveries, pushes: pushes)
        registry.deliver(entries, app: app.id)
        if pushes != nil { pushWorker?.jobsStored() }
        return message
    }
}
