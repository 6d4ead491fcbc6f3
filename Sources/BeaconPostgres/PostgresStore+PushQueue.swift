import BeaconCore
import BeaconStorage
import Foundation
import PostgresNIO

/// Push routing (pending routes, decisions, online skips) and the push job queue.
extension PostgresStore {
    /// A decision that was already recorded by someone else: the transaction is rolled back.
    private struct AlreadyDecided: Error {}

    // MARK: Routing

    public func pendingRoutes(before: Int64, limit: Int) async throws -> [PendingRoute] {
        let found = try await rows(
            """
            SELECT r.app_id AS route_app, r.message_id AS route_message, r.routed_through AS route_progress, m.id AS present, \(unescaped: Self.messageColumns("m")),
                ARRAY(SELECT i.username FROM inbox i WHERE i.app_id = r.app_id AND i.message_id = r.message_id AND i.username != m.sender
                    ORDER BY i.username) AS recipients
            FROM pending_routes r LEFT JOIN messages m ON m.app_id = r.app_id AND m.id = r.message_id
            WHERE r.created_at < \(before) ORDER BY r.created_at LIMIT \(max(limit, 0))
            """)
        var routes: [PendingRoute] = []
        for row in found {
            let app = try row["route_app"].decode(Int64.self)
            guard try row["present"].decode(Int64?.self) != nil else {
                // Its message is gone (retention): nothing is left to push.
                try await execute(
                    "DELETE FROM pending_routes WHERE app_id = \(app) AND message_id = \(try row["route_message"].decode(Int64.self))")
                continue
            }
            routes.append(
                PendingRoute(
                    app: app, message: try Self.message(from: row), recipients: try row["recipients"].decode([String].self),
                    routedThrough: try row["route_progress"].decode(String?.self)))
        }
        return routes
    }

    public func recordRoute(_ route: PushRoute, app: Int64) async throws -> Bool {
        guard let messageID = route.messageID.storedID else { return false }
        if case .pendingRoute(let after, let through) = route.replacing, !route.jobs.contains(where: \.awaitsBadge) {
            let columns = JobColumns(route.jobs, badges: [:])
            let part = RoutePart(after: after, through: through)
            return try await !rows(RecordPendingRoute(app: app, messageID: messageID, now: route.now, part: part, columns: columns)).isEmpty
        }
        do {
            try await transaction { connection in
                switch route.replacing {
                case .pendingRoute(let after, let through):
                    let part = RoutePart(after: after, through: through)
                    let moved = try await connection.rows(
                        MovePendingRoute(app: app, messageID: messageID, now: route.now, part: part), logger: logger)
                    guard moved.count == 1 else { throw AlreadyDecided() }
                case .onlineSkips(let username, let devices):
                    // The message's row, shared: a recall of it (which takes it first, exclusively) runs wholly before or
                    // after this decision, never past the alerts it inserts.
                    let stored = try await connection.query(
                        "SELECT 1 FROM messages WHERE app_id = \(app) AND id = \(messageID) FOR SHARE", logger: logger
                    ).collect().count
                    guard stored == 1 else { throw AlreadyDecided() }
                    for device in devices {
                        let removed = try await connection.query(
                            """
                            DELETE FROM push_jobs WHERE app_id = \(app) AND message_id = \(messageID) AND username = \(username)
                                AND device_id = \(device.deviceID) AND notifier = \(device.notifier)
                                AND status = 'skipped' AND last_reason = \(unescaped: StoredJobReason.online.sqlLiteral)
                            RETURNING 1
                            """, logger: logger
                        ).collect().count
                        guard removed > 0 else { throw AlreadyDecided() }
                    }
                case .nothing:
                    break
                }
                try await insertJobs(route, messageID: messageID, app: app, connection: connection)
            }
            return true
        } catch is AlreadyDecided {
            return false
        }
    }

