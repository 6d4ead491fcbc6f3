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

/// A push template: `title_pattern` and `content_pattern` with `{0}…{n}` and `{$fromNickname}`, `{$msg}`, `{$dynamicFrom}`.
public struct PushTemplate: Sendable, Hashable {
    public var name: String
    public var titlePattern: String
    public var contentPattern: String

    public init(name: String, titlePattern: String, contentPattern: String) {
        self.name = name
        self.titlePattern = titlePattern
        self.contentPattern = contentPattern
    }
}

/// What the payload of one receiver's notification is built from.
public struct PayloadInput: Sendable {
    public var message: Message
    public var receiver: String
    public var badge: Int
    /// The sender's push nickname (`nickname`), if set.
    public var senderNickname: String?
    public var style: DisplayStyle
    public var strings: DisplayStrings
    /// The receiver's preferred language for translations (empty: none).
    public var language: String?
    /// The app's templates by name (`default` applies to every push).
    public var templates: [String: PushTemplate]
    /// The template the receiver chose.
    public var receiverTemplate: String?

    public init(
        message: Message, receiver: String, badge: Int, senderNickname: String? = nil, style: DisplayStyle = .simpleBanner,
        strings: DisplayStrings = DisplayStrings(), language: String? = nil, templates: [String: PushTemplate] = [:], receiverTemplate: String? = nil
    ) {
        self.message = message
        self.receiver = receiver
        self.badge = badge
        self.senderNickname = senderNickname
        self.style = style
        self.strings = strings
        self.language = language
        self.templates = templates
        self.receiverTemplate = receiverTemplate
    }
}

/// A rendered notification.
public struct BuiltPayload: Sendable, Hashable {
    /// Compact JSON, within `limit` bytes.
    public var json: String
    public var voip: Bool
    public var collapseID: String?
    /// APNs' limit for this push type (4096, VoIP 5120).
    public var limit: Int
}

/// SPEC §4: the payload, from the receiver's display settings, the app's templates and the sender's `ext`. Pure.
public enum PayloadBuilder {
    public static let limit = 4096
    public static let voipLimit = 5120

    public static func build(_ input: PayloadInput) throws(BeaconError) -> BuiltPayload {
        let message = input.message
        let apnsExt = message.ext["em_apns_ext"]?.objectValue ?? [:]
        let pushExt = message.ext["em_push_ext"]?.objectValue ?? [:]
        let msgText = input.strings.summary(of: message, language: input.language)
        let fromName = input.senderNickname.flatMap { $0.isEmpty ? nil : $0 } ?? message.from
        let dynamicFrom = pushExt["group_user_nickname"]?.stringValue ?? fromName

        // Body and title, lowest priority first; each rule overrides what it sets.
        var title: String?
        var body: String
        switch input.style {
        case .simpleBanner: body = input.strings.newMessage
        case .messageSummary: body = "\(fromName): \(msgText)"
        }
        func apply(_ template: PushTemplate?, titleArgs: [String] = [], contentArgs: [String] = []) {
            guard let template else { return }
            let fill = { (pattern: String, args: [String]) in
                fillPattern(pattern, args: args, fromNickname: fromName, msg: msgText, dynamicFrom: dynamicFrom)
            }
            title = fill(template.titlePattern, titleArgs)
            body = fill(template.contentPattern, contentArgs)
        }
        apply(input.templates["default"])
        if let custom = apnsExt["em_push_title"]?.stringValue ?? pushExt["title"]?.stringValue { title = custom }
        if let custom = apnsExt["em_push_content"]?.stringValue ?? pushExt["content"]?.stringValue { body = custom }
        if let chosen = input.receiverTemplate { apply(input.templates[chosen]) }
        if let named = messageTemplate(message, receiver: input.receiver) {
            apply(input.templates[named.name], titleArgs: named.titleArgs, contentArgs: named.contentArgs)
        }

        var alert: [String: JSONValue] = ["body": .string(body)]
        if let title { alert["title"] = .string(title) }
        if let subtitle = apnsExt["em_alert_subTitle"]?.stringValue { alert["subtitle"] = .string(subtitle) }
        if let key = apnsExt["em_push_title_loc_key"]?.stringValue {
            alert["title-loc-key"] = .string(key)
            if let args = apnsExt["em_push_title_loc_args"]?.arrayValue { alert["title-loc-args"] = .array(args) }
        }
        if let key = apnsExt["em_push_body_loc_key"]?.stringValue {
            alert["loc-key"] = .string(key)
            if let args = apnsExt["em_push_body_loc_args"]?.arrayValue { alert["loc-args"] = .array(args) }
        }
        var aps: [String: JSONValue] = [
            "alert": .object(alert),
            "badge": .number(Double(apnsExt["em_push_badge"]?.intValue ?? input.badge)),
            "sound": .string(apnsExt["em_push_sound"]?.stringValue ?? "default"),
        ]
        if apnsExt["em_push_mutable_content"]?.boolValue == true { aps["mutable-content"] = 1 }
        if let category = apnsExt["em_push_category"]?.stringValue { aps["category"] = .string(category) }
        // Notifications group by conversation on the phone.
        aps["thread-id"] = .string(message.conversation(for: input.receiver).key)
        var payload: [String: JSONValue] = [
            "aps": .object(aps), "f": .string(message.from), "t": .string(input.receiver), "m": .string(String(message.id)),
        ]
        if message.chatType == .groupchat { payload["g"] = .string(message.to) }
        if let extern = apnsExt["extern"] ?? pushExt["custom"] { payload["e"] = extern }
        if let tencentExt = apnsExt["tencent_ext"] { payload["ext"] = tencentExt }

        let voip = pushExt["type"]?.stringValue == "call"
        let limit = voip ? voipLimit : Self.limit
        let collapseID = apnsExt["em_push_collapse_key"]?.stringValue.flatMap { $0.utf8.count <= 64 ? $0 : nil }
        return BuiltPayload(json: try fit(payload, limit: limit), voip: voip, collapseID: collapseID, limit: limit)
    }

