import BeaconCore

/// A Tencent `MsgBody` (its `TIMTextElem`, `TIMCustomElem`… elements) as a Beacon message: a type Beacon's push rules
/// and display strings know, a body with the fields that type needs, and the elements themselves under `MsgBody`, so that
/// a Tencent client gets back exactly what was sent (but for a lone text element, which is `msg` alone).
public struct MessageElements: Sendable, Hashable {
    public var type: MessageType
    public var body: [String: JSONValue]
    /// Push options the elements carry (a `TIMCustomElem`'s `Desc`, `Ext` and `Sound`, which Tencent pushes with).
    public var pushInfo: OfflinePushInfo

    /// The kinds of element Tencent's REST API sends.
    public static let kinds: Set<String> = [
        "TIMTextElem", "TIMCustomElem", "TIMImageElem", "TIMSoundElem", "TIMVideoFileElem", "TIMFileElem", "TIMLocationElem",
        "TIMFaceElem",
    ]

    /// Reads `msgBody` (1-20 elements, each `{"MsgType": …, "MsgContent": {…}}`). The message's type is text when every
    /// element is text (the texts joined), else that of the first other element; a custom message that says nothing to
    /// show (no `Desc` in its element) is not pushed, as at Tencent, unless `OfflinePushInfo.Desc` says something.
    public init(_ msgBody: JSONValue) throws(BeaconError) {
        guard let elements = msgBody.arrayValue, (1...20).contains(elements.count) else {
            throw .illegal("MsgBody must be an array of 1-20 elements")
        }
        var texts: [String] = []
        var primary: (kind: String, content: [String: JSONValue])?
        for element in elements {
            guard let kind = element["MsgType"]?.stringValue, Self.kinds.contains(kind), let content = element["MsgContent"]?.objectValue
            else {
                throw .illegal("each MsgBody element needs MsgType (one of \(Self.kinds.sorted().joined(separator: ", "))) and MsgContent")
            }
            if kind == "TIMTextElem" {
                guard let text = content["Text"]?.stringValue else { throw .illegal("TIMTextElem needs MsgContent.Text as a string") }
                texts.append(text)
            } else if primary == nil {
                primary = (kind, content)
            } else if kind == "TIMCustomElem", primary?.kind == "TIMCustomElem" {
                throw .illegal("a message holds at most one TIMCustomElem")
            }
        }
        var body: [String: JSONValue] = ["MsgBody": msgBody]
        pushInfo = OfflinePushInfo()
        guard let (kind, content) = primary else {
            type = .txt
            // One text element is the text alone, not kept twice (a message's body and ext hold 5 KB).
            body = elements.count == 1 ? [:] : body
            body["msg"] = .string(texts.joined())
            self.body = body
            return
        }
        func text(_ key: String) -> String { content[key]?.stringValue ?? "" }
        switch kind {
        case "TIMImageElem":
            type = .img
            // The original's URL (Type 1), else the first one given.
            let images = content["ImageInfoArray"]?.arrayValue ?? []
            let original = images.first { $0["Type"]?.intValue == 1 } ?? images.first
            body["url"] = .string(original?["URL"]?.stringValue ?? "")
        case "TIMSoundElem":
            type = .audio
            body["url"] = .string(text("Url"))
            if case .number(let seconds) = content["Second"] { body["length"] = .number(seconds) }
        case "TIMVideoFileElem":
            type = .video
            body["url"] = .string(text("VideoUrl"))
            body["thumb"] = .string(text("ThumbUrl"))
        case "TIMFileElem":
            type = .file
            body["url"] = .string(text("Url"))
            body["filename"] = .string(text("FileName"))
        case "TIMLocationElem":
            guard case .number(let latitude) = content["Latitude"], case .number(let longitude) = content["Longitude"] else {
                throw .illegal("TIMLocationElem needs numeric MsgContent.Latitude and Longitude")
            }
            type = .loc
            body["lat"] = .number(latitude)
            body["lng"] = .number(longitude)
            body["addr"] = .string(text("Desc"))
        case "TIMFaceElem":
            type = .custom
            body["customEvent"] = .string("TIMFaceElem")
        default:  // TIMCustomElem
            type = .custom
            body["customEvent"] = .string(text("Data"))
            let desc = content["Desc"]?.stringValue.flatMap { $0.isEmpty ? nil : $0 }
            pushInfo = OfflinePushInfo(
                pushFlag: desc == nil ? 1 : nil, desc: desc, ext: content["Ext"]?.stringValue.flatMap { $0.isEmpty ? nil : $0 },
                apnsInfo: content["Sound"]?.stringValue.map { OfflinePushInfo.ApnsInfo(sound: $0) })
        }
        self.body = body
    }

    /// The message's `ext`: `info` (the request's `OfflinePushInfo`) over what the elements ask, in Easemob's keys. A
    /// custom element without a `Desc` is pushed when `info` gives one.
    public func ext(with info: OfflinePushInfo?) -> [String: JSONValue] {
        var combined = info ?? OfflinePushInfo()
        if combined.desc == nil { combined.desc = pushInfo.desc }
        if combined.ext == nil { combined.ext = pushInfo.ext }
        if combined.apnsInfo?.sound == nil, let sound = pushInfo.apnsInfo?.sound {
            combined.apnsInfo = combined.apnsInfo ?? OfflinePushInfo.ApnsInfo()
            combined.apnsInfo?.sound = sound
        }
        if combined.pushFlag == nil, pushInfo.pushFlag == 1, combined.desc == nil { combined.pushFlag = 1 }
        return combined.merged(into: [:])
    }
}
