import BeaconAPNs
import BeaconCore
import BeaconProtocol
import BeaconStorage
import Foundation
import Hummingbird

/// Decodes one object or an array of them (Easemob accepts both for user creation).
struct OneOrMany<Element: Decodable>: Decodable {
    var elements: [Element]

    init(from decoder: any Decoder) throws {
        if let many = try? [Element](from: decoder) {
            elements = many
        } else {
            elements = [try Element(from: decoder)]
        }
    }
}

/// The REST API, Easemob's paths and bodies under `/{org}/{app}`.
struct Routes {
    let api: API
    let messages: MessageService
    let reads: ReadService
    let switchboard: Switchboard
    let cursors: CursorBook
    let pushConfigs: PushConfigs?
    let tokenLifetimeSeconds: Int
    /// `BeaconConfiguration.userGroupMaxUsers`.
    let userGroupMaxUsers: Int
    let passwordHashRounds: Int
    let logins: LoginThrottle
    let onPushConfiguration: (@Sendable (PushTrust) throws -> Void)?
    /// `BeaconConfiguration.webhookPrivateTargets`.
    let webhookPrivateTargets: Bool

    var store: any BeaconStore { api.store }

    /// Registers every REST route under `/:org/:app`, recording each in `table` (for 405 answers).
    func register(on router: Router<BeaconRequestContext>, table: RouteTable) {
        let app = router.group("/:org/:app")
        func add(
            _ method: HTTPRequest.Method, _ path: String,
            _ handler: @escaping @Sendable (Request, BeaconRequestContext) async throws -> Response
        ) {
            app.on(RouterPath(path), method: method, use: handler)
            table.add(method, "/:org/:app/" + path)
        }
        add(.post, "token", token)
        add(.post, "users", createUsers)
        add(.get, "users", listUsers)
        add(.get, "users/:username", getUser)
        add(.put, "users/:username", updateUser)
        add(.delete, "users/:username", deleteUser)
        add(.get, "users/:username/offline_msg_count", offlineCount)
        add(.get, "users/:username/offline_msg_status/:msgid", offlineStatus)
        add(.get, "users/:username/disconnect", disconnect)
        add(.post, "users/:username/disconnect", disconnect)
        let presence = PresenceRoutes(api: api, switchboard: switchboard, ownUser: { try await ownUser($0, $1) })
        add(.delete, "users/:username/disconnect/:device_id", presence.disconnectDevice)
        add(.get, "users/:username/resources", presence.resources)
        add(.get, "users/:username/devices", presence.devices)
        add(.post, "chatgroups", createGroup)
        add(.get, "chatgroups/:group", getGroup)
        add(.get, "chatgroups/:group/users", groupMembers)
        add(.post, "chatgroups/:group/users/:username", addGroupMember)
        add(.delete, "chatgroups/:group/users/:username", removeGroupMember)
        add(.post, "messages/users", { try await send($0, $1, chatType: .chat) })
        add(.post, "messages/chatgroups", { try await send($0, $1, chatType: .groupchat) })
        add(.post, "messages", sendLegacy)
        add(.post, "push/certificates", uploadPushConfig)
        add(.get, "push/certificates", listPushConfigs)
        add(.delete, "push/certificates/:name", deletePushConfig)
        add(.put, "users/:username/push/binding", bind)
        add(.get, "users/:username/push/binding", listBindings)
        add(.get, "push/deliveries", deliveries)
        add(.post, "push/test", TestPushRoutes(api: api, messages: messages, pushEnabled: pushConfigs != nil).send)
        add(.get, "stats", ActivityRoutes(api: api, switchboard: switchboard).stats)
        let settings = SettingsRoutes(api: api, ownUser: { try await ownUser($0, $1) })
        add(.put, "users/:username/notification/:chattype/:key", settings.put)
        add(.get, "users/:username/notification/:chattype/:key", settings.get)
        add(.post, "users/:username/notification/query", settings.query)
        add(.put, "push/policy", settings.putPolicy)
        add(.get, "push/policy", settings.getPolicy)
        let templates = TemplateRoutes(api: api, ownUser: { try await ownUser($0, $1) })
        add(.post, "notification/template", templates.create)
        add(.get, "notification/template", templates.list)
        add(.post, "notification/template_preview", templates.preview)
        add(.get, "notification/template/:name", templates.get)
        add(.put, "notification/template/:name", templates.update)
        add(.delete, "notification/template/:name", templates.delete)
        add(.put, "users/:username/notification/template", templates.choose)
        add(.get, "users/:username/notification/template", templates.chosen)
        add(.put, "users/:username/notification/language", templates.setLanguage)
        add(.get, "users/:username/notification/language", templates.getLanguage)
        add(.put, "push/nickname", templates.nicknames)
        let readRoutes = ReadRoutes(api: api, reads: reads, ownUser: { try await ownUser($0, $1) })
        add(.get, "users/:username/conversations", readRoutes.conversations)
        add(.post, "users/:username/conversations/read", readRoutes.readAll)
        add(.post, "users/:username/conversations/:chattype/:key/read", readRoutes.read)
        add(.put, "users/:username/push/badge", readRoutes.reportBadge)
        add(.get, "users/:username/push/badge", readRoutes.badge)
        let webhook = WebhookRoutes(api: api, box: pushConfigs?.box, privateTargets: webhookPrivateTargets)
        add(.put, "push/webhook", webhook.put)
        add(.get, "push/webhook", webhook.get)
        add(.delete, "push/webhook", webhook.delete)
        add(.post, "credentials/rotate", CredentialRoutes(api: api).rotate)
    }

