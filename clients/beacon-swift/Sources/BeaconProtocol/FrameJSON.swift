import BeaconCore

// The frames, as JSON: each type describes its JSON once, both ways (`jsonValue` and `init(jsonValue:)`), and its
// Codable conformance goes through that description. Frames are written with `JSONWriter` and read with `JSONReader`
// (the server's frames by the server and the SDK, the devices' frames by the SDK and the server), several times faster
// than `JSONEncoder`/`JSONDecoder`, which reach a `JSONValue` only by guessing. Integers travel as JSON numbers: exact
// up to 2^53, far above any sequence number, version, badge or millisecond time.

/// A JSON object's fields, read with the errors a frame that does not match the protocol gets.
struct JSONFields {
    let fields: [String: JSONValue]
    let context: String

    init(_ value: JSONValue, _ context: String) throws(BeaconError) {
        guard let fields = value.objectValue else { throw BeaconError(.jsonParse, "\(context) must be a JSON object") }
        self.fields = fields
        self.context = context
    }

    func string(_ key: String) throws(BeaconError) -> String {
        guard let value = try optionalString(key) else { throw missing(key) }
        return value
    }

    func optionalString(_ key: String) throws(BeaconError) -> String? {
        guard let value = present(key) else { return nil }
        guard let text = value.stringValue else { throw wrongType(key, "a string") }
        return text
    }

    func int64(_ key: String) throws(BeaconError) -> Int64 {
        guard let value = try optionalInt64(key) else { throw missing(key) }
        return value
    }

    func optionalInt64(_ key: String) throws(BeaconError) -> Int64? {
        guard let value = present(key) else { return nil }
        guard let number = value.intValue else { throw wrongType(key, "an integer") }
        return Int64(number)
    }

    /// An integer of any size, clamped to Int64's range: for counts and positions the server bounds itself (an `ack`
    /// of 2^63 is beyond anything sent, and refused as such), where `int64` stops at 2^53, the exact range of a double.
    func clampedInt64(_ key: String) throws(BeaconError) -> Int64 {
        guard let value = present(key) else { throw missing(key) }
        guard case .number(let number) = value, number.isFinite, number.rounded() == number else { throw wrongType(key, "an integer") }
        // An integral double fails `exactly` only outside Int64's range: no conversion here can trap.
        return Int64(exactly: number) ?? (number > 0 ? .max : .min)
    }

    func optionalObject(_ key: String) throws(BeaconError) -> [String: JSONValue]? {
        guard let value = present(key) else { return nil }
        guard let object = value.objectValue else { throw wrongType(key, "an object") }
        return object
    }

    func value(_ key: String) throws(BeaconError) -> JSONValue {
        guard let value = present(key) else { throw missing(key) }
        return value
    }

    /// The field, `null` included (absent is an error).
    func valueOrNull(_ key: String) throws(BeaconError) -> JSONValue {
        guard let value = fields[key] else { throw missing(key) }
        return value
    }

    func enumeration<T: RawRepresentable>(_ key: String, _: T.Type) throws(BeaconError) -> T where T.RawValue == String {
        guard let value = T(rawValue: try string(key)) else { throw wrongType(key, "a known value") }
        return value
    }

    /// The field, unless absent or null (as `decodeIfPresent` reads it).
    private func present(_ key: String) -> JSONValue? {
        guard let value = fields[key], value != .null else { return nil }
        return value
    }

    private func missing(_ key: String) -> BeaconError { BeaconError(.jsonParse, "\(context): missing field '\(key)'") }
    private func wrongType(_ key: String, _ expected: String) -> BeaconError {
        BeaconError(.jsonParse, "\(context): '\(key)' must be \(expected)")
    }
}

/// A type whose JSON is described once, both ways; its Codable conformance and its text go through that description.
public protocol JSONDescribed: Codable {
    init(jsonValue: JSONValue) throws(BeaconError)
    var jsonValue: JSONValue { get }
}

extension JSONDescribed {
    /// Reads a value from JSON text (a WebSocket message's).
    public init(json text: String) throws {
        try self.init(jsonValue: try JSONReader.value(of: text))
    }

