import BeaconCore
import BeaconStorage
import Foundation
import GRDB

/// Push routing (pending routes, decisions, online skips) and the push job queue.
extension SQLiteStore {
    /// A decision that was already recorded by someone else: the transaction is rolled back.
    private struct AlreadyDecided: Error {}

    // MARK: Routing

    public func pendingRoutes(before: Int64, limit: Int) async throws -> [PendingRoute] {
        let (routes, orphans) = try await read { db -> ([PendingRoute], [(Int64, Int64)]) in
            var routes: [PendingRoute] = []
            var orphans: [(Int64, Int64)] = []
            let recipients = try db.cachedStatement(sql: "SELECT username FROM inbox WHERE app_id = ? AND message_id = ? AND username != ?")
            for row in try Row.fetchAll(
                db,
                sql: """
                    SELECT r.app_id AS route_app, r.message_id AS route_message, r.routed_through AS route_progress, m.*
                    FROM pending_routes r
                    LEFT JOIN messages m ON m.app_id = r.app_id AND m.id = r.message_id
                    WHERE r.created_at < ? ORDER BY r.created_at LIMIT ?
                    """,
                arguments: [before, max(limit, 0)])
            {
                let app: Int64 = try row.decode(forColumn: "route_app")
                guard let id = try row.decode(Int64?.self, forColumn: "id") else {
                    let routeMessage: Int64 = try row.decode(forColumn: "route_message")
                    orphans.append((app, routeMessage))
                    continue
                }
                let message = try Self.message(from: row, Columns(of: row))
                let names = try String.fetchAll(recipients, arguments: [app, id, message.from])
                routes.append(
                    PendingRoute(
                        app: app, message: message, recipients: names, routedThrough: try row.decode(forColumn: "route_progress")))
            }
            return (routes, orphans)
        }
        if !orphans.isEmpty {
            // Their message is gone (retention): nothing is left to push.
            try await write { db in
                for (app, message) in orphans {
                    try db.execute(sql: "DELETE FROM pending_routes WHERE app_id = ? AND message_id = ?", arguments: [app, message])
                }
            }
        }
        return routes
    }

    public func recordRoute(_ route: PushRoute, app: Int64) async throws -> Bool {
        guard let messageID = route.messageID.storedID else { return false }
        do {
            try await write { db in
                switch route.replacing {
                case .pendingRoute(let after, let through?):
                    try db.execute(
                        sql: """
                            UPDATE pending_routes SET routed_through = ?, created_at = ?
                            WHERE app_id = ? AND message_id = ? AND routed_through IS ?
                            """,
                        arguments: [through, route.now, app, messageID, after])
                    guard db.changesCount == 1 else { throw AlreadyDecided() }
                case .pendingRoute(let after, nil):
                    try db.execute(
                        sql: "DELETE FROM pending_routes WHERE app_id = ? AND message_id = ? AND routed_through IS ?",
                        arguments: [app, messageID, after])
                    guard db.changesCount == 1 else { throw AlreadyDecided() }
                case .onlineSkips(let username, let devices):
                    let delete = try db.cachedStatement(
                        sql: """
                            DELETE FROM push_jobs WHERE app_id = ? AND message_id = ? AND username = ? AND device_id = ? AND notifier = ?
                                AND status = 'skipped' AND last_reason = \(StoredJobReason.online.sqlLiteral)
                            """)
                    for device in devices {
                        try delete.execute(arguments: [app, messageID, username, device.deviceID, device.notifier])
                        guard db.changesCount > 0 else { throw AlreadyDecided() }
                    }
                case .nothing:
                    break
                }
                try Self.insertJobs(route, messageID: messageID, app: app, db: db)
            }
            return true
        } catch is AlreadyDecided {
            return false
        }
    }

