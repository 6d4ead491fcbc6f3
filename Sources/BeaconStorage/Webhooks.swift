/// The push-result webhook: each app's receiver and the durable outbox of events for it.
public protocol WebhookStore: Sendable {
    /// Sets the app's webhook (its delivery state starts afresh) or, with nil, removes it and the events waiting for it.
    /// While a webhook is set and enabled, every push job that leaves `pending` (or is stored already decided) and every
    /// binding `removeBinding` removes records a `WebhookEvent`, in the same transaction.
    /// Returns the state before the change.
    @discardableResult
    func setWebhook(_ config: WebhookConfig?, app: Int64, now: Int64) async throws -> WebhookState?
    func webhook(app: Int64) async throws -> WebhookState?
    /// Claims, for `lease` ms, the oldest `limit` events of one app whose webhook is enabled and due (apps least
    /// recently due first); nil when none is. One batch per app at a time: events reach a receiver in order.
    func claimWebhookBatch(now: Int64, lease: Int64, limit: Int) async throws -> WebhookBatch?
    /// Ends a delivery attempt under its claim: delivered, the batch's events are removed and the failures reset;
    /// otherwise `error` is kept, failures counted and the app's next attempt is at `retryAt`. False when the claim
    /// lapsed and another took the app's events (nothing is changed).
    @discardableResult
    func finishWebhookBatch(_ batch: WebhookBatch, error: String?, retryAt: Int64, now: Int64) async throws -> Bool
    /// Events waiting for every enabled webhook, when the oldest was recorded, and how many were dropped at the bound.
    func webhookOutboxStats() async throws -> WebhookOutboxStats
}

/// An app's push-result webhook: where every final push outcome is POSTed.
public struct WebhookConfig: Sendable, Hashable {
    public var url: String
    /// The HMAC secret, sealed with the server's secret key.
    public var sealedSecret: [UInt8]
    /// Off: no events are recorded and none are sent (those waiting stay).
    public var enabled: Bool

    public init(url: String, sealedSecret: [UInt8], enabled: Bool) {
        self.url = url
        self.sealedSecret = sealedSecret
        self.enabled = enabled
    }
}

/// A webhook and how its deliveries are going.
public struct WebhookState: Sendable, Hashable {
    public var config: WebhookConfig
    /// Events recorded and not yet accepted by the receiver.
    public var pendingEvents: Int
    /// Failed deliveries since the last accepted one (drives the backoff).
    public var consecutiveFailures: Int
    /// When the next delivery may be tried (ms).
    public var nextAttemptAt: Int64
    /// Why the last delivery failed, as a coarse category (`refused_address`, `dns`, `connect`, `timeout`, `tls`,
    /// `http_3xx`, `http_4xx`, `http_5xx`, `invalid_response`, `internal`; never a status code or an error's text), nil after
    /// a success. Stored as the sender gives it.
    public var lastError: String?
    /// Events dropped unsent because the outbox held `WebhookOutbox.maxEventsPerApp` (since the webhook was set).
    public var droppedEvents: Int64

    public init(
        config: WebhookConfig, pendingEvents: Int, consecutiveFailures: Int, nextAttemptAt: Int64, lastError: String?, droppedEvents: Int64
    ) {
        self.config = config
        self.pendingEvents = pendingEvents
        self.consecutiveFailures = consecutiveFailures
        self.nextAttemptAt = nextAttemptAt
        self.lastError = lastError
        self.droppedEvents = droppedEvents
    }
}

/// The outbox as the metrics show it: over every enabled webhook.
public struct WebhookOutboxStats: Sendable, Hashable {
    /// Events recorded and not yet accepted by their receivers.
    public var pending: Int
    /// When the oldest of them was recorded (ms).
    public var oldest: Int64?
    /// Events dropped unsent at the outbox's bound (`WebhookState.droppedEvents`, summed).
    public var dropped: Int64

    public init(pending: Int, oldest: Int64?, dropped: Int64) {
        self.pending = pending
        self.oldest = oldest
        self.dropped = dropped
    }
}

/// The bounds of the webhook outbox.
public enum WebhookOutbox {
    /// Events kept per app while the receiver does not take them; beyond, retention drops the oldest (counted).
    public static let maxEventsPerApp = 100_000
}

/// One recorded outcome, waiting in the outbox. Recorded by the store in the same transaction as the outcome itself
/// (a push job reaching a state other than `pending`, or a binding removed because APNs said its token is dead).
public struct WebhookEvent: Sendable, Hashable {
    public enum Kind: String, Sendable {
        /// A push job's outcome: sent, failed, expired or skipped.
        case push
        /// A binding (or its VoIP token) removed after APNs refused the token.
        case bindingRemoved = "binding_removed"
    }

    /// Unique and increasing in the order events were recorded (with PostgreSQL, concurrent transactions may commit
    /// their events out of that order).
    public var id: Int64
    public var kind: Kind
    /// When the outcome was recorded (ms).
    public var at: Int64
    public var username: String
    public var deviceID: String
    public var notifier: String
    /// `push` only: the message, the APNs push type, the job's status and attempts, APNs' last answer.
    public var messageID: UInt64?
    public var pushType: String?
    public var outcome: String?
    /// The skip reason, APNs' refusal reason, or for `binding_removed` which token died (`token`, `voip_token`).
    public var reason: String?
    public var apnsStatus: Int?
    public var apnsID: String?
    public var attempts: Int?

    public init(
        id: Int64, kind: Kind, at: Int64, username: String, deviceID: String, notifier: String, messageID: UInt64? = nil,
        pushType: String? = nil, outcome: String? = nil, reason: String? = nil, apnsStatus: Int? = nil, apnsID: String? = nil,
        attempts: Int? = nil
    ) {
        self.id = id
        self.kind = kind
        self.at = at
        self.username = username
        self.deviceID = deviceID
        self.notifier = notifier
        self.messageID = messageID
        self.pushType = pushType
        self.outcome = outcome
        self.reason = reason
        self.apnsStatus = apnsStatus
        self.apnsID = apnsID
        self.attempts = attempts
    }
}

/// The oldest events of one app, claimed for one delivery attempt (`BeaconStore.claimWebhookBatch`).
public struct WebhookBatch: Sendable, Hashable {
    public var app: Int64
    public var config: WebhookConfig
    public var events: [WebhookEvent]
    /// Failed deliveries before this one.
    public var consecutiveFailures: Int
    /// Only this claim may finish the batch (a node whose lease lapsed is fenced out).
    public var claimToken: Int64

    public init(app: Int64, config: WebhookConfig, events: [WebhookEvent], consecutiveFailures: Int, claimToken: Int64) {
        self.app = app
        self.config = config
        self.events = events
        self.consecutiveFailures = consecutiveFailures
        self.claimToken = claimToken
    }
}
