import BeaconCore
import BeaconStorage
import Logging
import PostgresNIO

/// Read markers, unread counts, the badge and the background pushes that withdraw what was read.
extension PostgresStore {
    public func markRead(
        _ username: String, app: Int64, conversation: ConversationID?, upTo: UInt64?, readingDevice: String?, now: Int64
    ) async throws -> ReadUpdate {
        // An id beyond what is stored reads everything so far (no stored id is that large).
        let upToID = upTo.map { $0.storedID ?? Int64.max } ?? Int64.max
        return try await transaction { connection in
            // The user's row is locked: two reads of the same user (on two nodes) count their versions one after the other.
            guard
                let user = try await connection.query(
                    "SELECT badge, badge_seq, read_version FROM users WHERE app_id = \(app) AND username = \(username) FOR UPDATE",
                    logger: logger
                ).collect().first?.makeRandomAccess()
            else { throw BeaconError(.userNotFound, "user \(username) does not exist") }
            var reported = try user["badge"].decode(Int.self)
            let reportedThrough = try user["badge_seq"].decode(Int64.self)
            var version = try user["read_version"].decode(Int64.self)
            var targets: [String] = []
            if let conversation {
                targets = [conversation.description]
            } else {
                for try await target in try await connection.query(
                    """
                    SELECT DISTINCT i.conversation COLLATE "C" AS conversation FROM inbox i LEFT JOIN conversation_reads r
                        ON r.app_id = i.app_id AND r.username = i.username AND r.conversation = i.conversation
                    WHERE i.app_id = \(app) AND i.username = \(username) AND i.seq > COALESCE(r.read_seq, 0)
                    ORDER BY 1
                    """, logger: logger
                ).decode(String.self) {
                    targets.append(target)
                }
            }
            var markers: [ReadMarker] = []
            var pushed: Set<SkippedDevice> = []
            for target in targets {
                guard let conversationID = ConversationID(target) else { continue }
                let previous =
                    try await connection.query(
                        """
                        SELECT read_seq FROM conversation_reads WHERE app_id = \(app) AND username = \(username) AND conversation = \(target)
                        """, logger: logger
                    ).collect().first?.decode(Int64.self) ?? 0
                // The named message, else the newest entry before it (the named one may have been trimmed).
                guard
                    let (seq, messageID) = try await connection.query(
                        """
                        SELECT seq, message_id FROM inbox
                        WHERE app_id = \(app) AND username = \(username) AND conversation = \(target) AND message_id <= \(upToID)
                        ORDER BY message_id = \(upToID) DESC, seq DESC LIMIT 1
                        """, logger: logger
                    ).collect().first?.decode((Int64, Int64).self), seq > previous
                else { continue }
                if reportedThrough > previous {
                    // What the client's reported total counted and is now read no longer counts.
                    let nowRead =
                        try await connection.query(
                            """
                            SELECT COUNT(*) FROM inbox WHERE app_id = \(app) AND username = \(username) AND conversation = \(target) AND counts
                                AND seq > \(previous) AND seq <= \(min(seq, reportedThrough))
                            """, logger: logger
                        ).collect().first?.decode(Int.self) ?? 0
                    reported = max(0, reported - nowRead)
                }
                // Pushes not yet on their way for messages now read are not sent; those sent or in flight are withdrawn.
                try await connection.query(
                    """
                    UPDATE push_jobs SET status = 'skipped', last_reason = \(unescaped: StoredJobReason.read.sqlLiteral), updated_at = \(now), claimed_until = 0
                    WHERE app_id = \(app) AND username = \(username) AND status = 'pending' AND claimed_until <= \(now)
                        AND push_type = 'alert' AND message_id IN (SELECT message_id FROM inbox WHERE app_id = \(app)
                            AND username = \(username) AND conversation = \(target) AND seq > \(previous) AND seq <= \(seq))
                    """, logger: logger)
                for try await (device, notifier) in try await connection.query(
                    """
                    SELECT DISTINCT j.device_id, j.notifier FROM inbox i JOIN push_jobs j
                        ON j.app_id = i.app_id AND j.username = i.username AND j.message_id = i.message_id
                    WHERE i.app_id = \(app) AND i.username = \(username) AND i.conversation = \(target) AND i.seq > \(previous)
                        AND i.seq <= \(seq) AND j.push_type = 'alert' AND (j.status IN ('sent', 'pending')
                            OR (j.status = 'skipped' AND j.last_reason = \(unescaped: StoredJobReason.read.sqlLiteral) AND j.attempts > 0))
                    """, logger: logger
                ).decode((String, String).self) {
                    pushed.insert(SkippedDevice(deviceID: device, notifier: notifier))
                }
                // A stored version at the top of the range (a damaged row) is refused rather than wrapped or trapped on.
                guard version < Int64.max else { throw BeaconError(.internalError, "read-state version of \(username) is exhausted") }
                version += 1
                try await connection.query(
                    """
                    INSERT INTO conversation_reads (app_id, username, conversation, read_seq, up_to, version, updated_at)
                    VALUES (\(app), \(username), \(target), \(seq), \(messageID), \(version), \(now))
                    ON CONFLICT (app_id, username, conversation)
                    DO UPDATE SET read_seq = excluded.read_seq, up_to = excluded.up_to, version = excluded.version,
                        updated_at = excluded.updated_at
                    """, logger: logger)
                markers.append(ReadMarker(conversation: conversationID, seq: seq, upTo: UInt64(bitPattern: messageID), version: version))
            }
            if !markers.isEmpty {
                try await connection.query(
                    """
                    UPDATE users SET badge = \(reported), read_version = \(version) WHERE app_id = \(app) AND username = \(username)
                    """, logger: logger)
            }
            let badge = try await Self.badges(of: [username], app: app, connection: connection, logger: logger)[username] ?? 0
            let devices = pushed.filter { $0.deviceID != readingDevice }.sorted { ($0.deviceID, $0.notifier) < ($1.deviceID, $1.notifier) }
            return ReadUpdate(markers: markers, badge: badge, pushedDevices: devices)
        }
    }

