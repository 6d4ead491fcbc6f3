import BeaconCore
import BeaconStorage
import GRDB

/// Read markers, unread counts, the badge and the background pushes that withdraw what was read.
extension SQLiteStore {
    public func markRead(
        _ username: String, app: Int64, conversation: ConversationID?, upTo: UInt64?, readingDevice: String?, now: Int64
    ) async throws -> ReadUpdate {
        // An id beyond what is stored reads everything so far (no stored id is that large).
        let upToID = upTo.map { $0.storedID ?? Int64.max }
        return try await write { db in
            guard
                let user = try Row.fetchOne(
                    db, sql: "SELECT badge, badge_seq, read_version FROM users WHERE app_id = ? AND username = ?",
                    arguments: [app, username])
            else { throw BeaconError(.userNotFound, "user \(username) does not exist") }
            // Decoded with errors, not GRDB's trapping subscripts: a damaged stored row fails the request, not the server.
            var reported: Int = try user.decode(forColumn: "badge")
            let reportedThrough: Int64 = try user.decode(forColumn: "badge_seq")
            var version: Int64 = try user.decode(forColumn: "read_version")
            let targets: [String] =
                if let conversation { [conversation.description] } else {
                    try String.fetchAll(
                        db,
                        sql: """
                            SELECT DISTINCT i.conversation FROM inbox i LEFT JOIN conversation_reads r
                                ON r.app_id = i.app_id AND r.username = i.username AND r.conversation = i.conversation
                            WHERE i.app_id = ? AND i.username = ? AND i.seq > COALESCE(r.read_seq, 0) ORDER BY i.conversation
                            """,
                        arguments: [app, username])
                }
            var markers: [ReadMarker] = []
            var pushed: Set<SkippedDevice> = []
            for target in targets {
                guard let conversationID = ConversationID(target) else { continue }
                let previous =
                    try Int64.fetchOne(
                        db, sql: "SELECT read_seq FROM conversation_reads WHERE app_id = ? AND username = ? AND conversation = ?",
                        arguments: [app, username, target]) ?? 0
                // The named message, else the newest entry before it (the named one may have been trimmed).
                let newest = try Row.fetchOne(
                    db,
                    sql: """
                        SELECT seq, message_id FROM inbox WHERE app_id = ? AND username = ? AND conversation = ? AND message_id <= ?
                        ORDER BY message_id = ? DESC, seq DESC LIMIT 1
                        """,
                    arguments: [app, username, target, upToID ?? Int64.max, upToID ?? Int64.max])
                guard let newest, let seq = try newest.decode(Int64?.self, forColumn: "seq"), seq > previous else { continue }
                if reportedThrough > previous {
                    // What the client's reported total counted and is now read no longer counts.
                    let nowRead =
                        try Int.fetchOne(
                            db,
                            sql: """
                                SELECT COUNT(*) FROM inbox WHERE app_id = ? AND username = ? AND conversation = ? AND counts = 1
                                    AND seq > ? AND seq <= ?
                                """,
                            arguments: [app, username, target, previous, min(seq, reportedThrough)]) ?? 0
                    reported = max(0, reported - nowRead)
                }
                // Pushes not yet on their way for messages now read are not sent; those sent or in flight are withdrawn.
                try db.execute(
                    sql: """
                        UPDATE push_jobs SET status = 'skipped', last_reason = \(StoredJobReason.read.sqlLiteral), updated_at = ?, claimed_until = 0
                        WHERE app_id = ? AND username = ? AND status = 'pending' AND claimed_until <= ? AND push_type = 'alert'
                            AND message_id IN (SELECT message_id FROM inbox WHERE app_id = ? AND username = ? AND conversation = ?
                                AND seq > ? AND seq <= ?)
                        """,
                    arguments: [now, app, username, now, app, username, target, previous, seq])
                for row in try Row.fetchAll(
                    db,
                    sql: """
                        SELECT DISTINCT j.device_id, j.notifier FROM inbox i JOIN push_jobs j
                            ON j.app_id = i.app_id AND j.username = i.username AND j.message_id = i.message_id
                        WHERE i.app_id = ? AND i.username = ? AND i.conversation = ? AND i.seq > ? AND i.seq <= ?
                            AND j.push_type = 'alert' AND (j.status IN ('sent', 'pending')
                                OR (j.status = 'skipped' AND j.last_reason = \(StoredJobReason.read.sqlLiteral) AND j.attempts > 0))
                        """,
                    arguments: [app, username, target, previous, seq])
                {
                    pushed.insert(
                        SkippedDevice(deviceID: try row.decode(forColumn: "device_id"), notifier: try row.decode(forColumn: "notifier")))
                }
                // A stored version at the top of the range (a damaged row) is refused rather than wrapped or trapped on.
                guard version < Int64.max else { throw BeaconError(.internalError, "read-state version of \(username) is exhausted") }
                version += 1
                let messageID: Int64 = try newest.decode(forColumn: "message_id")
                try db.execute(
                    sql: """
                        INSERT INTO conversation_reads (app_id, username, conversation, read_seq, up_to, version, updated_at)
                        VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (app_id, username, conversation)
                        DO UPDATE SET read_seq = excluded.read_seq, up_to = excluded.up_to, version = excluded.version,
                            updated_at = excluded.updated_at
                        """,
                    arguments: [app, username, target, seq, messageID, version, now])
                markers.append(ReadMarker(conversation: conversationID, seq: seq, upTo: UInt64(bitPattern: messageID), version: version))
            }
            if !markers.isEmpty {
                try db.execute(
                    sql: "UPDATE users SET badge = ?, read_version = ? WHERE app_id = ? AND username = ?",
                    arguments: [reported, version, app, username])
            }
            let devices = pushed.filter { $0.deviceID != readingDevice }.sorted { ($0.deviceID, $0.notifier) < ($1.deviceID, $1.notifier) }
            return ReadUpdate(markers: markers, badge: try Self.badge(of: username, app: app, db: db), pushedDevices: devices)
        }
    }

