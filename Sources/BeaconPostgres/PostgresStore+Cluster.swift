import BeaconCore
import BeaconStorage
import PostgresNIO

/// Several nodes on one database: membership, presence, mailboxes and notifications.
extension PostgresStore: ClusterStore {
    /// No slot is free: 1024 nodes are live.
    public struct ClusterFull: Error, CustomStringConvertible {
        public var description: String { "1024 nodes are live on this database: no message-id slot is free" }
    }

    /// The advisory lock joins take turns under ("beacon2"), so that two nodes starting together get different slots.
    static let joinLock: Int64 = 0x6265_6163_6f6e_32

    /// A rescuer whose previous beat is older than this (ms) was held up itself: it declares nobody dead this round.
    static let steadyBeat: Int64 = 2500

    /// The channel a node's notifications arrive on.
    static func channel(of node: Int64) -> String { "beacon_node_\(node)" }

    // MARK: Membership

    /// Milliseconds since 1970 on the database's clock.
    static let databaseNow = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"

    public func joinCluster(name: String) async throws -> ClusterNode {
        let epoch = Int64.random(in: 1...Int64.max)
        return try await transaction { connection in
            try await connection.query("SELECT pg_advisory_xact_lock(\(Self.joinLock))", logger: logger)
            // A random free slot rather than the lowest: a slot freed by a node just declared dead is unlikely to be taken
            // again at once (its last ids and the new holder's first ones share the node bits).
            let rows = try await connection.query(
                """
                INSERT INTO cluster_nodes (epoch, name, slot, started_at, heartbeat_at)
                SELECT \(epoch), \(name), s, \(unescaped: Self.databaseNow), \(unescaped: Self.databaseNow) FROM generate_series(0, 1023) AS s
                WHERE s NOT IN (SELECT slot FROM cluster_nodes) ORDER BY random() LIMIT 1
                RETURNING slot
                """, logger: logger
            ).collect()
            guard let slot = try rows.first?.decode(Int.self) else { throw ClusterFull() }
            return try Self.node(epoch: epoch, name: name, slot: slot)
        }
    }

    public func heartbeat(_ node: ClusterNode) async throws -> Int? {
        // A heartbeat never undoes a leave (0). The others are counted in the statement's snapshot, taken after the call.
        try await rows(
            """
            UPDATE cluster_nodes SET heartbeat_at = \(unescaped: Self.databaseNow) WHERE epoch = \(node.epoch) AND heartbeat_at > 0
            RETURNING (SELECT count(*) FROM cluster_nodes WHERE epoch <> \(node.epoch) AND heartbeat_at > 0) AS others
            """
        ).first.map { Int(try $0["others"].decode(Int64.self)) }
    }

    public func leaveCluster(_ node: ClusterNode) async throws {
        try await execute("UPDATE cluster_nodes SET heartbeat_at = 0 WHERE epoch = \(node.epoch)")
    }

    public func removeDeadNodes(silentFor silence: Int64, by rescuer: ClusterNode) async throws -> DeadNodes? {
        try await transaction { connection in
            // The rescuer beats first, and reads how late its previous beat was: a rescuer whose own beats were held up (a
            // stalled database, a saturated pool) declares nobody dead this time, as the others were likely held up too.
            let previous = try await connection.query(
                """
                WITH previous AS (SELECT heartbeat_at FROM cluster_nodes WHERE epoch = \(rescuer.epoch) AND heartbeat_at > 0 FOR UPDATE)
                UPDATE cluster_nodes SET heartbeat_at = \(unescaped: Self.databaseNow) FROM previous WHERE epoch = \(rescuer.epoch)
                RETURNING \(unescaped: Self.databaseNow) - previous.heartbeat_at AS late
                """, logger: logger
            ).collect()
            guard let late = try previous.first?.decode(Int64.self) else { return nil }
            guard late <= Self.steadyBeat else { return DeadNodes(nodes: [], died: [], users: []) }
            // Each dead node is locked by the caller that cleans up after it; another waits, then finds it gone. The wait is
            // bounded: a transaction stuck holding a node's row (its node partitioned away mid-connect) is ended by
            // `idle_in_transaction_session_timeout`, and this rescue is tried again a second later.
            try await connection.query("SET LOCAL lock_timeout = '2s'", logger: logger)
            var dead: [ClusterNode] = []
            var died: [ClusterNode] = []
            for row in try await connection.query(
                """
                SELECT epoch, name, slot, heartbeat_at FROM cluster_nodes WHERE heartbeat_at < \(unescaped: Self.databaseNow) - \(silence)
                ORDER BY epoch FOR UPDATE
                """, logger: logger
            ).collect() {
                let (epoch, name, slot, heartbeat) = try row.decode((Int64, String, Int, Int64).self)
                let node = try Self.node(epoch: epoch, name: name, slot: slot)
                dead.append(node)
                if heartbeat > 0 { died.append(node) }
            }
            guard !dead.isEmpty else { return DeadNodes(nodes: [], died: [], users: []) }
            let epochs = dead.map(\.epoch)
            try await connection.query(
                """
                UPDATE push_jobs SET claimed_until = 0, claimed_by = 0
                WHERE claimed_by = ANY(\(epochs)) AND status = 'pending' AND claimed_by != 0
                """, logger: logger)
            var users: [(app: Int64, username: String)] = []
            var seen: Set<String> = []
            for row in try await connection.query(
                "DELETE FROM device_presence WHERE node_epoch = ANY(\(epochs)) RETURNING app_id, username", logger: logger
            ).collect() {
                let (app, username) = try row.decode((Int64, String).self)
                if seen.insert("\(app)/\(username)").inserted { users.append((app, username)) }
            }
            try await connection.query("DELETE FROM node_mailbox WHERE node_epoch = ANY(\(epochs))", logger: logger)
            try await connection.query("DELETE FROM cluster_nodes WHERE epoch = ANY(\(epochs))", logger: logger)
            return DeadNodes(nodes: dead, died: died, users: users)
        }
    }

