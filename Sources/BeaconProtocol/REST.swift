import BeaconCore

/// `POST /{org}/{app}/token`.
public struct TokenRequest: Sendable, Codable {
    public var grantType: String
    public var clientID: String?
    public var clientSecret: String?
    public var username: String?
    public var password: String?
    /// Requested lifetime in seconds (capped by the server).
    public var ttl: Int?

    enum CodingKeys: String, CodingKey {
        case grantType = "grant_type", clientID = "client_id", clientSecret = "client_secret", username, password, ttl
    }

    public static func password(username: String, password: String) -> TokenRequest {
        TokenRequest(grantType: "password", username: username, password: password)
    }

    public static func clientCredentials(id: String, secret: String) -> TokenRequest {
        TokenRequest(grantType: "client_credentials", clientID: id, clientSecret: secret)
    }

    public init(
        grantType: String, clientID: String? = nil, clientSecret: String? = nil, username: String? = nil,
        password: String? = nil, ttl: Int? = nil
    ) {
        self.grantType = grantType
        self.clientID = clientID
        self.clientSecret = clientSecret
        self.username = username
        self.password = password
        self.ttl = ttl
    }
}

public struct TokenResponse: Sendable, Codable {
    public var accessToken: String
    /// Seconds until the token expires.
    public var expiresIn: Int
    /// Present for app tokens: the app's key (`org#app`).
    public var application: String?
    /// Present for user tokens.
    public var user: UserEntity?

    enum CodingKeys: String, CodingKey {
        case accessToken = "access_token", expiresIn = "expires_in", application, user
    }

    public init(accessToken: String, expiresIn: Int, application: String? = nil, user: UserEntity? = nil) {
        self.accessToken = accessToken
        self.expiresIn = expiresIn
        self.application = application
        self.user = user
    }
}

/// A user as Easemob's REST API shows it.
public struct UserEntity: Sendable, Codable, Hashable {
    public var uuid: String
    public var type: String
    public var created: Int64
    public var modified: Int64
    public var username: String
    public var activated: Bool
    public var nickname: String?
    public var timezone: String?
    public var notificationDisplayStyle: Int?

    enum CodingKeys: String, CodingKey {
        case uuid, type, created, modified, username, activated, nickname, timezone, notificationDisplayStyle = "notification_display_style"
    }

    public init(
        uuid: String, created: Int64, modified: Int64, username: String, nickname: String?, timezone: String?,
        notificationDisplayStyle: Int? = nil
    ) {
        self.notificationDisplayStyle = notificationDisplayStyle
        self.uuid = uuid
        self.type = "user"
        self.created = created
        self.modified = modified
        self.username = username
        self.activated = true
        self.nickname = nickname
        self.timezone = timezone
    }
}

/// `POST /{org}/{app}/users` (one object or an array of them).
public struct CreateUserRequest: Sendable, Codable {
    public var username: String
    public var password: String
    public var nickname: String?

    public init(username: String, password: String, nickname: String? = nil) {
        self.username = username
        self.password = password
        self.nickname = nickname
    }
}

/// `PUT /{org}/{app}/users/{username}`. Absent fields are left unchanged.
public struct UpdateUserRequest: Sendable, Codable {
    public var nickname: String?
    public var timezone: String?
    /// 0 SimpleBanner ("You have a new message"), 1 MessageSummary ("<sender>: <text>").
    public var notificationDisplayStyle: Int?

    enum CodingKeys: String, CodingKey {
        case nickname, timezone, notificationDisplayStyle = "notification_display_style"
    }

    public init(nickname: String? = nil, timezone: String? = nil, notificationDisplayStyle: Int? = nil) {
        self.nickname = nickname
        self.timezone = timezone
        self.notificationDisplayStyle = notificationDisplayStyle
    }
}

/// `POST /{org}/{app}/chatgroups`.
public struct CreateGroupRequest: Sendable, Codable {
    public var groupname: String
    public var desc: String?
    public var owner: String
    public var members: [String]?
    public var maxusers: Int?

    public init(groupname: String, desc: String? = nil, owner: String, members: [String]? = nil, maxusers: Int? = nil) {
        self.groupname = groupname
        self.desc = desc
        self.owner = owner
        self.members = members
        self.maxusers = maxusers
    }
}

