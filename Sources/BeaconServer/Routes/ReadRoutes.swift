import BeaconCore
import BeaconProtocol
import BeaconStorage
import Foundation
import Hummingbird

/// Read state and the badge over REST: the same operations as the `read`, `read_all` and `badge` frames.
struct ReadRoutes: AppRouteCollection {
    let api: API
    let reads: ReadService

    var store: any BeaconStore { api.store }

    func register(on routes: AppRoutes) {
        routes.add(.get, "users/:username/conversations", .caller, conversations)
        routes.add(.post, "users/:username/conversations/read", .caller, readAll)
        routes.add(.post, "users/:username/conversations/:chattype/:key/read", .caller, read)
        routes.add(.put, "users/:username/push/badge", .caller, reportBadge)
        routes.add(.get, "users/:username/push/badge", .caller, badge)
    }

    static let maxConversations = 1000

    @Sendable func conversations(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let (app, user) = try await api.pathUser(context)
        let limit = min(max(request.uri.queryParameters.get("limit").flatMap { Int($0) } ?? 100, 1), Self.maxConversations)
        let found = try await store.conversations(of: user.username, app: app.id, limit: limit)
        let views = found.map { summary in
            ConversationInfo(
                chatType: summary.conversation.chatType, conversation: summary.conversation.key, unread: summary.unread,
                muted: summary.muted,
                readUpTo: summary.read.map { String($0.upTo) }, readSeq: summary.read?.seq ?? 0,
                lastMessageID: String(summary.lastMessageID),
                lastTimestamp: summary.lastTimestamp)
        }
        return api.respond(request, app: app, action: "get", entities: views, count: views.count)
    }

    @Sendable func read(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let (app, user) = try await api.pathUser(context)
        let typeText = try context.parameters.require("chattype")
        guard let chatType = ChatType(rawValue: typeText) else { throw BeaconError.illegal("chat type must be chat or groupchat") }
        let key = try context.parameters.require("key")
        // Without a body, everything so far is read.
        let body = try await api.bodyIfPresent(ReadRequest.self, from: request)
        let upTo = try body?.upTo.map { text throws(BeaconError) in try Validation.messageID(text) }
        let update = try await reads.markRead(
            user.username, app: app, conversation: ConversationID(chatType: chatType, key: key), upTo: upTo, readingDevice: nil)
        return respond(update, request, app: app)
    }

    @Sendable func readAll(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let (app, user) = try await api.pathUser(context)
        let update = try await reads.markRead(user.username, app: app, conversation: nil, upTo: nil, readingDevice: nil)
        return respond(update, request, app: app)
    }

    @Sendable func reportBadge(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let (app, user) = try await api.pathUser(context)
        let body = try await api.body(BadgeBody.self, from: request)
        guard body.badge >= 0 else { throw BeaconError.illegal("badge must be 0 or more") }
        try await store.reportBadge(of: user.username, app: app.id, value: body.badge)
        return api.respond(request, app: app, action: "put", data: BadgeBody(badge: try await store.badge(of: user.username, app: app.id)))
    }

    @Sendable func badge(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let (app, user) = try await api.pathUser(context)
        return api.respond(request, app: app, action: "get", data: BadgeBody(badge: try await store.badge(of: user.username, app: app.id)))
    }

    private func respond(_ update: ReadUpdate, _ request: Request, app: AppRecord) -> Response {
        api.respond(
            request, app: app, action: "post",
            data: ReadAnswer(read: update.markers.map { ReadService.state($0, badge: nil) }, badge: update.badge))
    }
}
