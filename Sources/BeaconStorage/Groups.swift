import BeaconCore

/// Chat groups and their members.
public protocol GroupStore: Sendable {
    /// Stores the group with its members and its owner (an empty owner, a group only the app owns, is no member).
    func createGroup(_ group: GroupRecord, members: [String]) async throws
    func group(_ id: String, app: Int64) async throws -> GroupRecord?
    /// Usernames of the group's members (the owner included), sorted.
    func groupMembers(_ id: String, app: Int64) async throws -> [String]
    /// False if the user was already a member.
    func addGroupMember(_ username: String, group: String, app: Int64, now: Int64) async throws -> Bool
    /// False if the user was not a member.
    func removeGroupMember(_ username: String, group: String, app: Int64) async throws -> Bool
    /// Deletes the group and its memberships (the messages it had stay in their receivers' inboxes). False if there was none.
    func deleteGroup(_ id: String, app: Int64) async throws -> Bool
    /// The ids of the groups the user is a member of, sorted.
    func groups(of username: String, app: Int64) async throws -> [String]
}

/// A chat group as stored.
public struct GroupRecord: Sendable, Hashable {
    public var appID: Int64
    public var id: String
    public var name: String
    public var description: String
    public var owner: String
    public var maxUsers: Int
    public var createdAt: Int64

    public init(appID: Int64, id: String, name: String, description: String, owner: String, maxUsers: Int, createdAt: Int64) {
        self.appID = appID
        self.id = id
        self.name = name
        self.description = description
        self.owner = owner
        self.maxUsers = maxUsers
        self.createdAt = createdAt
    }
}