    /// Splices the receivers' badges into payloads and inserts the jobs of `route`, but for receivers deleted since the
    /// route was decided (their records went with them; a user created again under the name is another user). Each
    /// receiver's row is key-share locked: a deletion either finishes first (no job) or waits and deletes the jobs too.
    func insertJobs(_ route: PushRoute, messageID: Int64, app: Int64, connection: PostgresConnection) async throws {
        let decided: Bool = if case .nothing = route.replacing { false } else { true }
        let badged = Set(route.jobs.filter(\.awaitsBadge).map(\.username))
        let badges = try await Self.badges(of: Array(badged), app: app, connection: connection, logger: logger)
        guard !route.jobs.isEmpty else { return }
        _ = try await connection.rows(
            InsertJobs(
                app: app, messageID: messageID, now: route.now, decided: decided, columns: JobColumns(route.jobs, badges: badges)),
            logger: logger)
    }

    /// Deletes the push contents among `ids` that no job refers to any more (their last jobs were just deleted, in the
    /// same transaction: in a statement apart, as one statement does not see its own deletions).
    static func deleteUnreferencedContents(_ ids: Set<Int64>, app: Int64, connection: PostgresConnection, logger: Logger) async throws {
        guard !ids.isEmpty else { return }
        try await connection.query(
            """
            DELETE FROM push_contents c WHERE c.app_id = \(app) AND c.id = ANY(\(Array(ids)))
                AND NOT EXISTS (SELECT 1 FROM push_jobs j WHERE j.content_id = c.id)
            """, logger: logger)
    }

    public func unacknowledgedOnlineSkips(of username: String, app: Int64, limit: Int) async throws -> [OnlineSkip] {
        let found = try await rows(
            """
            SELECT j.message_id, j.device_id, j.notifier FROM push_jobs j
            JOIN inbox i ON i.app_id = j.app_id AND i.message_id = j.message_id AND i.username = j.username
            JOIN push_bindings b ON b.app_id = j.app_id AND b.username = j.username AND b.device_id = j.device_id
                AND b.notifier = j.notifier
            WHERE j.app_id = \(app) AND j.username = \(username) AND j.status = 'skipped' AND j.last_reason = \(unescaped: StoredJobReason.online.sqlLiteral)
                AND i.seq > COALESCE((SELECT MAX(acked_seq) FROM device_cursors WHERE app_id = \(app) AND username = \(username)), 0)
                AND i.seq > COALESCE((SELECT read_seq FROM conversation_reads r WHERE r.app_id = i.app_id
                    AND r.username = i.username AND r.conversation = i.conversation), 0)
            ORDER BY i.seq, j.device_id COLLATE "C", j.notifier COLLATE "C" LIMIT \(max(limit, 0))
            """)
        var order: [Int64] = []
        var devices: [Int64: [SkippedDevice]] = [:]
        for row in found {
            let id = try row["message_id"].decode(Int64.self)
            if devices[id] == nil { order.append(id) }
            devices[id, default: []].append(
                SkippedDevice(deviceID: try row["device_id"].decode(String.self), notifier: try row["notifier"].decode(String.self)))
        }
        guard !order.isEmpty else { return [] }
        var messages: [Int64: Message] = [:]
        for row in try await rows(
            "SELECT \(unescaped: Self.messageColumns("m")) FROM messages m WHERE m.app_id = \(app) AND m.id = ANY(\(order))")
        {
            let message = try Self.message(from: row)
            messages[Int64(bitPattern: message.id)] = message
        }
        return order.compactMap { id in messages[id].map { OnlineSkip(message: $0, devices: devices[id] ?? []) } }
    }

    public func usersWithUnacknowledgedOnlineSkips(limit: Int) async throws -> [(app: Int64, username: String)] {
        try await rows(
            """
            SELECT DISTINCT j.app_id, j.username FROM push_jobs j
            JOIN inbox i ON i.app_id = j.app_id AND i.message_id = j.message_id AND i.username = j.username
            JOIN push_bindings b ON b.app_id = j.app_id AND b.username = j.username AND b.device_id = j.device_id
                AND b.notifier = j.notifier
            WHERE j.status = 'skipped' AND j.last_reason = \(unescaped: StoredJobReason.online.sqlLiteral)
                AND i.seq > COALESCE(
                    (SELECT MAX(acked_seq) FROM device_cursors c WHERE c.app_id = j.app_id AND c.username = j.username), 0)
                AND i.seq > COALESCE((SELECT read_seq FROM conversation_reads r WHERE r.app_id = i.app_id
                    AND r.username = i.username AND r.conversation = i.conversation), 0)
            LIMIT \(max(limit, 0))
            """
        ).map { (app: try $0["app_id"].decode(Int64.self), username: try $0["username"].decode(String.self)) }
    }

