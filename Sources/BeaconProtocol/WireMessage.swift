import BeaconCore

/// A message as it travels over the WebSocket and in REST answers (Easemob field names, ids as decimal strings).
public struct WireMessage: Sendable, Hashable, Codable {
    public var msgID: String
    public var from: String
    public var to: String
    public var chatType: ChatType
    public var type: MessageType
    public var body: JSONValue
    public var ext: [String: JSONValue]
    public var timestamp: Int64
    public var routetype: String?

    enum CodingKeys: String, CodingKey {
        case msgID = "msg_id", from, to, chatType = "chat_type", type, body, ext, timestamp, routetype
    }

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

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.msgID = try container.decode(String.self, forKey: .msgID)
        self.from = try container.decode(String.self, forKey: .from)
        self.to = try container.decode(String.self, forKey: .to)
        self.chatType = try container.decode(ChatType.self, forKey: .chatType)
        self.type = try container.decode(MessageType.self, forKey: .type)
        self.body = try container.decode(JSONValue.self, forKey: .body)
        self.ext = try container.decodeIfPresent([String: JSONValue].self, forKey: .ext) ?? [:]
        self.timestamp = try container.decode(Int64.self, forKey: .timestamp)
        self.routetype = try container.decodeIfPresent(String.self, forKey: .routetype)
    }

    /// Encoded through `jsonValue`, the one description of a message's JSON.
    public func encode(to encoder: any Encoder) throws {
        try jsonValue.encode(to: encoder)
    }

    /// The message's JSON (Easemob's field names; `routetype` only when set).
    public var jsonValue: JSONValue {
        var fields: [String: JSONValue] = [
            "msg_id": .string(msgID), "from": .string(from), "to": .string(to), "chat_type": .string(chatType.rawValue),
            "type": .string(type.rawValue), "body": body, "ext": .object(ext), "timestamp": .number(Double(timestamp)),
        ]
        if let routetype { fields["routetype"] = .string(routetype) }
        return .object(fields)
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