    public func readMarkers(of username: String, app: Int64, after version: Int64, limit: Int) async throws -> [ReadMarker] {
        try await rows(
            """
            SELECT * FROM (
                SELECT conversation, read_seq, up_to, version FROM conversation_reads
                WHERE app_id = \(app) AND username = \(username) AND version > \(version) ORDER BY version DESC LIMIT \(max(limit, 0))
            ) newest ORDER BY version
            """
        ).compactMap(Self.readMarker(from:))
    }

    public func conversations(of username: String, app: Int64, limit: Int) async throws -> [ConversationSummary] {
        try await rows(
            """
            WITH summary AS (
                SELECT i.conversation, MAX(i.seq) AS last_seq,
                    COUNT(*) FILTER (WHERE i.counts AND i.seq > COALESCE(r.read_seq, 0)) AS unread,
                    r.read_seq, r.up_to, r.version,
                    COALESCE(NULLIF(s.remind_type, 'DEFAULT'), p.remind_type, 'ALL') = 'NONE' AS muted
                FROM inbox i
                LEFT JOIN conversation_reads r ON r.app_id = i.app_id AND r.username = i.username AND r.conversation = i.conversation
                LEFT JOIN push_settings s ON s.app_id = i.app_id AND s.username = i.username AND s.scope = i.conversation
                LEFT JOIN push_settings p ON p.app_id = i.app_id AND p.username = i.username AND p.scope = ''
                WHERE i.app_id = \(app) AND i.username = \(username)
                GROUP BY i.conversation, r.read_seq, r.up_to, r.version, s.remind_type, p.remind_type
                ORDER BY last_seq DESC LIMIT \(max(limit, 0)))
            SELECT summary.*, i.message_id AS last_id, m.timestamp AS last_timestamp FROM summary
            JOIN inbox i ON i.app_id = \(app) AND i.username = \(username) AND i.seq = summary.last_seq
            JOIN messages m ON m.app_id = i.app_id AND m.id = i.message_id
            ORDER BY summary.last_seq DESC
            """
        ).compactMap { row in
            guard let conversation = ConversationID(try row["conversation"].decode(String.self)) else { return nil }
            return ConversationSummary(
                conversation: conversation, unread: try row["unread"].decode(Int.self), muted: try row["muted"].decode(Bool.self),
                read: try Self.readMarker(from: row), lastMessageID: UInt64(bitPattern: try row["last_id"].decode(Int64.self)),
                lastTimestamp: try row["last_timestamp"].decode(Int64.self))
        }
    }

    public func badge(of username: String, app: Int64) async throws -> Int {
        try await transactionTimings.time(.read) {
            try await client.withConnection { connection in
                try await Self.badges(of: [username], app: app, connection: connection, logger: logger)[username] ?? 0
            }
        }
    }

    public func reportBadge(of username: String, app: Int64, value: Int) async throws {
        try await execute(
            """
            UPDATE users SET badge = \(min(max(value, 0), JSONWriter.maxBadge)), badge_seq = inbox_seq
            WHERE app_id = \(app) AND username = \(username)
            """)
    }

