import BeaconStorage
import PostgresNIO

// Recording a route's jobs, prepared. A route whose jobs need no badge (every one skipped, or payloads without a badge:
// the common case of a receiver online) is recorded in one statement, its pending route removed in the same one: one
// round trip instead of a transaction's four.

extension PostgresStore {
    /// The jobs of a route as the statements bind them: payloads shared by several jobs as contents stored once
    /// (`PushContents`), each such job with its receiver's badge; the badge spliced into a payload stored whole.
    /// postgres-nio binds arrays without NULL elements: "" and -1 stand for none (no collapse id or reason is empty).
    struct JobColumns {
        var usernames: [String] = []
        var devices: [String] = []
        var notifiers: [String] = []
        var tokens: [String] = []
        var topics: [String] = []
        var types: [String] = []
        var priorities: [Int64] = []
        var expirations: [Int64] = []
        var collapseIDs: [String] = []
        var apnsIDs: [String] = []
        var payloads: [String] = []
        var statuses: [String] = []
        var reasons: [String] = []
        /// The content each job refers to, counted from 1 in `heads`; 0 for none.
        var contents: [Int64] = []
        /// The receiver's badge, for a job that refers to a content with a badge; -1 otherwise.
        var jobBadges: [Int64] = []
        var heads: [String] = []
        var badgeOffsets: [Int64] = []

        init(_ jobs: [NewPushJob], badges: [String: Int]) {
            let shared = PushContents(jobs)
            heads = shared.contents.map(\.head)
            badgeOffsets = shared.contents.map { $0.badgeOffset.map(Int64.init) ?? -1 }
            for (job, reference) in zip(jobs, shared.references) {
                let badge = badges[job.username] ?? 0
                usernames.append(job.username)
                devices.append(job.deviceID)
                notifiers.append(job.notifier)
                tokens.append(job.deviceToken)
                topics.append(job.topic)
                types.append(job.pushType.rawValue)
                priorities.append(Int64(job.priority.rawValue))
                expirations.append(job.expiration)
                collapseIDs.append(job.collapseID ?? "")
                apnsIDs.append(StoredForm.text(of: job.apnsID))
                payloads.append(reference == nil ? job.payload(withBadge: badge) : "")
                contents.append(reference.map { Int64($0) + 1 } ?? 0)
                jobBadges.append(reference != nil && job.awaitsBadge ? Int64(badge) : -1)
                statuses.append(job.skipReason == nil ? "pending" : "skipped")
                reasons.append(job.skipReason ?? "")
            }
        }

