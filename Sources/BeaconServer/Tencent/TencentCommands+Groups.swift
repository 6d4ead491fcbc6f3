import BeaconCore
import BeaconStorage
import Hummingbird

/// `group_open_http_svc`: groups and their members, the same groups as Easemob's `chatgroups` (sending is in
/// `TencentCommands+Messages`). Roles are `Owner` and `Member`.
extension TencentCommands {
    /// A group Tencent's `create_group` makes holds at most this many members (Tencent's Public group's default is 2000).
    static let maxGroupMembers = 10_000

    struct MemberItem: Codable {
        var memberAccount: String

        enum CodingKeys: String, CodingKey {
            case memberAccount = "Member_Account"
        }
    }

    struct CreateGroupRequest: Decodable {
        var ownerAccount: String?
        var groupID: String?
        var name: String
        var introduction: String?
        var memberList: [MemberItem]?
        var maxMemberCount: Int?

        enum CodingKeys: String, CodingKey {
            case ownerAccount = "Owner_Account", groupID = "GroupId", name = "Name", introduction = "Introduction"
            case memberList = "MemberList", maxMemberCount = "MaxMemberCount"
        }
    }

    struct GroupIDAnswer: Encodable {
        var groupID: String

        enum CodingKeys: String, CodingKey {
            case groupID = "GroupId"
        }
    }

    /// Creates a group (a `GroupId` of the caller's, or one Beacon makes) owned by `Owner_Account`, or by the app alone when
    /// it is absent; every member must be imported (10019 otherwise), and a group id in use is 10021.
    @Sendable func createGroup(_ call: TencentCall) async throws -> Response {
        let body = try call.decode(CreateGroupRequest.self)
        guard (1...128).contains(body.name.count) else { throw BeaconError.illegal("Name must be 1-128 characters") }
        if let id = body.groupID { try Validation.validateConversationKey(id) }
        let maxUsers = body.maxMemberCount ?? Self.maxGroupMembers
        guard (2...Self.maxGroupMembers).contains(maxUsers) else {
            throw BeaconError.illegal("MaxMemberCount must be 2-\(Self.maxGroupMembers)")
        }
        let owner = body.ownerAccount ?? ""
        let members = Array(Set((body.memberList ?? []).map(\.memberAccount) + (owner.isEmpty ? [] : [owner]))).sorted()
        guard members.count <= maxUsers else { throw BeaconError.illegal("more members than MaxMemberCount") }
        let existing = try await store.existingUsers(members, app: call.app.id)
        if let missing = members.first(where: { !existing.contains($0) }) {
            throw BeaconError(.userNotFound, "account \(missing) is not imported")
        }
        let id = body.groupID ?? String(messages.nextID().id)
        try await store.createGroup(
            GroupRecord(
                appID: call.app.id, id: id, name: body.name, description: body.introduction ?? "", owner: owner, maxUsers: maxUsers,
                createdAt: api.clock()),
            members: members)
        return try TencentDoor.answer(GroupIDAnswer(groupID: id))
    }

    private func existingGroup(_ id: String, app: AppRecord) async throws -> GroupRecord {
        guard let group = try await store.group(id, app: app.id) else { throw BeaconError(.groupNotFound, "group \(id) does not exist") }
        return group
    }

    struct Member: Encodable {
        var memberAccount: String
        var role: String

        enum CodingKeys: String, CodingKey {
            case memberAccount = "Member_Account", role = "Role"
        }
    }

    private static func members(_ group: GroupRecord, _ names: [String]) -> [Member] {
        names.map { Member(memberAccount: $0, role: $0 == group.owner ? "Owner" : "Member") }
    }

    struct GroupInfoRequest: Decodable {
        var groupIDList: [String]

        enum CodingKeys: String, CodingKey {
            case groupIDList = "GroupIdList"
        }
    }

    struct GroupInfo: Encodable {
        var groupID: String
        var errorCode: Int
        var errorInfo: String
        var type: String?
        var name: String?
        var introduction: String?
        var ownerAccount: String?
        var createTime: Int64?
        var memberNum: Int?
        var maxMemberNum: Int?
        var memberList: [Member]?

        enum CodingKeys: String, CodingKey {
            case groupID = "GroupId", errorCode = "ErrorCode", errorInfo = "ErrorInfo", type = "Type", name = "Name"
            case introduction = "Introduction", ownerAccount = "Owner_Account", createTime = "CreateTime", memberNum = "MemberNum"
            case maxMemberNum = "MaxMemberNum", memberList = "MemberList"
        }
    }

    struct GroupInfoAnswer: Encodable {
        var groupInfo: [GroupInfo]

        enum CodingKeys: String, CodingKey {
            case groupInfo = "GroupInfo"
        }
    }

    /// Up to 50 groups, each with its members; a missing one has `ErrorCode` 10010 in its place.
    @Sendable func groupInfo(_ call: TencentCall) async throws -> Response {
        let ids = try call.decode(GroupInfoRequest.self).groupIDList
        guard (1...50).contains(ids.count) else { throw BeaconError.illegal("GroupIdList names 1-50 groups") }
        var infos: [GroupInfo] = []
        for id in ids {
            guard let group = try await store.group(id, app: call.app.id) else {
                infos.append(GroupInfo(groupID: id, errorCode: 10010, errorInfo: "group \(id) does not exist"))
                continue
            }
            let names = try await store.groupMembers(id, app: call.app.id)
            infos.append(
                GroupInfo(
                    groupID: id, errorCode: 0, errorInfo: "", type: "Public", name: group.name, introduction: group.description,
                    ownerAccount: group.owner, createTime: group.createdAt / 1000, memberNum: names.count, maxMemberNum: group.maxUsers,
                    memberList: Self.members(group, names)))
        }
        return try TencentDoor.answer(GroupInfoAnswer(groupInfo: infos))
    }