    // MARK: Jobs

    public func bindingHolds(for claimed: PushJob) async throws -> Bool {
        let job = claimed.job
        return try await execute(
            """
            SELECT 1 FROM push_bindings WHERE app_id = \(claimed.appID) AND username = \(job.username) AND device_id = \(job.deviceID)
                AND notifier = \(job.notifier)
                AND (CASE WHEN \(job.pushType.rawValue) = 'voip' THEN voip_token ELSE device_token END) = \(job.deviceToken)
                AND EXISTS (SELECT 1 FROM push_jobs WHERE id = \(claimed.id) AND claim_token = \(claimed.claimToken) AND status = 'pending')
            """) > 0
    }

    public func pushQueueStats(now: Int64) async throws -> (pending: Int, oldestDue: Int64?) {
        let row = try await rows(
            """
            SELECT COUNT(*) AS pending, MIN(next_attempt_at) FILTER (WHERE next_attempt_at <= \(now)) AS oldest
            FROM push_jobs WHERE status = 'pending'
            """
        ).first
        return (pending: try row?["pending"].decode(Int.self) ?? 0, oldestDue: try row?["oldest"].decode(Int64?.self))
    }

    public func claimPushJobs(now: Int64, lease: Int64, limit: Int) async throws -> [PushJob] {
        try await claimPushJobs(now: now, lease: lease, limit: limit, node: 0)
    }

    public func claimPushJobs(now: Int64, lease: Int64, limit: Int, node: Int64) async throws -> [PushJob] {
        let token = Int64.random(in: 1...Int64.max)
        return try await transaction { connection in
            // A job goes to the token its device is bound to now, or nowhere: never to whoever holds the token since.
            // Rows another node is claiming are skipped, not waited for.
            try await connection.query(
                """
                UPDATE push_jobs SET status = 'skipped', last_reason = \(unescaped: StoredJobReason.bindingChanged.sqlLiteral), updated_at = \(now), claimed_until = 0
                WHERE id IN (
                    SELECT j.id FROM push_jobs j
                    WHERE j.status = 'pending' AND j.next_attempt_at <= \(now) AND j.claimed_until <= \(now) AND NOT EXISTS (
                        SELECT 1 FROM push_bindings b WHERE b.app_id = j.app_id AND b.username = j.username
                            AND b.device_id = j.device_id AND b.notifier = j.notifier
                            AND (CASE WHEN j.push_type = 'voip' THEN b.voip_token ELSE b.device_token END) = j.device_token)
                    FOR UPDATE SKIP LOCKED)
                """, logger: logger)
            let claimed = try await connection.query(
                """
                WITH claimed AS (
                    UPDATE push_jobs SET claimed_until = \(now + lease), attempts = attempts + 1, claim_token = \(token), claimed_by = \(node)
                    WHERE id IN (
                        SELECT id FROM push_jobs WHERE status = 'pending' AND next_attempt_at <= \(now) AND claimed_until <= \(now)
                        ORDER BY next_attempt_at, id LIMIT \(max(limit, 0)) FOR UPDATE SKIP LOCKED)
                    RETURNING \(unescaped: Self.jobColumns))
                SELECT *, \(unescaped: Self.contentColumns(of: "claimed")) FROM claimed
                """, logger: logger
            ).collect()
            var jobs: [PushJob] = []
            var damaged: [Int64] = []
            for row in claimed {
                let columns = row.makeRandomAccess()
                do {
                    jobs.append(try Self.pushJob(from: columns))
                } catch {
                    damaged.append(try columns["id"].decode(Int64.self))
                }
            }
            // A row that no longer decodes (`StoredForm.pushFields`) is never sent, and never claimed again: it ends
            // `failed` (`internal_error`, reported like any outcome) instead of holding the queue or its age.
            if !damaged.isEmpty {
                logger.error("push jobs that no longer decode were ended as failed", metadata: ["jobs": "\(damaged)"])
                try await connection.query(
                    """
                    UPDATE push_jobs SET status = 'failed', last_reason = \(unescaped: StoredJobReason.internalError.sqlLiteral), updated_at = \(now), claimed_until = 0,
                        claimed_by = 0
                    WHERE id = ANY(\(damaged))
                    """, logger: logger)
            }
            return jobs.sorted { $0.id < $1.id }
        }
    }