    public init(from decoder: any Decoder) throws {
        try self.init(jsonValue: try JSONValue(from: decoder))
    }

    public func encode(to encoder: any Encoder) throws {
        try jsonValue.encode(to: encoder)
    }

    /// The JSON text, keys sorted: how frames are sent.
    public var json: String { JSONWriter.string(jsonValue) }
}

extension ClientFrame: JSONDescribed {
    public init(jsonValue: JSONValue) throws(BeaconError) {
        let frame = try JSONFields(jsonValue, "frame")
        let op = try frame.string("op")
        switch op {
        case "send": self = .send(try SendRequest(fields: frame))
        case "ack": self = .ack(seq: try frame.clampedInt64("seq"))
        case "sync": self = .sync
        case "ping": self = .ping
        case "logout": self = .logout
        case "read":
            self = .read(
                chatType: try frame.enumeration("chat_type", ChatType.self), conversation: try frame.string("conversation"),
                upTo: try frame.optionalString("up_to"))
        case "read_all": self = .readAll
        case "badge": self = .badge(count: Int(clamping: try frame.clampedInt64("count")))
        default: throw BeaconError(.jsonParse, "unknown op '\(op)'")
        }
    }

    public var jsonValue: JSONValue {
        switch self {
        case .send(let request):
            var fields = request.jsonFields
            fields["op"] = "send"
            return .object(fields)
        case .ack(let seq): return ["op": "ack", "seq": .number(Double(seq))]
        case .sync: return ["op": "sync"]
        case .ping: return ["op": "ping"]
        case .logout: return ["op": "logout"]
        case .read(let chatType, let conversation, let upTo):
            var fields: [String: JSONValue] = [
                "op": "read", "chat_type": .string(chatType.rawValue), "conversation": .string(conversation),
            ]
            if let upTo { fields["up_to"] = .string(upTo) }
            return .object(fields)
        case .readAll: return ["op": "read_all"]
        case .badge(let count): return ["op": "badge", "count": .number(Double(count))]
        }
    }
}

extension ClientFrame.SendRequest: JSONDescribed {
    public init(jsonValue: JSONValue) throws(BeaconError) {
        try self.init(fields: try JSONFields(jsonValue, "send"))
    }

    init(fields: JSONFields) throws(BeaconError) {
        // `body` may be null here: what a body must hold is the message validation's to say, with its own error.
        self.init(
            id: try fields.string("id"), to: try fields.string("to"), chatType: try fields.enumeration("chat_type", ChatType.self),
            type: try fields.enumeration("type", MessageType.self), body: try fields.valueOrNull("body"),
            ext: try fields.optionalObject("ext"),
            routetype: try fields.optionalString("routetype"))
    }

    public var jsonValue: JSONValue { .object(jsonFields) }

    /// The request's JSON fields (`ext` and `routetype` only when set).
    var jsonFields: [String: JSONValue] {
        var fields: [String: JSONValue] = [
            "id": .string(id), "to": .string(to), "chat_type": .string(chatType.rawValue), "type": .string(type.rawValue), "body": body,
        ]
        if let ext { fields["ext"] = .object(ext) }
        if let routetype { fields["routetype"] = .string(routetype) }
        return fields
    }
}

extension ServerFrame: JSONDescribed {
    public init(jsonValue: JSONValue) throws(BeaconError) {
        let frame = try JSONFields(jsonValue, "frame")
        let op = try frame.string("op")
        switch op {
        case "welcome":
            self = .welcome(
                username: try frame.string("username"), deviceID: try frame.string("device_id"), cursor: try frame.int64("cursor"))
        case "msg":
            self = .message(seq: try frame.optionalInt64("seq"), message: try WireMessage(jsonValue: try frame.value("message")))
        case "sent":
            self = .sent(id: try frame.string("id"), messageID: try frame.string("message_id"), timestamp: try frame.int64("timestamp"))
        case "synced": self = .synced(seq: try frame.int64("seq"))
        case "pong": self = .pong
        case "error":
            self = .error(id: try frame.optionalString("id"), code: try frame.string("code"), description: try frame.string("description"))
        case "closing": self = .closing(reason: try frame.string("reason"))
        case "read": self = .read(try ReadState(fields: frame))
        case "recall":
            func id(_ name: String) throws(BeaconError) -> UInt64 {
                let text = try frame.string(name)
                guard let id = UInt64(text) else { throw BeaconError(.jsonParse, "\(name) '\(text.prefix(40))' is not a message id") }
                return id
            }
            let messageID = try id("msg_id")
            self = .recall(
                seq: try frame.int64("seq"), noticeID: try id("notice_id"),
                notice: RecallNotice(
                    messageID: messageID, from: try frame.string("from"), to: try frame.string("to"),
                    chatType: try frame.enumeration("chat_type", ChatType.self), recalledBy: try frame.string("by"),
                    timestamp: try frame.int64("timestamp")))
        default: throw BeaconError(.jsonParse, "unknown op '\(op)'")
        }
    }

