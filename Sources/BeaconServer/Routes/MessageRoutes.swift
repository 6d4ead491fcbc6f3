import BeaconCore
import BeaconProtocol
import BeaconStorage
import BeaconTencent
import Hummingbird

/// Sending messages over REST (Easemob's `messages/users`, `messages/chatgroups` and the older `messages`), and
/// recalling them (`messages/msg_recall`).
struct MessageRoutes: AppRouteCollection {
    let api: API
    let messages: MessageService
    let recalls: RecallService

    var store: any BeaconStore { api.store }

    func register(on routes: AppRoutes) {
        routes.add(.post, "messages/users", .caller) { try await send($0, $1, chatType: .chat) }
        routes.add(.post, "messages/chatgroups", .caller) { try await send($0, $1, chatType: .groupchat) }
        routes.add(.post, "messages", .caller, sendLegacy)
        routes.add(.post, "messages/msg_recall", .caller, recall)
    }

    /// Easemob's `msg_recall`: an app token recalls any message (without `from`, or with `force`), or one of `from`'s within
    /// the app's recall limit; a user token recalls its own within that limit.
    @Sendable func recall(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let app = try context.app
        let body = try await api.body(RecallRequest.self, from: request)
        guard let chatType = ChatType(rawValue: body.chatType) else {
            throw BeaconError.illegal("chat_type can only be 'chat' or 'groupchat'")
        }
        let recaller: RecallService.Recaller
        let from: String
        switch try context.caller {
        case .app:
            recaller = body.from == nil || body.force == true ? .app(name: body.from ?? "admin") : .appAsSender
            from = body.from ?? "admin"
        case .user(let name):
            guard body.from == nil || body.from == name else {
                throw BeaconError(.forbidden, "a user token may only recall as its own user")
            }
            recaller = .user(name)
            from = name
        }
        let messageID = try Validation.messageID(body.msgID)
        try await recalls.recall(
            RecallService.Request(messageID: messageID, to: body.to, chatType: chatType, from: body.from), by: recaller, app: app)
        return api.respond(
            request, app: app, action: "post",
            data: RecallAnswer(recalled: "yes", chattype: body.chatType, from: from, to: body.to, msgID: body.msgID))
    }

    @Sendable func send(_ request: Request, _ context: BeaconRequestContext, chatType: ChatType) async throws -> Response {
        let app = try context.app
        let caller = try context.caller
        let body = try await api.body(SendMessageRequest.self, from: request)
        return try await send(
            request, app: app, caller: caller, from: body.from, to: body.to, chatType: chatType, type: body.type, body: body.body,
            ext: body.offlinePushInfo.map { $0.merged(into: body.ext ?? [:]) } ?? body.ext, syncDevice: body.syncDevice ?? false,
            routetype: body.routetype, reference: body.msgID)
    }

    @Sendable func sendLegacy(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let app = try context.app
        let caller = try context.caller
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

/// `POST /{org}/{app}/messages/users` and `/messages/chatgroups` (Easemob's current format).
struct SendMessageRequest: Sendable, Codable {
    var from: String?
    var to: [String]
    var type: MessageType
    var body: JSONValue
    var ext: [String: JSONValue]?
    var syncDevice: Bool?
    var routetype: String?
    /// Tencent IM's offline push options, mapped onto the same rules as Easemob's `ext` keys.
    var offlinePushInfo: OfflinePushInfo?
    /// The client's own reference for this send (like an `Idempotency-Key` header): a retry within 24 h with the same
    /// one stores nothing and answers the first send's message ids.
    var msgID: String?

    enum CodingKeys: String, CodingKey {
        case from, to, type, body, ext, syncDevice = "sync_device", routetype, offlinePushInfo = "offline_push_info", msgID = "msg_id"
    }
}

/// `POST /{org}/{app}/messages` (Easemob's legacy format): `msg` holds `type` beside the body fields.
struct LegacySendMessageRequest: Sendable, Codable {
    var targetType: String
    var target: [String]
    var msg: [String: JSONValue]
    var from: String?
    var ext: [String: JSONValue]?
    var offlinePushInfo: OfflinePushInfo?
    /// As `SendMessageRequest.msgID`.
    var msgID: String?

    enum CodingKeys: String, CodingKey {
        case targetType = "target_type", target, msg, from, ext, offlinePushInfo = "offline_push_info", msgID = "msg_id"
    }
}
