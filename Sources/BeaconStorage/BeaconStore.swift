import BeaconCore

/// Everything Beacon keeps. One protocol, several databases: SQLite (embedded default) and PostgreSQL.
/// Every implementation must pass the conformance suite in `Tests/BeaconStorageTests`.
///
/// Times are milliseconds since 1970, supplied by the caller so that tests control the clock.
public protocol BeaconStore: Sendable {
    /// How long this store's transactions took so far (`beacon_store_transaction_duration_seconds`).
    var transactionTimings: TransactionTimings { get }

    // MARK: Server-wide settings

    /// The value stored under `name`, storing `makeValue()` first if there is none (atomic across processes).
    func setting(_ name: String, orInsert makeValue: @Sendable () -> String) async throws -> String

    // MARK: Apps

    /// Creates an app; fails with `duplicate` if `key` exists.
    func createApp(_ key: AppKey, clientID: String, clientSecretHash: String, limits: OfflineLimits, now: Int64) async throws -> AppRecord
    func app(_ key: AppKey) async throws -> AppRecord?
    func app(id: Int64) async throws -> AppRecord?
    /// Replaces the app's client secret (its hash) and ends everything the old one opened, in one transaction: app
    /// tokens issued before `now` are refused from then on (`tokensValidAfter`, which never moves back) and every console
    /// session of the app is deleted. Returns the app as it now is, or nil when there is none.
    func rotateClientSecret(app: Int64, newSecretHash: String, now: Int64) async throws -> AppRecord?
    /// The schema migrations this version knows that the database has not recorded as applied (`GET /ready`: a store
    /// that answers this is reachable and, with none pending, migrated).
    func pendingMigrations() async throws -> [String]
    func allApps() async throws -> [AppRecord]

    // MARK: Users

    /// Creates all users or none; fails with `duplicate` naming the first that exists.
    func createUsers(_ users: [NewUser], app: Int64, now: Int64) async throws -> [UserRecord]
    func user(_ username: String, app: Int64) async throws -> UserRecord?
    /// Users in username order (bytewise), after `after` when given, whose name starts with `prefix` when given.
    func users(app: Int64, after: String?, prefix: String?, limit: Int) async throws -> [UserRecord]
    /// The subset of `usernames` that exist.
    func existingUsers(_ usernames: [String], app: Int64) async throws -> Set<String>
    /// Applies `changes`; returns the updated user, or nil if there is none.
    func updateUser(_ username: String, app: Int64, changes: UserChanges, now: Int64) async throws -> UserRecord?
    /// Refuses every token issued to the user before `instant`.
    func revokeTokens(of username: String, app: Int64, before instant: Int64) async throws
    /// Deletes the user with their inbox, cursors, group memberships, push bindings and settings, and ends their
    /// pending push jobs as `skipped` (`user_deleted`). False if there was none.
    func deleteUser(_ username: String, app: Int64, now: Int64) async throws -> Bool

    // MARK: Groups

    func createGroup(_ group: GroupRecord, members: [String]) async throws
    func group(_ id: String, app: Int64) async throws -> GroupRecord?
    /// Usernames of the group's members (the owner included), sorted.
    func groupMembers(_ id: String, app: Int64) async throws -> [String]
    /// False if the user was already a member.
    func addGroupMember(_ username: String, group: String, app: Int64, now: Int64) async throws -> Bool
    /// False if the user was not a member.
    func removeGroupMember(_ username: String, group: String, app: Int64) async throws -> Bool

    // MARK: Messages

    /// Stores every message with its inbox copies, all or nothing (deliveries to users that do not exist are skipped).
    /// With a `receipt` whose reference was stored before in its scope, stores nothing and answers the earlier message
    /// ids. A message that `routesPushes` gets a pending route in the same transaction, so that a crash before its
    /// pushes are decided loses none (`pendingRoutes`, `recordRoute`).
    func append(_ messages: [NewMessage], app: Int64, receipt: SendReceipt?) async throws -> AppendResult
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