        /// Binds $1 app, $2 message id, $3 now, then the columns as $4…$18, the contents as $19 and $20.
        func bindings(app: Int64, messageID: Int64, now: Int64) -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 22)
            bindings.append(app)
            bindings.append(messageID)
            bindings.append(now)
            bindings.append(usernames)
            bindings.append(devices)
            bindings.append(notifiers)
            bindings.append(tokens)
            bindings.append(topics)
            bindings.append(types)
            bindings.append(priorities)
            bindings.append(expirations)
            bindings.append(collapseIDs)
            bindings.append(apnsIDs)
            bindings.append(payloads)
            bindings.append(statuses)
            bindings.append(reasons)
            bindings.append(contents)
            bindings.append(jobBadges)
            bindings.append(heads)
            bindings.append(badgeOffsets)
            return bindings
        }

        /// A decided job's receiver still holds its message: one deleted since the decision holds none, nor does a user
        /// created again under the name (another user).
        static let held = "EXISTS (SELECT 1 FROM inbox i WHERE i.app_id = $1 AND i.message_id = $2 AND i.username = j.u)"

        /// Common table expressions that insert the jobs bound by `bindings`, but for receivers deleted since the route was
        /// decided, and the contents the inserted jobs refer to; each receiver's row is key-share locked, so a deletion
        /// either finishes first (no job) or waits and deletes the jobs too. `condition` is appended to the jobs' WHERE.
        /// (The contents' ids are drawn first, so that the jobs can refer to them in the same statement.)
        static func insert(where condition: String) -> String {
            """
            contents AS MATERIALIZED (
                SELECT nextval('push_contents_id_seq') AS id, c.head, NULLIF(c.badge_offset, -1) AS badge_offset, c.k
                FROM unnest($19::text[], $20::bigint[]) WITH ORDINALITY AS c(head, badge_offset, k)),
            inserted AS (
                INSERT INTO push_jobs (app_id, message_id, username, device_id, notifier, device_token, topic, push_type, priority,
                    expiration, collapse_id, apns_id, payload, content_id, badge, status, last_reason, created_at, updated_at,
                    next_attempt_at)
                SELECT $1, $2, j.u, j.d, j.n, j.t, j.topic, j.type, j.p, j.e, NULLIF(j.c, ''), j.a, j.payload, contents.id,
                    NULLIF(j.b, -1), j.s, NULLIF(j.r, ''), $3, $3, $3
                FROM unnest($4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::bigint[], $11::bigint[],
                    $12::text[], $13::text[], $14::text[], $15::text[], $16::text[], $17::bigint[], $18::bigint[]) WITH ORDINALITY
                    AS j(u, d, n, t, topic, type, p, e, c, a, payload, s, r, content, b, o)
                JOIN users ON users.app_id = $1 AND users.username = j.u
                LEFT JOIN contents ON contents.k = j.content
                WHERE \(condition)
                ORDER BY j.o  -- ids in the route's order: a device's pushes are sent in id order
                FOR KEY SHARE OF users
                RETURNING content_id),
            stored_contents AS (
                INSERT INTO push_contents (id, app_id, message_id, head, badge_offset)
                SELECT id, $1, $2, head, badge_offset FROM contents WHERE id IN (SELECT content_id FROM inserted))
            """
        }
    }

    /// A route's jobs, in the transaction that records it: with `decided`, only those whose receiver still holds the
    /// message (`JobColumns.held`).
    struct InsertJobs: PostgresPreparedStatement {
        static let sql = "WITH \(JobColumns.insert(where: "(NOT $21::bool OR \(JobColumns.held))")) SELECT 1"
        typealias Row = Void
        var app: Int64
        var messageID: Int64
        var now: Int64
        var decided: Bool
        var columns: JobColumns

        func makeBindings() throws -> PostgresBindings {
            var bindings = columns.bindings(app: app, messageID: messageID, now: now)
            bindings.append(decided)
            return bindings
        }
        func decodeRow(_ row: PostgresRow) throws -> Row {}
    }

    /// Which part of a pending route a decision records (`PushRoute.Replacing.pendingRoute`).
    struct RoutePart {
        /// The route's progress the part starts after; nil at its start.
        var after: String?
        /// The part's last recipient, the route's progress once it is recorded; nil for the route's last part.
        var through: String?

        /// Common table expressions that move the pending route of $1 (app) and $2 (message) on from progress `$after` to
        /// `$through` at `$now`, its age starting again (its last part removes it), if its progress is still `$after`;
        /// `moved` has a row when they did.
        static func movingOn(now: Int, after: Int, through: Int) -> String {
            """
            removed AS (DELETE FROM pending_routes WHERE app_id = $1 AND message_id = $2
                AND routed_through IS NOT DISTINCT FROM $\(after)::text AND $\(through)::text IS NULL RETURNING 1),
            progressed AS (UPDATE pending_routes SET routed_through = $\(through)::text, created_at = $\(now)::bigint
                WHERE app_id = $1 AND message_id = $2
                AND routed_through IS NOT DISTINCT FROM $\(after)::text AND $\(through)::text IS NOT NULL RETURNING 1),
            moved AS (SELECT 1 AS one FROM removed UNION ALL SELECT 1 FROM progressed)
            """
        }

        func append(to bindings: inout PostgresBindings) {
            for name in [after, through] {
                if let name { bindings.append(name) } else { bindings.appendNull() }
            }
        }
    }

    /// Moves the message's pending route on (`RoutePart.movingOn`): a row when it did.
    struct MovePendingRoute: PostgresPreparedStatement {
        static let sql = "WITH \(RoutePart.movingOn(now: 3, after: 4, through: 5)) SELECT one FROM moved"
        typealias Row = Int32
        var app: Int64
        var messageID: Int64
        var now: Int64
        var part: RoutePart

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 5)
            bindings.append(app)
            bindings.append(messageID)
            bindings.append(now)
            part.append(to: &bindings)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }

    /// Moves the message's pending route on and, if it was where the part starts (nobody recorded the part first),
    /// inserts the jobs: a row when it was.
    struct RecordPendingRoute: PostgresPreparedStatement {
        static let sql = """
            WITH \(RoutePart.movingOn(now: 3, after: 21, through: 22)),
            \(JobColumns.insert(where: "EXISTS (SELECT 1 FROM moved) AND \(JobColumns.held)"))
            SELECT one FROM moved
            """
        typealias Row = Int32
        var app: Int64
        var messageID: Int64
        var now: Int64
        var part: RoutePart
        var columns: JobColumns

        func makeBindings() throws -> PostgresBindings {
            var bindings = columns.bindings(app: app, messageID: messageID, now: now)
            part.append(to: &bindings)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }
}
