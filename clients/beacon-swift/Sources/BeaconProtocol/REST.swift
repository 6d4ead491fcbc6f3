import BeaconCore

// The REST bodies the SDK and the server share. A body only the server reads or writes lives beside its route, in
// `BeaconServer/Routes/`.

/// `POST /{org}/{app}/token`.
public struct TokenRequest: Sendable, Codable {
    public var grantType: String
    public var clientID: String?
    public var clientSecret: String?
    public var username: String?
    public var password: String?
    /// A Tencent UserSig of `username` (`grant_type: usersig`).
    public var usersig: String?
    /// Requested lifetime in seconds (capped by the server).
    public var ttl: Int?

    enum CodingKeys: String, CodingKey {
        case grantType = "grant_type", clientID = "client_id", clientSecret = "client_secret", username, password, usersig, ttl
    }

    public static func password(username: String, password: String) -> TokenRequest {
        TokenRequest(grantType: "password", username: username, password: password)
    }

    /// A login with a Tencent UserSig the app's backend made for `username`.
    public static func userSig(username: String, userSig: String) -> TokenRequest {
        TokenRequest(grantType: "usersig", username: username, usersig: userSig)
    }

    public static func clientCredentials(id: String, secret: String) -> TokenRequest {
        TokenRequest(grantType: "client_credentials", clientID: id, clientSecret: secret)
    }

    public init(
        grantType: String, clientID: String? = nil, clientSecret: String? = nil, username: String? = nil,
        password: String? = nil, usersig: String? = nil, ttl: Int? = nil
    ) {
        self.grantType = grantType
        self.clientID = clientID
        self.clientSecret = clientSecret
        self.username = username
        self.password = password
        self.usersig = usersig
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

/// `POST /{org}/{app}/messages/msg_recall` (Easemob's field names). `sync_device` is accepted and ignored: the sender's
/// devices always learn of a recall.
public struct RecallRequest: Sendable, Codable {
    /// The message to recall, a decimal id.
    public var msgID: String
    /// The username (`chat`) or group id (`groupchat`) it was sent to.
    public var to: String
    public var chatType: String
    /// Its sender: the app recalls on their behalf, within the app's recall limit (unless `force`). Without it, the app
    /// (as `admin`) recalls any message at any time; a user token recalls its own.
    public var from: String?
    public var force: Bool?
    public var syncDevice: Bool?

    enum CodingKeys: String, CodingKey {
        case msgID = "msg_id", to, chatType = "chat_type", from, force, syncDevice = "sync_device"
    }

    public init(msgID: String, to: String, chatType: String, from: String? = nil, force: Bool? = nil) {
        self.msgID = msgID
        self.to = to
        self.chatType = chatType
        self.from = from
        self.force = force
    }
}

/// What a recall answers (`data`), as Easemob does.
public struct RecallAnswer: Sendable, Codable {
    /// `yes`.
    public var recalled: String
    public var chattype: String
    public var from: String
    public var to: String
    public var msgID: String

    enum CodingKeys: String, CodingKey {
        case recalled, chattype, from, to, msgID = "msg_id"
    }

    public init(recalled: String, chattype: String, from: String, to: String, msgID: String) {
        self.recalled = recalled
        self.chattype = chattype
        self.from = from
        self.to = to
        self.msgID = msgID
    }
}
