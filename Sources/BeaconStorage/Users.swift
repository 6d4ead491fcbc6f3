import BeaconCore

/// Users: their accounts, profiles and tokens' validity. Deleting a user deletes every record of theirs.
public protocol UserStore: Sendable {
    /// Creates all users or none; fails with `duplicate` naming the first that exists.
    func createUsers(_ users: [NewUser], app: Int64, now: Int64) async throws -> [UserRecord]
    func user(_ username: String, app: Int64) async throws -> UserRecord?
    /// Users in username order (bytewise), after `after` when given, whose name starts with `prefix` when given.
    func users(app: Int64, after: String?, prefix: String?, limit: Int) async throws -> [UserRecord]
    /// The subset of `usernames` that exist.
    func existingUsers(_ usernames: [String], app: Int64) async throws -> Set<String>
    /// The users of `usernames` that exist, in no particular order.
    func users(named usernames: [String], app: Int64) async throws -> [UserRecord]
    /// Applies `changes`; returns the updated user, or nil if there is none.
    func updateUser(_ username: String, app: Int64, changes: UserChanges, now: Int64) async throws -> UserRecord?
    /// Refuses every token issued to the user before `instant`.
    func revokeTokens(of username: String, app: Int64, before instant: Int64) async throws
    /// Deletes the user with their inbox, cursors, group memberships, push bindings and settings, and ends their
    /// pending push jobs as `skipped` (`user_deleted`). False if there was none.
    func deleteUser(_ username: String, app: Int64, now: Int64) async throws -> Bool
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
    /// `notification_display_style`: 0 SimpleBanner, 1 MessageSummary.
    public var displayStyle: Int

    public init(
        appID: Int64, username: String, uuid: String, passwordHash: String, nickname: String?, timezone: String?,
        createdAt: Int64, modifiedAt: Int64, tokensValidAfter: Int64, displayStyle: Int = 0
    ) {
        self.displayStyle = displayStyle
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
    public var displayStyle: Int?

    public init(nickname: String? = nil, timezone: String? = nil, displayStyle: Int? = nil) {
        self.nickname = nickname
        self.timezone = timezone
        self.displayStyle = displayStyle
    }
}
