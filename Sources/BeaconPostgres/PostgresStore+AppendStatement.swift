import BeaconCore
import BeaconStorage
import PostgresNIO

// A send's append as one statement: its receipt, its receivers' sequences (row locks in username order), its messages,
// their inbox rows and pending routes, as data-modifying CTEs that commit together. (Statement by statement, the same
// append was BEGIN, four or five statements and COMMIT — six or seven round trips, the receivers' rows held throughout.)
// A send with a receiver that must exist (`Delivery.required`) runs it in a transaction, which rolls back when one is
// missing; so does a recall's notice, in the recall's transaction.

/// A send's rows as the append's statements bind them, built before any sequence is known: each inbox row keeps its
/// place among its receiver's rows of the send (`offsets`, from 1), its sequence once the receiver's is reserved.
struct AppendRows {
    /// The receivers, in username order (the order their rows are locked in), and how many rows each gets.
    var receivers: [String] = []
    var amounts: [Int64] = []
    var messages:
        (
            ids: [Int64], senders: [String], recipients: [String], chatTypes: [String], types: [String], bodies: [String],
            exts: [String], timestamps: [Int64]
        ) = ([], [], [], [], [], [], [], [])
    /// postgres-nio binds arrays without NULL elements: no origin device is "" here (device ids are never empty).
    var inbox:
        (
            usernames: [String], offsets: [Int64], ids: [Int64], conversations: [String], chatTypes: [String], origins: [String],
            created: [Int64], counts: [Bool]
        ) = ([], [], [], [], [], [], [], [])
    /// Each inbox row's message and origin device.
    var entries: [(message: Message, originDevice: String?)] = []
    var routes: (ids: [Int64], created: [Int64]) = ([], [])
    /// The messages that route pushes.
    var routing: Set<UInt64> = []

    init(_ encoded: [(new: NewMessage, id: Int64, body: String, ext: String)]) {
        var counts: [String: Int64] = [:]
        for (new, id, body, ext) in encoded {
            let message = new.message
            messages.ids.append(id)
            messages.senders.append(message.from)
            messages.recipients.append(message.to)
            messages.chatTypes.append(message.chatType.rawValue)
            messages.types.append(message.type.rawValue)
            messages.bodies.append(body)
            messages.exts.append(ext)
            messages.timestamps.append(message.timestamp)
            for delivery in new.deliveries {
                counts[delivery.username, default: 0] += 1
                inbox.usernames.append(delivery.username)
                inbox.offsets.append(counts[delivery.username] ?? 1)
                inbox.ids.append(id)
                inbox.conversations.append(message.conversation(for: delivery.username).description)
                inbox.chatTypes.append(message.chatType.rawValue)
                inbox.origins.append(delivery.originDevice ?? "")
                inbox.created.append(message.timestamp)
                inbox.counts.append(message.countsAsUnread && delivery.username != message.from)
                entries.append((message, delivery.originDevice))
            }
            if new.routesPushes {
                routes.ids.append(id)
                routes.created.append(message.timestamp)
                routing.insert(message.id)
            }
        }
        receivers = counts.keys.sorted()
        amounts = receivers.map { counts[$0] ?? 0 }
    }

    /// The inbox entries of the receivers that exist, `before` holding each one's sequence before the append.
    func entries(before: [String: Int64]) -> [InboxEntry] {
        inbox.usernames.indices.compactMap { row in
            let username = inbox.usernames[row]
            guard let first = before[username] else { return nil }  // no such user
            let entry = entries[row]
            return InboxEntry(username: username, seq: first + inbox.offsets[row], message: entry.message, originDevice: entry.originDevice)
        }
    }
}

