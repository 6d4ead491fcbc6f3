import BeaconCore
import BeaconProtocol
import BeaconStorage
import Foundation
import Hummingbird

/// Users (Easemob's `users` resource): creating, listing, reading, updating and deleting them, their stored messages'
/// counts, and the forced logout of every device.
struct UserRoutes: AppRouteCollection {
    let api: API
    let switchboard: Switchboard
    let cursors: CursorBook
    let passwordHashRounds: Int

    var store: any BeaconStore { api.store }
    var accounts: AccountActions { AccountActions(store: store, switchboard: switchboard, clock: api.clock) }

    func register(on routes: AppRoutes) {
        routes.add(.post, "users", .app, createUsers)
        routes.add(.get, "users", .app, listUsers)
        routes.add(.get, "users/:username", .caller, getUser)
        routes.add(.put, "users/:username", .caller, updateUser)
        routes.add(.delete, "users/:username", .app, deleteUser)
        routes.add(.get, "users/:username/offline_msg_count", .caller, offlineCount)
        routes.add(.get, "users/:username/offline_msg_status/:msgid", .caller, offlineStatus)
        routes.add(.get, "users/:username/disconnect", .caller, disconnect)
        routes.add(.post, "users/:username/disconnect", .caller, disconnect)
    }

    @Sendable func createUsers(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let app = try context.requireApp()
        let requests = try await api.body(OneOrMany<CreateUserRequest>.self, from: request).elements
        guard (1...60).contains(requests.count) else { throw BeaconError.illegal("create 1-60 users per request") }
        var newUsers: [NewUser] = []
        for user in requests {
            try Validation.validateUsername(user.username)
            try Validation.validatePassword(user.password)
            if let nickname = user.nickname { try Validation.validateNickname(nickname) }
        }
        // The Tencent administrator is the app's backend, never an account (docs/tencent.md).
        if let admin = app.tencent?.adminIdentifier, requests.contains(where: { $0.username == admin }) {
            throw BeaconError(.duplicate, "\(admin) is the app's Tencent administrator, not an account")
        }
        if let duplicate = Dictionary(grouping: requests, by: \.username).first(where: { $0.value.count > 1 })?.key {
            throw BeaconError(.duplicate, "username \(duplicate) appears twice in the request")
        }
        for user in requests {
            let hash = try await Credentials.hashPasswordOffLoop(user.password, rounds: passwordHashRounds)
            newUsers.append(NewUser(username: user.username, passwordHash: hash, nickname: user.nickname))
        }
        let created = try await store.createUsers(newUsers, app: app.id, now: api.clock())
        return api.respond(request, app: app, action: "post", entities: created.map(UserEntity.init))
    }

    /// Easemob's `GET /users?limit=&cursor=`, plus `prefix` (the console's search). The cursor is the last username of
    /// the page, base64url (opaque to clients).
    @Sendable func listUsers(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let app = try context.requireApp()
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
        return api.respond(request, app: app, action: "get", entities: page.map(UserEntity.init), count: page.count, cursor: cursor)
    }

    private static func decodeCursor(_ cursor: String) -> String? {
        guard cursor.utf8.count <= 1024 else { return nil }
        return Data(base64URLEncoded: cursor).flatMap { String(data: $0, encoding: .utf8) }
    }

    @Sendable func getUser(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let (app, user) = try await api.pathUser(context)
        return api.respond(request, app: app, action: "get", entities: [UserEntity(user)], count: 1)
    }

    @Sendable func updateUser(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let (app, user) = try await api.pathUser(context)
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
        return api.respond(request, app: app, action: "put", entities: [UserEntity(updated)])
    }

    @Sendable func deleteUser(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let app = try context.requireApp()
        let username = try context.parameters.require("username")
        guard let user = try await store.user(username, app: app.id) else {
            throw BeaconError(.userNotFound, "user \(username) does not exist")
        }
        _ = try await accounts.delete(username, app: app)
        return api.respond(request, app: app, action: "delete", entities: [UserEntity(user)])
    }

    @Sendable func offlineCount(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let (app, user) = try await api.pathUser(context)
        try await cursors.flush(username: user.username, app: app.id)
        let count = try await store.offlineCount(of: user.username, app: app.id)
        return api.respond(request, app: app, action: "get", data: [user.username: String(count)])
    }

    @Sendable func offlineStatus(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let (app, user) = try await api.pathUser(context)
        let text = try context.parameters.require("msgid")
        guard let id = UInt64(text) else { throw BeaconError.illegal("msg_id must be a decimal message id") }
        try await cursors.flush(username: user.username, app: app.id)
        guard let status = try await store.offlineStatus(of: id, for: user.username, app: app.id) else {
            throw BeaconError(.messageNotFound, "no stored message \(text) for \(user.username)")
        }
        return api.respond(request, app: app, action: "get", data: [text: status.rawValue])
    }

    /// Easemob's forced logout: every device of the user is disconnected and every token revoked.
    @Sendable func disconnect(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let (app, user) = try await api.pathUser(context)
        try await accounts.kick(user.username, app: app)
        return api.respond(request, app: app, action: "get", data: ["result": true] as JSONValue)
    }

}

extension UserEntity {
    /// A user as the REST API shows it.
    init(_ user: UserRecord) {
        self.init(
            uuid: user.uuid, created: user.createdAt, modified: user.modifiedAt, username: user.username, nickname: user.nickname,
            timezone: user.timezone, notificationDisplayStyle: user.displayStyle)
    }
}

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

/// `POST /{org}/{app}/users` (one object or an array of them).
struct CreateUserRequest: Sendable, Codable {
    var username: String
    var password: String
    var nickname: String?
}
