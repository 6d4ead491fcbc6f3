import BeaconCore
import BeaconStorage
import PostgresNIO

extension PostgresStore {
    public func createGroup(_ group: GroupRecord, members: [String]) async throws {
        try await transaction { connection in
            try await Self.mapConstraint("group \(group.id) already exists") {
                try await connection.query(
                    """
                    INSERT INTO chat_groups (app_id, id, name, description, owner, max_users, created_at)
                    VALUES (\(group.appID), \(group.id), \(group.name), \(group.description), \(group.owner), \(group.maxUsers), \(group.createdAt))
                    """, logger: logger)
            }
            let everyone = Array(Set(members + [group.owner])).filter { !$0.isEmpty }.sorted()
            try await connection.query(
                """
                INSERT INTO group_members (app_id, group_id, username, joined_at)
                SELECT \(group.appID), \(group.id), member, \(group.createdAt) FROM unnest(\(everyone)::text[]) AS member
                ON CONFLICT DO NOTHING
                """, logger: logger)
        }
    }

    public func group(_ id: String, app: Int64) async throws -> GroupRecord? {
        try await rows(
            "SELECT app_id, id, name, description, owner, max_users, created_at FROM chat_groups WHERE app_id = \(app) AND id = \(id)"
        ).first.map { row in
            GroupRecord(
                appID: try row["app_id"].decode(Int64.self), id: try row["id"].decode(String.self),
                name: try row["name"].decode(String.self),
                description: try row["description"].decode(String.self), owner: try row["owner"].decode(String.self),
                maxUsers: try row["max_users"].decode(Int.self), createdAt: try row["created_at"].decode(Int64.self))
        }
    }

    public func groupMembers(_ id: String, app: Int64) async throws -> [String] {
        try await rows("SELECT username FROM group_members WHERE app_id = \(app) AND group_id = \(id) ORDER BY username COLLATE \"C\"").map
        {
            try $0["username"].decode(String.self)
        }
    }

    public func addGroupMember(_ username: String, group: String, app: Int64, now: Int64) async throws -> Bool {
        try await execute(
            """
            INSERT INTO group_members (app_id, group_id, username, joined_at) VALUES (\(app), \(group), \(username), \(now))
            ON CONFLICT DO NOTHING RETURNING 1
            """) > 0
    }

    public func removeGroupMember(_ username: String, group: String, app: Int64) async throws -> Bool {
        try await execute("DELETE FROM group_members WHERE app_id = \(app) AND group_id = \(group) AND username = \(username) RETURNING 1")
            > 0
    }

    public func deleteGroup(_ id: String, app: Int64) async throws -> Bool {
        try await transaction { connection in
            try await connection.query("DELETE FROM group_members WHERE app_id = \(app) AND group_id = \(id)", logger: logger)
            let deleted = try await connection.query(
                "DELETE FROM chat_groups WHERE app_id = \(app) AND id = \(id) RETURNING 1", logger: logger
            ).collect()
            return !deleted.isEmpty
        }
    }

    public func groups(of username: String, app: Int64) async throws -> [String] {
        try await rows(
            "SELECT group_id FROM group_members WHERE app_id = \(app) AND username = \(username) ORDER BY group_id COLLATE \"C\""
        ).map { try $0["group_id"].decode(String.self) }
    }
}