extension PostgresStore {
    /// Stores `encoded` with `AppendStatement` (and the routing inputs `request` names, when its message routes pushes):
    /// on the pool, committing on its own, or in the transaction of `connection`. A receiver that must exist
    /// (`Delivery.required`) and does not fails it with `userNotFound`, naming the first in the messages' order: only in a
    /// transaction, which rolls back.
    func append(
        _ encoded: [(new: NewMessage, id: Int64, body: String, ext: String)], app: Int64, receipt: SendReceipt?, resultsText: String,
        readingInputs request: RoutingInputsRequest?, on connection: PostgresConnection?
    ) async throws -> (AppendResult, RoutingInputsQuery.Row?) {
        let rows = AppendRows(encoded)
        let append = AppendStatement(app: app, receipt: receipt, resultsText: resultsText, rows: rows)
        let answer: AppendStatement.Answer
        var inputs: RoutingInputsQuery.Row?
        if let request, rows.routing.contains(request.messageID) {
            let statement = AppendReadingInputs(
                inputs: RoutingInputsQuery(app: app, recipients: request.recipients, scopes: request.scopes, sender: request.sender),
                append: append)
            let row = try await firstRow(statement, on: connection)
            (answer, inputs) = (row.append, row.inputs)
        } else {
            answer = try await firstRow(append, on: connection)
        }
        guard answer.stored else {
            // The receipt's reference was stored before (a retry), by a transaction committed by now: its answer.
            guard let receipt else { throw BeaconError(.internalError, "an append without a receipt stored nothing") }
            let earlier = try await sentMessages(scope: receipt.scope, reference: receipt.reference, app: app, on: connection)
            return (.repeated(earlier ?? [:]), nil)
        }
        // Receivers that do not exist are not among them (nil: none exists).
        let before = Dictionary(zip(answer.receivers ?? [], answer.befores ?? []), uniquingKeysWith: { first, _ in first })
        if connection != nil,
            let missing = encoded.lazy.flatMap(\.new.deliveries).first(where: { $0.required && before[$0.username] == nil })
        {
            throw BeaconError(.userNotFound, "user \(missing.username) does not exist")
        }
        let routed = answer.routed ? rows.routing : []
        return (.stored(rows.entries(before: before), routed: routed, inputs: nil), answer.routed ? inputs : nil)
    }

    /// The statement's one row, run on `connection`, or on the pool (retrying a deadlock's victim) when nil.
    private func firstRow<Statement: PostgresPreparedStatement>(_ statement: Statement, on connection: PostgresConnection?)
        async throws -> Statement.Row
    {
        let row =
            if let connection {
                try await connection.rows(statement, logger: logger).first
            } else {
                try await retryingDeadlocks { try await self.rows(statement).first }
            }
        guard let row else { throw BeaconError(.internalError, "the append returned no row") }
        return row
    }

    /// Runs `body` again (up to five times in all) when PostgreSQL chose it as a deadlock's victim.
    private func retryingDeadlocks<T>(_ body: () async throws -> T) async throws -> T {
        var attempt = 0
        while true {
            attempt += 1
            do {
                return try await body()
            } catch let error as PSQLError where attempt < 5 && ["40P01", "40001"].contains(error.serverInfo?[.sqlState]) {
                logger.debug("append retried", metadata: ["error": "\(String(reflecting: error))"])
            }
        }
    }

    /// The append (`AppendRows`) as data-modifying CTEs. Without a receipt, or with one whose reference is new, everything
    /// is inserted; with a reference stored before, nothing (`stored` false). A receiver that does not exist gets no row.
    /// Answers whether it stored, whether pending routes were inserted (the app has a push configuration), and each
    /// existing receiver's sequence before.
    struct AppendStatement: PostgresPreparedStatement {
        /// Its text, its parameters numbered from `$first` (the app is `$first`).
        static func text(first: Int) -> String {
            func p(_ index: Int) -> String { "$\(first + index)" }
            return """
                WITH receipt AS (
                    INSERT INTO send_receipts (app_id, scope, reference, message_ids, created_at)
                    SELECT \(p(0)), \(p(2)), \(p(3)), \(p(4)), \(p(5)) WHERE \(p(1))::boolean
                    ON CONFLICT DO NOTHING RETURNING 1),
                go AS (SELECT NOT \(p(1))::boolean OR EXISTS (SELECT 1 FROM receipt) AS yes),
                wanted AS (
                    SELECT * FROM unnest(\(p(6))::text[], \(p(7))::bigint[]) AS w(username, amount) WHERE (SELECT yes FROM go)),
                locked AS (
                    SELECT u.username FROM users u JOIN wanted w ON w.username = u.username
                    WHERE u.app_id = \(p(0)) ORDER BY u.username FOR NO KEY UPDATE OF u),
                reserved AS (
                    UPDATE users u SET inbox_seq = u.inbox_seq + w.amount FROM wanted w, locked l
                    WHERE u.app_id = \(p(0)) AND u.username = w.username AND l.username = w.username
                    RETURNING u.username, u.inbox_seq - w.amount AS before),
                stored AS (
                    INSERT INTO messages (app_id, id, sender, recipient, chat_type, type, body, ext, timestamp)
                    SELECT \(p(0)), * FROM unnest(\(p(8))::bigint[], \(p(9))::text[], \(p(10))::text[], \(p(11))::text[],
                        \(p(12))::text[], \(p(13))::text[], \(p(14))::text[], \(p(15))::bigint[])
                    WHERE (SELECT yes FROM go)),
                entries AS (
                    INSERT INTO inbox (app_id, username, seq, message_id, conversation, chat_type, origin_device, created_at, counts)
                    SELECT \(p(0)), r.u, res.before + r.k, r.i, r.c, r.t, NULLIF(r.o, ''), r.a, r.n
                    FROM unnest(\(p(16))::text[], \(p(17))::bigint[], \(p(18))::bigint[], \(p(19))::text[], \(p(20))::text[],
                        \(p(21))::text[], \(p(22))::bigint[], \(p(23))::boolean[]) AS r(u, k, i, c, t, o, a, n)
                    JOIN reserved res ON res.username = r.u),
                routes AS (
                    INSERT INTO pending_routes (app_id, message_id, created_at)
                    SELECT \(p(0)), x.id, x.created FROM unnest(\(p(24))::bigint[], \(p(25))::bigint[]) AS x(id, created)
                    WHERE (SELECT yes FROM go) AND EXISTS (SELECT 1 FROM push_configs WHERE app_id = \(p(0)))
                    RETURNING 1)
                SELECT (SELECT yes FROM go), EXISTS (SELECT 1 FROM routes),
                    (SELECT array_agg(username ORDER BY username) FROM reserved),
                    (SELECT array_agg(before ORDER BY username) FROM reserved)
                """
        }

