import BeaconStorage
import PostgresNIO

/// Several nodes on one database: membership, presence, mailboxes and their wake-ups.
extension PostgresStore: ClusterStore {
    /// No slot is free: 1024 nodes are live.
    public struct ClusterFull: Error, CustomStringConvertible {
        public var description: String { "1024 nodes are live on this database: no message-id slot is free" }
    }

    /// The advisory lock joins take turns under ("beacon2"), so that two nodes starting together get different slots.
    static let joinLock: Int64 = 0x6265_6163_6f6e_32

    /// The channel a node's wake-ups arrive on.
    static func wakeupChannel(of node: Int64) -> String { "beacon_node_\(node)" }

    // MARK: Membership

    /// Milliseconds since 1970 on the database's clock.
    static let databaseNow = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"

    public func joinCluster(name: String) async throws -> ClusterNode {
        let epoch = Int64.random(in: 1...Int64.max)
        return try await transaction { connection in
            try await connection.query("SELECT pg_advisory_xact_lock(\(Self.joinLock))", logger: logger)
            let rows = try await connection.query(
                """
                INSERT INTO cluster_nodes (epoch, name, slot, started_at, heartbeat_at)
                SELECT \(epoch), \(name), s, \(unescaped: Self.databaseNow), \(unescaped: Self.databaseNow) FROM generate_series(0, 1023) AS s
                WHERE s NOT IN (SELECT slot FROM cluster_nodes) ORDER BY s LIMIT 1
                RETURNING slot
                """, logger: logger
            ).collect()
            guard let slot = try rows.first?.decode(Int.self) else { throw ClusterFull() }
            return ClusterNode(epoch: epoch, name: name, slot: UInt16(slot))
        }
    }

    public func heartbeat(_ node: ClusterNode) async throws -> Bool {
        // A heartbeat never undoes a leave (0).
        try await execute(
            """
            UPDATE cluster_nodes SET heartbeat_at = \(unescaped: Self.databaseNow) WHERE epoch = \(node.epoch) AND heartbeat_at > 0
            RETURNING 1
            """) == 1
    }

    public func leaveCluster(_ node: ClusterNode) async throws {
        try await execute("UPDATE cluster_nodes SET heartbeat_at = 0 WHERE epoch = \(node.epoch)")
    }

    public func removeDeadNodes(silentFor silence: Int64) async throws -> DeadNodes {
        try await transaction { connection in
            // Each dead node is locked by the one caller that cleans up after it; the others skip it.
            let dead = try await connection.query(
                """
                SELECT epoch, name, slot FROM cluster_nodes WHERE heartbeat_at < \(unescaped: Self.databaseNow) - \(silence)
                ORDER BY epoch FOR UPDATE SKIP LOCKED
                """, logger: logger
            ).collect().map { row in
                let (epoch, name, slot) = try row.decode((Int64, String, Int).self)
                return ClusterNode(epoch: epoch, name: name, slot: UInt16(slot))
            }
            guard !dead.isEmpty else { return DeadNodes(nodes: [], users: []) }
            let epochs = dead.map(\.epoch)
            try await connection.query(
                """
                UPDATE push_jobs SET claimed_until = 0, claimed_by = 0
                WHERE claimed_by = ANY(\(epochs)) AND status = 'pending'
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
            return DeadNodes(nodes: dead, users: users)
        }
    }

    public func liveNodes() async throws -> [ClusterNode] {
        try await rows("SELECT epoch, name, slot FROM cluster_nodes WHERE heartbeat_at > 0 ORDER BY started_at, epoch").map { row in
            ClusterNode(
                epoch: try row["epoch"].decode(Int64.self), name: try row["name"].decode(String.self),
                slot: UInt16(try row["slot"].decode(Int.self)))
        }
    }

    // MARK: Presence

    public func connect(_ device: DeviceKey, through connection: DeviceConnection, now: Int64) async throws -> DeviceConnection? {
        // The row is locked by the upsert, so the old values are read in the same statement.
        let rows = try await rows(
            """
            WITH old AS (
                SELECT node_epoch, connection_id FROM device_presence
                WHERE app_id = \(device.app) AND username = \(device.username) AND device_id = \(device.deviceID) FOR UPDATE),
            upserted AS (
                INSERT INTO device_presence (app_id, username, device_id, node_epoch, connection_id, connected_at)
                VALUES (\(device.app), \(device.username), \(device.deviceID), \(connection.node), \(connection.id), \(now))
                ON CONFLICT (app_id, username, device_id) DO UPDATE
                SET node_epoch = excluded.node_epoch, connection_id = excluded.connection_id, connected_at = excluded.connected_at
                RETURNING 1)
            SELECT old.node_epoch, old.connection_id FROM old, upserted
            """)
        guard let row = rows.first else { return nil }
        let node = try row["node_epoch"].decode(Int64.self)
        let id = try row["connection_id"].decode(Int64.self)
        return node == connection.node && id == connection.id ? nil : DeviceConnection(node: node, id: id)
    }

    public func disconnect(_ device: DeviceKey, through connection: DeviceConnection) async throws -> Bool {
        try await execute(
            """
            DELETE FROM device_presence
            WHERE app_id = \(device.app) AND username = \(device.username) AND device_id = \(device.deviceID)
                AND node_epoch = \(connection.node) AND connection_id = \(connection.id)
            RETURNING 1
            """) == 1
    }

    public func connections(of usernames: [String], app: Int64) async throws -> [String: [String: DeviceConnection]] {
        guard !usernames.isEmpty else { return [:] }
        var found: [String: [String: DeviceConnection]] = [:]
        for row in try await rows(
            """
            SELECT username, device_id, node_epoch, connection_id FROM device_presence
            WHERE app_id = \(app) AND username = ANY(\(usernames))
            """)
        {
            found[try row["username"].decode(String.self), default: [:]][try row["device_id"].decode(String.self)] = DeviceConnection(
                node: try row["node_epoch"].decode(Int64.self), id: try row["connection_id"].decode(Int64.self))
        }
        return found
    }

    // MARK: Mailboxes

    public func post(_ letters: [Letter]) async throws {
        guard !letters.isEmpty else { return }
        try await execute(
            """
            INSERT INTO node_mailbox (node_epoch, body)
            SELECT n, b FROM unnest(\(letters.map(\.node))::bigint[], \(letters.map(\.body))::text[]) WITH ORDINALITY AS l(n, b, o) ORDER BY o
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

    public func wake(_ nodes: Set<Int64>) async throws {
        guard !nodes.isEmpty else { return }
        try await execute("SELECT pg_notify(c, '') FROM unnest(\(nodes.sorted().map(Self.wakeupChannel))::text[]) AS c")
    }

    public func listenForWakeups(of node: Int64, _ onWakeup: @escaping @Sendable () -> Void) async throws {
        // A pool connection kept for as long as this listens: when it fails, the sequence throws and the pool replaces it.
        try await client.withConnection { connection in
            try await connection.listen(on: Self.wakeupChannel(of: node)) { notifications in
                onWakeup()  // whatever was posted while nobody listened
                for try await _ in notifications { onWakeup() }
            }
        }
    }
}