    @discardableResult
    public func recordPushAttempts(_ outcomes: [PushAttemptOutcome], now: Int64) async throws -> Int {
        guard !outcomes.isEmpty else { return 0 }
        let ids = outcomes.map(\.jobID)
        let tokens = outcomes.map(\.claimToken)
        let statuses = outcomes.map(\.status.rawValue)
        // postgres-nio binds arrays without NULL elements: -1 and "" stand for none.
        let httpStatuses = outcomes.map { $0.httpStatus.map(Int64.init) ?? -1 }
        let reasons = outcomes.map { $0.reason ?? "" }
        let nextAttempts = outcomes.map { $0.nextAttemptAt ?? -1 }
        // Only a job still pending under the outcome's claim token is completed (a job claimed again after its lease ran
        // out is fenced off). Rows are locked in id order first, so that this cannot deadlock with another writer of the
        // same jobs; a deadlock reported anyway is retried with the transaction.
        return try await transaction { connection in
            try await connection.query(
                "SELECT id FROM push_jobs WHERE id = ANY(\(ids)) ORDER BY id FOR UPDATE", logger: logger)
            return try await connection.query(
                """
                WITH outcome AS (
                    SELECT id, token, status, NULLIF(http_status, -1) AS http_status, NULLIF(reason, '') AS reason,
                        NULLIF(next_attempt_at, -1) AS next_attempt_at
                    FROM unnest(\(ids)::bigint[], \(tokens)::bigint[], \(statuses)::text[], \(httpStatuses)::bigint[], \(reasons)::text[],
                        \(nextAttempts)::bigint[]) AS o(id, token, status, http_status, reason, next_attempt_at)),
                updated AS (
                    UPDATE push_jobs j SET status = o.status, last_status = o.http_status, last_reason = o.reason, updated_at = \(now),
                        next_attempt_at = COALESCE(o.next_attempt_at, j.next_attempt_at), claimed_until = 0,
                        claimed_by = 0
                    FROM outcome o WHERE j.id = o.id AND j.claim_token = o.token AND j.status = 'pending'
                    RETURNING j.id, o.http_status, o.reason, o.status)
                INSERT INTO push_attempts (job_id, at, http_status, reason, outcome)
                SELECT id, \(now), http_status, reason, status FROM updated ORDER BY id
                RETURNING 1
                """, logger: logger
            ).collect().count
        }
    }

    public func returnUnsentPushJobs(_ jobs: [PushJob]) async throws {
        guard !jobs.isEmpty else { return }
        let (ids, tokens) = (jobs.map(\.id), jobs.map(\.claimToken))
        try await execute(
            """
            UPDATE push_jobs j SET claimed_until = 0, claimed_by = 0, attempts = j.attempts - 1
            FROM unnest(\(ids)::bigint[], \(tokens)::bigint[]) AS c(id, token)
            WHERE j.id = c.id AND j.claim_token = c.token AND j.status = 'pending'
            """)
    }

    public func releasePushClaims() async throws {
        try await execute("UPDATE push_jobs SET claimed_until = 0, claimed_by = 0 WHERE status = 'pending' AND claimed_until > 0")
    }