    public func liveNodes() async throws -> [ClusterNode] {
        try await rows("SELECT epoch, name, slot FROM cluster_nodes WHERE heartbeat_at > 0 ORDER BY started_at, epoch").map { row in
            try Self.node(
                epoch: try row["epoch"].decode(Int64.self), name: try row["name"].decode(String.self),
                slot: try row["slot"].decode(Int.self))
        }
    }

    /// A node read from `cluster_nodes` (a slot out of range is a corrupt row: an error, not a trap).
    private static func node(epoch: Int64, name: String, slot: Int) throws -> ClusterNode {
        guard let slot = UInt16(exactly: slot), slot < 1024 else {
            throw BeaconError(.internalError, "cluster_nodes holds slot \(slot) for node \(name); slots are 0-1023")
        }
        return ClusterNode(epoch: epoch, name: name, slot: slot)
    }

    // MARK: Presence

    public func connect(_ device: DeviceKey, node: Int64, connection id: Int64, openedAgo: Int64) async throws -> ConnectOutcome {
        try await transaction { transaction in
            // The node must still be live, and stays so until commit: a rescuer's FOR UPDATE waits for this lock, so a node
            // declared dead can never leave a presence row behind.
            let live =
                try await transaction.query(
                    "SELECT 1 FROM cluster_nodes WHERE epoch = \(node) AND heartbeat_at > 0 FOR KEY SHARE", logger: logger
                ).collect().count == 1
            guard live else { return .nodeGone }
            // One connection of a device at a time: two first connections would otherwise both insert, neither seeing the other.
            let lockKey = "presence/\(device.app)/\(device.username)/\(device.deviceID)"
            try await transaction.query("SELECT pg_advisory_xact_lock(hashtextextended(\(lockKey), 0))", logger: logger)
            let openedAt =
                try await transaction.query(
                    "SELECT \(unescaped: Self.databaseNow) - \(max(0, openedAgo)) AS opened_at", logger: logger
                ).collect().first?.decode(Int64.self) ?? 0
            let earlier = try await transaction.query(
                """
                SELECT node_epoch, connection_id, connected_at FROM device_presence
                WHERE app_id = \(device.app) AND username = \(device.username) AND device_id = \(device.deviceID)
                """, logger: logger
            ).collect().first.map { row in
                let (node, id, openedAt) = try row.decode((Int64, Int64, Int64).self)
                return DeviceConnection(node: node, id: id, openedAt: openedAt)
            }
            if let earlier, earlier.node == node, earlier.id == id { return .connected(replacing: nil) }
            if let earlier, earlier.openedAt > openedAt { return .superseded(by: earlier) }
            try await transaction.query(
                """
                INSERT INTO device_presence (app_id, username, device_id, node_epoch, connection_id, connected_at)
                VALUES (\(device.app), \(device.username), \(device.deviceID), \(node), \(id), \(openedAt))
                ON CONFLICT (app_id, username, device_id) DO UPDATE
                SET node_epoch = excluded.node_epoch, connection_id = excluded.connection_id, connected_at = excluded.connected_at
                """, logger: logger)
            return .connected(replacing: earlier)
        }
    }

