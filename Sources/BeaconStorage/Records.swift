import BeaconCore

/// A tenant as stored.
public struct AppRecord: Sendable, Hashable {
    public var id: Int64
    public var key: AppKey
    public var clientID: String
    /// SHA-256 of the client secret, hex. The secret itself is shown once and never stored.
    public var clientSecretHash: String
    public var limits: OfflineLimits
    public var createdAt: Int64
    /// App tokens issued before this instant (ms) are refused: set when the client secret is rotated
    /// (`BeaconStore.rotateClientSecret`). 0 for an app whose secret never was.
    public var tokensValidAfter: Int64

    public init(
        id: Int64, key: AppKey, clientID: String, clientSecretHash: String, limits: OfflineLimits, createdAt: Int64, tokensValidAfter: Int64 = 0
    ) {
        self.id = id
        self.key = key
        self.clientID = clientID
        self.clientSecretHash = clientSecretHash
        self.limits = limits
        self.createdAt = createdAt
        self.tokensValidAfter = tokensValidAfter
    }
}

/// A user to create.
public struct NewUser: Sendable, Hashable {
    public var username: String
    public var passwordHash: String
    public var nickname: String?

    public init(username: String, passwordHash: String, nickname: String? = nil) {
        self.username = username
        self.passwordHash = passwordHash
        self.nickname = nickname
    }
}

/// A user as stored.
public struct UserRecord: Sendable, Hashable {
    public var appID: Int64
    public var username: String
    public var uuid: String
    public var passwordHash: String
    public var nickname: String?
    public var timezone: String?
    public var createdAt: Int64
    public var modifiedAt: Int64
    /// Tokens issued before this instant (ms) are refused: set when the user is kicked.
    public var tokensValidAfter: Int64
    /// `notification_display_style`: 0 SimpleBanner, 1 MessageSummary.
    public var displayStyle: Int

    public init(
        appID: Int64, username: String, uuid: String, passwordHash: String, nickname: String?, timezone: String?,
        createdAt: Int64, modifiedAt: Int64, tokensValidAfter: Int64, displayStyle: Int = 0
    ) {
        self.displayStyle = displayStyle
        self.appID = appID
        self.username = username
        self.uuid = uuid
        self.passwordHash = passwordHash
        self.nickname = nickname
        self.timezone = timezone
        self.createdAt = createdAt
        self.modifiedAt = modifiedAt
        self.tokensValidAfter = tokensValidAfter
    }
}

/// Changes to a user; `nil` leaves a field as it is.
public struct UserChanges: Sendable, Hashable {
    public var nickname: String?
    public var timezone: String?
    public var displayStyle: Int?

    public init(nickname: String? = nil, timezone: String? = nil, displayStyle: Int? = nil) {
        self.nickname = nickname
        self.timezone = timezone
        self.displayStyle = displayStyle
    }
}

/// A chat group as stored.
public struct GroupRecord: Sendable, Hashable {
    public var appID: Int64
    public var id: String
    public var name: String
    public var description: String
    public var owner: String
    public var maxUsers: Int
    public var createdAt: Int64

    public init(appID: Int64, id: String, name: String, description: String, owner: String, maxUsers: Int, createdAt: Int64) {
        self.appID = appID
        self.id = id
        self.name = name
        self.description = description
        self.owner = owner
        self.maxUsers = maxUsers
        self.createdAt = createdAt
    }
}

/// One copy of a message to put in a user's inbox.
public struct Delivery: Sendable, Hashable {
    public var username: String
    /// The device the message was sent from, for the sender's own copy: that device does not get it back.
    public var originDevice: String?