/// `POST /{org}/{app}/messages/users` and `/messages/chatgroups` (Easemob's current format).
public struct SendMessageRequest: Sendable, Codable {
    public var from: String?
    public var to: [String]
    public var type: MessageType
    public var body: JSONValue
    public var ext: [String: JSONValue]?
    public var syncDevice: Bool?
    public var routetype: String?
    /// Tencent IM's offline push options, mapped onto the same rules as Easemob's `ext` keys.
    public var offlinePushInfo: OfflinePushInfo?
    /// The client's own reference for this send (like an `Idempotency-Key` header): a retry within 24 h with the same
    /// one stores nothing and answers the first send's message ids.
    public var msgID: String?

    enum CodingKeys: String, CodingKey {
        case from, to, type, body, ext, syncDevice = "sync_device", routetype, offlinePushInfo = "offline_push_info", msgID = "msg_id"
    }

    public init(
        from: String? = nil, to: [String], type: MessageType, body: JSONValue, ext: [String: JSONValue]? = nil,
        syncDevice: Bool? = nil, routetype: String? = nil
    ) {
        self.from = from
        self.to = to
        self.type = type
        self.body = body
        self.ext = ext
        self.syncDevice = syncDevice
        self.routetype = routetype
    }
}

/// `POST /{org}/{app}/messages` (Easemob's legacy format): `msg` holds `type` beside the body fields.
public struct LegacySendMessageRequest: Sendable, Codable {
    public var targetType: String
    public var target: [String]
    public var msg: [String: JSONValue]
    public var from: String?
    public var ext: [String: JSONValue]?
    public var offlinePushInfo: OfflinePushInfo?
    /// As `SendMessageRequest.msgID`.
    public var msgID: String?

    enum CodingKeys: String, CodingKey {
        case targetType = "target_type", target, msg, from, ext, offlinePushInfo = "offline_push_info", msgID = "msg_id"
    }

    public init(targetType: String, target: [String], msg: [String: JSONValue], from: String? = nil, ext: [String: JSONValue]? = nil) {
        self.targetType = targetType
        self.target = target
        self.msg = msg
        self.from = from
        self.ext = ext
    }
}

/// Easemob's error body.
public struct ErrorBody: Sendable, Codable {
    public var error: String
    public var errorDescription: String
    public var exception: String
    public var timestamp: Int64
    public var duration: Int

    enum CodingKeys: String, CodingKey {
        case error, errorDescription = "error_description", exception, timestamp, duration
    }

    public init(error: String, errorDescription: String, exception: String, timestamp: Int64) {
        self.error = error
        self.errorDescription = errorDescription
        self.exception = exception
        self.timestamp = timestamp
        self.duration = 0
    }
}

/// Easemob's success envelope: `data` or `entities` beside request metadata.
public struct Envelope<Data: Codable & Sendable>: Sendable, Codable {
    public var action: String
    public var organization: String
    public var application: String
    public var applicationName: String
    public var path: String
    public var uri: String
    public var timestamp: Int64
    public var duration: Int
    public var data: Data?
    public var entities: Data?
    public var count: Int?
    /// Where the next page starts (pass it back as `cursor`); absent on the last page.
    public var cursor: String?

    public init(
        action: String, organization: String, application: String, applicationName: String, path: String, uri: String,
        timestamp: Int64, data: Data? = nil, entities: Data? = nil, count: Int? = nil, cursor: String? = nil
    ) {
        self.action = action
        self.organization = organization
        self.application = application
        self.applicationName = applicationName
        self.path = path
        self.uri = uri
        self.timestamp = timestamp
        self.duration = 0
        self.data = data
        self.entities = entities
        self.count = count
        self.cursor = cursor
    }
}

/// `PUT /{org}/{app}/users/{username}/push/binding`.
public struct PushBindingRequest: Sendable, Codable {
    public var deviceID: String
    /// Hex APNs device token; empty unbinds this device and notifier.
    public var deviceToken: String
    /// The push configuration name; empty unbinds every notifier of this device.
    public var notifierName: String
    /// Hex PushKit VoIP token of the same installation, if the app uses VoIP pushes for calls.
    public var voipToken: String?

    enum CodingKeys: String, CodingKey {
        case deviceID = "device_id", deviceToken = "device_token", notifierName = "notifier_name", voipToken = "voip_token"
    }

    public init(deviceID: String, deviceToken: String, notifierName: String, voipToken: String? = nil) {
        self.deviceID = deviceID
        self.deviceToken = deviceToken
        self.notifierName = notifierName
        self.voipToken = voipToken
    }
}