    public func disconnect(_ device: DeviceKey, node: Int64, connection id: Int64) async throws -> Bool {
        try await execute(
            """
            DELETE FROM device_presence
            WHERE app_id = \(device.app) AND username = \(device.username) AND device_id = \(device.deviceID)
                AND node_epoch = \(node) AND connection_id = \(id)
            RETURNING 1
            """) == 1
    }

    public func reconcilePresence(node: Int64, live: @Sendable () -> Set<Int64>) async throws -> [DeviceKey] {
        // Read before `live` is asked: each row read was committed after its connection registered on the node, so a
        // connection missing from `live` (asked afterwards) had ended there.
        let recorded = try await rows("SELECT connection_id FROM device_presence WHERE node_epoch = \(node)").map {
            try $0["connection_id"].decode(Int64.self)
        }
        guard !recorded.isEmpty else { return [] }
        let ended = Set(recorded).subtracting(live())
        guard !ended.isEmpty else { return [] }
        return try await rows(
            """
            DELETE FROM device_presence WHERE node_epoch = \(node) AND connection_id = ANY(\(ended.sorted()))
            RETURNING app_id, username, device_id
            """
        ).map { row in
            DeviceKey(
                app: try row["app_id"].decode(Int64.self), username: try row["username"].decode(String.self),
                deviceID: try row["device_id"].decode(String.self))
        }
    }

    public func connectedDeviceCount(app: Int64) async throws -> Int {
        Int(try await rows("SELECT COUNT(*) AS n FROM device_presence WHERE app_id = \(app)").first?["n"].decode(Int64.self) ?? 0)
    }

    public func connections(of usernames: [String], app: Int64) async throws -> [String: [String: DeviceConnection]] {
        guard !usernames.isEmpty else { return [:] }
        var found: [String: [String: DeviceConnection]] = [:]
        for (username, device, node, id, openedAt) in try await rows(Connections(app: app, usernames: usernames)) {
            found[username, default: [:]][device] = DeviceConnection(node: node, id: id, openedAt: openedAt)
        }
        return found
    }

    // MARK: Mailboxes

    /// The target nodes are share-locked while the letters go in: a rescuer deleting a node's mailbox waits, so no letter
    /// is left behind for a node that is gone.
    public func post(_ letters: [Letter]) async throws {
        guard !letters.isEmpty else { return }
        try await execute(
            """
            WITH live AS (
                SELECT epoch FROM cluster_nodes WHERE epoch = ANY(\(letters.map(\.node))) AND heartbeat_at > 0 FOR KEY SHARE)
            INSERT INTO node_mailbox (node_epoch, body)
            SELECT n, b FROM unnest(\(letters.map(\.node))::bigint[], \(letters.map(\.body))::text[]) WITH ORDINALITY AS l(n, b, o)
            WHERE n IN (SELECT epoch FROM live) ORDER BY o
            """)
    }

    public func takeLetters(for node: Int64, limit: Int) async throws -> [String] {
        // No cursor: what is taken is deleted, so a letter that commits late is taken by the next call, never skipped.
        try await rows(
            """
            WITH taken AS (
                DELETE FROM node_mailbox WHERE id IN (
                    SELECT id FROM node_mailbox WHERE node_epoch = \(node) ORDER BY id LIMIT \(max(limit, 0)) FOR UPDATE SKIP LOCKED)
                RETURNING id, body)
            SELECT body FROM taken ORDER BY id
            """
        ).map { try $0["body"].decode(String.self) }
    }

    public func notify(_ notifications: [Letter]) async throws {
        guard !notifications.isEmpty else { return }
        // A function scan yields the arrays' elements in order, and pg_notify queues its notifications in call order.
        try await execute(
            """
            SELECT pg_notify(c, b) FROM unnest(\(notifications.map { Self.channel(of: $0.node) })::text[],
                \(notifications.map(\.body))::text[]) AS n(c, b)
            """)
    }

    public func listen(for node: Int64, _ onSignal: @escaping @Sendable (NodeSignal) -> Void) async throws {
        // A pool connection kept for as long as this listens: when it fails, the sequence throws and the pool replaces it.
        // Closed whenever listening ends, before it goes back to the pool (which then drops it): it may be half-open (its
        // caller found it silent), with a LISTEN still in flight, and would hang whoever took it next.
        try await client.withConnection { connection in
            do {
                try await connection.listen(on: Self.channel(of: node)) { notifications in
                    onSignal(.listening)
                    for try await notification in notifications {
                        onSignal(notification.payload.isEmpty ? .wakeup : .notice(notification.payload))
                    }
                }
            } catch {
                try? await connection.close()
                throw error
            }
            try? await connection.close()
        }
    }
}
