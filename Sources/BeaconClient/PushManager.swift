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

/// What Beacon puts in a push, parsed on the device (e.g. in a notification service extension).
public struct PushPayload: Sendable, Hashable {
    public var title: String?
    public var subtitle: String?
    public var body: String?
    public var badge: Int?
    public var sound: String?
    public var threadID: String?
    /// Sender.
    public var from: String?
    /// Receiver.
    public var to: String?
    /// Group id (group messages only).
    public var group: String?
    /// Message id.
    public var messageID: String?
    /// The sender's custom content (`em_apns_ext.extern` / `em_push_ext.custom`).
    public var extra: JSONValue?
    /// Tencent's `OfflinePushInfo.Ext`, as the sender put it.
    public var tencentExt: JSONValue?
    /// An image for a notification service extension to attach (`em_push_image`, Tencent's `ApnsInfo.Image`).
    public var imageURL: String?
    /// `aps.category`: the notification's actions.
    public var category: String?
    /// `aps.mutable-content`: a notification service extension may change it before it shows.
    public var mutableContent: Bool
    /// The localization keys and arguments (`title-loc-key`, `title-loc-args`, `loc-key`, `loc-args`).
    public var titleLocKey: String?
    public var titleLocArgs: [String]
    public var locKey: String?
    public var locArgs: [String]
    /// Set for Beacon's background push telling what the user read on another device, or which messages were recalled
    /// (not a message notification).
    public var withdrawal: Withdrawal?

    /// What was read elsewhere or recalled: the notifications to remove and the badge to show.
    public struct Withdrawal: Sendable, Hashable {
        /// One conversation read up to a message.
        public struct Read: Sendable, Hashable {
            public var chatType: ChatType
            /// The peer's username (1:1) or the group id: the `thread-id` of its notifications.
            public var conversation: String
            public var upTo: UInt64
        }

        public var badge: Int
        public var reads: [Read]
        /// Messages recalled: their notifications go whatever the conversation.
        public var recalled: [UInt64]

        public init(badge: Int, reads: [Read], recalled: [UInt64] = []) {
            self.badge = badge
            self.reads = reads
            self.recalled = recalled
        }

        /// Whether a delivered notification shows a message now read or recalled: its message id (`m`) is recalled, or
        /// its conversation (`thread-id`, and `g` present for groups) is listed and its id is at most the one read up to.
        public func covers(_ notification: PushPayload) -> Bool {
            guard let id = notification.messageID.flatMap({ UInt64($0) }) else { return false }
            if recalled.contains(id) { return true }
            guard let threadID = notification.threadID else { return false }
            let chatType: ChatType = notification.group == nil ? .chat : .groupchat
            return reads.contains { $0.chatType == chatType && $0.conversation == threadID && id <= $0.upTo }
        }
    }

    /// Parses the JSON payload bytes.
    public init(json: Data) throws {
        let root = try JSONDecoder().decode(JSONValue.self, from: json)
        let aps = root["aps"]
        let alert = aps?["alert"]
        title = alert?["title"]?.stringValue
        subtitle = alert?["subtitle"]?.stringValue
        body = alert?["body"]?.stringValue ?? alert?.stringValue
        badge = aps?["badge"]?.intValue
        sound = aps?["sound"]?.stringValue
        threadID = aps?["thread-id"]?.stringValue
        from = root["f"]?.stringValue
        to = root["t"]?.stringValue
        group = root["g"]?.stringValue
        messageID = root["m"]?.stringValue
        extra = root["e"]
        tencentExt = root["ext"]
        imageURL = root["image"]?.stringValue
        category = aps?["category"]?.stringValue
        mutableContent = aps?["mutable-content"]?.intValue == 1 || aps?["mutable-content"]?.boolValue == true
        titleLocKey = alert?["title-loc-key"]?.stringValue
        titleLocArgs = Self.strings(alert?["title-loc-args"])
        locKey = alert?["loc-key"]?.stringValue
        locArgs = Self.strings(alert?["loc-args"])
        if let beacon = root["beacon"], let badge = beacon["badge"]?.intValue {
            let reads: [Withdrawal.Read] = (beacon["read"]?.arrayValue ?? []).compactMap { read in
                guard let type = read["chat_type"]?.stringValue.flatMap(ChatType.init),
                    let conversation = read["conversation"]?.stringValue,
                    let upTo = read["up_to"]?.stringValue.flatMap({ UInt64($0) })
                else { return nil }
                return Withdrawal.Read(chatType: type, conversation: conversation, upTo: upTo)
            }
            let recalled = (beacon["recalled"]?.arrayValue ?? []).compactMap { $0.stringValue.flatMap { UInt64($0) } }
            withdrawal = Withdrawal(badge: badge, reads: reads, recalled: recalled)
        }
    }

    /// Localization arguments as strings, each in its place (a value that is not a string as its JSON text).
    private static func strings(_ value: JSONValue?) -> [String] {
        (value?.arrayValue ?? []).map { $0.stringValue ?? JSONWriter.string($0) }
    }

    /// Parses `UNNotificationContent.userInfo` / `didReceiveRemoteNotification` dictionaries.
    public init(userInfo: [AnyHashable: Any]) throws {
        let object = Dictionary(uniqueKeysWithValues: userInfo.compactMap { key, value in (key as? String).map { ($0, value) } })
        // A local notification's userInfo may hold dates or data, which JSONSerialization would raise on (not throw).
        guard JSONSerialization.isValidJSONObject(object) else { throw BeaconClientError.badResponse("userInfo is not JSON") }
        try self.init(json: try JSONSerialization.data(withJSONObject: object))
    }
}

#if canImport(UserNotifications)
    import UserNotifications

    extension PushPayload.Withdrawal {
        /// Removes the delivered notifications of messages now read or recalled and sets the app's badge: what the app does with
        /// Beacon's background push (`application(_:didReceiveRemoteNotification:fetchCompletionHandler:)`).
        @available(iOS 16.0, macOS 13.0, watchOS 9.0, tvOS 16.0, *)
        public func apply(to center: UNUserNotificationCenter = .current()) async {
            let delivered = await center.deliveredNotifications()
            let read = delivered.filter { notification in
                (try? PushPayload(userInfo: notification.request.content.userInfo)).map(covers) ?? false
            }
            center.removeDeliveredNotifications(withIdentifiers: read.map(\.request.identifier))
            try? await center.setBadgeCount(badge)
        }
    }
#endif