    // MARK: Tokens

    @Sendable func token(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let app = try await api.app(context)
        let body = try await api.body(TokenRequest.self, from: request)
        let now = api.clock()
        let lifetime = min(max(body.ttl ?? tokenLifetimeSeconds, 1), TokenClaims.maxUserTokenLifetime)
        var claims = TokenClaims(app: app.id, user: nil, uid: nil, iat: now, exp: now + Int64(lifetime) * 1000)
        switch body.grantType {
        case "client_credentials":
            // The secret is checked against the app as stored now, not the cached copy: a rotated secret obtains nothing, on
            // any node. (The client id never changes: a wrong one costs no store read.)
            guard body.clientID == app.clientID, let secret = body.clientSecret, let current = try await api.currentApp(app),
                Credentials.hashSecret(secret) == current.clientSecretHash
            else { throw BeaconError(.invalidGrant, "client_id or client_secret is wrong") }
            let appLifetime = min(lifetime, TokenClaims.maxAppTokenLifetime)
            // Never before the rotation that made this secret the current one (a node whose clock is behind the CLI's).
            let issuedAt = max(now, current.tokensValidAfter)
            let appClaims = TokenClaims(
                app: app.id, user: nil, uid: nil, iat: issuedAt, exp: now + Int64(appLifetime) * 1000, sec: TokenClaims.secretTag(of: current))
            return API.json(
                TokenResponse(accessToken: api.tokens.issue(appClaims), expiresIn: appLifetime, application: "\(app.key.org)#\(app.key.name)"))
        case "password":
            guard let username = body.username, let password = body.password, password.utf8.count <= 1024 else {
                throw BeaconError(.invalidGrant, "username or password is wrong")
            }
            // A username no user can have is refused here (invalid_grant), before anything is counted or hashed. The address
            // is the client's: a trusted proxy's `X-Forwarded-For`, else the peer's.
            let attempt = try logins.begin(app: app.id, username: username, address: api.origin(of: request, context: context).address, now: now)
            var succeeded = false
            defer { logins.end(attempt, now: now, succeeded: succeeded) }
            let user = try await store.user(username, app: app.id)
            guard try await Credentials.verifyPasswordOffLoop(password, hash: user?.passwordHash, rounds: passwordHashRounds), let user else {
                throw BeaconError(.invalidGrant, "username or password is wrong")
            }
            succeeded = true
            claims.user = username
            claims.uid = user.uuid
            return API.json(TokenResponse(accessToken: api.tokens.issue(claims), expiresIn: lifetime, user: entity(user)))
        default:
            throw BeaconError.illegal("grant_type must be client_credentials or password")
        }
    }

    // MARK: Users

