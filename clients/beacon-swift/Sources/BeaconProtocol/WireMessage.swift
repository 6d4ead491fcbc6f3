import BeaconCore

/// A message as it travels over the WebSocket and in REST answers (Easemob field names, ids as decimal strings).
public struct WireMessage: Sendable, Hashable {
    public var msgID: String
    public var from: String
    public var to: String
    public var chatType: ChatType
    public var type: MessageType
    public var body: JSONValue
    public var ext: [String: JSONValue]
    public var timestamp: Int64
    public var routetype: String?

    public init(_ message: Message) {
        self.msgID = String(message.id)
        self.from = message.from
        self.to = message.to
        self.chatType = message.chatType
        self.type = message.type
        self.body = message.body
        self.ext = message.ext
        self.timestamp = message.timestamp
        self.routetype = message.onlineOnly ? RouteType.online : nil
    }

    /// The domain message, if the id is a valid 64-bit number.
    public var message: Message? {
        guard let id = UInt64(msgID) else { return nil }
        return Message(
            id: id, from: from, to: to, chatType: chatType, type: type, body: body, ext: ext,
            timestamp: timestamp, onlineOnly: routetype == RouteType.online)
    }
}

/// Values of Easemob's `routetype` field.
public enum RouteType {
    /// Deliver to online devices only: never stored, never pushed.
    public static let online = "ROUTE_ONLINE"
}
