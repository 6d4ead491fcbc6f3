import BeaconCore
import BeaconProtocol
import Foundation

/// A daily do-not-disturb window in the user's time zone (hours 0–23, minutes 0–59).
public struct SilentInterval: Sendable, Hashable {
    public var startHour: Int
    public var startMinute: Int
    public var endHour: Int
    public var endMinute: Int

    public init(startHour: Int, startMinute: Int, endHour: Int, endMinute: Int) {
        self.startHour = startHour
        self.startMinute = startMinute
        self.endHour = endHour
        self.endMinute = endMinute
    }
}

/// Do-not-disturb and push-mode settings to apply (the seeds' `SilentModeParam`).
public struct SilentModeParam: Sendable, Hashable {
    public var remindType: RemindType?
    /// One-shot do-not-disturb in minutes, [0, 10080]; 0 clears it.
    public var durationMinutes: Int?
    /// Daily quiet hours (app level only); all zero clears them.
    public var interval: SilentInterval?

    public init(remindType: RemindType? = nil, durationMinutes: Int? = nil, interval: SilentInterval? = nil) {
        self.remindType = remindType
        self.durationMinutes = durationMinutes
        self.interval = interval
    }
}

/// Settings as the server has them (the seeds' `SilentModeResult`).
public struct SilentModeResult: Sendable, Hashable {
    public var conversationID: String?
    public var conversationType: ChatType?
    /// nil: inherits (conversations) or not set.
    public var remindType: RemindType?
    /// When the one-shot do-not-disturb ends (ms), if one is active.
    public var expireTimestamp: Int64?
    /// Daily quiet hours as minutes after midnight.
    public var start: Int?
    public var end: Int?
}

/// The receiver's push display options.
public struct PushOptions: Sendable, Hashable {
    public var displayName: String?
    /// 0 SimpleBanner, 1 MessageSummary.
    public var displayStyle: Int

    public init(displayName: String?, displayStyle: Int) {
        self.displayName = displayName
        self.displayStyle = displayStyle
    }
}

struct SettingsBody: Codable {
    var type: String?
    var ignoreInterval: String?
    var ignoreDuration: Int64?
    var chattype: String?
    var key: String?
}

extension BeaconClient {
    /// App-level push mode and do-not-disturb.
    @discardableResult
    public func setSilentModeForAll(_ param: SilentModeParam) async throws -> SilentModeResult {
        try await putSettings(chattype: "user", key: try currentUser(), param: param)
    }

    public func getSilentModeForAll() async throws -> SilentModeResult {
        let answer: Envelope<SettingsBody> = try await request(
            "GET", "users/\(try currentUser())/notification/user/\(try currentUser())", body: nil as String?)
        return Self.result(answer.data, conversation: nil, type: nil)
    }

    /// One conversation's push mode and do-not-disturb (`interval` is app level only).
    @discardableResult
    public func setSilentModeForConversation(_ conversationID: String, type: ChatType, param: SilentModeParam) async throws
        -> SilentModeResult
    {
        var result = try await putSettings(chattype: Self.chattype(type), key: conversationID, param: param)
        result.conversationID = conversationID
        result.conversationType = type
        return result
    }

    public func getSilentModeForConversation(_ conversationID: String, type: ChatType) async throws -> SilentModeResult {
        let answer: Envelope<SettingsBody> = try await request(
            "GET", "users/\(try currentUser())/notification/\(Self.chattype(type))/\(conversationID)", body: nil as String?)
        return Self.result(answer.data, conversation: conversationID, type: type)
    }

