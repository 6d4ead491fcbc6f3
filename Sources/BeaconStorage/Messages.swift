import BeaconCore

/// Messages: stored once, a copy in each receiver's inbox, read by devices up to their cursors, and kept within the
/// app's offline limits.
public protocol MessageStore: Sendable {
    /// Stores every message with its inbox copies, all or nothing (deliveries to users that do not exist are skipped).
    /// With a `receipt` whose reference was stored before in its scope, stores nothing and answers the earlier message
    /// ids. A message that `routesPushes` gets a pending route in the same transaction when the app has a push
    /// configuration (`AppendResult.stored`'s `routed`), so that a crash before its pushes are decided loses none
    /// (`pendingRoutes`, `recordRoute`); without one there is nothing to decide, and no route is written. With `request`,
    /// the routing inputs of the message it names come back with it when that message was given a pending route, read
    /// with the append (an engine with round trips spends none more on them).
    func append(_ messages: [NewMessage], app: Int64, receipt: SendReceipt?, readingInputs request: RoutingInputsRequest?) async throws
        -> AppendResult
    /// The message ids by target of the send stored under `scope` and `reference` (`SendReceipt`), nil when none was.
    func sentMessages(scope: String, reference: String, app: Int64) async throws -> [String: UInt64]?
    /// The user's inbox entries after `seq`, oldest first.
    func inbox(of username: String, app: Int64, after seq: Int64, limit: Int) async throws -> [InboxEntry]
    /// The highest sequence number this device has acknowledged (0 for a new device).
    func cursor(of username: String, device: String, app: Int64) async throws -> Int64
    /// Moves each device's cursor forward to its `seq` (never backwards, never past the inbox), in one transaction;
    /// `now` is when each device was last seen.
    func acknowledge(_ cursors: [DeviceCursor], now: Int64) async throws
    /// The devices of the user that have connected (kept until retention forgets a device unseen for the app's age
    /// limit), by device id: when each was last seen (connected, acknowledged or disconnected; ms) and its cursor.
    func devices(of username: String, app: Int64) async throws -> [SeenDevice]
    /// Number of stored messages received (not sent) by the user that no device of theirs has acknowledged.
    func offlineCount(of username: String, app: Int64) async throws -> Int
    /// Whether a stored message reached a device of the user; nil if the user's inbox does not hold it.
    func offlineStatus(of messageID: UInt64, for username: String, app: Int64) async throws -> OfflineStatus?
    /// The stored message with this id, nil when there is none (never stored, recalled, or gone with retention).
    func message(_ id: UInt64, app: Int64) async throws -> Message?

    // MARK: Recall

    /// Recalls a stored message, all or nothing (`MessageRecall`): removes it from every inbox and the store, puts
    /// `notice` in each of those inboxes in its place (its entries returned, for live delivery), ends its pushes not yet
    /// on their way (`skipped`, `recalled`, as are its `online` skips and its pending route), and queues a withdrawal
    /// for each device it was pushed to (sent, or in flight) with the receiver's badge as it now is. Nil, changing
    /// nothing, when the message is not stored (recalled already, or never stored).
    func recall(_ recall: MessageRecall, app: Int64) async throws -> RecallResult?

    // MARK: Retention

    /// Drops inbox entries beyond the app's limits (count per conversation, age), messages no inbox holds, finished
    /// push records, send receipts, cursors of devices unseen for the age limit, and webhook events beyond
    /// `WebhookOutbox.maxEventsPerApp` (oldest first, counted in `WebhookState.droppedEvents`). Works in small batches, each its
    /// own short transaction, so that senders never wait long behind it. Returns the number of inbox entries removed.
    func enforceRetention(_ app: AppRecord, now: Int64) async throws -> Int
}

extension MessageStore {
    /// Stores messages, reading no routing inputs (`append(_:app:receipt:readingInputs:)`).
    public func append(_ messages: [NewMessage], app: Int64, receipt: SendReceipt?) async throws -> AppendResult {
        try await append(messages, app: app, receipt: receipt, readingInputs: nil)
    }

    /// Stores one message that pushes nobody.
    public func append(_ message: Message, app: Int64, deliveries: [Delivery]) async throws -> [InboxEntry] {
        guard
            case .stored(let entries, _, _) = try await append(
                [NewMessage(message: message, deliveries: deliveries)], app: app, receipt: nil)
        else { return [] }
        return entries
    }
}

/// One copy of a message to put in a user's inbox.
public struct Delivery: Sendable, Hashable {
    public var username: String
    /// The device the message was sent from, for the sender's own copy: that device does not get it back.
    /// `noticeOrigin` for a notice Beacon writes (a recall).
    public var originDevice: String?

    /// The origin of the entries of notices Beacon writes (`RecallNotice`): a device id no device may have, so every
    /// device gets them, and not counted as received (`offlineCount`), as no one sent them to the user.
    public static let noticeOrigin = "beacon:notice"
    /// The user must exist: if not, `append` stores nothing and throws `user_not_found` (an app's send to a name that
    /// is nobody's). Otherwise a delivery to a user that does not exist is skipped (a user's send is not told).
    public var required: Bool