    public var jsonValue: JSONValue {
        func number(_ value: some BinaryInteger) -> JSONValue { .number(Double(value)) }
        switch self {
        case .welcome(let username, let deviceID, let cursor):
            return ["op": "welcome", "username": .string(username), "device_id": .string(deviceID), "cursor": number(cursor)]
        case .message(let seq, let message):
            var fields: [String: JSONValue] = ["op": "msg", "message": message.jsonValue]
            if let seq { fields["seq"] = number(seq) }
            return .object(fields)
        case .sent(let id, let messageID, let timestamp):
            return ["op": "sent", "id": .string(id), "message_id": .string(messageID), "timestamp": number(timestamp)]
        case .synced(let seq):
            return ["op": "synced", "seq": number(seq)]
        case .pong:
            return ["op": "pong"]
        case .error(let id, let code, let description):
            var fields: [String: JSONValue] = ["op": "error", "code": .string(code), "description": .string(description)]
            if let id { fields["id"] = .string(id) }
            return .object(fields)
        case .closing(let reason):
            return ["op": "closing", "reason": .string(reason)]
        case .read(let state):
            var fields = state.jsonFields
            fields["op"] = "read"
            return .object(fields)
        case .recall(let seq, let noticeID, let notice):
            return [
                "op": "recall", "seq": number(seq), "notice_id": .string(String(noticeID)), "msg_id": .string(String(notice.messageID)),
                "chat_type": .string(notice.chatType.rawValue), "from": .string(notice.from), "to": .string(notice.to),
                "by": .string(notice.recalledBy), "timestamp": number(notice.timestamp),
            ]
        }
    }
}

extension WireMessage: JSONDescribed {
    public init(jsonValue: JSONValue) throws(BeaconError) {
        let message = try JSONFields(jsonValue, "message")
        msgID = try message.string("msg_id")
        from = try message.string("from")
        to = try message.string("to")
        chatType = try message.enumeration("chat_type", ChatType.self)
        type = try message.enumeration("type", MessageType.self)
        body = try message.value("body")
        ext = try message.optionalObject("ext") ?? [:]
        timestamp = try message.int64("timestamp")
        routetype = try message.optionalString("routetype")
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
}

extension ReadState: JSONDescribed {
    public init(jsonValue: JSONValue) throws(BeaconError) {
        try self.init(fields: try JSONFields(jsonValue, "read state"))
    }

    init(fields: JSONFields) throws(BeaconError) {
        self.init(
            chatType: try fields.enumeration("chat_type", ChatType.self), conversation: try fields.string("conversation"),
            upTo: try fields.string("up_to"), seq: try fields.int64("seq"), version: try fields.int64("version"),
            badge: try fields.optionalInt64("badge").map { Int(clamping: $0) })
    }

    public var jsonValue: JSONValue { .object(jsonFields) }

    /// The marker's JSON fields (`badge` only when known).
    var jsonFields: [String: JSONValue] {
        var fields: [String: JSONValue] = [
            "chat_type": .string(chatType.rawValue), "conversation": .string(conversation), "up_to": .string(upTo),
            "seq": .number(Double(seq)), "version": .number(Double(version)),
        ]
        if let badge { fields["badge"] = .number(Double(badge)) }
        return fields
    }
}
