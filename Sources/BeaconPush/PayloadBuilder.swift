import BeaconCore
import Foundation

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
    /// Whether a call (`em_push_ext.type: "call"`) may become a VoIP push; false renders the alert a device without
    /// a VoIP token gets instead.
    public var allowsVoIP: Bool

    public init(
        message: Message, receiver: String, badge: Int, senderNickname: String? = nil, style: DisplayStyle = .simpleBanner,
        strings: DisplayStrings = DisplayStrings(), language: String? = nil, templates: [String: PushTemplate] = [:],
        receiverTemplate: String? = nil,
        allowsVoIP: Bool = true
    ) {
        self.allowsVoIP = allowsVoIP
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

/// A rendered notification. The receiver's badge is spliced in last (`json(badge:)`), so that the same rendering
/// serves whatever badge the store assigns when it records the push.
public struct BuiltPayload: Sendable, Hashable {
    /// Compact JSON without the badge when `badgeOffset` is set; complete otherwise (the sender fixed the badge).
    public var withoutBadge: String
    /// The UTF-8 offset in `withoutBadge` where `,"badge":N` belongs (right after the alert, keeping keys sorted).
    public var badgeOffset: Int?
    /// The badge of the input this was built from.
    public var badge: Int
    public var voip: Bool
    public var collapseID: String?
    /// APNs' limit for this push type (4096, VoIP 5120).
    public var limit: Int

    /// Compact JSON with the input's badge, within `limit` bytes.
    public var json: String { json(badge: badge) }

    /// Compact JSON with `badge` (at most `PayloadBuilder.maxBadge`), within `limit` bytes.
    public func json(badge: Int) -> String {
        guard let badgeOffset else { return withoutBadge }
        return JSONWriter.insertBadge(badge, into: withoutBadge, atUTF8Offset: badgeOffset)
    }
}

/// SPEC §4: the payload, from the receiver's display settings, the app's templates and the sender's `ext`. Pure.
/// Linear in the size of its input, and bounded: patterns are at most 1 KB and rendered texts are cut at
/// `maxRenderedBytes` before they are fitted to APNs' limit.
public enum PayloadBuilder {
    public static let limit = 4096
    public static let voipLimit = 5120
    /// Badges are capped here: the room for the badge is reserved before it is known.
    public static let maxBadge = JSONWriter.maxBadge
    /// A rendered title or body longer than this is cut right away (it could never fit a payload anyway).
    static let maxRenderedBytes = 8 * 1024
    private static let badgeRoom = #","badge":"#.utf8.count + String(maxBadge).utf8.count
    private static let alertPrefix = #"{"aps":{"alert":"#

    public static func build(_ input: PayloadInput) throws(BeaconError) -> BuiltPayload {
        try render(input).payload
    }

    /// The payload, and whether a text was shortened to fit APNs' limit (the console's template preview tells).
    public static func buildReportingFit(_ input: PayloadInput) throws(BeaconError) -> (payload: BuiltPayload, shortened: Bool) {
        let rendering = try render(input)
        return (rendering.payload, rendering.shortened)
    }

    /// A rendering, the limit its JSON was fitted to, and whether fitting shortened a text.
    struct Rendering {
        var payload: BuiltPayload
        var fitLimit: Int
        var shortened: Bool
    }

    static func render(_ input: PayloadInput) throws(BeaconError) -> Rendering {
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
            let builtIns = BuiltIns(fromNickname: fromName, msg: msgText, dynamicFrom: dynamicFrom)
            title = fillPattern(template.titlePattern, args: titleArgs, builtIns: builtIns)
            body = fillPattern(template.contentPattern, args: contentArgs, builtIns: builtIns)
        }
        apply(input.templates["default"])
        if let custom = apnsExt["em_push_title"]?.stringValue ?? pushExt["title"]?.stringValue { title = custom }
        if let custom = apnsExt["em_push_content"]?.stringValue ?? pushExt["content"]?.stringValue { body = custom }
        if let chosen = input.receiverTemplate { apply(input.templates[chosen]) }
        if let named = messageTemplate(message, receiver: input.receiver) {
            apply(input.templates[named.name], titleArgs: named.titleArgs, contentArgs: named.contentArgs)
        }

        var alert: [String: JSONValue] = ["body": .string(cut(body))]
        if let title { alert["title"] = .string(cut(title)) }
        if let subtitle = apnsExt["em_alert_subTitle"]?.stringValue { alert["subtitle"] = .string(cut(subtitle)) }
        // APNs takes strings as arguments: any other value goes as its JSON text, keeping every argument in its place.
        func locArgs(_ value: JSONValue?) -> JSONValue? {
            value?.arrayValue.map { .array($0.map { .string($0.stringValue ?? JSONWriter.string($0)) }) }
        }
        if let key = apnsExt["em_push_title_loc_key"]?.stringValue {
            alert["title-loc-key"] = .string(key)
            if let args = locArgs(apnsExt["em_push_title_loc_args"]) { alert["title-loc-args"] = args }
        }
        if let key = apnsExt["em_push_body_loc_key"]?.stringValue {
            alert["loc-key"] = .string(key)
            if let args = locArgs(apnsExt["em_push_body_loc_args"]) { alert["loc-args"] = args }
        }
        var aps: [String: JSONValue] = [
            "alert": .object(alert),
            "sound": .string(apnsExt["em_push_sound"]?.stringValue ?? "default"),
        ]
        // The sender may fix the badge; otherwise it is spliced in per receiver.
        let fixedBadge = apnsExt["em_push_badge"]?.intValue.map { min(max($0, 0), maxBadge) }
        if let fixedBadge { aps["badge"] = .number(Double(fixedBadge)) }
        let voip = input.allowsVoIP && pushExt["type"]?.stringValue == "call"
        // An image for the app's notification service extension to attach (`em_push_image`, Tencent's `ApnsInfo.Image`):
        // that extension only runs for alerts with `mutable-content` (never for a VoIP push, which PushKit hands the app).
        let image = voip ? nil : apnsExt["em_push_image"]?.stringValue.flatMap { $0.isEmpty ? nil : $0 }
        if !voip, apnsExt["em_push_mutable_content"]?.boolValue == true || image != nil { aps["mutable-content"] = 1 }
        if let category = apnsExt["em_push_category"]?.stringValue { aps["category"] = .string(category) }
        // Notifications group by conversation on the phone.
        aps["thread-id"] = .string(message.conversation(for: input.receiver).key)
        var payload: [String: JSONValue] = [
            "aps": .object(aps), "f": .string(message.from), "t": .string(input.receiver), "m": .string(String(message.id)),
        ]
        if message.chatType == .groupchat { payload["g"] = .string(message.to) }
        if let extern = apnsExt["extern"] ?? pushExt["custom"] { payload["e"] = extern }
        if let tencentExt = apnsExt["tencent_ext"] { payload["ext"] = tencentExt }
        if let image { payload["image"] = .string(image) }

        let limit = voip ? voipLimit : Self.limit
        // APNs takes at most 64 bytes; an HTTP/2 header value takes no control characters and no leading or trailing
        // space. Such a key is left out (the message id collapses instead), so the push still goes.
        let collapseID = apnsExt["em_push_collapse_key"]?.stringValue.flatMap { key in
            let valid = key.utf8.count <= 64 && !key.utf8.contains { $0 < 0x20 || $0 == 0x7F } && key.first != " " && key.last != " "
            return valid ? key : nil
        }
        let fitLimit = limit - (fixedBadge == nil ? badgeRoom : 0)
        let (fitted, json, shortened) = try fit(payload, limit: fitLimit)
        var badgeOffset: Int?
        if fixedBadge == nil, case .object(let fittedAPS)? = fitted["aps"], let fittedAlert = fittedAPS["alert"] {
            let prefix = alertPrefix + JSONWriter.string(fittedAlert)
            // Keys are sorted: "aps" comes first and "alert" first within it, so the badge goes right after the alert.
            if json.hasPrefix(prefix) { badgeOffset = prefix.utf8.count }
        }
        if fixedBadge == nil, badgeOffset == nil {
            // Not reachable with sorted keys; render the badge in place rather than lose it.
            aps["badge"] = .number(Double(min(max(input.badge, 0), maxBadge)))
            payload["aps"] = .object(aps)
            let (_, json, shortened) = try fit(payload, limit: limit)
            return Rendering(
                payload: BuiltPayload(
                    withoutBadge: json, badgeOffset: nil, badge: input.badge, voip: voip, collapseID: collapseID, limit: limit),
                fitLimit: limit, shortened: shortened)
        }
        return Rendering(
            payload: BuiltPayload(
                withoutBadge: json, badgeOffset: badgeOffset, badge: input.badge, voip: voip, collapseID: collapseID, limit: limit),
            fitLimit: fitLimit, shortened: shortened)
    }

    /// Shortens the body, then the title, then the subtitle, at a character boundary with "…", until the payload
    /// fits. When even empty texts do not fit (the sender's own fields are too big), throws 413. Linear in the texts' size.
    static func fit(_ payload: [String: JSONValue], limit: Int) throws(BeaconError)
        -> (payload: [String: JSONValue], json: String, shortened: Bool)
    {
        var payload = payload
        var json = JSONWriter.string(.object(payload))
        var shortened = false
        for field in ["body", "title", "subtitle"] where json.utf8.count > limit {
            guard case .object(var aps)? = payload["aps"], case .object(var alert)? = aps["alert"], let text = alert[field]?.stringValue
            else {
                continue
            }
            shortened = true
            // Keep the longest prefix whose escaped form leaves room for the rest and "…" (3 bytes).
            let budget = escapedSize(text) - (json.utf8.count - limit) - 3
            alert[field] = .string(budget > 0 ? prefix(of: text, escapedSizeAtMost: budget) + "…" : "")
            aps["alert"] = .object(alert)
            payload["aps"] = .object(aps)
            json = JSONWriter.string(.object(payload))
        }
        guard json.utf8.count <= limit else {
            throw BeaconError(
                .requestTooLarge, "the push fields of this message make a payload of \(json.utf8.count) bytes; APNs accepts \(limit)")
        }
        return (payload, json, shortened)
    }

    /// The bytes `text` takes inside a JSON string literal (as `JSONWriter` writes it).
    static func escapedSize<S: Sequence<Unicode.Scalar>>(_ scalars: S) -> Int {
        scalars.reduce(0) { size, scalar in
            switch scalar {
            case "\"", "\\", "\n", "\r", "\t": size + 2
            case _ where scalar.value < 0x20: size + 6
            default: size + UTF8.width(scalar)
            }
        }
    }

    static func escapedSize(_ text: String) -> Int { escapedSize(text.unicodeScalars) }

    /// The longest prefix of whole characters whose escaped size is at most `budget`.
    static func prefix(of text: String, escapedSizeAtMost budget: Int) -> String {
        var used = 0
        var end = text.startIndex
        for index in text.indices {
            let size = escapedSize(text[index].unicodeScalars)
            guard used + size <= budget else { break }
            used += size
            end = text.index(after: index)
        }
        return String(text[..<end])
    }

    /// A text cut to `maxRenderedBytes` (whole characters): anything longer is shortened by `fit` anyway.
    static func cut(_ text: String) -> String {
        text.utf8.count <= maxRenderedBytes ? text : prefix(of: text, escapedSizeAtMost: maxRenderedBytes)
    }

    /// `ext.em_push_template` (or its `directed_template` when it lists the receiver).
    static func messageTemplate(_ message: Message, receiver: String) -> (name: String, titleArgs: [String], contentArgs: [String])? {
        guard let template = message.ext["em_push_template"]?.objectValue else { return nil }
        func args(_ object: [String: JSONValue], _ key: String) -> [String] {
            object[key]?.arrayValue?.prefix(100).map { $0.stringValue ?? JSONWriter.string($0) } ?? []
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

    /// The values of the built-in placeholders for one rendering.
    struct BuiltIns {
        var fromNickname: String
        var msg: String
        var dynamicFrom: String

        /// The value of the built-in that `text` starts with, and its length in characters.
        func match(_ text: Substring) -> (value: String, length: Int)? {
            guard text.hasPrefix("{$") else { return nil }
            if text.hasPrefix("{$fromNickname}") { return (fromNickname, 15) }
            if text.hasPrefix("{$msg}") { return (msg, 6) }
            if text.hasPrefix("{$dynamicFrom}") { return (dynamicFrom, 14) }
            return nil
        }
    }

    /// Replaces `{0}`…`{99}` (missing → empty) and the built-ins in one pass; arguments may themselves hold built-ins.
    /// Values are inserted as they are, never scanned again, and the output stops growing at `maxRenderedBytes`.
    static func fillPattern(_ pattern: String, args: [String], builtIns: BuiltIns) -> String {
        var output = ""
        func append(_ text: Substring, expandingArgs: Bool) {
            var rest = text
            while output.utf8.count < maxRenderedBytes, let open = rest.firstIndex(of: "{") {
                output += rest[..<open]
                let tail = rest[open...]
                if let (value, length) = builtIns.match(tail) {
                    output += value
                    rest = tail.dropFirst(length)
                } else if expandingArgs, let index = PatternPlaceholder.index(at: tail) {
                    if index < args.count { append(Substring(args[index]), expandingArgs: false) }
                    rest = tail.dropFirst(index < 10 ? 3 : 4)
                } else {
                    output += "{"
                    rest = tail.dropFirst()
                }
            }
            if output.utf8.count < maxRenderedBytes { output += rest }
        }
        append(Substring(pattern), expandingArgs: true)
        return cut(output)
    }
}