    public func readMarkers(of username: String, app: Int64, after version: Int64, limit: Int) async throws -> [ReadMarker] {
        try await read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT * FROM (
                        SELECT conversation, read_seq, up_to, version FROM conversation_reads
                        WHERE app_id = ? AND username = ? AND version > ? ORDER BY version DESC LIMIT ?)
                    ORDER BY version
                    """,
                arguments: [app, username, version, max(limit, 0)]
            ).compactMap(Self.readMarker(from:))
        }
    }

    public func conversations(of username: String, app: Int64, limit: Int) async throws -> [ConversationSummary] {
        try await read { db in
            let rows = try Row.fetchAll(
                db,
                sql: """
                    SELECT i.conversation, MAX(i.seq) AS last_seq,
                        SUM(CASE WHEN i.counts = 1 AND i.seq > COALESCE(r.read_seq, 0) THEN 1 ELSE 0 END) AS unread,
                        r.read_seq, r.up_to, r.version,
                        COALESCE(NULLIF(s.remind_type, 'DEFAULT'), p.remind_type, 'ALL') = 'NONE' AS muted
                    FROM inbox i
                    LEFT JOIN conversation_reads r ON r.app_id = i.app_id AND r.username = i.username AND r.conversation = i.conversation
                    LEFT JOIN push_settings s ON s.app_id = i.app_id AND s.username = i.username AND s.scope = i.conversation
                    LEFT JOIN push_settings p ON p.app_id = i.app_id AND p.username = i.username AND p.scope = ''
                    WHERE i.app_id = ? AND i.username = ?
                    GROUP BY i.conversation ORDER BY last_seq DESC LIMIT ?
                    """,
                arguments: [app, username, max(limit, 0)])
            let last = try db.cachedStatement(
                sql:
                    "SELECT i.message_id, m.timestamp FROM inbox i JOIN messages m ON m.app_id = i.app_id AND m.id = i.message_id WHERE i.app_id = ? AND i.username = ? AND i.seq = ?"
            )
            return try rows.compactMap { row in
                guard let conversation = ConversationID(try row.decode(String.self, forColumn: "conversation")),
                    let newest = try Row.fetchOne(last, arguments: [app, username, try row.decode(Int64.self, forColumn: "last_seq")])
                else { return nil }
                return ConversationSummary(
                    conversation: conversation, unread: try row.decode(forColumn: "unread"), muted: try row.decode(forColumn: "muted"),
                    read: try Self.readMarker(from: row),
                    lastMessageID: UInt64(bitPattern: try newest.decode(Int64.self, forColumn: "message_id")),
                    lastTimestamp: try newest.decode(forColumn: "timestamp"))
            }
        }
    }

    public func badge(of username: String, app: Int64) async throws -> Int {
        try await read { db in try Self.badge(of: username, app: app, db: db) }
    }

    public func reportBadge(of username: String, app: Int64, value: Int) async throws {
        try await write { db in
            try db.execute(
                sql: "UPDATE users SET badge = ?, badge_seq = inbox_seq WHERE app_id = ? AND username = ?",
                arguments: [min(max(value, 0), JSONWriter.maxBadge), app, username])
        }
    }

    /// The user's badge (see `BeaconStore.badge(of:app:)`); 0 for a user that does not exist.
    static func badge(of username: String, app: Int64, db: Database) throws -> Int {
        try badges(of: [username], app: app, db: db)[username] ?? 0
    }

    /// The badges of these users (see `BeaconStore.badge(of:app:)`), one statement per 500 of them (a route's part reads
    /// its receivers' together); users that do not exist are absent.
    static func badges(of usernames: [String], app: Int64, db: Database) throws -> [String: Int] {
        var badges: [String: Int] = [:]
        for chunk in chunks(usernames) {
            let rows = try Row.fetchCursor(
                db,
                sql: """
                    SELECT u.username, u.badge + (
                        SELECT COUNT(*) FROM inbox i
                        LEFT JOIN conversation_reads r ON r.app_id = i.app_id AND r.username = i.username AND r.conversation = i.conversation
                        LEFT JOIN push_settings s ON s.app_id = i.app_id AND s.username = i.username AND s.scope = i.conversation
                        WHERE i.app_id = u.app_id AND i.username = u.username AND i.counts = 1 AND i.seq > u.badge_seq
                            AND i.seq > COALESCE(r.read_seq, 0)
                            AND (a.badge_counts_muted = 1 OR COALESCE(NULLIF(s.remind_type, 'DEFAULT'), p.remind_type, 'ALL') != 'NONE'))
                    FROM users u JOIN apps a ON a.id = u.app_id
                    LEFT JOIN push_settings p ON p.app_id = u.app_id AND p.username = u.username AND p.scope = ''
                    WHERE u.app_id = ? AND u.username IN (\(marks(chunk.count)))
                    """,
                arguments: StatementArguments([app] + chunk.map { $0 as any DatabaseValueConvertible }))
            while let row = try rows.next() {
                badges[try row.decode(String.self, atIndex: 0)] = try row.decode(Int.self, atIndex: 1)
            }
        }
        return badges
    }

    private static func readMarker(from row: Row) throws -> ReadMarker? {
        guard let seq = try row.decode(Int64?.self, forColumn: "read_seq"), let upTo = try row.decode(Int64?.self, forColumn: "up_to"),
            let version = try row.decode(Int64?.self, forColumn: "version"),
            let conversation = ConversationID(try row.decode(String.self, forColumn: "conversation"))
        else { return nil }
        return ReadMarker(conversation: conversation, seq: seq, upTo: UInt64(bitPattern: upTo), version: version)
    }

    public func queueWithdrawals(
        _ jobs: [NewPushJob], messageID: UInt64, readVersion: Int64, app: Int64, spacing: Int64, now: Int64
    ) async throws {
        guard let messageID = messageID.storedID, !jobs.isEmpty else { return }
        try await write { db in
            let newer = try db.cachedStatement(
                sql: """
                    SELECT EXISTS (SELECT 1 FROM push_jobs WHERE app_id = ? AND username = ? AND device_id = ? AND notifier = ?
                        AND push_type = 'background' AND status IN ('pending', 'sent') AND read_version >= ?)
                    """)
            // Older withdrawals still waiting (or whose worker's lease lapsed) are replaced by this one: a lapsed worker can
            // no longer record its answer, and an older read state is never sent after a newer one. A recall's withdrawal
            // (no read version, 0) is not: this one does not name what it removes.
            let supersede = try db.cachedStatement(
                sql: """
                    UPDATE push_jobs SET status = 'skipped', last_reason = \(StoredJobReason.superseded.sqlLiteral), updated_at = ?, claimed_until = 0
                    WHERE app_id = ? AND username = ? AND device_id = ? AND notifier = ? AND push_type = 'background'
                        AND read_version > 0 AND status = 'pending' AND claimed_until <= ?
                    """)
            let previous = try db.cachedStatement(
                sql: """
                    SELECT MAX(next_attempt_at) FROM push_jobs
                    WHERE app_id = ? AND username = ? AND device_id = ? AND notifier = ? AND push_type = 'background'
                        AND NOT (status = 'skipped' AND last_reason = \(StoredJobReason.superseded.sqlLiteral))
                    """)
            let insert = try db.cachedStatement(
                sql: """
                    INSERT INTO push_jobs (app_id, message_id, username, device_id, notifier, device_token, topic, push_type, priority,
                        expiration, collapse_id, apns_id, payload, status, created_at, updated_at, next_attempt_at, read_version)
                    VALUES (?, ?, ?, ?, ?, ?, ?, 'background', ?, ?, NULL, ?, ?, 'pending', ?, ?, ?, ?)
                    """)
            for job in jobs {
                // A withdrawal of a later read state is queued or sent already (reads that committed in the other order).
                guard try Bool.fetchOne(newer, arguments: [app, job.username, job.deviceID, job.notifier, readVersion]) != true else {
                    continue
                }
                try supersede.execute(arguments: [now, app, job.username, job.deviceID, job.notifier, now])
                let last = try Int64.fetchOne(previous, arguments: [app, job.username, job.deviceID, job.notifier])
                let due = WithdrawalSchedule.due(after: last, spacing: spacing, now: now)
                try insert.execute(arguments: [
                    app, messageID, job.username, job.deviceID, job.notifier, job.deviceToken, job.topic, job.priority.rawValue,
                    job.expiration, StoredForm.text(of: job.apnsID), job.payload, now, now, due, readVersion,
                ])
            }
        }
    }
}
