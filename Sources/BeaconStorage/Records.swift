import BeaconCore

/// A tenant as stored.
public struct AppRecord: Sendable, Hashable {
    public var id: Int64
    public var key: AppKey
    public var clientID: String
    /// SHA-256 of the client secret, hex. The secret itself is shown once and never stored.
    public var clientSecretHash: String
    public var limits: OfflineLimits
    public var createdAt: Int64

    public init(id: Int64, key: AppKey, clientID: String, clientSecretHash: String, limits: OfflineLimits, createdAt: Int64) {
        self.id = id
        self.key = key
        self.clientID = clientID
        self.clientSecretHash = clientSecretHash
        self.limits = limits
        self.createdAt = createdAt
    }
}

/// A user to create.
public struct NewUser: Sendable, Hashable {
    public var username: String
    public var passwordHash: String
    public var nickname: String?

    public init(username: String, passwordHash: String, nickname: String? = nil) {
        self.username = username
        self.passwordHash = passwordHash
        self.nickname = nickname
    }
}

/// A user as stored.
public struct UserRecord: Sendable, Hashable {
    public var appID: Int64
    public var username: String
    public var uuid: String
    public var passwordHash: String
    public var nickname: String?
    public var timezone: String?
    public var createdAt: Int64
    public var modifiedAt: Int64
    /// Tokens issued before this instant (ms) are refused: set when the user is kicked.
    public var tokensValidAfter: Int64

    public init(
        appID: Int64, username: String, uuid: String, passwordHash: String, nickname: String?, timezone: String?,
        createdAt: Int64, modifiedAt: Int64, tokensValidAfter: Int64
    ) {
        self.appID = appID
        self.username = username
        self.uuid = uuid
        self.passwordHash = passwordHash
        self.nickname = nickname
        self.timezone = timezone
        self.createdAt = createdAt
        self.modifiedAt = modifiedAt
        self.tokensValidAfter = tokensValidAfter
    }
}

/// Changes to a user; `nil` leaves a field as it is.
public struct UserChanges: Sendable, Hashable {
    public var nickname: String?
    public var timezone: String?

    public init(nickname: String? = nil, timezone: String? = nil) {
        self.nickname = nickname
        self.timezone = timezone
    }
}

/// A chat group as stored.
public struct GroupRecord: Sendable, Hashable {
    public var appID: Int64
    public var id: String
    public var name: String
    public var description: String
    public var owner: String
    public var maxUsers: Int
    public var createdAt: Int64

    public init(appID: Int64, id: String, name: String, description: String, owner: String, maxUsers: Int, createdAt: Int64) {
        self.appID = appID
        self.id = id
        self.name = name
        self.description = description
        self.owner = owner
        self.maxUsers = maxUsers
        self.createdAt = createdAt
    }
}

/// One copy of a message to put in a user's inbox.
public struct Delivery: Sendable, Hashable {
    public var username: String
    /// The device the message was sent from, for the sender's own copy: that device does not get it back.
    public var originDevice: String?

    public init(username: String, originDevice: String? = nil) {
        self.username = username
        self.originDevice = originDevice
    }
}

/// A message in one user's inbox, numbered by that user's own gapless-at-write sequence.
public struct InboxEntry: Sendable, Hashable {
    public var username: String
    public var seq: Int64
    public var message: Message
    public var originDevice: String?

    public init(username: String, seq: Int64, message: Message, originDevice: String?) {
        self.username = username
        self.seq = seq
        self.message = message
        self.originDevice = originDevice
    }
}

/// Whether a stored message has reached a device of the user.
public enum OfflineStatus: String, Sendable {
    case delivered
    case undelivered
}

/// How far one device has acknowledged its user's inbox.
public struct DeviceCursor: Sendable, Hashable {
    public var app: Int64
    public var username: String
    public var device: String
    public var seq: Int64

    public init(app: Int64, username: String, device: String, seq: Int64) {
        self.app = app
        self.username = username
        self.device = device
        self.seq = seq
    }
}