    /// Inserts the jobs of `route`, but for receivers deleted since the route was decided (their records went with them; a
    /// user created again under the name is another user, who does not hold the message): a decision's receivers must
    /// still hold its message, a withdrawal's must still exist. A payload that jobs share is stored once (`PushContents`)
    /// and each job keeps its receiver's badge; one stored whole gets the badge spliced in.
    static func insertJobs(_ route: PushRoute, messageID: Int64, app: Int64, db: Database) throws {
        let receivers = Array(Set(route.jobs.map(\.username)))
        let holding: Int64? = if case .nothing = route.replacing { nil } else { messageID }
        let present = try Self.present(receivers, holding: holding, app: app, db: db)
        let badged = Set(route.jobs.filter { $0.awaitsBadge && present.contains($0.username) }.map(\.username))
        let badges = try Self.badges(of: Array(badged), app: app, db: db)
        let shared = PushContents(route.jobs)
        var storedContents: [Int: Int64] = [:]
        let storeContent = try db.cachedStatement(
            sql: "INSERT INTO push_contents (app_id, message_id, head, badge_offset) VALUES (?, ?, ?, ?)")
        let insert = try db.cachedStatement(
            sql: """
                INSERT INTO push_jobs (app_id, message_id, username, device_id, notifier, device_token, topic, push_type, priority,
                    expiration, collapse_id, apns_id, payload, content_id, badge, status, last_reason, created_at, updated_at,
                    next_attempt_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """)
        for (job, reference) in zip(route.jobs, shared.references) where present.contains(job.username) {
            let badge = badges[job.username] ?? 0
            var contentID: Int64?
            if let reference {
                if storedContents[reference] == nil {
                    let content = shared.contents[reference]
                    try storeContent.execute(arguments: [app, messageID, content.head, content.badgeOffset])
                    storedContents[reference] = db.lastInsertedRowID
                }
                contentID = storedContents[reference]
            }
            try insert.execute(arguments: [
                app, messageID, job.username, job.deviceID, job.notifier, job.deviceToken, job.topic, job.pushType.rawValue,
                job.priority.rawValue, job.expiration, job.collapseID, StoredForm.text(of: job.apnsID),
                contentID == nil ? job.payload(withBadge: badge) : "", contentID, contentID == nil || !job.awaitsBadge ? nil : badge,
                job.skipReason == nil ? "pending" : "skipped", job.skipReason, route.now, route.now, route.now,
            ])
        }
    }

    /// Deletes the push contents among `ids` (the references of jobs just deleted, nil for none) that no job refers to
    /// any more.
    static func deleteUnreferencedContents(_ ids: [Int64?], app: Int64, db: Database) throws {
        for chunk in chunks(Array(Set(ids.compactMap { $0 }))) {
            try db.execute(
                sql: """
                    DELETE FROM push_contents WHERE app_id = ? AND id IN (\(marks(chunk.count)))
                        AND NOT EXISTS (SELECT 1 FROM push_jobs j WHERE j.content_id = push_contents.id)
                    """,
                arguments: StatementArguments([app] + chunk))
        }
    }

    /// Which of `usernames` hold message `holding` (have its inbox entry), or exist when it is nil: one statement per 500.
    static func present(_ usernames: [String], holding messageID: Int64?, app: Int64, db: Database) throws -> Set<String> {
        var present = Set<String>()
        for chunk in chunks(usernames) {
            var values: [(any DatabaseValueConvertible)?] = [app]
            if let messageID { values.append(messageID) }
            values += chunk.map { $0 }
            let sql =
                messageID == nil
                ? "SELECT username FROM users WHERE app_id = ? AND username IN (\(marks(chunk.count)))"
                : "SELECT username FROM inbox WHERE app_id = ? AND message_id = ? AND username IN (\(marks(chunk.count)))"
            present.formUnion(try String.fetchSet(db, sql: sql, arguments: StatementArguments(values)))
        }
        return present
    }

    public func unacknowledgedOnlineSkips(of username: String, app: Int64, limit: Int) async throws -> [OnlineSkip] {
        try await read { db in
            let rows = try Row.fetchAll(
                db,
                sql: """
                    SELECT j.message_id, j.device_id, j.notifier FROM push_jobs j
                    JOIN inbox i ON i.app_id = j.app_id AND i.message_id = j.message_id AND i.username = j.username
                    JOIN push_bindings b ON b.app_id = j.app_id AND b.username = j.username AND b.device_id = j.device_id
                        AND b.notifier = j.notifier
                    WHERE j.app_id = ? AND j.username = ? AND j.status = 'skipped' AND j.last_reason = \(StoredJobReason.online.sqlLiteral)
                        AND i.seq > COALESCE((SELECT MAX(acked_seq) FROM device_cursors WHERE app_id = ? AND username = ?), 0)
                        AND i.seq > COALESCE((SELECT read_seq FROM conversation_reads r WHERE r.app_id = i.app_id
                            AND r.username = i.username AND r.conversation = i.conversation), 0)
                    ORDER BY i.seq, j.device_id, j.notifier LIMIT ?
                    """,
                arguments: [app, username, app, username, max(limit, 0)])
            var order: [Int64] = []
            var devices: [Int64: [SkippedDevice]] = [:]
            for row in rows {
                let id: Int64 = try row.decode(forColumn: "message_id")
                if devices[id] == nil { order.append(id) }
                devices[id, default: []].append(
                    SkippedDevice(deviceID: try row.decode(forColumn: "device_id"), notifier: try row.decode(forColumn: "notifier")))
            }
            let load = try db.cachedStatement(sql: "SELECT * FROM messages WHERE app_id = ? AND id = ?")
            return try order.compactMap { id in
                guard let row = try Row.fetchOne(load, arguments: [app, id]) else { return nil }
                return OnlineSkip(message: try Self.message(from: row, Columns(of: row)), devices: devices[id] ?? [])
            }
        }
    }

