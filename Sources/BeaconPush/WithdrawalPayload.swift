import BeaconCore

/// The background push that tells a device what the user read elsewhere: the new badge and, per conversation, the
/// message read up to, so that the app removes those notifications (matched by `thread-id` = conversation and `m`).
///
/// `{"aps":{"content-available":1},"beacon":{"badge":0,"read":[{"chat_type":"chat","conversation":"alice","up_to":"…"}]}}`
/// — `aps` holds only `content-available`, as APNs requires of push type `background` (sent with priority 5).
public enum WithdrawalPayload {
    /// One conversation read up to a message.
    public struct Read: Sendable, Hashable {
        public var conversation: ConversationID
        public var upTo: UInt64

        public init(conversation: ConversationID, upTo: UInt64) {
            self.conversation = conversation
            self.upTo = upTo
        }
    }

    /// Conversations one payload names at most (the most recently read): it stays far below APNs' 4 KB whatever the keys.
    public static let maxReads = 16

    /// The payload's JSON; `reads` beyond `maxReads` are left out (the newest are kept when given oldest first).
    public static func json(badge: Int, reads: [Read]) -> String {
        let kept = reads.suffix(maxReads).map { read -> JSONValue in
            [
                "chat_type": .string(read.conversation.chatType.rawValue), "conversation": .string(read.conversation.key),
                "up_to": .string(String(read.upTo)),
            ]
        }
        let beacon: JSONValue = ["badge": .number(Double(min(max(badge, 0), JSONWriter.maxBadge))), "read": .array(Array(kept))]
        return JSONWriter.string(["aps": ["content-available": 1], "beacon": beacon])
    }

    /// The payload that removes the notification of a recalled message (matched by `m`), without its badge:
    /// `{"aps":{"content-available":1},"beacon":{"recalled":["…"],"badge":N}}` once the receiver's badge is put in at
    /// `badgeOffset` (`NewPushJob.badgeOffset`).
    public static func recall(of messageID: UInt64) -> (json: String, badgeOffset: Int) {
        let json = JSONWriter.string(["aps": ["content-available": 1], "beacon": ["recalled": [.string(String(messageID))]]])
        // The badge goes last in `beacon`: before the two closing braces.
        return (json, json.utf8.count - 2)
    }
}