/// Tencent IM's `OfflinePushInfo` (snake_case), accepted on REST sends.
public struct OfflinePushInfo: Sendable, Codable, Hashable {
    /// 1: do not push this message.
    public var pushFlag: Int?
    public var title: String?
    public var desc: String?
    /// Delivered as the payload's `ext`.
    public var ext: String?
    public var apnsInfo: ApnsInfo?

    public struct ApnsInfo: Sendable, Codable, Hashable {
        public var sound: String?
        /// 1: this message does not raise the badge.
        public var badgeMode: Int?
        public var title: String?
        public var subTitle: String?
        public var image: String?
        public var mutableContent: Int?

        enum CodingKeys: String, CodingKey {
            case sound, badgeMode = "badge_mode", title, subTitle = "sub_title", image, mutableContent = "mutable_content"
        }
    }

    enum CodingKeys: String, CodingKey {
        case pushFlag = "push_flag", title, desc, ext, apnsInfo = "apns_info"
    }

    /// The same request in Easemob's `ext` keys (SPEC §3–§4); keys the sender set in `ext` win.
    public func merged(into ext: [String: JSONValue]) -> [String: JSONValue] {
        var result = ext
        var apns = ext["em_apns_ext"]?.objectValue ?? [:]
        func set(_ key: String, _ value: JSONValue?) {
            if let value, apns[key] == nil { apns[key] = value }
        }
        if pushFlag == 1, result["em_ignore_notification"] == nil { result["em_ignore_notification"] = true }
        set("em_push_title", (apnsInfo?.title ?? title).map(JSONValue.string))
        set("em_push_content", desc.map(JSONValue.string))
        set("em_alert_subTitle", apnsInfo?.subTitle.map(JSONValue.string))
        set("em_push_sound", apnsInfo?.sound.map(JSONValue.string))
        if apnsInfo?.mutableContent == 1 { set("em_push_mutable_content", true) }
        set("em_push_image", apnsInfo?.image.map(JSONValue.string))
        set("tencent_ext", ext["em_apns_ext"]?["tencent_ext"] == nil ? self.ext.map(JSONValue.string) : nil)
        if apnsInfo?.badgeMode == 1 { set("em_push_badge_unchanged", true) }
        if !apns.isEmpty { result["em_apns_ext"] = .object(apns) }
        return result
    }
}

// MARK: Read state

/// The body of `POST …/users/{u}/conversations/{type}/{key}/read` (optional: without it, everything so far is read).
public struct ReadRequest: Sendable, Codable {
    /// The message read up to, a decimal id.
    public var upTo: String?

    enum CodingKeys: String, CodingKey { case upTo = "up_to" }

    public init(upTo: String? = nil) {
        self.upTo = upTo
    }
}

/// What a read answers (`data`): the markers that moved and the user's badge afterwards.
public struct ReadAnswer: Sendable, Codable {
    public var read: [ReadState]
    public var badge: Int

    public init(read: [ReadState], badge: Int) {
        self.read = read
        self.badge = badge
    }
}

/// `PUT …/users/{u}/push/badge` (the app's own badge) and the `data` of its answer and of `GET` (the user's badge).
public struct BadgeBody: Sendable, Codable {
    public var badge: Int

    public init(badge: Int) {
        self.badge = badge
    }
}

/// One conversation in `GET …/users/{u}/conversations` (`entities`).
public struct ConversationInfo: Sendable, Hashable, Codable {
    public var chatType: ChatType
    /// The peer's username (1:1) or the group id.
    public var conversation: String
    /// Unread messages (cmd and silent messages never count).
    public var unread: Int
    /// The user's push mode for it is `NONE`.
    public var muted: Bool
    /// The message it is read up to, if any.
    public var readUpTo: String?
    /// The inbox position it is read up to (0: nothing read).
    public var readSeq: Int64
    public var lastMessageID: String
    public var lastTimestamp: Int64

    enum CodingKeys: String, CodingKey {
        case chatType = "chat_type", conversation, unread, muted, readUpTo = "read_up_to", readSeq = "read_seq",
            lastMessageID = "last_msg_id", lastTimestamp = "last_timestamp"
    }

    public init(
        chatType: ChatType, conversation: String, unread: Int, muted: Bool, readUpTo: String?, readSeq: Int64, lastMessageID: String,
        lastTimestamp: Int64
    ) {
        self.chatType = chatType
        self.conversation = conversation
        self.unread = unread
        self.muted = muted
        self.readUpTo = readUpTo
        self.readSeq = readSeq
        self.lastMessageID = lastMessageID
        self.lastTimestamp = lastTimestamp
    }
}
