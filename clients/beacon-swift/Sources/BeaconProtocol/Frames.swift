import BeaconCore

/// What a device sends over its WebSocket. Every frame is one JSON text message with an `op` field;
/// `docs/protocol.md` describes each one.
public enum ClientFrame: Sendable, Hashable {
    /// Send a message. `id` is the client's own reference, echoed in the `sent` or `error` answer.
    case send(SendRequest)
    /// Everything up to and including `seq` has been received and may be forgotten for this device.
    case ack(seq: Int64)
    /// Ask again for everything after the device's acknowledged cursor.
    case sync
    /// Keep-alive; answered with `pong`.
    case ping
    /// The device is going away: it is offline from this frame on (pushes resume at once); answered with
    /// `closing(reason: "logout")` before the server closes the connection.
    case logout
    /// The user has read the conversation up to message `upTo` (everything so far when nil).
    case read(chatType: ChatType, conversation: String, upTo: String?)
    /// The user has read every conversation.
    case readAll
    /// The badge the app shows (its own unread total, e.g. when it goes to background): counting continues from it.
    case badge(count: Int)

    public struct SendRequest: Sendable, Hashable {
        public var id: String
        public var to: String
        public var chatType: ChatType
        public var type: MessageType
        public var body: JSONValue
        public var ext: [String: JSONValue]?
        public var routetype: String?

        public init(
            id: String, to: String, chatType: ChatType, type: MessageType, body: JSONValue,
            ext: [String: JSONValue]? = nil, routetype: String? = nil
        ) {
            self.id = id
            self.to = to
            self.chatType = chatType
            self.type = type
            self.body = body
            self.ext = ext
            self.routetype = routetype
        }
    }
}

/// What the server sends to a device.
public enum ServerFrame: Sendable, Hashable {
    /// First frame after the upgrade: who the device is and its acknowledged cursor.
    case welcome(username: String, deviceID: String, cursor: Int64)
    /// A message for this device. `seq` is absent for online-only (`ROUTE_ONLINE`) messages.
    case message(seq: Int64?, message: WireMessage)
    /// The message with client reference `id` is stored (or, for online-only, dispatched).
    case sent(id: String, messageID: String, timestamp: Int64)
    /// The device has received everything stored for it up to `seq`.
    case synced(seq: Int64)
    case pong
    /// A frame could not be handled. `id` names the send it refers to, when there is one.
    case error(id: String?, code: String, description: String)
    /// The server closes this connection: `replaced` (same device connected again) or `kicked` (must log in again).
    case closing(reason: String)
    /// The user read a conversation (on any device): its read marker moved.
    case read(ReadState)
    /// A message this device may hold was recalled: the notice at inbox position `seq` (its own id `noticeID`, a decimal
    /// string in JSON), acknowledged like a message.
    case recall(seq: Int64, noticeID: UInt64, notice: RecallNotice)
}

/// A conversation's read marker as devices receive it (`read` frame).
public struct ReadState: Sendable, Hashable {
    public var chatType: ChatType
    /// The peer's username (1:1) or the group id.
    public var conversation: String
    /// Read up to and including this message id (decimal string).
    public var upTo: String
    /// Its position in the user's inbox: entries of the conversation at or below it are read.
    public var seq: Int64
    /// The user's read-state version of this change; a device that reconnects with `reads_since=V` gets the markers above V.
    public var version: Int64
    /// The user's badge after the change (absent in the markers sent after connecting).
    public var badge: Int?

    public init(chatType: ChatType, conversation: String, upTo: String, seq: Int64, version: Int64, badge: Int? = nil) {
        self.chatType = chatType
        self.conversation = conversation
        self.upTo = upTo
        self.seq = seq
        self.version = version
        self.badge = badge
    }
}
