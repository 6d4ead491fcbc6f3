import BeaconCore
import BeaconStorage
import GRDB

extension SQLiteStore {
    public func createGroup(_ group: GroupRecord, members: [String]) async throws {
        try await write { db in
            try Self.mapConstraint("group \(group.id) already exists") {
                try db.execute(
                    sql: """
                        INSERT INTO chat_groups (app_id, id, name, description, owner, max_users, created_at)
                        VALUES (?, ?, ?, ?, ?, ?, ?)
                        """,
                    arguments: [group.appID, group.id, group.name, group.description, group.owner, group.maxUsers, group.createdAt])
            }
            let insert = try db.cachedStatement(
                sql: "INSERT INTO group_members (app_id, group_id, username, joined_at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING")
            for member in Set(members + [group.owner]) where !member.isEmpty {
                try insert.execute(arguments: [group.appID, group.id, member, group.createdAt])
            }
        }
    }

    public func group(_ id: String, app: Int64) async throws -> GroupRecord? {
        try await read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM chat_groups WHERE app_id = ? AND id = ?", arguments: [app, id]).map { row in
                GroupRecord(
                    appID: try row.decode(forColumn: "app_id"), id: try row.decode(forColumn: "id"),
                    name: try row.decode(forColumn: "name"),
                    description: try row.decode(forColumn: "description"), owner: try row.decode(forColumn: "owner"),
                    maxUsers: try row.decode(forColumn: "max_users"), createdAt: try row.decode(forColumn: "created_at"))
            }
        }
    }

    public func groupMembers(_ id: String, app: Int64) async throws -> [String] {
        try await read { db in
            try String.fetchAll(
                db, sql: "SELECT username FROM group_members WHERE app_id = ? AND group_id = ? ORDER BY username", arguments: [app, id])
        }
    }

    public func addGroupMember(_ username: String, group: String, app: Int64, now: Int64) async throws -> Bool {
        try await write { db in
            try db.execute(
                sql: "INSERT INTO group_members (app_id, group_id, username, joined_at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                arguments: [app, group, username, now])
            return db.changesCount > 0
        }
    }

    public func removeGroupMember(_ username: String, group: String, app: Int64) async throws -> Bool {
        try await write { db in
            try db.execute(
                sql: "DELETE FROM group_members WHERE app_id = ? AND group_id = ? AND username = ?", arguments: [app, group, username])
            return db.changesCount > 0
        }
    }

    public func deleteGroup(_ id: String, app: Int64) async throws -> Bool {
        try await write { db in
            try db.execute(sql: "DELETE FROM group_members WHERE app_id = ? AND group_id = ?", arguments: [app, id])
            try db.execute(sql: "DELETE FROM chat_groups WHERE app_id = ? AND id = ?", arguments: [app, id])
            return db.changesCount > 0
        }
    }

    public func groups(of username: String, app: Int64) async throws -> [String] {
        try await read { db in
            try String.fetchAll(
                db, sql: "SELECT group_id FROM group_members WHERE app_id = ? AND username = ? ORDER BY group_id",
                arguments: [app, username])
        }
    }
}