    public init(username: String, originDevice: String? = nil, required: Bool = false) {
        self.username = username
        self.originDevice = originDevice
        self.required = required
    }
}

/// A message in one user's inbox, numbered by that user's own gapless-at-write sequence.
public struct InboxEntry: Sendable, Hashable {
    public var username: String
    public var seq: Int64
    public var message: Message
    public var originDevice: String?

    public init(username: String, seq: Int64, message: Message, originDevice: String?) {
        self.username = username
        self.seq = seq
        self.message = message
        self.originDevice = originDevice
    }
}

/// Whether a stored message has reached a device of the user.
public enum OfflineStatus: String, Sendable {
    case delivered
    case undelivered
}

/// A device that has connected: when it was last seen and how far it has acknowledged.
public struct SeenDevice: Sendable, Hashable {
    public var deviceID: String
    /// Milliseconds since 1970.
    public var lastSeen: Int64
    public var acknowledgedSeq: Int64

    public init(deviceID: String, lastSeen: Int64, acknowledgedSeq: Int64) {
        self.deviceID = deviceID
        self.lastSeen = lastSeen
        self.acknowledgedSeq = acknowledgedSeq
    }
}

/// How far one device has acknowledged its user's inbox.
public struct DeviceCursor: Sendable, Hashable {
    public var app: Int64
    public var username: String
    /// The uuid of the user the device's session belongs to: when set, the cursor is written only while the name still
    /// belongs to that user (an acknowledgement flushed after the user was deleted never reaches a new user of the name).
    public var userID: String?
    public var device: String
    public var seq: Int64

    public init(app: Int64, username: String, userID: String? = nil, device: String, seq: Int64) {
        self.app = app
        self.username = username
        self.userID = userID
        self.device = device
        self.seq = seq
    }
}

/// One message to store, with its inbox copies.
public struct NewMessage: Sendable, Hashable {
    public var message: Message
    public var deliveries: [Delivery]
    /// Whether pushes are to be decided for it: a pending route is stored with it (see `BeaconStore.recordRoute`).
    public var routesPushes: Bool

    public init(message: Message, deliveries: [Delivery], routesPushes: Bool = false) {
        self.message = message
        self.deliveries = deliveries
        self.routesPushes = routesPushes
    }
}

/// A client's own reference for a send (`Idempotency-Key`, a REST `msg_id`, a WebSocket `send.id`): a retry with the
/// same reference in the same scope is answered with the first send's message ids and stores nothing.
public struct SendReceipt: Sendable, Hashable {
    /// Whose reference it is: one sender's (`senderScope(_:)`) or one device's (`deviceScope(user:device:)`). A user's
    /// receipts go with the user.
    public var scope: String
    public var reference: String
    public var now: Int64

    /// How long a receipt answers retries (ms); retention removes older ones.
    public static let lifetime: Int64 = 24 * 3600 * 1000

    public init(scope: String, reference: String, now: Int64) {
        self.scope = scope
        self.reference = reference
        self.now = now
    }

    /// A REST send's scope: its sender (`from`, or the user of a user token).
    public static func senderScope(_ sender: String) -> String { "rest:\(sender)" }
    /// A WebSocket send's scope: the device it came from.
    public static func deviceScope(user: String, device: String) -> String { "ws:\(user)/\(device)" }
}

/// What `append` did.
public enum AppendResult: Sendable, Hashable {
    /// The messages are stored; their inbox entries, with sequence numbers, the messages given a pending route (their
    /// pushes are to be decided), and the routing inputs asked for when their message is among those.
    case stored([InboxEntry], routed: Set<UInt64>, inputs: RoutingInputs?)
    /// The receipt's reference was seen before: the earlier send's message ids by target; nothing was stored.
    case repeated([String: UInt64])
}

/// A recall to store (`MessageStore.recall`).
public struct MessageRecall: Sendable {
    public var messageID: UInt64
    /// The notice to put in each inbox that held the message (`RecallNotice.message(id:)`).
    public var notice: Message
    /// The background push that removes, from one device, the notification of a push of the message that was sent
    /// (its receiver's badge is put in where `badgeOffset` says when it is stored).
    public var withdrawal: @Sendable (_ sent: NewPushJob) -> NewPushJob
    public var now: Int64

    public init(messageID: UInt64, notice: Message, withdrawal: @escaping @Sendable (_ sent: NewPushJob) -> NewPushJob, now: Int64) {
        self.messageID = messageID
        self.notice = notice
        self.withdrawal = withdrawal
        self.now = now
    }
}

/// What a recall did.
public struct RecallResult: Sendable, Hashable {
    /// The notice's inbox entries, one per user that held the message.
    public var notices: [InboxEntry]
    /// Withdrawal pushes queued.
    public var withdrawals: Int

    public init(notices: [InboxEntry], withdrawals: Int) {
        self.notices = notices
        self.withdrawals = withdrawals
    }
}