    /// The badges of these users (see `BeaconStore.badge(of:app:)`); users that do not exist are absent.
    static func badges(of usernames: [String], app: Int64, connection: PostgresConnection, logger: Logger) async throws -> [String: Int] {
        guard !usernames.isEmpty else { return [:] }
        var badges: [String: Int] = [:]
        for try await (username, badge) in try await connection.query(
            """
            SELECT u.username, u.badge + (
                SELECT COUNT(*) FROM inbox i
                LEFT JOIN conversation_reads r ON r.app_id = i.app_id AND r.username = i.username AND r.conversation = i.conversation
                LEFT JOIN push_settings s ON s.app_id = i.app_id AND s.username = i.username AND s.scope = i.conversation
                WHERE i.app_id = u.app_id AND i.username = u.username AND i.counts AND i.seq > u.badge_seq
                    AND i.seq > COALESCE(r.read_seq, 0)
                    AND (a.badge_counts_muted OR COALESCE(NULLIF(s.remind_type, 'DEFAULT'), p.remind_type, 'ALL') != 'NONE'))
            FROM users u JOIN apps a ON a.id = u.app_id
            LEFT JOIN push_settings p ON p.app_id = u.app_id AND p.username = u.username AND p.scope = ''
            WHERE u.app_id = \(app) AND u.username = ANY(\(usernames))
            """, logger: logger
        ).decode((String, Int).self) {
            badges[username] = badge
        }
        return badges
    }

    private static func readMarker(from row: PostgresRandomAccessRow) throws -> ReadMarker? {
        guard let seq = try row["read_seq"].decode(Int64?.self), let upTo = try row["up_to"].decode(Int64?.self),
            let version = try row["version"].decode(Int64?.self),
            let conversation = ConversationID(try row["conversation"].decode(String.self))
        else { return nil }
        return ReadMarker(conversation: conversation, seq: seq, upTo: UInt64(bitPattern: upTo), version: version)
    }

    public func queueWithdrawals(
        _ jobs: [NewPushJob], messageID: UInt64, readVersion: Int64, app: Int64, spacing: Int64, now: Int64
    ) async throws {
        guard let messageID = messageID.storedID, !jobs.isEmpty else { return }
        try await transaction { connection in
            // The users' rows are locked (in username order, as senders lock them): two nodes queueing for one device at once
            // take turns, so that the second finds the first's job.
            let usernames = Array(Set(jobs.map(\.username))).sorted()
            try await connection.query(
                """
                SELECT 1 FROM users WHERE app_id = \(app) AND username = ANY(\(usernames)) ORDER BY username FOR UPDATE
                """, logger: logger
            ).collect()
            for job in jobs {
                // A withdrawal of a later read state is queued or sent already (reads that committed in the other order).
                let newer = try await connection.query(
                    """
                    SELECT 1 FROM push_jobs WHERE app_id = \(app) AND username = \(job.username) AND device_id = \(job.deviceID)
                        AND notifier = \(job.notifier) AND push_type = 'background' AND status IN ('pending', 'sent')
                        AND read_version >= \(readVersion) LIMIT 1
                    """, logger: logger
                ).collect().count
                guard newer == 0 else { continue }
                // Older withdrawals still waiting (or whose worker's lease lapsed) are replaced by this one: a lapsed worker
                // can no longer record its answer, and an older read state is never sent after a newer one. A recall's
                // withdrawal (no read version, 0) is not: this one does not name what it removes.
                try await connection.query(
                    """
                    UPDATE push_jobs SET status = 'skipped', last_reason = \(unescaped: StoredJobReason.superseded.sqlLiteral), updated_at = \(now), claimed_until = 0
                    WHERE app_id = \(app) AND username = \(job.username) AND device_id = \(job.deviceID) AND notifier = \(job.notifier)
                        AND push_type = 'background' AND read_version > 0 AND status = 'pending' AND claimed_until <= \(now)
                    """, logger: logger)
                let last = try await connection.query(
                    """
                    SELECT MAX(next_attempt_at) FROM push_jobs WHERE app_id = \(app) AND username = \(job.username)
                        AND device_id = \(job.deviceID) AND notifier = \(job.notifier) AND push_type = 'background'
                        AND NOT (status = 'skipped' AND last_reason = \(unescaped: StoredJobReason.superseded.sqlLiteral))
                    """, logger: logger
                ).collect().first?.decode(Int64?.self)
                let due = WithdrawalSchedule.due(after: last, spacing: spacing, now: now)
                try await connection.query(
                    """
                    INSERT INTO push_jobs (app_id, message_id, username, device_id, notifier, device_token, topic, push_type, priority,
                        expiration, collapse_id, apns_id, payload, status, created_at, updated_at, next_attempt_at, read_version)
                    VALUES (\(app), \(messageID), \(job.username), \(job.deviceID), \(job.notifier), \(job.deviceToken), \(job.topic),
                        'background', \(Int64(job.priority.rawValue)), \(job.expiration), NULL, \(StoredForm.text(of: job.apnsID)), \(job.payload), 'pending', \(now),
                        \(now), \(due), \(readVersion))
                    """, logger: logger)
            }
        }
    }
}
