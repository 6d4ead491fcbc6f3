import BeaconCore
import BeaconProtocol
import BeaconStorage
import Hummingbird

/// Groups (Easemob's `chatgroups`): created by the app or by a user (a group of one), read by their members, members
/// added by the app and removed by the app, the owner, or themselves.
struct GroupRoutes: AppRouteCollection {
    let api: API
    let messages: MessageService
    /// `BeaconConfiguration.userGroupMaxUsers`.
    let userGroupMaxUsers: Int

    var store: any BeaconStore { api.store }

    func register(on routes: AppRoutes) {
        routes.add(.post, "chatgroups", .caller, createGroup)
        routes.add(.get, "chatgroups/:group", .caller, getGroup)
        routes.add(.get, "chatgroups/:group/users", .caller, groupMembers)
        routes.add(.post, "chatgroups/:group/users/:username", .caller, addGroupMember)
        routes.add(.delete, "chatgroups/:group/users/:username", .caller, removeGroupMember)
    }

    @Sendable func createGroup(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let caller = try context.caller
        let body = try await api.body(CreateGroupRequest.self, from: request)
        let app = try context.requireSelfOrApp(body.owner)
        guard (1...128).contains(body.groupname.count) else { throw BeaconError.illegal("groupname must be 1-128 characters") }
        // A user creates a group of one (themself) up to `userGroupMaxUsers`: only the app adds others, so that nobody is
        // put in a group without the app's say, and a user token cannot probe which names exist.
        let byUser = caller != .app
        if byUser, (body.members ?? []).contains(where: { $0 != body.owner }) {
            throw BeaconError(.forbidden, "a user token creates a group with no other members; the app adds members")
        }
        let cap = byUser ? userGroupMaxUsers : 100_000
        let maxUsers = body.maxusers ?? min(10_000, cap)
        guard (2...max(cap, 2)).contains(maxUsers) else { throw BeaconError.illegal("maxusers must be 2-\(max(cap, 2))") }
        let members = Array(Set((body.members ?? []) + [body.owner]))
        guard members.count <= maxUsers else { throw BeaconError.illegal("more members than maxusers") }
        let existing = try await store.existingUsers(members, app: app.id)
        if let missing = members.sorted().first(where: { !existing.contains($0) }) {
            throw BeaconError(.userNotFound, "user \(missing) does not exist")
        }
        let id = String(messages.nextID().id)
        let group = GroupRecord(
            appID: app.id, id: id, name: body.groupname, description: body.desc ?? "", owner: body.owner, maxUsers: maxUsers,
            createdAt: api.clock())
        try await store.createGroup(group, members: members)
        return api.respond(request, app: app, action: "post", data: ["groupid": .string(id)] as JSONValue)
    }

    @Sendable func getGroup(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let (app, group, members) = try await groupForMember(request, context)
        let data: JSONValue = [
            [
                "id": .string(group.id), "name": .string(group.name), "description": .string(group.description),
                "owner": .string(group.owner), "created": .number(Double(group.createdAt)),
                "maxusers": .number(Double(group.maxUsers)), "affiliations_count": .number(Double(members.count)),
                "affiliations": affiliations(group, members),
            ]
        ]
        return api.respond(request, app: app, action: "get", data: data, count: 1)
    }

    @Sendable func groupMembers(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let (app, group, members) = try await groupForMember(request, context)
        return api.respond(request, app: app, action: "get", data: affiliations(group, members), count: members.count)
    }

    @Sendable func addGroupMember(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let (app, group, username) = try await groupForOwner(request, context)
        guard try await store.user(username, app: app.id) != nil else {
            throw BeaconError(.userNotFound, "user \(username) does not exist")
        }
        guard try await store.groupMembers(group.id, app: app.id).count < group.maxUsers else {
            throw BeaconError(.forbidden, "group \(group.id) is full")
        }
        _ = try await store.addGroupMember(username, group: group.id, app: app.id, now: api.clock())
        return api.respond(
            request, app: app, action: "post",
            data: ["result": true, "groupid": .string(group.id), "action": "add_member", "user": .string(username)] as JSONValue)
    }

    @Sendable func removeGroupMember(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let (app, group, username) = try await groupForOwner(request, context)
        guard username != group.owner else { throw BeaconError(.forbidden, "the owner cannot be removed from the group") }
        guard try await store.removeGroupMember(username, group: group.id, app: app.id) else {
            throw BeaconError(.userNotFound, "user \(username) is not a member of group \(group.id)")
        }
        return api.respond(
            request, app: app, action: "delete",
            data: ["result": true, "groupid": .string(group.id), "action": "remove_member", "user": .string(username)] as JSONValue)
    }

    private func groupForMember(_ request: Request, _ context: BeaconRequestContext) async throws -> (AppRecord, GroupRecord, [String]) {
        let app = try context.app
        let caller = try context.caller
        let id = try context.parameters.require("group")
        guard let group = try await store.group(id, app: app.id) else { throw BeaconError(.groupNotFound, "group \(id) does not exist") }
        let members = try await store.groupMembers(id, app: app.id)
        if case .user(let name) = caller, !members.contains(name) {
            throw BeaconError(.forbidden, "\(name) is not a member of group \(id)")
        }
        return (app, group, members)
    }

    /// The group and the `:username` to add or remove. Adding is the app's; removing, the app's or the group owner's (a
    /// member may remove themself).
    private func groupForOwner(_ request: Request, _ context: BeaconRequestContext) async throws -> (AppRecord, GroupRecord, String) {
        let app = try context.app
        let caller = try context.caller
        let id = try context.parameters.require("group")
        let username = try context.parameters.require("username")
        guard let group = try await store.group(id, app: app.id) else { throw BeaconError(.groupNotFound, "group \(id) does not exist") }
        if case .user(let name) = caller {
            guard request.method == .delete else { throw BeaconError(.forbidden, "only the app adds members to a group") }
            guard name == group.owner || name == username else {
                throw BeaconError(.forbidden, "only the group owner may remove its members")
            }
        }
        return (app, group, username)
    }

    private func affiliations(_ group: GroupRecord, _ members: [String]) -> JSONValue {
        .array(
            [["owner": .string(group.owner)]]
                + members.filter { $0 != group.owner }.map { ["member": .string($0)] as JSONValue })
    }
}

/// `POST /{org}/{app}/chatgroups`.
struct CreateGroupRequest: Sendable, Codable {
    var groupname: String
    var desc: String?
    var owner: String
    var members: [String]?
    var maxusers: Int?
}