    /// Up to 20 conversations; those that inherit everything are left out.
    public func getSilentModeForConversations(_ conversations: [(id: String, type: ChatType)]) async throws -> [SilentModeResult] {
        struct Query: Encodable {
            struct Item: Encodable {
                var chattype: String
                var key: String
            }
            var conversations: [Item]
        }
        let answer: Envelope<[SettingsBody]> = try await request(
            "POST", "users/\(try currentUser())/notification/query",
            body: Query(conversations: conversations.map { .init(chattype: Self.chattype($0.type), key: $0.id) }))
        return (answer.data ?? []).map { item in
            Self.result(item, conversation: item.key, type: item.chattype == "chatgroup" ? .groupchat : .chat)
        }
    }

    /// The conversation inherits the app-level push mode again.
    public func clearRemindTypeForConversation(_ conversationID: String, type: ChatType) async throws {
        try await setSilentModeForConversation(conversationID, type: type, param: SilentModeParam(remindType: .default))
    }

    /// The name pushes show for this user's messages.
    public func updatePushDisplayName(_ name: String) async throws {
        let _: Envelope<[UserEntity]> = try await request("PUT", "users/\(try currentUser())", body: UpdateUserRequest(nickname: name))
    }

    /// 0 SimpleBanner, 1 MessageSummary.
    public func updatePushDisplayStyle(_ style: Int) async throws {
        let _: Envelope<[UserEntity]> = try await request(
            "PUT", "users/\(try currentUser())", body: UpdateUserRequest(notificationDisplayStyle: style))
    }

    public func getPushNotificationOptionsFromServer() async throws -> PushOptions {
        let answer: Envelope<[UserEntity]> = try await request("GET", "users/\(try currentUser())", body: nil as String?)
        let user = answer.entities?.first
        return PushOptions(displayName: user?.nickname, displayStyle: user?.notificationDisplayStyle ?? 0)
    }

    /// Pushes use the message's translation into `language` when it carries one; empty turns this off.
    public func setPreferredNotificationLanguage(_ language: String) async throws {
        struct Body: Codable { var translationLanguage: String }
        let _: Envelope<Body> = try await request(
            "PUT", "users/\(try currentUser())/notification/language", body: Body(translationLanguage: language))
    }

    public func getPreferredNotificationLanguage() async throws -> String {
        struct Body: Codable { var translationLanguage: String? }
        let answer: Envelope<Body> = try await request("GET", "users/\(try currentUser())/notification/language", body: nil as String?)
        return answer.data?.translationLanguage ?? ""
    }

    private func putSettings(chattype: String, key: String, param: SilentModeParam) async throws -> SilentModeResult {
        if let minutes = param.durationMinutes, !(0...10_080).contains(minutes) {
            throw BeaconClientError.server(status: 400, code: "illegal_argument", description: "duration must be 0-10080 minutes")
        }
        let body = SettingsBody(
            type: param.remindType?.rawValue,
            ignoreInterval: param.interval.map { "\($0.startHour):\($0.startMinute)-\($0.endHour):\($0.endMinute)" },
            ignoreDuration: param.durationMinutes.map { Int64($0) * 60_000 })
        let answer: Envelope<SettingsBody> = try await request(
            "PUT", "users/\(try currentUser())/notification/\(chattype)/\(key)", body: body)
        return Self.result(answer.data, conversation: nil, type: nil)
    }

    private func currentUser() throws -> String {
        guard let username else { throw BeaconClientError.notLoggedIn }
        return username
    }

    private static func chattype(_ type: ChatType) -> String { type == .groupchat ? "chatgroup" : "user" }

    private static func result(_ body: SettingsBody?, conversation: String?, type: ChatType?) -> SilentModeResult {
        let bounds = body?.ignoreInterval?.split(separator: "-").map { part -> Int? in
            let hm = part.split(separator: ":").compactMap { Int($0) }
            return hm.count == 2 ? hm[0] * 60 + hm[1] : nil
        }
        return SilentModeResult(
            conversationID: conversation, conversationType: type, remindType: body?.type.flatMap(RemindType.init),
            expireTimestamp: body?.ignoreDuration, start: bounds?.first ?? nil, end: bounds?.last ?? nil)
    }
}
