/// What a recall leaves in the inbox of everyone who held the message: a notice, in its place, that it was recalled.
///
/// It is stored as a `cmd` message with the reserved action `beacon_recall` (which no sender may use), at the end of each
/// inbox like any message, so that devices get it in order with their messages: as a `recall` frame (docs/protocol.md),
/// which the SDK hands out in `messages` with `Message.recall` set. It names the recalled message's conversation as that message did (`from`,
/// `to`, `chatType`), so it lands in the same conversation on both sides.
public struct RecallNotice: Sendable, Hashable {
    /// The recalled message.
    public var messageID: UInt64
    public var from: String
    public var to: String
    public var chatType: ChatType
    /// Who recalled it: the sender, or the app (`admin`, or the Tencent administrator).
    public var recalledBy: String
    /// When it was recalled (ms since 1970).
    public var timestamp: Int64

    /// The reserved `cmd` action of notices.
    public static let action = "beacon_recall"

    public init(messageID: UInt64, from: String, to: String, chatType: ChatType, recalledBy: String, timestamp: Int64) {
        self.messageID = messageID
        self.from = from
        self.to = to
        self.chatType = chatType
        self.recalledBy = recalledBy
        self.timestamp = timestamp
    }

    /// The notice of recalling `message`.
    public init(recalling message: Message, by operator: String, at timestamp: Int64) {
        self.init(
            messageID: message.id, from: message.from, to: message.to, chatType: message.chatType, recalledBy: `operator`,
            timestamp: timestamp)
    }

    /// The notice `message` is, nil for any other message.
    public init?(_ message: Message) {
        guard message.type == .cmd, message.body["action"]?.stringValue == Self.action,
            let recalled = message.body["msg_id"]?.stringValue.flatMap({ UInt64($0) })
        else { return nil }
        self.init(
            messageID: recalled, from: message.from, to: message.to, chatType: message.chatType,
            recalledBy: message.body["by"]?.stringValue ?? "", timestamp: message.timestamp)
    }

    /// The notice as an inbox message under `id` (its own id, not the recalled message's).
    public func message(id: UInt64) -> Message {
        Message(
            id: id, from: from, to: to, chatType: chatType, type: .cmd,
            body: ["action": .string(Self.action), "msg_id": .string(String(messageID)), "by": .string(recalledBy)], timestamp: timestamp)
    }
}

extension Message {
    /// Set when this message is the notice that another one was recalled (`RecallNotice`).
    public var recall: RecallNotice? { RecallNotice(self) }
}
