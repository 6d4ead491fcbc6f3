import BeaconCore

/// What decides and shapes a user's pushes: their settings per scope, language and template, the app's templates and
/// policy.
public protocol PushSettingsStore: Sendable {
    /// Creates or replaces one scope's settings; a record with nothing set is deleted.
    func savePushSettings(_ settings: PushSettingsRecord, app: Int64) async throws
    /// Settings of many users at these scopes, and their push profiles: what the decision and payload read for a message.
    func pushSettings(of usernames: [String], scopes: [String], app: Int64) async throws
        -> (settings: [PushSettingsRecord], profiles: [String: PushProfile])
    /// Sets the user's preferred push language (nil clears) and chosen template (nil clears); absent = unchanged.
    func setPushPreferences(of username: String, app: Int64, language: String??, template: String??) async throws
    /// Creates a template (fails with `duplicate` when the name exists) or, with `replace`, updates one that exists.
    func saveTemplate(_ template: PushTemplateRecord, app: Int64, replace: Bool) async throws -> Bool
    func templates(app: Int64) async throws -> [PushTemplateRecord]
    func deleteTemplate(_ name: String, app: Int64) async throws -> Bool
    func pushPolicy(app: Int64) async throws -> PushPolicyRecord
    func savePushPolicy(_ policy: PushPolicyRecord, app: Int64) async throws
}

extension PushSettingsStore {
    /// The user's settings at these scopes (missing scopes are absent).
    public func pushSettings(of username: String, scopes: [String], app: Int64) async throws -> [String: PushSettingsRecord] {
        let found = try await pushSettings(of: [username], scopes: scopes, app: app).settings
        return Dictionary(found.map { ($0.scope, $0) }, uniquingKeysWith: { first, _ in first })
    }
}

/// A user's push settings at one scope: the app level (`scope` empty) or one conversation (`chat:peer`, `groupchat:id`).
public struct PushSettingsRecord: Sendable, Hashable, Codable {
    public var username: String
    public var scope: String
    /// `DEFAULT`, `ALL`, `AT`, `NONE`; nil = not set.
    public var remindType: String?
    /// `H:M-H:M` (app level only).
    public var quietHours: String?
    /// One-shot do-not-disturb expiry, ms.
    public var silentUntil: Int64?

    public init(username: String, scope: String, remindType: String? = nil, quietHours: String? = nil, silentUntil: Int64? = nil) {
        self.username = username
        self.scope = scope
        self.remindType = remindType
        self.quietHours = quietHours
        self.silentUntil = silentUntil
    }
}

/// What the payload and the decision need to know about a receiver.
public struct PushProfile: Sendable, Hashable {
    /// IANA time zone, if the user set one.
    public var timeZone: String?
    /// `notification_display_style`: 0 SimpleBanner, 1 MessageSummary.
    public var displayStyle: Int
    /// Preferred language for translated pushes (nil: none).
    public var language: String?
    /// The template the user chose.
    public var template: String?
    /// The user's push nickname.
    public var nickname: String?

    public init(timeZone: String? = nil, displayStyle: Int = 0, language: String? = nil, template: String? = nil, nickname: String? = nil) {
        self.timeZone = timeZone
        self.displayStyle = displayStyle
        self.language = language
        self.template = template
        self.nickname = nickname
    }
}

/// App-wide push policy (`/push/policy`).
public struct PushPolicyRecord: Sendable, Hashable, Codable {
    /// `all_offline` or `any_offline`.
    public var multiDevice: String
    /// Default IANA time zone for users without one.
    public var timezone: String
    /// Overrides of the default display strings (`new_message`, `image`, `voice`, `video`, `file`, `location`, `custom`).
    public var displayStrings: [String: String]

    /// Whether unread messages of muted conversations (push mode `NONE`) count in the badge.
    public var badgeCountsMuted: Bool
    /// How long after sending a user may recall a message (s); the app itself may recall at any time.
    public var recallLimitSeconds: Int64

    /// Easemob's and Tencent's default: two minutes.
    public static let defaultRecallLimitSeconds: Int64 = 120
    /// The longest limit an app may set: seven days, as Easemob allows.
    public static let maxRecallLimitSeconds: Int64 = 7 * 24 * 3600

    public init(
        multiDevice: String = "all_offline", timezone: String = "UTC", displayStrings: [String: String] = [:],
        badgeCountsMuted: Bool = false, recallLimitSeconds: Int64 = Self.defaultRecallLimitSeconds
    ) {
        self.multiDevice = multiDevice
        self.timezone = timezone
        self.displayStrings = displayStrings
        self.badgeCountsMuted = badgeCountsMuted
        self.recallLimitSeconds = recallLimitSeconds
    }
}

/// An app's push template (`POST /notification/template`).
public struct PushTemplateRecord: Sendable, Hashable, Codable {
    public var name: String
    public var titlePattern: String
    public var contentPattern: String
    public var createdAt: Int64
    public var updatedAt: Int64

    public init(name: String, titlePattern: String, contentPattern: String, createdAt: Int64, updatedAt: Int64) {
        self.name = name
        self.titlePattern = titlePattern
        self.contentPattern = contentPattern
        self.createdAt = createdAt
        self.updatedAt = updatedAt
    }
}
