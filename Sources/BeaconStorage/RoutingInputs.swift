import BeaconCore

/// What deciding and rendering one message's pushes reads from the store: the app's configurations, policy and templates,
/// the receivers' settings, profiles and bindings, and the sender's nickname. One read, so that an engine answering it in
/// one statement (PostgreSQL) spends one round trip per message on it, not seven.
public struct RoutingInputs: Sendable, Hashable {
    /// The app's push configurations, as a job needs them.
    public var notifiers: [Notifier]
    public var policy: PushPolicyRecord
    public var templates: [PushTemplateRecord]
    /// The receivers' settings at the scopes asked for.
    public var settings: [PushSettingsRecord]
    /// The receivers' push profiles (receivers that do not exist are absent).
    public var profiles: [String: PushProfile]
    /// The sender's nickname (nil: none, or the sender is not a user).
    public var senderNickname: String?
    /// The receivers' bindings (absent: none).
    public var bindings: [String: [PushBinding]]

    public init(
        notifiers: [Notifier], policy: PushPolicyRecord, templates: [PushTemplateRecord], settings: [PushSettingsRecord],
        profiles: [String: PushProfile], senderNickname: String?, bindings: [String: [PushBinding]]
    ) {
        self.notifiers = notifiers
        self.policy = policy
        self.templates = templates
        self.settings = settings
        self.profiles = profiles
        self.senderNickname = senderNickname
        self.bindings = bindings
    }
}

/// Which message's routing inputs an append reads with it (`MessageStore.append(_:app:receipt:readingInputs:)`): those
/// `BeaconStore.routingInputs` would answer for `sender`, `recipients` and `scopes`.
public struct RoutingInputsRequest: Sendable, Hashable {
    public var messageID: UInt64
    public var sender: String
    public var recipients: [String]
    public var scopes: [String]

    public init(messageID: UInt64, sender: String, recipients: [String], scopes: [String]) {
        self.messageID = messageID
        self.sender = sender
        self.recipients = recipients
        self.scopes = scopes
    }
}

/// What a push job needs of a push configuration: its name, the topic and whether it may carry VoIP.
public struct Notifier: Sendable, Hashable, Codable {
    public var name: String
    public var bundleID: String
    public var voip: Bool

    public init(name: String, bundleID: String, voip: Bool) {
        self.name = name
        self.bundleID = bundleID
        self.voip = voip
    }

    public init(_ config: PushConfigRecord) {
        self.init(name: config.name, bundleID: config.bundleID, voip: config.voip)
    }
}

extension BeaconStore {
    /// The inputs of one message's routing, read one area at a time (an embedded engine's reads cost no round trip).
    /// The receivers' settings are those at `scopes`; an engine answering in one statement must give the same answer.
    public func routingInputs(sender: String, recipients: [String], scopes: [String], app: Int64) async throws -> RoutingInputs {
        let (settings, profiles) = try await pushSettings(of: recipients, scopes: scopes, app: app)
        return RoutingInputs(
            notifiers: try await pushConfigs(app: app).map(Notifier.init), policy: try await pushPolicy(app: app),
            templates: try await templates(app: app), settings: settings, profiles: profiles,
            senderNickname: try await user(sender, app: app)?.nickname, bindings: try await bindings(of: recipients, app: app))
    }
}
