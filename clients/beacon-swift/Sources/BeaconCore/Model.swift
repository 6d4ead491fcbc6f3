/// A tenant, addressed as `org/app` in URLs (app key `org#app`).
public struct AppKey: Sendable, Hashable, CustomStringConvertible {
    public var org: String
    public var name: String

    public init(org: String, name: String) {
        self.org = org
        self.name = name
    }

    /// Parses `ORG/APP` (or `ORG#APP`, Easemob's app key form).
    public init(parsing text: String) throws(BeaconError) {
        let parts = text.split(whereSeparator: { $0 == "/" || $0 == "#" }).map(String.init)
        guard parts.count == 2, Validation.isValidName(parts[0]), Validation.isValidName(parts[1]) else {
            throw .illegal("app must be ORG/APP with letters, digits, '-', '_' or '.' in each part, got '\(text)'")
        }
        self.init(org: parts[0], name: parts[1])
    }

    public var description: String { "\(org)/\(name)" }
}

/// Whether a message goes to one user or to a group.
public enum ChatType: String, Sendable, Codable, Hashable, CaseIterable {
    case chat
    case groupchat
}

/// The message types of Easemob's REST and SDK.
public enum MessageType: String, Sendable, Codable, Hashable, CaseIterable {
    case txt, img, audio, video, file, loc, cmd, custom
}

/// A conversation from one user's point of view: a peer for 1:1 chats, a group otherwise.
public struct ConversationID: Sendable, Hashable, CustomStringConvertible {
    public var chatType: ChatType
    /// The peer's username (1:1) or the group id.
    public var key: String

    public init(chatType: ChatType, key: String) {
        self.chatType = chatType
        self.key = key
    }

    /// `chat:alice` or `groupchat:1234`: the form stored with each inbox entry.
    public var description: String { "\(chatType.rawValue):\(key)" }

    public init?(_ text: String) {
        guard let colon = text.firstIndex(of: ":"), let type = ChatType(rawValue: String(text[..<colon])) else {
            return nil
        }
        self.init(chatType: type, key: String(text[text.index(after: colon)...]))
    }
}

/// A stored (or online-only) chat message. Ids are server-assigned, 64-bit and time-ordered.
public struct Message: Sendable, Hashable, Codable {
    public var id: UInt64
    public var from: String
    /// The receiving username (1:1) or group id.
    public var to: String
    public var chatType: ChatType
    public var type: MessageType
    public var body: JSONValue
    public var ext: [String: JSONValue]
    /// Server time of acceptance, milliseconds since 1970.
    public var timestamp: Int64
    /// True for `routetype: ROUTE_ONLINE`: delivered to online devices only, never stored or pushed.
    public var onlineOnly: Bool

    public init(
        id: UInt64, from: String, to: String, chatType: ChatType, type: MessageType, body: JSONValue,
        ext: [String: JSONValue] = [:], timestamp: Int64, onlineOnly: Bool = false
    ) {
        self.id = id
        self.from = from
        self.to = to
        self.chatType = chatType
        self.type = type
        self.body = body
        self.ext = ext
        self.timestamp = timestamp
        self.onlineOnly = onlineOnly
    }

    /// Whether the message counts as unread for its receivers (their conversations' unread counts and their badge):
    /// not `cmd`, not online-only, not silent (`em_ignore_notification`) and not marked to leave the badge alone
    /// (`em_apns_ext.em_push_badge_unchanged`, Tencent's `BadgeMode: 1`).
    public var countsAsUnread: Bool {
        type != .cmd && !onlineOnly && ext["em_ignore_notification"]?.boolValue != true
            && ext["em_apns_ext"]?["em_push_badge_unchanged"]?.boolValue != true
    }

    /// The conversation this message belongs to, as seen by `username`.
    public func conversation(for username: String) -> ConversationID {
        switch chatType {
        case .groupchat: ConversationID(chatType: .groupchat, key: to)
        case .chat: ConversationID(chatType: .chat, key: username == to ? from : to)
        }
    }
}

/// Per-app limits on what is kept for devices that are away.
public struct OfflineLimits: Sendable, Hashable, Codable {
    /// Newest messages kept per 1:1 conversation and user.
    public var perChat: Int
    /// Newest messages kept per group conversation and user.
    public var perGroup: Int
    /// How long a message is kept, in seconds.
    public var maxAgeSeconds: Int64

    public init(perChat: Int = 500, perGroup: Int = 200, maxAgeSeconds: Int64 = 7 * 24 * 3600) {
        self.perChat = perChat
        self.perGroup = perGroup
        self.maxAgeSeconds = maxAgeSeconds
    }

    public static let `default` = OfflineLimits()

    public func limit(for chatType: ChatType) -> Int {
        chatType == .chat ? perChat : perGroup
    }
}

/// Push modes ("remind types").
public enum RemindType: String, Sendable, Codable, Hashable, CaseIterable {
    /// Conversations only: inherit the app-level mode.
    case `default` = "DEFAULT"
    case all = "ALL"
    /// Only messages that mention the user (`em_at_list`).
    case mentionsOnly = "AT"
    case none = "NONE"
}