    struct MemberInfoRequest: Decodable {
        var groupID: String
        var limit: Int?
        var offset: Int?

        enum CodingKeys: String, CodingKey {
            case groupID = "GroupId", limit = "Limit", offset = "Offset"
        }
    }

    struct MemberInfoAnswer: Encodable {
        var memberNum: Int
        var memberList: [Member]

        enum CodingKeys: String, CodingKey {
            case memberNum = "MemberNum", memberList = "MemberList"
        }
    }

    /// The group's members, `Limit` (at most 6000) from `Offset`; `MemberNum` counts them all.
    @Sendable func groupMembers(_ call: TencentCall) async throws -> Response {
        let body = try call.decode(MemberInfoRequest.self)
        let group = try await existingGroup(body.groupID, app: call.app)
        let names = try await store.groupMembers(group.id, app: call.app.id)
        let offset = min(max(body.offset ?? 0, 0), names.count)
        let limit = min(max(body.limit ?? 6000, 0), 6000)
        let page = Array(names[offset...].prefix(limit))
        return try TencentDoor.answer(MemberInfoAnswer(memberNum: names.count, memberList: Self.members(group, page)))
    }

    struct AddMembersRequest: Decodable {
        var groupID: String
        var memberList: [MemberItem]

        enum CodingKeys: String, CodingKey {
            case groupID = "GroupId", memberList = "MemberList"
        }
    }

    struct MemberResult: Encodable {
        var memberAccount: String
        /// 0: not added (no such account, or the group is full), 1: added, 2: already a member.
        var result: Int

        enum CodingKeys: String, CodingKey {
            case memberAccount = "Member_Account", result = "Result"
        }
    }

    struct MemberResults: Encodable {
        var memberList: [MemberResult]

        enum CodingKeys: String, CodingKey {
            case memberList = "MemberList"
        }
    }

    /// Adds up to 500 imported accounts to the group, each answered with its `Result`.
    @Sendable func addGroupMembers(_ call: TencentCall) async throws -> Response {
        let body = try call.decode(AddMembersRequest.self)
        guard (1...500).contains(body.memberList.count) else { throw TencentFailure(10005, "MemberList names 1-500 accounts") }
        let group = try await existingGroup(body.groupID, app: call.app)
        let existing = try await store.existingUsers(body.memberList.map(\.memberAccount), app: call.app.id)
        var count = try await store.groupMembers(group.id, app: call.app.id).count
        var results: [MemberResult] = []
        for item in body.memberList {
            let name = item.memberAccount
            guard existing.contains(name), count < group.maxUsers else {
                results.append(MemberResult(memberAccount: name, result: 0))
                continue
            }
            let added = try await store.addGroupMember(name, group: group.id, app: call.app.id, now: api.clock())
            if added { count += 1 }
            results.append(MemberResult(memberAccount: name, result: added ? 1 : 2))
        }
        return try TencentDoor.answer(MemberResults(memberList: results))
    }

    struct DeleteMembersRequest: Decodable {
        var groupID: String
        var memberToDelAccount: [String]

        enum CodingKeys: String, CodingKey {
            case groupID = "GroupId", memberToDelAccount = "MemberToDel_Account"
        }
    }

    /// Removes up to 500 members (one that is not a member is passed over); the owner cannot be removed (10004), as at
    /// Tencent and through the Easemob door.
    @Sendable func deleteGroupMembers(_ call: TencentCall) async throws -> Response {
        let body = try call.decode(DeleteMembersRequest.self)
        guard (1...500).contains(body.memberToDelAccount.count) else {
            throw TencentFailure(10005, "MemberToDel_Account names 1-500 accounts")
        }
        let group = try await existingGroup(body.groupID, app: call.app)
        if !group.owner.isEmpty, body.memberToDelAccount.contains(group.owner) {
            throw BeaconError.illegal("\(group.owner) owns group \(group.id) and cannot be removed from it")
        }
        for name in body.memberToDelAccount {
            _ = try await store.removeGroupMember(name, group: group.id, app: call.app.id)
        }
        return try TencentDoor.answer(TencentEnvelope.NoFields())
    }

    struct GroupRequest: Decodable {
        var groupID: String

        enum CodingKeys: String, CodingKey {
            case groupID = "GroupId"
        }
    }

    /// Dissolves the group: it and its memberships go; what it sent stays in its receivers' inboxes.
    @Sendable func destroyGroup(_ call: TencentCall) async throws -> Response {
        let id = try call.decode(GroupRequest.self).groupID
        guard try await store.deleteGroup(id, app: call.app.id) else { throw BeaconError(.groupNotFound, "group \(id) does not exist") }
        return try TencentDoor.answer(TencentEnvelope.NoFields())
    }

    struct JoinedRequest: Decodable {
        var memberAccount: String

        enum CodingKeys: String, CodingKey {
            case memberAccount = "Member_Account"
        }
    }

    struct JoinedAnswer: Encodable {
        var totalCount: Int
        var groupIDList: [GroupIDAnswer]

        enum CodingKeys: String, CodingKey {
            case totalCount = "TotalCount", groupIDList = "GroupIdList"
        }
    }

    /// The groups an imported account is a member of.
    @Sendable func joinedGroups(_ call: TencentCall) async throws -> Response {
        let name = try call.decode(JoinedRequest.self).memberAccount
        guard try await account(name, app: call.app) != nil else {
            throw BeaconError(.userNotFound, "account \(name.prefix(64)) is not imported")
        }
        let ids = try await store.groups(of: name, app: call.app.id)
        return try TencentDoor.answer(JoinedAnswer(totalCount: ids.count, groupIDList: ids.map(GroupIDAnswer.init)))
    }
}
