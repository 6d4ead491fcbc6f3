import BeaconCore
import Foundation

/// What Beacon puts in a push, parsed on the device (e.g. in a notification service extension).
public struct PushPayload: Sendable, Hashable {
    public var title: String?
    public var subtitle: String?
    public var body: String?
    public var badge: Int?
    public var sound: String?
    public var threadID: String?
    /// Sender.
    public var from: String?
    /// Receiver.
    public var to: String?
    /// Group id (group messages only).
    public var group: String?
    /// Message id.
    public var messageID: String?
    /// The sender's custom content (`em_apns_ext.extern` / `em_push_ext.custom`).
    public var extra: JSONValue?
    /// Tencent's `OfflinePushInfo.Ext`, as the sender put it.
    public var tencentExt: JSONValue?
    /// An image for a notification service extension to attach (`em_push_image`, Tencent's `ApnsInfo.Image`).
    public var imageURL: String?
    /// `aps.category`: the notification's actions.
    public var category: String?
    /// `aps.mutable-content`: a notification service extension may change it before it shows.
    public var mutableContent: Bool
    /// The localization keys and arguments (`title-loc-key`, `title-loc-args`, `loc-key`, `loc-args`).
    public var titleLocKey: String?
    public var titleLocArgs: [String]
    public var locKey: String?
    public var locArgs: [String]
    /// Set for Beacon's background push telling what the user read on another device, or which messages were recalled
    /// (not a message notification).
    public var withdrawal: Withdrawal?

    /// What was read elsewhere or recalled: the notifications to remove and the badge to show.
    public struct Withdrawal: Sendable, Hashable {
        /// One conversation read up to a message.
        public struct Read: Sendable, Hashable {
            public var chatType: ChatType
            /// The peer's username (1:1) or the group id: the `thread-id` of its notifications.
            public var conversation: String
            public var upTo: UInt64
        }

        public var badge: Int
        public var reads: [Read]
        /// Messages recalled: their notifications go whatever the conversation.
        public var recalled: [UInt64]

        public init(badge: Int, reads: [Read], recalled: [UInt64] = []) {
            self.badge = badge
            self.reads = reads
            self.recalled = recalled
        }

        /// Whether a delivered notification shows a message now read or recalled: its message id (`m`) is recalled, or
        /// its conversation (`thread-id`, and `g` present for groups) is listed and its id is at most the one read up to.
        public func covers(_ notification: PushPayload) -> Bool {
            guard let id = notification.messageID.flatMap({ UInt64($0) }) else { return false }
            if recalled.contains(id) { return true }
            guard let threadID = notification.threadID else { return false }
            let chatType: ChatType = notification.group == nil ? .chat : .groupchat
            return reads.contains { $0.chatType == chatType && $0.conversation == threadID && id <= $0.upTo }
        }
    }

    /// Parses the JSON payload bytes.
    public init(json: Data) throws {
        let root = try JSONDecoder().decode(JSONValue.self, from: json)
        let aps = root["aps"]
        let alert = aps?["alert"]
        title = alert?["title"]?.stringValue
        subtitle = alert?["subtitle"]?.stringValue
        body = alert?["body"]?.stringValue ?? alert?.stringValue
        badge = aps?["badge"]?.intValue
        sound = aps?["sound"]?.stringValue
        threadID = aps?["thread-id"]?.stringValue
        from = root["f"]?.stringValue
        to = root["t"]?.stringValue
        group = root["g"]?.stringValue
        messageID = root["m"]?.stringValue
        extra = root["e"]
        tencentExt = root["ext"]
        imageURL = root["image"]?.stringValue
        category = aps?["category"]?.stringValue
        mutableContent = aps?["mutable-content"]?.intValue == 1 || aps?["mutable-content"]?.boolValue == true
        titleLocKey = alert?["title-loc-key"]?.stringValue
        titleLocArgs = Self.strings(alert?["title-loc-args"])
        locKey = alert?["loc-key"]?.stringValue
        locArgs = Self.strings(alert?["loc-args"])
        if let beacon = root["beacon"], let badge = beacon["badge"]?.intValue {
            let reads: [Withdrawal.Read] = (beacon["read"]?.arrayValue ?? []).compactMap { read in
                guard let type = read["chat_type"]?.stringValue.flatMap(ChatType.init),
                    let conversation = read["conversation"]?.stringValue,
                    let upTo = read["up_to"]?.stringValue.flatMap({ UInt64($0) })
                else { return nil }
                return Withdrawal.Read(chatType: type, conversation: conversation, upTo: upTo)
            }
            let recalled = (beacon["recalled"]?.arrayValue ?? []).compactMap { $0.stringValue.flatMap { UInt64($0) } }
            withdrawal = Withdrawal(badge: badge, reads: reads, recalled: recalled)
        }
    }

    /// Localization arguments as strings, each in its place (a value that is not a string as its JSON text).
    private static func strings(_ value: JSONValue?) -> [String] {
        (value?.arrayValue ?? []).map { $0.stringValue ?? JSONWriter.string($0) }
    }

    /// Parses `UNNotificationContent.userInfo` / `didReceiveRemoteNotification` dictionaries.
    public init(userInfo: [AnyHashable: Any]) throws {
        let object = Dictionary(uniqueKeysWithValues: userInfo.compactMap { key, value in (key as? String).map { ($0, value) } })
        // A local notification's userInfo may hold dates or data, which JSONSerialization would raise on (not throw).
        guard JSONSerialization.isValidJSONObject(object) else { throw PushPayloadError.notJSON }
        try self.init(json: try JSONSerialization.data(withJSONObject: object))
    }
}

/// Why a dictionary is not a push payload.
public enum PushPayloadError: Error, Sendable, Equatable {
    /// `userInfo` holds values JSON cannot carry (a local notification's dates or data).
    case notJSON
}
