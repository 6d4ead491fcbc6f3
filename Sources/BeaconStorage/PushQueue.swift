import BeaconCore
import Foundation

/// The push queue: each message's push decisions (routes), the jobs they make, their claims by workers and their
/// attempts — the delivery records.
public protocol PushQueueStore: Sendable {
    // MARK: Push routing

    /// Messages whose pending route was stored, or last moved on by a part, before `before` (ms), oldest first, with their
    /// recipients.
    func pendingRoutes(before: Int64, limit: Int) async throws -> [PendingRoute]
    /// Records the push decisions for one message, or for a part of its recipients: puts each receiver's badge
    /// (`badge(of:app:)`) into their jobs' payloads, stores the jobs (a payload several of them share once:
    /// `PushContents`; each job is read back with its own payload), and removes what made the decision due (the pending
    /// route, or the online skips being replaced) or, for a part that is not the route's last, moves the pending route's
    /// progress on. All or nothing; false, storing nothing, when that was already gone or moved (decided elsewhere).
    func recordRoute(_ route: PushRoute, app: Int64) async throws -> Bool
    /// The user's messages whose devices were skipped as `online` and that no device of the user has acknowledged or
    /// marked read (skips of devices no longer bound are left out), oldest first.
    func unacknowledgedOnlineSkips(of username: String, app: Int64, limit: Int) async throws -> [OnlineSkip]
    /// The users (app id, username) with `unacknowledgedOnlineSkips`: after a restart, none of their devices is online.
    func usersWithUnacknowledgedOnlineSkips(limit: Int) async throws -> [(app: Int64, username: String)]

    // MARK: Push jobs

    /// Queues background pushes that tell devices what was read elsewhere (one job per device and notifier, push type
    /// `background`) as of the user's read-state `readVersion`, coalesced: it replaces (`skipped`, `superseded`) the
    /// device's withdrawals still waiting or whose worker's lease lapsed, and is due no sooner than `spacing` ms after the
    /// device's previous one. A device with a withdrawal of a later version waiting or sent gets nothing.
    func queueWithdrawals(_ jobs: [NewPushJob], messageID: UInt64, readVersion: Int64, app: Int64, spacing: Int64, now: Int64) async throws

    /// Claims up to `limit` due pending jobs for `lease` ms (a crashed worker's jobs become due again), each under a
    /// new claim token. Due jobs whose device binding no longer holds their token (unbound, moved to another user,
    /// the user kicked or deleted) end as `skipped` with `binding_changed` instead. The jobs come in the order they
    /// were recorded (by `id`), so that a worker can push a device's in that order.
    func claimPushJobs(now: Int64, lease: Int64, limit: Int) async throws -> [PushJob]
    /// Whether the job is still held by its claim (not deleted with its user meanwhile) and its device binding still holds
    /// its token: the check the claim made, made again just before a send that waited long after its claim.
    func bindingHolds(for job: PushJob) async throws -> Bool
    /// Records attempts' outcomes, each only if its job is still pending under the outcome's claim token (a job
    /// claimed again after its lease ran out cannot be completed twice). Returns how many were recorded.
    @discardableResult
    func recordPushAttempts(_ outcomes: [PushAttemptOutcome], now: Int64) async throws -> Int
    /// Hands back claimed jobs that their claim never sent: due again at once, that claim's attempt not counted. A job
    /// no longer pending under the claim token it was handed out with is left as it is.
    func returnUnsentPushJobs(_ jobs: [PushJob]) async throws
    /// Lets go of every claim: the one process pushing from this store restarted, so nobody holds them any more.
    func releasePushClaims() async throws
    /// Delivery records, newest first, that match `filter`.
    func pushJobs(app: Int64, matching filter: PushJobFilter, limit: Int) async throws -> [PushJob]
    /// Pending jobs (due or not), and the time the oldest due one became due (nil: none is due at `now`).
    func pushQueueStats(now: Int64) async throws -> (pending: Int, oldestDue: Int64?)
    /// The earliest time a pending job is due, if any.
    func nextPushJobDue() async throws -> Int64?
}

extension PushQueueStore {
    /// Delivery records, newest first, filtered by user and/or message.
    public func pushJobs(app: Int64, username: String?, messageID: UInt64?, limit: Int) async throws -> [PushJob] {
        try await pushJobs(app: app, matching: PushJobFilter(username: username, messageID: messageID), limit: limit)
    }
}

/// A push's kind, as APNs' `apns-push-type` names it: the kinds Beacon sends.
public enum PushType: String, Sendable, Hashable, CaseIterable {
    case alert, voip, background
}

/// A push's `apns-priority`.
public enum PushPriority: Int, Sendable, Hashable, CaseIterable {
    /// Sent as the device's power allows (background pushes must use it).
    case considerate = 5
    case immediate = 10
}