    // MARK: Read state and badge

    /// Marks `conversation` (every conversation with something unread when nil) read up to message `upTo` (everything
    /// stored so far when nil) for the user. Markers only move forward; a message not in the conversation moves it to the
    /// newest entry with an id at most `upTo`. A client-reported badge loses the messages it counted that are now read.
    /// Pending pushes of messages now read that no worker holds end `skipped` (`read`); devices with such a push sent or in
    /// flight are `pushedDevices` (`readingDevice` left out).
    func markRead(
        _ username: String, app: Int64, conversation: ConversationID?, upTo: UInt64?, readingDevice: String?, now: Int64
    ) async throws -> ReadUpdate
    /// The user's read markers set after `version`: the `limit` most recent changes, oldest first.
    func readMarkers(of username: String, app: Int64, after version: Int64, limit: Int) async throws -> [ReadMarker]
    /// The user's conversations that have entries in their inbox, most recent first, with unread counts.
    func conversations(of username: String, app: Int64, limit: Int) async throws -> [ConversationSummary]
    /// The user's badge: the client's last reported total (less what was read of it since), plus unread messages stored
    /// after that report, in conversations that count (muted ones only if the app's policy says so).
    func badge(of username: String, app: Int64) async throws -> Int
    /// The client reports the badge it shows: counting continues from it.
    func reportBadge(of username: String, app: Int64, value: Int) async throws

    // MARK: Push configurations and bindings

    /// Creates or replaces the app's configuration named `config.name`.
    func savePushConfig(_ config: PushConfigRecord) async throws
    func pushConfig(_ name: String, app: Int64) async throws -> PushConfigRecord?
    func pushConfigs(app: Int64) async throws -> [PushConfigRecord]
    /// Deletes the configuration; false if there was none.
    func deletePushConfig(_ name: String, app: Int64) async throws -> Bool

    /// Binds `binding.deviceToken` to the device and notifier, removing the token from anyone else in the app
    /// (one device token belongs to one user at a time). With `holder` (a user's uuid), only while the name still belongs
    /// to that user: false, binding nothing, once they were deleted (a bind that raced the deletion must not bind the
    /// old phone to a new user of the name).
    func bind(_ binding: PushBinding, app: Int64, holder: String?) async throws -> Bool
    /// Removes bindings of the user's device: one notifier's, or all of them when `notifier` is nil.
    func unbind(username: String, deviceID: String, notifier: String?, app: Int64) async throws
    /// Removes every binding of the user (kick, logout everywhere).
    func unbindAll(username: String, app: Int64) async throws
    /// The bindings of many users (absent: none).
    func bindings(of usernames: [String], app: Int64) async throws -> [String: [PushBinding]]
    /// The bindings whose alert token is `deviceToken`: one user's device (a token belongs to one device at a time), under
    /// each push configuration it was bound with.
    func bindings(holding deviceToken: String, app: Int64) async throws -> [PushBinding]
    /// Removes the binding for this token and notifier unless it was made at or after `unlessBoundSince` (ms), recording a
    /// `binding_removed` webhook event (at `now`) for each. Returns whether one was removed.
    func removeBinding(deviceToken: String, notifier: String, app: Int64, unlessBoundSince: Int64?, now: Int64) async throws -> Bool

    // MARK: Push settings

    /// Creates or replaces one scope's settings; a record with nothing set is deleted.
    func savePushSettings(_ settings: PushSettingsRecord, app: Int64) async throws
    /// Settings of many users at these scopes, and their push profiles: what the decision and payload read for a message.
    func pushSettings(of usernames: [String], scopes: [String], app: Int64) async throws
        -> (settings: [PushSettingsRecord], profiles: [String: PushProfile])
    /// Sets the user's preferred push language (nil clears) and chosen template (nil clears); absent = unchanged.
    func setPushPreferences(of username: String, app: Int64, language: String??, template: String??) async throws
    /// Creates a template (fails with `duplicate` when the name exists) or, with `replace`, updates one that exists.
    func saveTemplate(_ template: PushTemplateRecord, app: Int64, replace: Bool) async throws -> Bool
    func templates(app: Int64) async throws -> [PushTemplateRecord]
    func deleteTemplate(_ name: String, app: Int64) async throws -> Bool
    func pushPolicy(app: Int64) async throws -> PushPolicyRecord
    func savePushPolicy(_ policy: PushPolicyRecord, app: Int64) async throws