    @Sendable func createUsers(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let app = try await api.app(context)
        try await api.caller(request, app: app).requireApp()
        let requests = try await api.body(OneOrMany<CreateUserRequest>.self, from: request).elements
        guard (1...60).contains(requests.count) else { throw BeaconError.illegal("create 1-60 users per request") }
        var newUsers: [NewUser] = []
        for user in requests {
            try Validation.validateUsername(user.username)
            try Validation.validatePassword(user.password)
            if let nickname = user.nickname { try Validation.validateNickname(nickname) }
        }
        if let duplicate = Dictionary(grouping: requests, by: \.username).first(where: { $0.value.count > 1 })?.key {
            throw BeaconError(.duplicate, "username \(duplicate) appears twice in the request")
        }
        for user in requests {
            let hash = try await Credentials.hashPasswordOffLoop(user.password, rounds: passwordHashRounds)
            newUsers.append(NewUser(username: user.username, passwordHash: hash, nickname: user.nickname))
        }
        let created = try await store.createUsers(newUsers, app: app.id, now: api.clock())
        return api.respond(request, app: app, action: "post", entities: created.map(entity))
    }

    /// Easemob's `GET /users?limit=&cursor=`, plus `prefix` (the console's search). The cursor is the last username of
    /// the page, base64url (opaque to clients).
    @Sendable func listUsers(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let app = try await api.app(context)
        try await api.caller(request, app: app).requireApp()
        let query = request.uri.queryParameters
        let limit = min(max(query.get("limit").flatMap { Int($0) } ?? 10, 1), 100)
        var after: String?
        if let cursor = query.get("cursor"), !cursor.isEmpty {
            guard let decoded = Self.decodeCursor(cursor) else { throw BeaconError.illegal("cursor is not one this API gave") }
            after = decoded
        }
        let prefix = query.get("prefix").flatMap { $0.isEmpty ? nil : $0 }
        let users = try await store.users(app: app.id, after: after, prefix: prefix, limit: limit + 1)
        let page = Array(users.prefix(limit))
        let cursor = users.count > limit ? page.last.map { Data($0.username.utf8).base64URLEncoded() } : nil
        return api.respond(request, app: app, action: "get", entities: page.map(entity), count: page.count, cursor: cursor)
    }

    private static func decodeCursor(_ cursor: String) -> String? {
        guard cursor.utf8.count <= 1024 else { return nil }
        return Data(base64URLEncoded: cursor).flatMap { String(data: $0, encoding: .utf8) }
    }

    @Sendable func getUser(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let (app, user) = try await ownUser(request, context)
        return api.respond(request, app: app, action: "get", entities: [entity(user)], count: 1)
    }

    @Sendable func updateUser(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let (app, user) = try await ownUser(request, context)
        let body = try await api.body(UpdateUserRequest.self, from: request)
        if let nickname = body.nickname { try Validation.validateNickname(nickname) }
        if let timezone = body.timezone { try Validation.validateTimeZone(timezone) }
        if let style = body.notificationDisplayStyle, ![0, 1].contains(style) {
            throw BeaconError.illegal("notification_display_style must be 0 (SimpleBanner) or 1 (MessageSummary)")
        }
        guard
            let updated = try await store.updateUser(
                user.username, app: app.id,
                changes: UserChanges(nickname: body.nickname, timezone: body.timezone, displayStyle: body.notificationDisplayStyle),
                now: api.clock())
        else { throw BeaconError(.userNotFound, "user \(user.username) does not exist") }
        return api.respond(request, app: app, action: "put", entities: [entity(updated)])
    }

    @Sendable func deleteUser(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let app = try await api.app(context)
        try await api.caller(request, app: app).requireApp()
        let username = try context.parameters.require("username")
        guard let user = try await store.user(username, app: app.id) else {
            throw BeaconError(.userNotFound, "user \(username) does not exist")
        }
        // Disconnected, deleted, then disconnected again: a session that registered in between (its token still held)
        // ends too, and none of the old user's devices stays online to receive what is sent to a new user of the name.
        await switchboard.disconnectAll(of: username, app: app.id, reason: "kicked")
        _ = try await store.deleteUser(username, app: app.id, now: api.clock())
        await switchboard.disconnectAll(of: username, app: app.id, reason: "kicked")
        return api.respond(request, app: app, action: "delete", entities: [entity(user)])
    }

