import Foundation

/// Input rules shared by the REST API, the WebSocket gateway and the SDK.
public enum Validation {
    /// Largest `body` + `ext` of one message, in bytes of JSON (Easemob: 5 KB).
    public static let maxMessageBytes = 5 * 1024
    /// Most users addressed by one REST send.
    public static let maxUserTargets = 600
    /// Most groups addressed by one REST send.
    public static let maxGroupTargets = 3
    /// Longest push nickname, in characters.
    public static let maxNicknameLength = 100

    /// Usernames: lowercase letters, digits, `_ - .`, 1–64 characters; not `.` or `..`, which URLs resolve away (no
    /// REST path could name such a user).
    public static func validateUsername(_ username: String) throws(BeaconError) {
        guard username != ".", username != ".." else { throw .illegal("username cannot be '.' or '..'") }
        guard (1...64).contains(username.utf8.count),
            username.utf8.allSatisfy({ isLowerAlnum($0) || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: ".") })
        else {
            throw .illegal("username '\(username)' must be 1-64 of lowercase letters, digits, '_', '-' or '.'")
        }
    }

    /// A conversation's key (a peer's username or a group id): 1–128 bytes.
    public static func validateConversationKey(_ key: String) throws(BeaconError) {
        guard (1...128).contains(key.utf8.count) else { throw .illegal("conversation must be 1-128 bytes") }
    }

    /// A message id as clients write it: a decimal string.
    public static func messageID(_ text: String) throws(BeaconError) -> UInt64 {
        guard let id = UInt64(text) else { throw .illegal("message id '\(text.prefix(40))' must be a decimal number") }
        return id
    }

    /// Org and app names: letters, digits, `_ - .`, 1–64 characters.
    public static func isValidName(_ name: String) -> Bool {
        (1...64).contains(name.utf8.count)
            && name.utf8.allSatisfy {
                isLowerAlnum($0) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0) || $0 == UInt8(ascii: "_")
                    || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: ".")
            }
    }

    public static func validatePassword(_ password: String) throws(BeaconError) {
        guard (1...128).contains(password.utf8.count) else {
            throw .illegal("password must be 1-128 bytes")
        }
    }

    public static func validateNickname(_ nickname: String) throws(BeaconError) {
        guard nickname.count <= maxNicknameLength else {
            throw .illegal("nickname must be at most \(maxNicknameLength) characters")
        }
    }

    /// An IANA time zone name known to this system (`Asia/Tokyo`, `UTC`).
    public static func validateTimeZone(_ name: String) throws(BeaconError) {
        guard !name.isEmpty, TimeZone(identifier: name) != nil else {
            throw .illegal("timezone '\(name)' is not a known IANA time zone name")
        }
    }

    /// How deep a message's `body`, and its `ext`, may nest objects and arrays (the body or ext object itself is level
    /// 1). Every reader of a message — the SDK, the cluster's relay, the stores — reads it inside two or three levels of
    /// its own, well within their limit of `JSONReader.maxDepth`.
    public static let maxMessageDepth = 64

    /// Checks a message's type against its body, its nesting against `maxMessageDepth` and its size against the 5 KB limit.
    public static func validateContent(type: MessageType, body: JSONValue, ext: [String: JSONValue]) throws(BeaconError) {
        guard case .object(let fields) = body else {
            throw .illegal("body must be a JSON object")
        }
        for (name, value) in [("body", body), ("ext", JSONValue.object(ext))] where nests(value, deeperThan: maxMessageDepth) {
            throw .illegal("\(name) nests objects and arrays deeper than \(maxMessageDepth) levels")
        }
        func requireString(_ key: String) throws(BeaconError) {
            guard fields[key]?.stringValue != nil else {
                throw .illegal("a \(type.rawValue) message needs body.\(key) as a string")
            }
        }
        switch type {
        case .txt: try requireString("msg")
        case .cmd:
            try requireString("action")
            // Only Beacon writes recall notices: a sender's could make devices drop messages that were never recalled.
            guard fields["action"]?.stringValue != RecallNotice.action else {
                throw .illegal("cmd action '\(RecallNotice.action)' is reserved for Beacon's recall notices")
            }
        case .img, .audio, .video, .file: try requireString("url")
        case .loc:
            guard case .number = fields["lat"], case .number = fields["lng"] else {
                throw .illegal("a loc message needs numeric body.lat and body.lng")
            }
        case .custom: try requireString("customEvent")
        }
        let size = encodedSize(body) + encodedSize(.object(ext))
        guard size <= maxMessageBytes else {
            throw BeaconError(.requestTooLarge, "body + ext is \(size) bytes; the limit is \(maxMessageBytes)")
        }
    }

    /// Whether `value` has objects or arrays nested more than `limit` levels deep (a scalar has none, `{}` one).
    static func nests(_ value: JSONValue, deeperThan limit: Int) -> Bool {
        switch value {
        case .object(let fields): return limit <= 0 || fields.values.contains { nests($0, deeperThan: limit - 1) }
        case .array(let items): return limit <= 0 || items.contains { nests($0, deeperThan: limit - 1) }
        default: return false
        }
    }

    static func encodedSize(_ value: JSONValue) -> Int {
        (try? JSONEncoder().encode(value).count) ?? 0
    }

    private static func isLowerAlnum(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
    }
}