    /// Shortens the body, then the title, then the subtitle, at a character boundary with "…", until the payload
    /// fits. When even empty texts do not fit (the sender's own fields are too big), throws 413.
    static func fit(_ payload: [String: JSONValue], limit: Int) throws(BeaconError) -> String {
        var payload = payload
        var json = JSONWriter.string(.object(payload))
        for field in ["body", "title", "subtitle"] where json.utf8.count > limit {
            guard case .object(var aps)? = payload["aps"], case .object(var alert)? = aps["alert"], let text = alert[field]?.stringValue else {
                continue
            }
            let excess = json.utf8.count - limit
            // Keep as many leading characters as fit; "…" costs 3 bytes.
            var kept = Substring(text)
            while !kept.isEmpty, text.utf8.count - kept.utf8.count < excess + 3 { kept = kept.dropLast() }
            alert[field] = .string(kept.isEmpty ? "" : kept + "…")
            aps["alert"] = .object(alert)
            payload["aps"] = .object(aps)
            json = JSONWriter.string(.object(payload))
        }
        guard json.utf8.count <= limit else {
            throw BeaconError(.requestTooLarge, "the push fields of this message make a payload of \(json.utf8.count) bytes; APNs accepts \(limit)")
        }
        return json
    }

    /// `ext.em_push_template` (or its `directed_template` when it lists the receiver).
    static func messageTemplate(_ message: Message, receiver: String) -> (name: String, titleArgs: [String], contentArgs: [String])? {
        guard let template = message.ext["em_push_template"]?.objectValue else { return nil }
        func args(_ object: [String: JSONValue], _ key: String) -> [String] {
            object[key]?.arrayValue?.map { $0.stringValue ?? JSONWriter.string($0) } ?? []
        }
        if let directed = template["directed_template"]?.objectValue,
            directed["target"]?.arrayValue?.contains(where: { $0.stringValue?.lowercased() == receiver }) == true,
            let name = directed["name"]?.stringValue
        {
            return (name, args(directed, "title_args"), args(directed, "content_args"))
        }
        guard let name = template["name"]?.stringValue else { return nil }
        return (name, args(template, "title_args"), args(template, "content_args"))
    }

    /// Replaces `{0}…{n}` (missing → empty) and the built-ins; arguments may themselves be built-ins.
    static func fillPattern(_ pattern: String, args: [String], fromNickname: String, msg: String, dynamicFrom: String) -> String {
        func expand(_ text: String) -> String {
            guard text.contains("{$") else { return text }
            return text.replacingOccurrences(of: "{$fromNickname}", with: fromNickname).replacingOccurrences(of: "{$msg}", with: msg)
                .replacingOccurrences(of: "{$dynamicFrom}", with: dynamicFrom)
        }
        var output = ""
        var rest = Substring(pattern)
        while let open = rest.firstIndex(of: "{") {
            output += rest[..<open]
            let afterOpen = rest.index(after: open)
            if let close = rest[afterOpen...].firstIndex(of: "}"), let index = Int(rest[afterOpen..<close]) {
                output += index < args.count ? expand(args[index]) : ""
                rest = rest[rest.index(after: close)...]
            } else {
                output += "{"
                rest = rest[afterOpen...]
            }
        }
        output += rest
        return expand(output)
    }
}