    // MARK: Push routing

    /// Messages whose pending route was stored before `before` (ms), oldest first, with their recipients.
    func pendingRoutes(before: Int64, limit: Int) async throws -> [PendingRoute]
    /// Records the push decisions for one message: puts each receiver's badge (`badge(of:app:)`) into their jobs'
    /// payloads, stores the jobs, and removes what made the decision due (the pending route, or the online
    /// skips being replaced). All or nothing; false, storing nothing, when that was already gone (decided elsewhere).
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

    // MARK: Push-result webhook

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

    // MARK: Console sessions

    /// Stores a new session, and forgets sessions that expired before `now`.
    func createConsoleSession(_ session: ConsoleSession, now: Int64) async throws
    /// Creates the session only while the app's client secret is still the one whose hash is `secretHash` (the one the
    /// sign-in checked): false, creating nothing, when a rotation came in between.
    func createConsoleSession(_ session: ConsoleSession, now: Int64, secretHash: String) async throws -> Bool
    /// The session with this digest, unless it expired before `now`.
    func consoleSession(digest: String, now: Int64) async throws -> ConsoleSession?
    /// Ends the session (signing out); false when there was none.
    func deleteConsoleSession(digest: String) async throws -> Bool
    /// Ends every console session of every app (`beacon rotate-key`); returns how many there were.
    func deleteAllConsoleSessions() async throws -> Int
    /// The app's users, its messages made since `since` (ms; counted by their time-ordered ids) and its push outcomes
    /// recorded since then.
    func activity(app: Int64, since: Int64) async throws -> AppActivity

    // MARK: Retention

    /// Drops inbox entries beyond the app's limits (count per conversation, age), messages no inbox holds, finished
    /// push records, send receipts, cursors of devices unseen for the age limit, and webhook events beyond
    /// `WebhookOutbox.maxEventsPerApp` (oldest first, counted in `WebhookState.droppedEvents`). Works in small batches, each its
    /// own short transaction, so that senders never wait long behind it. Returns the number of inbox entries removed.
    func enforceRetention(_ app: AppRecord, now: Int64) async throws -> Int
}

extension BeaconStore {
    /// The user's bindings.
    /// Delivery records, newest first, filtered by user and/or message.
    public func pushJobs(app: Int64, username: String?, messageID: UInt64?, limit: Int) async throws -> [PushJob] {
        try await pushJobs(app: app, matching: PushJobFilter(username: username, messageID: messageID), limit: limit)
    }

    /// Binds whoever holds the name now.
    public func bind(_ binding: PushBinding, app: Int64) async throws {
        _ = try await bind(binding, app: app, holder: nil)
    }

    public func bindings(of username: String, app: Int64) async throws -> [PushBinding] {
        try await bindings(of: [username], app: app)[username] ?? []
    }

    /// The user's settings at these scopes (missing scopes are absent).
    public func pushSettings(of username: String, scopes: [String], app: Int64) async throws -> [String: PushSettingsRecord] {
        let found = try await pushSettings(of: [username], scopes: scopes, app: app).settings
        return Dictionary(found.map { ($0.scope, $0) }, uniquingKeysWith: { first, _ in first })
    }

    /// Stores one message that pushes nobody.
    public func append(_ message: Message, app: Int64, deliveries: [Delivery]) async throws -> [InboxEntry] {
        guard case .stored(let entries) = try await append([NewMessage(message: message, deliveries: deliveries)], app: app, receipt: nil)
        else { return [] }
        return entries
    }
}
