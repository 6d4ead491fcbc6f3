import BeaconCore
import Foundation

/// How a receiver wants notifications to read (`notification_display_style`).
public enum DisplayStyle: Int, Sendable, Codable, Hashable {
    /// "You have a new message".
    case simpleBanner = 0
    /// "<sender>: <summary>".
    case messageSummary = 1
}

/// The strings an app may configure for payload bodies.
public struct DisplayStrings: Sendable, Hashable {
    public var newMessage = "You have a new message"
    public var image = "[Image]"
    public var voice = "[Voice]"
    public var video = "[Video]"
    public var file = "[File]"
    public var location = "[Location]"
    public var custom = "[Custom message]"

    public init() {}

    /// The defaults with the app's overrides (keys `new_message`, `image`, `voice`, `video`, `file`, `location`, `custom`).
    public init(overrides: [String: String]) {
        self.init()
        newMessage = overrides["new_message"] ?? newMessage
        image = overrides["image"] ?? image
        voice = overrides["voice"] ?? voice
        video = overrides["video"] ?? video
        file = overrides["file"] ?? file
        location = overrides["location"] ?? location
        custom = overrides["custom"] ?? custom
    }

    public static let keys: Set<String> = ["new_message", "image", "voice", "video", "file", "location", "custom"]

    func summary(of message: Message, language: String?) -> String {
        switch message.type {
        case .txt:
            if let language, !language.isEmpty, let translated = message.body["translations"]?[language]?.stringValue { return translated }
            return message.body["msg"]?.stringValue ?? ""
        case .img: return image
        case .audio: return voice
        case .video: return video
        case .file: return file
        case .loc: return location
        case .custom, .cmd: return custom
        }
    }
}

/// A push template: `title_pattern` and `content_pattern` with `{0}…{99}` and `{$fromNickname}`, `{$msg}`, `{$dynamicFrom}`.
public struct PushTemplate: Sendable, Hashable {
    public var name: String
    public var titlePattern: String
    public var contentPattern: String

    /// Longest pattern, in bytes: rendering stays small and fast whatever a template holds.
    public static let maxPatternBytes = 1024
    /// The built-in placeholders a pattern (or a message's template argument) may use.
    public static let builtIns = ["{$fromNickname}", "{$msg}", "{$dynamicFrom}"]

    public init(name: String, titlePattern: String, contentPattern: String) {
        self.name = name
        self.titlePattern = titlePattern
        self.contentPattern = contentPattern
    }

    /// Checks a pattern when it is saved: at most 1 KB, and every `{` opens `{0}`…`{99}` or a built-in.
    public static func validate(pattern: String, field: String) throws(BeaconError) {
        guard pattern.utf8.count <= maxPatternBytes else {
            throw BeaconError(.invalidTemplate, "\(field) is \(pattern.utf8.count) bytes; at most \(maxPatternBytes)")
        }
        var rest = Substring(pattern)
        while let open = rest.firstIndex(of: "{") {
            let tail = rest[open...]
            if let builtIn = builtIns.first(where: { tail.hasPrefix($0) }) {
                rest = tail.dropFirst(builtIn.count)
            } else if let index = PatternPlaceholder.index(at: tail) {
                rest = tail.dropFirst(index < 10 ? 3 : 4)
            } else {
                let shown = tail.prefix(16)
                throw BeaconError(
                    .invalidTemplate, "\(field): '\(shown)' is not a placeholder; use {0}…{99}, {$fromNickname}, {$msg} or {$dynamicFrom}")
            }
        }
    }
}

/// `{0}`…`{99}`: one or two decimal digits between braces.
enum PatternPlaceholder {
    /// The index of the placeholder that `text` starts with, if it starts with one.
    static func index(at text: Substring) -> Int? {
        let bytes = text.utf8
        var iterator = bytes.makeIterator()
        guard iterator.next() == UInt8(ascii: "{"), let first = iterator.next(), isDigit(first) else { return nil }
        var value = Int(first - UInt8(ascii: "0"))
        guard let second = iterator.next() else { return nil }
        if second == UInt8(ascii: "}") { return value }
        guard isDigit(second), iterator.next() == UInt8(ascii: "}") else { return nil }
        value = value * 10 + Int(second - UInt8(ascii: "0"))
        return value
    }

    private static func isDigit(_ byte: UInt8) -> Bool { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) }
}