        static let sql = text(first: 1)

        struct Answer {
            var stored: Bool
            var routed: Bool
            /// The receivers that exist and each one's sequence before (nil when none does).
            var receivers: [String]?
            var befores: [Int64]?
        }
        typealias Row = Answer

        var app: Int64
        var receipt: SendReceipt?
        var resultsText: String
        var rows: AppendRows

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 26)
            append(to: &bindings)
            return bindings
        }

        func append(to bindings: inout PostgresBindings) {
            bindings.append(app)
            bindings.append(receipt != nil)
            bindings.append(receipt?.scope ?? "")
            bindings.append(receipt?.reference ?? "")
            bindings.append(resultsText)
            bindings.append(receipt?.now ?? 0)
            bindings.append(rows.receivers)
            bindings.append(rows.amounts)
            bindings.append(rows.messages.ids)
            bindings.append(rows.messages.senders)
            bindings.append(rows.messages.recipients)
            bindings.append(rows.messages.chatTypes)
            bindings.append(rows.messages.types)
            bindings.append(rows.messages.bodies)
            bindings.append(rows.messages.exts)
            bindings.append(rows.messages.timestamps)
            bindings.append(rows.inbox.usernames)
            bindings.append(rows.inbox.offsets)
            bindings.append(rows.inbox.ids)
            bindings.append(rows.inbox.conversations)
            bindings.append(rows.inbox.chatTypes)
            bindings.append(rows.inbox.origins)
            bindings.append(rows.inbox.created)
            bindings.append(rows.inbox.counts)
            bindings.append(rows.routes.ids)
            bindings.append(rows.routes.created)
        }

        func decodeRow(_ row: PostgresRow) throws -> Row {
            let (stored, routed, receivers, befores) = try row.decode((Bool, Bool, [String]?, [Int64]?).self)
            return Answer(stored: stored, routed: routed, receivers: receivers, befores: befores)
        }
    }

    /// `AppendStatement` (its parameters from `$5`) with `RoutingInputsQuery`'s areas (`$1`–`$4`): a send's append and
    /// its routed message's routing inputs in one round trip. The areas are read as of this statement (read committed:
    /// what others committed before it; not this statement's own inserts, which they do not read).
    struct AppendReadingInputs: PostgresPreparedStatement {
        static let sql = AppendStatement.text(first: 5) + ",\n" + RoutingInputsQuery.columns

        struct Row {
            var append: AppendStatement.Answer
            var inputs: RoutingInputsQuery.Row
        }
        var inputs: RoutingInputsQuery
        var append: AppendStatement

        func makeBindings() throws -> PostgresBindings {
            var bindings = try inputs.makeBindings()
            append.append(to: &bindings)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row {
            let (stored, routed, receivers, befores, notifiers, policy, templates, settings, profiles, senderNickname, bindings) =
                try row.decode((Bool, Bool, [String]?, [Int64]?, String?, String?, String?, String?, String?, String?, String?).self)
            return Row(
                append: AppendStatement.Answer(stored: stored, routed: routed, receivers: receivers, befores: befores),
                inputs: RoutingInputsQuery.Row(
                    notifiers: notifiers, policy: policy, templates: templates, settings: settings, profiles: profiles,
                    senderNickname: senderNickname, bindings: bindings))
        }
    }
}