    @Sendable func offlineCount(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let (app, user) = try await ownUser(request, context)
        try await cursors.flush(username: user.username, app: app.id)
        let count = try await store.offlineCount(of: user.username, app: app.id)
        return api.respond(request, app: app, action: "get", data: [user.username: String(count)])
    }

    @Sendable func offlineStatus(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let (app, user) = try await ownUser(request, context)
        let text = try context.parameters.require("msgid")
        guard let id = UInt64(text) else { throw BeaconError.illegal("msg_id must be a decimal message id") }
        try await cursors.flush(username: user.username, app: app.id)
        guard let status = try await store.offlineStatus(of: id, for: user.username, app: app.id) else {
            throw BeaconError(.messageNotFound, "no stored message \(text) for \(user.username)")
        }
        return api.respond(request, app: app, action: "get", data: [text: status.rawValue])
    }

    /// Easemob's forced logout: every device of the user is disconnected and every token revoked.
    @Sendable func disconnect(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let (app, user) = try await ownUser(request, context)
        try await store.revokeTokens(of: user.username, app: app.id, before: api.clock() + 1)
        try await store.unbindAll(username: user.username, app: app.id)
        await switchboard.disconnectAll(of: user.username, app: app.id, reason: "kicked")
        return api.respond(request, app: app, action: "get", data: ["result": true] as JSONValue)
    }

    /// The app and the `:username` user, which the caller must be (or be the app).
    @Sendable func ownUser(_ request: Request, _ context: some RequestContext) async throws -> (AppRecord, UserRecord) {
        let app = try await api.app(context)
        let username = try context.parameters.require("username")
        let (caller, authenticated) = try await api.authenticate(request, app: app)
        try caller.requireSelfOrApp(username)
        // A user's own record is the one its token was checked against (not a second read, which could find a user
        // created again under the name in between).
        if let authenticated { return (app, authenticated) }
        guard let user = try await store.user(username, app: app.id) else {
            throw BeaconError(.userNotFound, "user \(username) does not exist")
        }
        return (app, user)
    }

    private func entity(_ user: UserRecord) -> UserEntity {
        UserEntity(
            uuid: user.uuid, created: user.createdAt, modified: user.modifiedAt, username: user.username, nickname: user.nickname,
            timezone: user.timezone, notificationDisplayStyle: user.displayStyle)
    }

    // MARK: Groups