    public init(username: String, originDevice: String? = nil) {
        self.username = username
        self.originDevice = originDevice
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

/// How far one device has acknowledged its user's inbox.
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

/// A push configuration ("certificate" in Easemob's console): how to reach APNs for one app build.
/// `secret` is sealed by the server (AES-GCM) before it reaches the store.
public struct PushConfigRecord: Sendable, Hashable {
    public enum Kind: String, Sendable, Codable { case p12, p8 }

    public var appID: Int64
    /// The `notifier_name` devices bind with (the SDK's `apnsCertName`).
    public var name: String
    public var kind: Kind
    /// `development` or `production`.
    public var environment: String
    public var bundleID: String
    public var voip: Bool
    public var keyID: String?
    public var teamID: String?
    /// Encrypted credentials: the `.p8` PEM, or the `.p12` bytes and password.
    public var sealedSecret: [UInt8]
    /// The `.p12` certificate's expiry (ms), if any.
    public var expiresAt: Int64?
    public var createdAt: Int64

    public init(
        appID: Int64, name: String, kind: Kind, environment: String, bundleID: String, voip: Bool, keyID: String?, teamID: String?,
        sealedSecret: [UInt8], expiresAt: Int64?, createdAt: Int64
    ) {
        self.appID = appID
        self.name = name
        self.kind = kind
        self.environment = environment
        self.bundleID = bundleID
        self.voip = voip
        self.keyID = keyID
        self.teamID = teamID
        self.sealedSecret = sealedSecret
        self.expiresAt = expiresAt
        self.createdAt = createdAt
    }
}

/// A device's push binding: which token to push to through which configuration.
public struct PushBinding: Sendable, Hashable, Codable {
    public var username: String
    public var deviceID: String
    public var notifier: String
    /// The alert token (`didRegisterForRemoteNotificationsWithDeviceToken`).
    public var deviceToken: String
    /// The PushKit VoIP token of the same installation, if the app registered one: VoIP pushes go there.
    public var voipToken: String?
    public var boundAt: Int64

    public init(username: String, deviceID: String, notifier: String, deviceToken: String, voipToken: String? = nil, boundAt: Int64) {
        self.username = username
        self.deviceID = deviceID
        self.notifier = notifier
        self.deviceToken = deviceToken
        self.voipToken = voipToken
        self.boundAt = boundAt
    }
}

/// A push to store with a message: one per bound device of an offline recipient.
public struct NewPushJob: Sendable, Hashable {
    public var username: String
    public var deviceID: String
    public var notifier: String
    public var deviceToken: String
    public var topic: String
    public var pushType: String
    public var priority: Int
    public var expiration: Int64
    public var collapseID: String?
    public var apnsID: String
    public var payload: String
    /// Where the receiver's badge goes when the job is recorded: `,"badge":N` is inserted at this UTF-8 offset of
    /// `payload`. Nil: the payload is final.
    public var badgeOffset: Int?
    /// Set when the rules decided not to push: the job is recorded as `skipped` with this reason.
    public var skipReason: String?

    public init(
        username: String, deviceID: String, notifier: String, deviceToken: String, topic: String, pushType: String, priority: Int,
        expiration: Int64, collapseID: String?, apnsID: String, payload: String, badgeOffset: Int? = nil, skipReason: String? = nil
    ) {
        self.badgeOffset = badgeOffset
        self.skipReason = skipReason
        self.username = username
        self.deviceID = deviceID
        self.notifier = notifier
        self.deviceToken = deviceToken
        self.topic = topic
        self.pushType = pushType
        self.priority = priority
        self.expiration = expiration
        self.collapseID = collapseID
        self.apnsID = apnsID
        self.payload = payload
    }
}

/// The state of a push job.
/// Which delivery records `pushJobs(app:matching:limit:)` returns: every condition that is set holds.
public struct PushJobFilter: Sendable, Equatable {
    public var username: String?
    public var messageID: UInt64?
    public var status: PushJobStatus?
    /// The skip reason or the last attempt's reason (`dnd`, `BadDeviceToken`, …).
    public var reason: String?
    /// Updated at or after this time (ms since 1970).
    public var updatedSince: Int64?

    public init(
        username: String? = nil, messageID: UInt64? = nil, status: PushJobStatus? = nil, reason: String? = nil, updatedSince: Int64? = nil
    ) {
        self.username = username
        self.messageID = messageID
        self.status = status
        self.reason = reason
        self.updatedSince = updatedSince
    }
}

public enum PushJobStatus: String, Sendable, Codable, CaseIterable {
    /// Waiting for its (next) attempt.
    case pending
    /// APNs accepted it.
    case sent
    /// APNs refused it for good (bad token, unregistered, payload too large, …).
    case failed
    /// Retried until it was too old.
    case expired
    /// Decided against by the receiver's rules (the reason says which); never sent.
    case skipped
}

/// A stored push job with its delivery record.
public struct PushJob: Sendable, Hashable {
    public var id: Int64
    public var appID: Int64
    public var messageID: UInt64
    public var job: NewPushJob
    public var status: PushJobStatus
    public var attempts: Int
    public var lastStatus: Int?
    public var lastReason: String?
    public var createdAt: Int64
    public var updatedAt: Int64
    public var nextAttemptAt: Int64
    /// Every attempt so far, oldest first (filled by `pushJobs`, empty from `claimPushJobs`).
    public var history: [PushAttempt]
    /// The token of the claim that handed this job out (`claimPushJobs`): only that claim may record its outcome.
    public var claimToken: Int64

    public init(
        id: Int64, appID: Int64, messageID: UInt64, job: NewPushJob, status: PushJobStatus, attempts: Int, lastStatus: Int?,
        lastReason: String?, createdAt: Int64, updatedAt: Int64, nextAttemptAt: Int64, history: [PushAttempt] = [], claimToken: Int64 = 0
    ) {
        self.history = history
        self.claimToken = claimToken
        self.id = id
        self.appID = appID
        self.messageID = messageID
        self.job = job
        self.status = status
        self.attempts = attempts
        self.lastStatus = lastStatus
        self.lastReason = lastReason
        self.createdAt = createdAt
        self.updatedAt = updatedAt
        self.nextAttemptAt = nextAttemptAt
    }
}

/// What became of one attempt.
public struct PushAttemptOutcome: Sendable, Hashable {
    public var jobID: Int64
    /// The claim the attempt was made under (`PushJob.claimToken`).
    public var claimToken: Int64
    public var status: PushJobStatus
    /// HTTP status from APNs, if it answered.
    public var httpStatus: Int?
    /// APNs' reason, or a transport failure description.
    public var reason: String?
    /// When to try again (pending only).
    public var nextAttemptAt: Int64?

    public init(jobID: Int64, claimToken: Int64, status: PushJobStatus, httpStatus: Int?, reason: String?, nextAttemptAt: Int64? = nil) {
        self.jobID = jobID
        self.claimToken = claimToken
        self.status = status
        self.httpStatus = httpStatus
        self.reason = reason
        self.nextAttemptAt = nextAttemptAt
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
    /// The messages are stored; their inbox entries, with sequence numbers.
    case stored([InboxEntry])
    /// The receipt's reference was seen before: the earlier send's message ids by target; nothing was stored.
    case repeated([String: UInt64])
}

/// A stored message whose pushes have not been decided yet (the server stopped between storing and routing it).
public struct PendingRoute: Sendable, Hashable {
    public var app: Int64
    public var message: Message
    /// Who receives it (its inbox holders but the sender).
    public var recipients: [String]

    public init(app: Int64, message: Message, recipients: [String]) {
        self.app = app
        self.message = message
        self.recipients = recipients
    }
}

/// A message of the user's that a device was online for (so its bound devices were skipped with `online`) and that no
/// device of the user has acknowledged since: to decide again when the user's devices go offline.
public struct OnlineSkip: Sendable, Hashable {
    public var message: Message
    /// The bound devices skipped, as `device_id` and notifier.
    public var devices: [SkippedDevice]

    public init(message: Message, devices: [SkippedDevice]) {
        self.message = message
        self.devices = devices
    }
}

/// One device (and notifier) a push decision skipped.
public struct SkippedDevice: Sendable, Hashable {
    public var deviceID: String
    public var notifier: String

    public init(deviceID: String, notifier: String) {
        self.deviceID = deviceID
        self.notifier = notifier
    }
}

/// The push decisions for one message, to record (`BeaconStore.recordRoute`).
public struct PushRoute: Sendable {
    /// What the decisions replace, which must still be there: that makes each decision happen once.
    public enum Replacing: Sendable, Hashable {
        /// The message's pending route (its first decision).
        case pendingRoute
        /// The `online` skips of one user's devices (decided again once they went offline).
        case onlineSkips(username: String, devices: [SkippedDevice])
        /// Nothing: pushes that belong to no stored message (a test push, under an id of its own).
        case nothing
    }

    public var messageID: UInt64
    public var replacing: Replacing
    /// Pushed or skipped, per recipient and bound device.
    public var jobs: [NewPushJob]
    /// When the jobs are due (ms).
    public var now: Int64

    public init(messageID: UInt64, replacing: Replacing, jobs: [NewPushJob], now: Int64) {
        self.messageID = messageID
        self.replacing = replacing
        self.jobs = jobs
        self.now = now
    }
}

/// A user's push settings at one scope: the app level (`scope` empty) or one conversation (`chat:peer`, `groupchat:id`).
public struct PushSettingsRecord: Sendable, Hashable {
    public var username: String
    public var scope: String
    /// `DEFAULT`, `ALL`, `AT`, `NONE`; nil = not set.
    public var remindType: String?
    /// `H:M-H:M` (app level only).
    public var quietHours: String?
    /// One-shot do-not-disturb expiry, ms.
    public var silentUntil: Int64?

    public init(username: String, scope: String, remindType: String? = nil, quietHours: String? = nil, silentUntil: Int64? = nil) {
        self.username = username
        self.scope = scope
        self.remindType = remindType
        self.quietHours = quietHours
        self.silentUntil = silentUntil
    }
}

/// What the payload and the decision need to know about a receiver.
public struct PushProfile: Sendable, Hashable {
    /// IANA time zone, if the user set one.
    public var timeZone: String?
    /// `notification_display_style`: 0 SimpleBanner, 1 MessageSummary.
    public var displayStyle: Int
    /// Preferred language for translated pushes (nil: none).
    public var language: String?
    /// The template the user chose.
    public var template: String?
    /// The user's push nickname.
    public var nickname: String?

    public init(timeZone: String? = nil, displayStyle: Int = 0, language: String? = nil, template: String? = nil, nickname: String? = nil) {
        self.timeZone = timeZone
        self.displayStyle = displayStyle
        self.language = language
        self.template = template
        self.nickname = nickname
    }
}

/// App-wide push policy (`/push/policy`).
public struct PushPolicyRecord: Sendable, Hashable, Codable {
    /// `all_offline` or `any_offline`.
    public var multiDevice: String
    /// Default IANA time zone for users without one.
    public var timezone: String
    /// Overrides of the default display strings (`new_message`, `image`, `voice`, `video`, `file`, `location`, `custom`).
    public var displayStrings: [String: String]

    /// Whether unread messages of muted conversations (push mode `NONE`) count in the badge.
    public var badgeCountsMuted: Bool

    public init(
        multiDevice: String = "all_offline", timezone: String = "UTC", displayStrings: [String: String] = [:], badgeCountsMuted: Bool = false
    ) {
        self.multiDevice = multiDevice
        self.timezone = timezone
        self.displayStrings = displayStrings
        self.badgeCountsMuted = badgeCountsMuted
    }
}

/// One recorded attempt of a push job.
public struct PushAttempt: Sendable, Hashable, Codable {
    public var at: Int64
    public var httpStatus: Int?
    public var reason: String?
    public var outcome: PushJobStatus

    enum CodingKeys: String, CodingKey {
        case at, httpStatus = "http_status", reason, outcome
    }

    public init(at: Int64, httpStatus: Int?, reason: String?, outcome: PushJobStatus) {
        self.at = at
        self.httpStatus = httpStatus
        self.reason = reason
        self.outcome = outcome
    }
}

/// An app's push template (`POST /notification/template`).
public struct PushTemplateRecord: Sendable, Hashable {
    public var name: String
    public var titlePattern: String
    public var contentPattern: String
    public var createdAt: Int64
    public var updatedAt: Int64

    public init(name: String, titlePattern: String, contentPattern: String, createdAt: Int64, updatedAt: Int64) {
        self.name = name
        self.titlePattern = titlePattern
        self.contentPattern = contentPattern
        self.createdAt = createdAt
        self.updatedAt = updatedAt
    }
}

// MARK: Read state

/// How far a user has read one conversation: everything in it up to inbox position `seq` (message `upTo`).
public struct ReadMarker: Sendable, Hashable {
    public var conversation: ConversationID
    public var seq: Int64
    public var upTo: UInt64
    /// The user's read-state version when this marker was set: markers changed after version V are those above V.
    public var version: Int64

    public init(conversation: ConversationID, seq: Int64, upTo: UInt64, version: Int64) {
        self.conversation = conversation
        self.seq = seq
        self.upTo = upTo
        self.version = version
    }
}

/// What marking conversations read changed.
public struct ReadUpdate: Sendable, Hashable {
    /// The markers that moved forward (none: everything was read already).
    public var markers: [ReadMarker]
    /// The user's badge afterwards.
    public var badge: Int
    /// The user's devices, other than the one that read, with a push sent for a message now read.
    public var pushedDevices: [SkippedDevice]

    public init(markers: [ReadMarker], badge: Int, pushedDevices: [SkippedDevice]) {
        self.markers = markers
        self.badge = badge
        self.pushedDevices = pushedDevices
    }
}

/// One conversation of a user, as the conversation list shows it.
public struct ConversationSummary: Sendable, Hashable {
    public var conversation: ConversationID
    /// Unread messages (those that count as unread, after the read marker).
    public var unread: Int
    /// Whether the conversation's push mode is `NONE` (its own, or the user's when it has none).
    public var muted: Bool
    public var read: ReadMarker?
    public var lastMessageID: UInt64
    public var lastTimestamp: Int64

    public init(conversation: ConversationID, unread: Int, muted: Bool, read: ReadMarker?, lastMessageID: UInt64, lastTimestamp: Int64) {
        self.conversation = conversation
        self.unread = unread
        self.muted = muted
        self.read = read
        self.lastMessageID = lastMessageID
        self.lastTimestamp = lastTimestamp
    }
}

/// When a device's next withdrawal is due (`BeaconStore.queueWithdrawals`): at once, or `spacing` ms after its previous
/// one's due time when that is recent. A stored due time at the top of the range (a damaged row) saturates.
public enum WithdrawalSchedule {
    public static func due(after previous: Int64?, spacing: Int64, now: Int64) -> Int64 {
        guard let previous, previous > now - spacing else { return now }
        let (due, overflow) = previous.addingReportingOverflow(spacing)
        return overflow ? Int64.max : due
    }
}
