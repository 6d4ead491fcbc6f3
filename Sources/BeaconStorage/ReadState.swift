import BeaconCore

/// How far each user has read each conversation, and the badge that follows from it.
public protocol ReadStateStore: Sendable {
    /// Marks `conversation` (every conversation with something unread when nil) read up to message `upTo` (everything
    /// stored so far when nil) for the user. Markers only move forward; a message not in the conversation moves it to the
    /// newest entry with an id at most `upTo`. A client-reported badge loses the messages it counted that are now read.
    /// Pending pushes of messages now read that no worker holds end `skipped` (`read`); devices with such a push sent or in
    /// flight are `pushedDevices` (`readingDevice` left out).
    func markRead(
        _ username: String, app: Int64, conversation: ConversationID?, upTo: UInt64?, readingDevice: String?, now: Int64
    ) async throws -> ReadUpdate
    /// The user's read markers set after `version`: the `limit` most recent changes, oldest first.
    func readMarkers(of username: String, app: Int64, after version: Int64, limit: Int) async throws -> [ReadMarker]
    /// The user's conversations that have entries in their inbox, most recent first, with unread counts.
    func conversations(of username: String, app: Int64, limit: Int) async throws -> [ConversationSummary]
    /// The user's badge: the client's last reported total (less what was read of it since), plus unread messages stored
    /// after that report, in conversations that count (muted ones only if the app's policy says so).
    func badge(of username: String, app: Int64) async throws -> Int
    /// The client reports the badge it shows: counting continues from it.
    func reportBadge(of username: String, app: Int64, value: Int) async throws
}

/// How far a user has read one conversation: everything in it up to inbox position `seq` (message `upTo`).
public struct ReadMarker: Sendable, Hashable {
    public var conversation: ConversationID
    public var seq: Int64
    public var upTo: UInt64
    /// The user's read-state version when this marker was set: markers changed after version V are those above V.
    public var version: Int64

    public init(conversation: ConversationID, seq: Int64, upTo: UInt64, version: Int64) {
        self.conversation = conversation
        self.seq = seq
        self.upTo = upTo
        self.version = version
    }
}

/// What marking conversations read changed.
public struct ReadUpdate: Sendable, Hashable {
    /// The markers that moved forward (none: everything was read already).
    public var markers: [ReadMarker]
    /// The user's badge afterwards.
    public var badge: Int
    /// The user's devices, other than the one that read, with a push sent for a message now read.
    public var pushedDevices: [SkippedDevice]

    public init(markers: [ReadMarker], badge: Int, pushedDevices: [SkippedDevice]) {
        self.markers = markers
        self.badge = badge
        self.pushedDevices = pushedDevices
    }
}

/// One conversation of a user, as the conversation list shows it.
public struct ConversationSummary: Sendable, Hashable {
    public var conversation: ConversationID
    /// Unread messages (those that count as unread, after the read marker).
    public var unread: Int
    /// Whether the conversation's push mode is `NONE` (its own, or the user's when it has none).
    public var muted: Bool
    public var read: ReadMarker?
    public var lastMessageID: UInt64
    public var lastTimestamp: Int64

    public init(conversation: ConversationID, unread: Int, muted: Bool, read: ReadMarker?, lastMessageID: UInt64, lastTimestamp: Int64) {
        self.conversation = conversation
        self.unread = unread
        self.muted = muted
        self.read = read
        self.lastMessageID = lastMessageID
        self.lastTimestamp = lastTimestamp
    }
}
