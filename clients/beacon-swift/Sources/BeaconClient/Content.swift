import BeaconCore
import Foundation

/// What a message says, by type. Converts to and from Easemob's `type` + `body`.
public enum MessageContent: Sendable, Hashable {
    case text(String)
    case image(url: String, filename: String? = nil, width: Int? = nil, height: Int? = nil)
    case voice(url: String, seconds: Int, filename: String? = nil)
    case video(url: String, seconds: Int, thumbnail: String? = nil, filename: String? = nil)
    case file(url: String, filename: String)
    case location(latitude: Double, longitude: Double, address: String)
    /// A command message: delivered, never shown, never pushed.
    case command(action: String)
    case custom(event: String, fields: [String: String] = [:])

    public var type: MessageType {
        switch self {
        case .text: .txt
        case .image: .img
        case .voice: .audio
        case .video: .video
        case .file: .file
        case .location: .loc
        case .command: .cmd
        case .custom: .custom
        }
    }

    public var body: JSONValue {
        func optional(_ value: String?) -> JSONValue { value.map(JSONValue.string) ?? .null }
        switch self {
        case .text(let text):
            return ["msg": .string(text)]
        case .image(let url, let filename, let width, let height):
            var body: [String: JSONValue] = ["url": .string(url), "filename": optional(filename)]
            if let width, let height { body["size"] = ["width": .number(Double(width)), "height": .number(Double(height))] }
            return .object(body)
        case .voice(let url, let seconds, let filename):
            return ["url": .string(url), "length": .number(Double(seconds)), "filename": optional(filename)]
        case .video(let url, let seconds, let thumbnail, let filename):
            return ["url": .string(url), "length": .number(Double(seconds)), "thumb": optional(thumbnail), "filename": optional(filename)]
        case .file(let url, let filename):
            return ["url": .string(url), "filename": .string(filename)]
        case .location(let latitude, let longitude, let address):
            return ["lat": .number(latitude), "lng": .number(longitude), "addr": .string(address)]
        case .command(let action):
            return ["action": .string(action)]
        case .custom(let event, let fields):
            return ["customEvent": .string(event), "customExts": .object(fields.mapValues(JSONValue.string))]
        }
    }

    /// The content of a received message; nil when its body does not match its type.
    public init?(type: MessageType, body: JSONValue) {
        func number(_ key: String) -> Double? {
            if case .number(let value) = body[key] { return value }
            return nil
        }
        switch type {
        case .txt:
            guard let text = body["msg"]?.stringValue else { return nil }
            self = .text(text)
        case .img:
            guard let url = body["url"]?.stringValue else { return nil }
            self = .image(
                url: url, filename: body["filename"]?.stringValue, width: body["size"]?["width"]?.intValue,
                height: body["size"]?["height"]?.intValue)
        case .audio:
            guard let url = body["url"]?.stringValue else { return nil }
            self = .voice(url: url, seconds: body["length"]?.intValue ?? 0, filename: body["filename"]?.stringValue)
        case .video:
            guard let url = body["url"]?.stringValue else { return nil }
            self = .video(
                url: url, seconds: body["length"]?.intValue ?? 0, thumbnail: body["thumb"]?.stringValue,
                filename: body["filename"]?.stringValue)
        case .file:
            guard let url = body["url"]?.stringValue else { return nil }
            self = .file(url: url, filename: body["filename"]?.stringValue ?? "")
        case .loc:
            guard let lat = number("lat"), let lng = number("lng") else { return nil }
            self = .location(latitude: lat, longitude: lng, address: body["addr"]?.stringValue ?? "")
        case .cmd:
            guard let action = body["action"]?.stringValue else { return nil }
            self = .command(action: action)
        case .custom:
            guard let event = body["customEvent"]?.stringValue else { return nil }
            self = .custom(event: event, fields: body["customExts"]?.objectValue?.compactMapValues(\.stringValue) ?? [:])
        }
    }
}

/// A message to send.
public struct OutgoingChatMessage: Sendable, Hashable {
    public var to: String
    public var chatType: ChatType
    public var content: MessageContent
    /// The message's own `ext`, as the receivers get it.
    public var ext: [String: JSONValue]
    /// How the receivers are notified; its keys (`MessagePushOptions.ext`) take the place of the same keys in `ext`.
    public var push: MessagePushOptions
    /// Deliver to online devices only (`ROUTE_ONLINE`): not stored, not pushed.
    public var onlineOnly: Bool

    public init(
        to: String, chatType: ChatType = .chat, content: MessageContent, ext: [String: JSONValue] = [:],
        push: MessagePushOptions = MessagePushOptions(), onlineOnly: Bool = false
    ) {
        self.to = to
        self.chatType = chatType
        self.content = content
        self.ext = ext
        self.push = push
        self.onlineOnly = onlineOnly
    }

    /// `ext` with the push options' keys; inside `em_apns_ext`, key by key (the app's own keys there stay).
    var sentExt: [String: JSONValue] {
        ext.merging(push.ext) { own, typed in
            guard case .object(let ownKeys) = own, case .object(let typedKeys) = typed else { return typed }
            return .object(ownKeys.merging(typedKeys) { _, typed in typed })
        }
    }
}

extension Message {
    /// The typed content of this message, when its body matches its type.
    public var content: MessageContent? { MessageContent(type: type, body: body) }
}