    public func usersWithUnacknowledgedOnlineSkips(limit: Int) async throws -> [(app: Int64, username: String)] {
        try await read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT DISTINCT j.app_id, j.username FROM push_jobs j
                    JOIN inbox i ON i.app_id = j.app_id AND i.message_id = j.message_id AND i.username = j.username
                    JOIN push_bindings b ON b.app_id = j.app_id AND b.username = j.username AND b.device_id = j.device_id
                        AND b.notifier = j.notifier
                    WHERE j.status = 'skipped' AND j.last_reason = \(StoredJobReason.online.sqlLiteral)
                        AND i.seq > COALESCE(
                            (SELECT MAX(acked_seq) FROM device_cursors c WHERE c.app_id = j.app_id AND c.username = j.username), 0)
                        AND i.seq > COALESCE((SELECT read_seq FROM conversation_reads r WHERE r.app_id = i.app_id
                            AND r.username = i.username AND r.conversation = i.conversation), 0)
                    LIMIT ?
                    """,
                arguments: [max(limit, 0)]
            ).map { (app: try $0.decode(Int64.self, forColumn: "app_id"), username: try $0.decode(String.self, forColumn: "username")) }
        }
    }

    // MARK: Jobs

    public func bindingHolds(for claimed: PushJob) async throws -> Bool {
        let job = claimed.job
        return try await read { db in
            try Bool.fetchOne(
                db,
                sql: """
                    SELECT EXISTS (SELECT 1 FROM push_bindings WHERE app_id = ? AND username = ? AND device_id = ? AND notifier = ?
                        AND (CASE WHEN ? = 'voip' THEN voip_token ELSE device_token END) = ?)
                    AND EXISTS (SELECT 1 FROM push_jobs WHERE id = ? AND claim_token = ? AND status = 'pending')
                    """,
                arguments: [
                    claimed.appID, job.username, job.deviceID, job.notifier, job.pushType.rawValue, job.deviceToken, claimed.id,
                    claimed.claimToken,
                ]) ?? false
        }
    }

    public func pushQueueStats(now: Int64) async throws -> (pending: Int, oldestDue: Int64?) {
        try await read { db in
            let row = try Row.fetchOne(
                db,
                sql: """
                    SELECT COUNT(*) AS pending, MIN(CASE WHEN next_attempt_at <= ? THEN next_attempt_at END) AS oldest
                    FROM push_jobs WHERE status = 'pending'
                    """,
                arguments: [now])
            return (
                pending: try row?.decode(Int.self, forColumn: "pending") ?? 0,
                oldestDue: try row?.decode(Int64?.self, forColumn: "oldest") ?? nil
            )
        }
    }

    public func claimPushJobs(now: Int64, lease: Int64, limit: Int) async throws -> [PushJob] {
        let token = Int64.random(in: 1...Int64.max)
        return try await write { db in
            // A job goes to the token its device is bound to now, or nowhere: never to whoever holds the token since.
            try db.execute(
                sql: """
                    UPDATE push_jobs SET status = 'skipped', last_reason = \(StoredJobReason.bindingChanged.sqlLiteral), updated_at = ?, claimed_until = 0
                    WHERE status = 'pending' AND next_attempt_at <= ? AND claimed_until <= ? AND NOT EXISTS (
                        SELECT 1 FROM push_bindings b WHERE b.app_id = push_jobs.app_id AND b.username = push_jobs.username
                            AND b.device_id = push_jobs.device_id AND b.notifier = push_jobs.notifier
                            AND (CASE WHEN push_jobs.push_type = 'voip' THEN b.voip_token ELSE b.device_token END) = push_jobs.device_token)
                    """,
                arguments: [now, now, now])
            let claimed = try Row.fetchAll(
                db,
                sql: """
                    UPDATE push_jobs SET claimed_until = ?, attempts = attempts + 1, claim_token = ? WHERE id IN (
                        SELECT id FROM push_jobs WHERE status = 'pending' AND next_attempt_at <= ? AND claimed_until <= ?
                        ORDER BY next_attempt_at, id LIMIT ?)
                    RETURNING *
                    """,
                arguments: [now + lease, token, now, now, max(limit, 0)])
            guard let first = claimed.first else { return [] }
            let columns = Columns(of: first)
            let contents = try Self.contents(referredToBy: claimed, columns, db: db)
            var jobs: [PushJob] = []
            var damaged: [Int64] = []
            for row in claimed {
                do {
                    jobs.append(try Self.pushJob(from: row, columns, contents: contents))
                } catch {
                    damaged.append(try columns.decode("id", in: row))
                }
            }
            // A row that no longer decodes (`StoredForm.pushFields`) is never sent, and never claimed again: it ends
            // `failed` (`internal_error`, reported like any outcome) instead of holding the queue or its age.
            for chunk in Self.chunks(damaged) {
                try db.execute(
                    sql: """
                        UPDATE push_jobs SET status = 'failed', last_reason = \(StoredJobReason.internalError.sqlLiteral), updated_at = ?, claimed_until = 0
                        WHERE id IN (\(Self.marks(chunk.count)))
                        """,
                    arguments: StatementArguments([now] + Array(chunk)))
            }
            return jobs.sorted { $0.id < $1.id }
        }
    }

    @discardableResult
    public func recordPushAttempts(_ outcomes: [PushAttemptOutcome], now: Int64) async throws -> Int {
        guard !outcomes.isEmpty else { return 0 }
        return try await write { db in
            let update = try db.cachedStatement(
                sql: """
                    UPDATE push_jobs SET status = ?, last_status = ?, last_reason = ?, updated_at = ?,
                        next_attempt_at = COALESCE(?, next_attempt_at), claimed_until = 0
                    WHERE id = ? AND claim_token = ? AND status = 'pending'
                    """)
            let log = try db.cachedStatement(
                sql: "INSERT INTO push_attempts (job_id, at, http_status, reason, outcome) VALUES (?, ?, ?, ?, ?)")
            var recorded = 0
            for outcome in outcomes {
                try update.execute(arguments: [
                    outcome.status.rawValue, outcome.httpStatus, outcome.reason, now, outcome.nextAttemptAt, outcome.jobID,
                    outcome.claimToken,
                ])
                guard db.changesCount > 0 else { continue }
                recorded += 1
                try log.execute(arguments: [outcome.jobID, now, outcome.httpStatus, outcome.reason, outcome.status.rawValue])
            }
            return recorded
        }
    }

    public func returnUnsentPushJobs(_ jobs: [PushJob]) async throws {
        guard !jobs.isEmpty else { return }
        try await write { db in
            let hand = try db.cachedStatement(
                sql:
                    "UPDATE push_jobs SET claimed_until = 0, attempts = attempts - 1 WHERE id = ? AND claim_token = ? AND status = 'pending'"
            )
            for job in jobs { try hand.execute(arguments: [job.id, job.claimToken]) }
        }
    }

    public func releasePushClaims() async throws {
        try await write { db in
            try db.execute(sql: "UPDATE push_jobs SET claimed_until = 0 WHERE status = 'pending' AND claimed_until > 0")
        }
    }

    public func pushJobs(app: Int64, matching filter: PushJobFilter, limit: Int) async throws -> [PushJob] {
        let storedID = filter.messageID?.storedID
        if filter.messageID != nil, storedID == nil { return [] }  // no message has such an id
        let status = filter.status?.rawValue
        return try await read { db in
            let rows = try Row.fetchAll(
                db,
                sql: """
                    SELECT * FROM push_jobs WHERE app_id = ? AND (? IS NULL OR username = ?) AND (? IS NULL OR message_id = ?)
                        AND (? IS NULL OR status = ?) AND (? IS NULL OR last_reason = ?) AND (? IS NULL OR updated_at >= ?)
                    ORDER BY id DESC LIMIT ?
                    """,
                arguments: [
                    app, filter.username, filter.username, storedID, storedID, status, status, filter.reason, filter.reason,
                    filter.updatedSince, filter.updatedSince, max(limit, 0),
                ])
            let history = try db.cachedStatement(sql: "SELECT * FROM push_attempts WHERE job_id = ? ORDER BY rowid")
            return try Self.pushJobs(from: rows, db: db).map { job in
                var job = job
                job.history = try Row.fetchAll(history, arguments: [job.id]).map { attempt in
                    PushAttempt(
                        at: try attempt.decode(forColumn: "at"), httpStatus: try attempt.decode(forColumn: "http_status"),
                        reason: try attempt.decode(forColumn: "reason"),
                        outcome: PushJobStatus(rawValue: try attempt.decode(forColumn: "outcome")) ?? .pending)
                }
                return job
            }
        }
    }

    public func nextPushJobDue() async throws -> Int64? {
        try await read { db in
            try Int64.fetchOne(db, sql: "SELECT MIN(MAX(next_attempt_at, claimed_until)) FROM push_jobs WHERE status = 'pending'")
        }
    }

    /// Jobs from rows of `push_jobs`, with the contents they refer to. Rows are decoded with errors, not GRDB's trapping
    /// subscripts: a damaged stored job fails the read, not the server.
    static func pushJobs(from rows: [Row], db: Database) throws -> [PushJob] {
        guard let first = rows.first else { return [] }
        let columns = Columns(of: first)
        let contents = try contents(referredToBy: rows, columns, db: db)
        return try rows.map { try pushJob(from: $0, columns, contents: contents) }
    }

    /// A stored push content: the message it belongs to, the head its jobs share and where their badge goes
    /// (`PushContents`).
    struct StoredContent {
        var app: Int64
        var message: Int64
        var head: String
        var badgeOffset: Int64?
    }

    /// The contents that rows of `push_jobs` refer to, by id. A row whose reference does not decode finds none, and a
    /// content row that does not decode is left out: only the jobs that refer to it fail (as damaged rows).
    static func contents(referredToBy rows: [Row], _ columns: Columns, db: Database) throws -> [Int64: StoredContent] {
        let ids = Set(rows.compactMap { row in try? columns.decode("content_id", in: row) as Int64? })
        var contents: [Int64: StoredContent] = [:]
        for chunk in chunks(Array(ids)) {
            for row in try Row.fetchAll(
                db, sql: "SELECT id, app_id, message_id, head, badge_offset FROM push_contents WHERE id IN (\(marks(chunk.count)))",
                arguments: StatementArguments(Array(chunk)))
            {
                guard let id = try? row.decode(Int64.self, forColumn: "id"),
                    let content = try? StoredContent(
                        app: row.decode(forColumn: "app_id"), message: row.decode(forColumn: "message_id"),
                        head: row.decode(forColumn: "head"),
                        badgeOffset: row.decode(forColumn: "badge_offset"))
                else { continue }
                contents[id] = content
            }
        }
        return contents
    }

    /// One job from `row`, whose result's columns are `columns`; `contents` holds the content it refers to, if any.
    static func pushJob(from row: Row, _ columns: Columns, contents: [Int64: StoredContent]) throws -> PushJob {
        func column<Value: DatabaseValueConvertible>(_ name: String) throws -> Value { try columns.decode(name, in: row) }
        let id: Int64 = try column("id")
        let typed = try StoredForm.pushFields(
            job: id, pushType: try column("push_type"), priority: try column("priority"), apnsID: try column("apns_id"),
            status: try column("status"))
        let username: String = try column("username")
        let (app, message): (Int64, Int64) = (try column("app_id"), try column("message_id"))
        let contentID: Int64? = try column("content_id")
        // Only a content of the job's own message: a damaged reference never splices in another message's text.
        let content = contentID.flatMap { contents[$0] }.flatMap { $0.app == app && $0.message == message ? $0 : nil }
        let payload = try StoredForm.payload(
            job: id, stored: try column("payload"), contentID: contentID, head: content?.head, badgeOffset: content?.badgeOffset,
            badge: try column("badge"), username: username)
        return PushJob(
            id: id, appID: app, messageID: UInt64(bitPattern: message),
            job: NewPushJob(
                username: username, deviceID: try column("device_id"), notifier: try column("notifier"),
                deviceToken: try column("device_token"), topic: try column("topic"), pushType: typed.pushType,
                priority: typed.priority, expiration: try column("expiration"), collapseID: try column("collapse_id"),
                apnsID: typed.apnsID, payload: payload),
            status: typed.status, attempts: try column("attempts"),
            lastStatus: try column("last_status"), lastReason: try column("last_reason"), createdAt: try column("created_at"),
            updatedAt: try column("updated_at"), nextAttemptAt: try column("next_attempt_at"), claimToken: try column("claim_token"))
    }
}