    @Sendable func createGroup(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let app = try await api.app(context)
        let caller = try await api.caller(request, app: app)
        let body = try await api.body(CreateGroupRequest.self, from: request)
        try caller.requireSelfOrApp(body.owner)
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

    @Sendable func getGroup(_ request: Request, _ context: some RequestContext) async throws -> Response {
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

    @Sendable func groupMembers(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let (app, group, members) = try await groupForMember(request, context)
        return api.respond(request, app: app, action: "get", data: affiliations(group, members), count: members.count)
    }

    @Sendable func addGroupMember(_ request: Request, _ context: some RequestContext) async throws -> Response {
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

    @Sendable func removeGroupMember(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let (app, group, username) = try await groupForOwner(request, context)
        guard username != group.owner else { throw BeaconError(.forbidden, "the owner cannot be removed from the group") }
        guard try await store.removeGroupMember(username, group: group.id, app: app.id) else {
            throw BeaconError(.userNotFound, "user \(username) is not a member of group \(group.id)")
        }
        return api.respond(
            request, app: app, action: "delete",
            data: ["result": true, "groupid": .string(group.id), "action": "remove_member", "user": .string(username)] as JSONValue)
    }

    private func groupForMember(_ request: Request, _ context: some RequestContext) async throws -> (AppRecord, GroupRecord, [String]) {
        let app = try await api.app(context)
        let caller = try await api.caller(request, app: app)
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
    private func groupForOwner(_ request: Request, _ context: some RequestContext) async throws -> (AppRecord, GroupRecord, String) {
        let app = try await api.app(context)
        let caller = try await api.caller(request, app: app)
        let id = try context.parameters.require("group")
        let username = try context.parameters.require("username")
        guard let group = try await store.group(id, app: app.id) else { throw BeaconError(.groupNotFound, "group \(id) does not exist") }
        if case .user(let name) = caller {
            guard request.method == .delete else { throw BeaconError(.forbidden, "only the app adds members to a group") }
            guard name == group.owner || name == username else { throw BeaconError(.forbidden, "only the group owner may remove its members") }
        }
        return (app, group, username)
    }

    private func affiliations(_ group: GroupRecord, _ members: [String]) -> JSONValue {
        .array(
            [["owner": .string(group.owner)]]
                + members.filter { $0 != group.owner }.map { ["member": .string($0)] as JSONValue })
    }

    // MARK: Push configurations and bindings

    private func requirePush() throws -> PushConfigs {
        guard let pushConfigs else { throw BeaconError.illegal("push is not enabled on this server (no secret key configured)") }
        return pushConfigs
    }

    @Sendable func uploadPushConfig(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let app = try await api.app(context)
        try await api.caller(request, app: app).requireApp()
        let configs = try requirePush()
        let upload: PushConfigUpload
        if let contentType = request.headers[.contentType], contentType.lowercased().hasPrefix("multipart/form-data") {
            upload = try await multipartUpload(request, contentType: contentType)
        } else {
            upload = try await api.body(PushConfigUpload.self, from: request)
        }
        let record = try configs.validate(upload, app: app.id, now: api.clock())
        try await store.savePushConfig(record)
        try onPushConfiguration?(try configs.trust(for: record))
        return api.respond(request, app: app, action: "post", entities: [PushConfigView(record)])
    }

    /// The same fields as the JSON form, with `file` as a file part (raw `.p12` or `.p8` bytes).
    private func multipartUpload(_ request: Request, contentType: String) async throws -> PushConfigUpload {
        let buffer = try await api.collectBody(of: request)
        guard let form = MultipartForm(contentType: contentType, body: Array(buffer.readableBytesView)) else {
            throw BeaconError(.jsonParse, "malformed multipart/form-data body")
        }
        guard let name = form.text("name"), let kindText = form.text("kind"), let kind = PushConfigRecord.Kind(rawValue: kindText),
            let environmentText = form.text("environment"), let environment = APNsEnvironment(rawValue: environmentText),
            let bundleID = form.text("bundle_id"), let file = form.bytes("file")
        else { throw BeaconError.illegal("the form needs name, kind (p8|p12), environment, bundle_id and a file part") }
        return PushConfigUpload(
            name: name, kind: kind, file: kind == .p12 ? Data(file).base64EncodedString() : String(decoding: file, as: UTF8.self),
            password: form.text("password"), keyID: form.text("key_id"), teamID: form.text("team_id"), environment: environment,
            bundleID: bundleID, voip: form.text("voip").map { $0 == "true" || $0 == "1" })
    }

    @Sendable func listPushConfigs(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let app = try await api.app(context)
        try await api.caller(request, app: app).requireApp()
        let views = try await store.pushConfigs(app: app.id).map(PushConfigView.init)
        return api.respond(request, app: app, action: "get", entities: views, count: views.count)
    }

    @Sendable func deletePushConfig(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let app = try await api.app(context)
        try await api.caller(request, app: app).requireApp()
        let name = try context.parameters.require("name")
        guard let record = try await store.pushConfig(name, app: app.id), try await store.deletePushConfig(name, app: app.id) else {
            throw BeaconError(.resourceNotFound, "no push configuration named \(name)")
        }
        return api.respond(request, app: app, action: "delete", entities: [PushConfigView(record)])
    }

    struct BindingView: Codable, Sendable {
        var deviceID: String
        var deviceToken: String
        var voipToken: String?
        var notifierName: String
        enum CodingKeys: String, CodingKey {
            case deviceID = "device_id", deviceToken = "device_token", voipToken = "voip_token", notifierName = "notifier_name"
        }
        init(_ binding: PushBinding) {
            deviceID = binding.deviceID
            deviceToken = binding.deviceToken
            voipToken = binding.voipToken
            notifierName = binding.notifier
        }
    }

    /// Easemob's binding semantics: an empty token unbinds the device and notifier; an empty notifier unbinds
    /// the whole device; an unknown notifier is refused. Answers with the device's remaining bindings.
    @Sendable func bind(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let (app, user) = try await ownUser(request, context)
        let body = try await api.body(PushBindingRequest.self, from: request)
        guard (1...128).contains(body.deviceID.utf8.count) else { throw BeaconError.illegal("device_id must be 1-128 bytes") }
        if body.notifierName.isEmpty {
            try await store.unbind(username: user.username, deviceID: body.deviceID, notifier: nil, app: app.id)
        } else {
            guard try await store.pushConfig(body.notifierName, app: app.id) != nil else {
                throw BeaconError(.notifierNotFound, "no push configuration named \(body.notifierName)")
            }
            if body.deviceToken.isEmpty {
                try await store.unbind(username: user.username, deviceID: body.deviceID, notifier: body.notifierName, app: app.id)
            } else {
                for token in [body.deviceToken] + (body.voipToken.map { [$0] } ?? []) {
                    guard token.utf8.count <= 256, APNsDeviceToken.isWellFormed(token) else {
                        throw BeaconError.illegal("device_token and voip_token must be the hex form of an APNs device token")
                    }
                }
                let voipToken = body.voipToken?.lowercased()
                guard voipToken != body.deviceToken.lowercased() else {
                    throw BeaconError.illegal("voip_token is PushKit's token, which differs from the alert device_token")
                }
                let bound = try await store.bind(
                    PushBinding(
                        username: user.username, deviceID: body.deviceID, notifier: body.notifierName,
                        deviceToken: body.deviceToken.lowercased(), voipToken: voipToken, boundAt: api.clock()),
                    app: app.id, holder: user.uuid)
                guard bound else { throw BeaconError(.userNotFound, "user \(user.username) does not exist") }
            }
        }
        let remaining = try await store.bindings(of: user.username, app: app.id).filter { $0.deviceID == body.deviceID }
        return api.respond(request, app: app, action: "put", entities: remaining.map(BindingView.init))
    }

    @Sendable func listBindings(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let (app, user) = try await ownUser(request, context)
        let bindings = try await store.bindings(of: user.username, app: app.id)
        return api.respond(request, app: app, action: "get", entities: bindings.map(BindingView.init), count: bindings.count)
    }

    struct DeliveryView: Codable, Sendable {
        var messageID: String
        var username: String
        var deviceID: String
        var notifierName: String
        var deviceToken: String
        var apnsID: String
        /// `alert`, `voip`, or `background` (a withdrawal of what was read elsewhere).
        var pushType: String
        var status: String
        var httpStatus: Int?
        var reason: String?
        var attempts: Int
        var created: Int64
        var updated: Int64
        var history: [PushAttempt]
        /// The APNs payload as sent; absent for a skip.
        var payload: JSONValue?
        enum CodingKeys: String, CodingKey {
            case messageID = "message_id", username, deviceID = "device_id", notifierName = "notifier_name", deviceToken = "device_token"
            case apnsID = "apns_id", pushType = "push_type", status, httpStatus = "http_status", reason, attempts, created, updated, history
            case payload
        }
        init(_ job: PushJob) {
            messageID = String(job.messageID)
            username = job.job.username
            deviceID = job.job.deviceID
            notifierName = job.job.notifier
            deviceToken = job.job.deviceToken
            apnsID = job.job.apnsID
            pushType = job.job.pushType
            status = job.status.rawValue
            httpStatus = job.lastStatus
            reason = job.lastReason
            attempts = job.attempts
            created = job.createdAt
            updated = job.updatedAt
            history = job.history
            payload = job.job.payload.isEmpty ? nil : try? JSONDecoder().decode(JSONValue.self, from: Data(job.job.payload.utf8))
        }
    }

    /// `GET /push/deliveries?username=&message_id=&status=&reason=&since=&limit=`: push jobs with their attempts, newest
    /// first.
    @Sendable func deliveries(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let app = try await api.app(context)
        let caller = try await api.caller(request, app: app)
        let query = request.uri.queryParameters
        var filter = PushJobFilter(username: query.get("username"), reason: query.get("reason"))
        if case .user(let name) = caller, filter.username != name {
            throw BeaconError(.forbidden, "a user token may only read its own deliveries")
        }
        if let text = query.get("message_id") {
            guard let id = UInt64(text) else { throw BeaconError.illegal("message_id must be a decimal message id") }
            filter.messageID = id
        }
        if let text = query.get("status") {
            guard let status = PushJobStatus(rawValue: text) else {
                throw BeaconError.illegal("status must be one of \(PushJobStatus.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            filter.status = status
        }
        if let text = query.get("since") {
            guard let since = Int64(text), since >= 0 else { throw BeaconError.illegal("since must be a time in ms since 1970") }
            filter.updatedSince = since
        }
        let limit = min(max(query.get("limit").flatMap { Int($0) } ?? 100, 1), 1000)
        let jobs = try await store.pushJobs(app: app.id, matching: filter, limit: limit)
        return api.respond(request, app: app, action: "get", entities: jobs.map(DeliveryView.init), count: jobs.count)
    }

    // MARK: Messages

    @Sendable func send(_ request: Request, _ context: some RequestContext, chatType: ChatType) async throws -> Response {
        let app = try await api.app(context)
        let caller = try await api.caller(request, app: app)
        let body = try await api.body(SendMessageRequest.self, from: request)
        return try await send(
            request, app: app, caller: caller, from: body.from, to: body.to, chatType: chatType, type: body.type, body: body.body,
            ext: body.offlinePushInfo.map { $0.merged(into: body.ext ?? [:]) } ?? body.ext, syncDevice: body.syncDevice ?? false,
            routetype: body.routetype, reference: body.msgID)
    }

    @Sendable func sendLegacy(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let app = try await api.app(context)
        let caller = try await api.caller(request, app: app)
        let body = try await api.body(LegacySendMessageRequest.self, from: request)
        let chatType: ChatType
        switch body.targetType {
        case "users": chatType = .chat
        case "chatgroups": chatType = .groupchat
        default: throw BeaconError.illegal("target_type can only be 'users' or 'chatgroups'")
        }
        guard let typeName = body.msg["type"]?.stringValue, let type = MessageType(rawValue: typeName) else {
            throw BeaconError.illegal("msg.type must be one of \(MessageType.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        var fields = body.msg
        fields["type"] = nil
        return try await send(
            request, app: app, caller: caller, from: body.from, to: body.target, chatType: chatType, type: type,
            body: .object(fields), ext: body.offlinePushInfo.map { $0.merged(into: body.ext ?? [:]) } ?? body.ext, syncDevice: false,
            routetype: nil, reference: body.msgID)
    }

    private func send(
        _ request: Request, app: AppRecord, caller: Caller, from: String?, to targets: [String], chatType: ChatType, type: MessageType,
        body: JSONValue, ext: [String: JSONValue]?, syncDevice: Bool, routetype: String?, reference: String?
    ) async throws -> Response {
        let sender: String
        switch caller {
        case .app: sender = from ?? "admin"
        case .user(let name):
            guard from == nil || from == name else { throw BeaconError(.forbidden, "a user token may only send as its own user") }
            sender = name
        }
        guard !sender.isEmpty else { throw BeaconError.illegal("from must not be empty") }
        if let routetype, routetype != RouteType.online { throw BeaconError.illegal("routetype must be \(RouteType.online)") }
        // As in Easemob, an app may send as any name; only real users get copies on their other devices.
        let senderIsUser = try await store.user(sender, app: app.id) != nil
        let outgoing = OutgoingMessage(
            from: sender, chatType: chatType, type: type, body: body, ext: ext ?? [:], onlineOnly: routetype == RouteType.online,
            originDevice: nil, copyToSender: senderIsUser && (syncDevice || chatType == .groupchat))
        // A retried send with the same reference (header or `msg_id`) answers the first send's ids and stores nothing.
        var receipt: SendReceipt?
        if let reference = request.headers.first(where: { $0.name.canonicalName == "idempotency-key" })?.value ?? reference {
            guard (1...128).contains(reference.utf8.count) else { throw BeaconError.illegal("Idempotency-Key and msg_id are 1-128 bytes") }
            // Per sender, as Easemob's `msg_id` is: two senders' references never meet (a user token sends as itself).
            receipt = SendReceipt(scope: SendReceipt.senderScope(sender), reference: reference, now: api.clock())
        }
        let sent = try await messages.send(outgoing, to: targets, app: app, enforceMembership: caller != .app, receipt: receipt)
        var data: [String: String] = [:]
        for message in sent { data[message.target] = String(message.id) }
        return api.respond(request, app: app, action: "post", data: data)
    }
}