/// A push to store with a message: one per bound device of an offline recipient.
public struct NewPushJob: Sendable, Hashable {
    public var username: String
    public var deviceID: String
    public var notifier: String
    public var deviceToken: String
    public var topic: String
    public var pushType: PushType
    public var priority: PushPriority
    public var expiration: Int64
    public var collapseID: String?
    /// `apns-id`; nil for a job recorded skipped with no device to push to.
    public var apnsID: UUID?
    public var payload: String
    /// Where the receiver's badge goes when the job is recorded: `,"badge":N` is inserted at this UTF-8 offset of
    /// `payload`. Nil: the payload is final.
    public var badgeOffset: Int?
    /// Set when the rules decided not to push: the job is recorded as `skipped` with this reason.
    public var skipReason: String?

    public init(
        username: String, deviceID: String, notifier: String, deviceToken: String, topic: String, pushType: PushType,
        priority: PushPriority,
        expiration: Int64, collapseID: String?, apnsID: UUID?, payload: String, badgeOffset: Int? = nil, skipReason: String? = nil
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

    /// Whether the receiver's badge is yet to be put in the payload (`payload(withBadge:)`) when the job is recorded.
    public var awaitsBadge: Bool { badgeOffset != nil && skipReason == nil }

    /// The payload to store: with `badge` put where the payload builder left room for it (`awaitsBadge`); as it is
    /// otherwise. The one place a badge enters a stored payload, whichever engine records the job.
    public func payload(withBadge badge: Int) -> String {
        guard let badgeOffset, skipReason == nil else { return payload }
        return JSONWriter.insertBadge(badge, into: payload, atUTF8Offset: badgeOffset)
    }

}

/// The reasons a store itself ends a job with, or looks for: one Swift place for both engines' SQL (`sqlLiteral`). Like
/// the push rules' own reasons (`BeaconPush.SkipReason`), they are stable codes of the delivery records and the webhook.
public enum StoredJobReason: String, Sendable, CaseIterable {
    /// The rules found the receiver online (`SkipReason.online`): such a job is decided again if the message goes unread.
    case online
    /// The device's token changed hands between the decision and the send.
    case bindingChanged = "binding_changed"
    /// The receiver read the conversation before the push went out.
    case read
    /// A newer withdrawal for the same device replaced this one.
    case superseded
    /// The message was recalled before the push went out.
    case recalled
    /// The receiver was deleted.
    case userDeleted = "user_deleted"
    /// The job's stored row no longer decodes.
    case internalError = "internal_error"

    /// The reason as an SQL string literal (`'online'`), for statements whose plan must see the constant.
    public var sqlLiteral: String { "'\(rawValue)'" }
}

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

/// The state of a push job.
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

/// A stored message whose pushes have not been decided yet, or not for all its recipients (the server stopped between
/// storing and routing it, or in the middle of its route).
public struct PendingRoute: Sendable, Hashable {
    public var app: Int64
    public var message: Message
    /// Who receives it (its inbox holders but the sender).
    public var recipients: [String]
    /// The last recipient (in `RouteOrder`) whose pushes are recorded; nil when none is.
    public var routedThrough: String?

    public init(app: Int64, message: Message, recipients: [String], routedThrough: String? = nil) {
        self.app = app
        self.message = message
        self.recipients = recipients
        self.routedThrough = routedThrough
    }
}

/// The order in which a route records its recipients' pushes, part by part: by the UTF-8 bytes of their usernames, so
/// that a route's stored progress (`PendingRoute.routedThrough`) says exactly who is left. Only Swift compares names in
/// this order; the stores only test the progress for equality (a database's collation may order text otherwise).
public enum RouteOrder {
    public static func precedes(_ a: String, _ b: String) -> Bool { a.utf8.lexicographicallyPrecedes(b.utf8) }

    /// The recipients still to route after `progress`, in route order, each once.
    public static func remaining(_ recipients: [String], after progress: String?) -> [String] {
        // Compared by bytes, not `==` (canonical equivalence), which would take two usernames for one.
        var remaining: [String] = []
        for name in recipients.sorted(by: precedes) where progress.map({ precedes($0, name) }) ?? true {
            if let last = remaining.last, last.utf8.elementsEqual(name.utf8) { continue }
            remaining.append(name)
        }
        return remaining
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
        /// The message's pending route (its first decision): the jobs of its recipients after `after` (`RouteOrder`),
        /// which must be the route's stored progress. `through` is the last recipient of a part that is not the route's
        /// last, and becomes its progress; nil for the last part, which removes the pending route.
        case pendingRoute(after: String? = nil, through: String? = nil)
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

/// When a device's next withdrawal is due (`BeaconStore.queueWithdrawals`): at once, or `spacing` ms after its previous
/// one's due time when that is recent. A stored due time at the top of the range (a damaged row) saturates.
public enum WithdrawalSchedule {
    public static func due(after previous: Int64?, spacing: Int64, now: Int64) -> Int64 {
        guard let previous, previous > now - spacing else { return now }
        let (due, overflow) = previous.addingReportingOverflow(spacing)
        return overflow ? Int64.max : due
    }
}