    public func pushJobs(app: Int64, matching filter: PushJobFilter, limit: Int) async throws -> [PushJob] {
        let storedID = filter.messageID?.storedID
        if filter.messageID != nil, storedID == nil { return [] }  // no message has such an id
        let (username, status, reason, since) = (filter.username, filter.status?.rawValue, filter.reason, filter.updatedSince)
        let found = try await rows(
            """
            SELECT \(unescaped: Self.jobColumns), \(unescaped: Self.contentColumns(of: "push_jobs")),
                ARRAY(SELECT a.at FROM push_attempts a WHERE a.job_id = push_jobs.id ORDER BY a.id) AS attempt_at,
                ARRAY(SELECT COALESCE(a.http_status, -1) FROM push_attempts a WHERE a.job_id = push_jobs.id ORDER BY a.id) AS attempt_status,
                ARRAY(SELECT COALESCE(a.reason, '') FROM push_attempts a WHERE a.job_id = push_jobs.id ORDER BY a.id) AS attempt_reason,
                ARRAY(SELECT a.outcome FROM push_attempts a WHERE a.job_id = push_jobs.id ORDER BY a.id) AS attempt_outcome
            FROM push_jobs WHERE app_id = \(app) AND (\(username)::text IS NULL OR username = \(username))
                AND (\(storedID)::bigint IS NULL OR message_id = \(storedID))
                AND (\(status)::text IS NULL OR status = \(status)) AND (\(reason)::text IS NULL OR last_reason = \(reason))
                AND (\(since)::bigint IS NULL OR updated_at >= \(since))
            ORDER BY id DESC LIMIT \(max(limit, 0))
            """)
        return try found.map { row in
            var job = try Self.pushJob(from: row)
            let at = try row["attempt_at"].decode([Int64].self)
            let statuses = try row["attempt_status"].decode([Int64].self)
            let reasons = try row["attempt_reason"].decode([String].self)
            let outcomes = try row["attempt_outcome"].decode([String].self)
            job.history = at.indices.map { index in
                PushAttempt(
                    at: at[index], httpStatus: statuses[index] < 0 ? nil : Int(statuses[index]),
                    reason: reasons[index].isEmpty ? nil : reasons[index],
                    outcome: PushJobStatus(rawValue: outcomes[index]) ?? .pending)
            }
            return job
        }
    }

    public func nextPushJobDue() async throws -> Int64? {
        try await rows("SELECT MIN(GREATEST(next_attempt_at, claimed_until)) AS due FROM push_jobs WHERE status = 'pending'")
            .first.flatMap { try $0["due"].decode(Int64?.self) }
    }

    static let jobColumns = """
        id, app_id, message_id, username, device_id, notifier, device_token, topic, push_type, priority, expiration, collapse_id,
        apns_id, payload, content_id, badge, status, attempts, last_status, last_reason, created_at, updated_at, next_attempt_at,
        claim_token
        """

    /// The head and badge offset of the content a job of `table` refers to (`content_id`), read with the job
    /// (`jobColumns`): only a content of the job's own message, so that a damaged reference never splices in another
    /// message's text.
    static func contentColumns(of table: String) -> String {
        let content =
            "FROM push_contents c WHERE c.id = \(table).content_id AND c.app_id = \(table).app_id AND c.message_id = \(table).message_id"
        return "(SELECT c.head \(content)) AS content_head, (SELECT c.badge_offset \(content)) AS content_badge_offset"
    }

    /// A job from its `jobColumns` and `contentColumns`.
    static func pushJob(from row: PostgresRandomAccessRow) throws -> PushJob {
        let id = try row["id"].decode(Int64.self)
        let typed = try StoredForm.pushFields(
            job: id, pushType: try row["push_type"].decode(String.self), priority: try row["priority"].decode(Int.self),
            apnsID: try row["apns_id"].decode(String.self), status: try row["status"].decode(String.self))
        let username = try row["username"].decode(String.self)
        let payload = try StoredForm.payload(
            job: id, stored: try row["payload"].decode(String.self), contentID: try row["content_id"].decode(Int64?.self),
            head: try row["content_head"].decode(String?.self), badgeOffset: try row["content_badge_offset"].decode(Int64?.self),
            badge: try row["badge"].decode(Int64?.self), username: username)
        return PushJob(
            id: id, appID: try row["app_id"].decode(Int64.self),
            messageID: UInt64(bitPattern: try row["message_id"].decode(Int64.self)),
            job: NewPushJob(
                username: username, deviceID: try row["device_id"].decode(String.self),
                notifier: try row["notifier"].decode(String.self), deviceToken: try row["device_token"].decode(String.self),
                topic: try row["topic"].decode(String.self), pushType: typed.pushType, priority: typed.priority,
                expiration: try row["expiration"].decode(Int64.self), collapseID: try row["collapse_id"].decode(String?.self),
                apnsID: typed.apnsID, payload: payload),
            status: typed.status, attempts: try row["attempts"].decode(Int.self),
            lastStatus: try row["last_status"].decode(Int?.self), lastReason: try row["last_reason"].decode(String?.self),
            createdAt: try row["created_at"].decode(Int64.self), updatedAt: try row["updated_at"].decode(Int64.self),
            nextAttemptAt: try row["next_attempt_at"].decode(Int64.self), claimToken: try row["claim_token"].decode(Int64.self))
    }
}
