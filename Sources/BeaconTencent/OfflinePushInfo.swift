import BeaconCore

/// Tencent Cloud IM's `OfflinePushInfo`: what a sender asks of the offline push. Read in Tencent's own spelling (`PushFlag`,
/// `ApnsInfo`, the `/v4` door) and in snake case (`push_flag`, `apns_info`, beside an Easemob-shaped send); either way it
/// becomes Easemob's `ext` keys (`merged(into:)`), which the push rules and the payload builder read: one mapping.
public struct OfflinePushInfo: Sendable, Hashable, Encodable {
    /// 1: do not push this message.
    public var pushFlag: Int?
    public var title: String?
    public var desc: String?
    /// Delivered as the payload's `ext`, as Tencent puts it there.
    public var ext: String?
    public var apnsInfo: ApnsInfo?

    public struct ApnsInfo: Sendable, Hashable, Encodable {
        public var sound: String?
        /// 1: this message does not raise the badge.
        public var badgeMode: Int?
        public var title: String?
        public var subTitle: String?
        public var image: String?
        public var mutableContent: Int?

        public init(
            sound: String? = nil, badgeMode: Int? = nil, title: String? = nil, subTitle: String? = nil, image: String? = nil,
            mutableContent: Int? = nil
        ) {
            self.sound = sound
            self.badgeMode = badgeMode
            self.title = title
            self.subTitle = subTitle
            self.image = image
            self.mutableContent = mutableContent
        }

        enum CodingKeys: String, CodingKey {
            case sound = "Sound", badgeMode = "BadgeMode", title = "Title", subTitle = "SubTitle", image = "Image"
            case mutableContent = "MutableContent"
        }
    }

    public init(pushFlag: Int? = nil, title: String? = nil, desc: String? = nil, ext: String? = nil, apnsInfo: ApnsInfo? = nil) {
        self.pushFlag = pushFlag
        self.title = title
        self.desc = desc
        self.ext = ext
        self.apnsInfo = apnsInfo
    }

    enum CodingKeys: String, CodingKey {
        case pushFlag = "PushFlag", title = "Title", desc = "Desc", ext = "Ext", apnsInfo = "ApnsInfo"
    }

    /// The same request in Easemob's `ext` keys (SPEC §3–§4); keys the sender set in `ext` win.
    public func merged(into ext: [String: JSONValue]) -> [String: JSONValue] {
        var result = ext
        var apns = ext["em_apns_ext"]?.objectValue ?? [:]
        func set(_ key: String, _ value: JSONValue?) {
            if let value, apns[key] == nil { apns[key] = value }
        }
        if pushFlag == 1, result["em_ignore_notification"] == nil { result["em_ignore_notification"] = true }
        set("em_push_title", (apnsInfo?.title ?? title).map(JSONValue.string))
        set("em_push_content", desc.map(JSONValue.string))
        set("em_alert_subTitle", apnsInfo?.subTitle.map(JSONValue.string))
        set("em_push_sound", apnsInfo?.sound.map(JSONValue.string))
        if apnsInfo?.mutableContent == 1 { set("em_push_mutable_content", true) }
        set("em_push_image", apnsInfo?.image.map(JSONValue.string))
        set("tencent_ext", ext["em_apns_ext"]?["tencent_ext"] == nil ? self.ext.map(JSONValue.string) : nil)
        if apnsInfo?.badgeMode == 1 { set("em_push_badge_unchanged", true) }
        if !apns.isEmpty { result["em_apns_ext"] = .object(apns) }
        return result
    }
}

extension OfflinePushInfo: Decodable {
    /// Tencent's spelling first, then snake case (`push_flag`, `apns_info`, `badge_mode`, `sub_title`, `mutable_content`).
    public init(from decoder: any Decoder) throws {
        let fields = try decoder.container(keyedBy: AnyKey.self)
        self.init(
            pushFlag: try fields.either(Int.self, "PushFlag", "push_flag"), title: try fields.either(String.self, "Title", "title"),
            desc: try fields.either(String.self, "Desc", "desc"), ext: try fields.either(String.self, "Ext", "ext"),
            apnsInfo: try fields.either(ApnsInfo.self, "ApnsInfo", "apns_info"))
    }
}

extension OfflinePushInfo.ApnsInfo: Decodable {
    public init(from decoder: any Decoder) throws {
        let fields = try decoder.container(keyedBy: AnyKey.self)
        self.init(
            sound: try fields.either(String.self, "Sound", "sound"), badgeMode: try fields.either(Int.self, "BadgeMode", "badge_mode"),
            title: try fields.either(String.self, "Title", "title"), subTitle: try fields.either(String.self, "SubTitle", "sub_title"),
            image: try fields.either(String.self, "Image", "image"),
            mutableContent: try fields.either(Int.self, "MutableContent", "mutable_content"))
    }
}

/// A coding key of any name: for fields read under either of two spellings.
struct AnyKey: CodingKey {
    var stringValue: String
    var intValue: Int? { nil }
    init(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}

extension KeyedDecodingContainer where Key == AnyKey {
    /// The field under `first`, else under `second`, else nil.
    func either<T: Decodable>(_ type: T.Type, _ first: String, _ second: String) throws -> T? {
        try decodeIfPresent(T.self, forKey: AnyKey(stringValue: first)) ?? decodeIfPresent(T.self, forKey: AnyKey(stringValue: second))
    }
}
