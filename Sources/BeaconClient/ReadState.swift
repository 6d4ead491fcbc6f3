import BeaconCore
import BeaconProtocol
import Foundation

/// One conversation as `BeaconClient.conversations()` lists it.
public struct ConversationInfo: Sendable, Hashable, Codable {
    public var chatType: ChatType
    /// The peer's username (1:1) or the group id.
    public var conversation: String
    /// Unread messages (cmd and silent messages never count).
    public var unread: Int
    /// The user's push mode for it is `NONE`.
    public var muted: Bool
    /// The message it is read up to, if any.
    public var readUpTo: String?
    public var lastMessageID: String
    public var lastTimestamp: Int64

    enum CodingKeys: String, CodingKey {
        case chatType = "chat_type", conversation, unread, muted, readUpTo = "read_up_to", lastMessageID = "last_msg_id",
            lastTimestamp = "last_timestamp"
    }
}

/// What a read answers: the markers that moved and the user's badge afterwards.
struct ReadAnswer: Codable, Sendable {
    var read: [ReadState]
    var badge: Int
}

struct BadgeBody: Codable, Sendable {
    var badge: Int
}

struct ReadBody: Codable, Sendable {
    var upTo: String?
    enum CodingKeys: String, CodingKey { case upTo = "up_to" }
}

extension BeaconClient {
    /// Marks a conversation read up to `messageID` (everything received so far when nil), for every device of the user:
    /// the others get a `read` marker live, and those that were pushed its messages get a background push that removes
    /// the notifications and sets the badge. Returns the user's badge afterwards.
    @discardableResult
    public func markConversationAsRead(chatType: ChatType, conversation: String, upTo messageID: UInt64? = nil) async throws -> Int {
        guard let username else { throw BeaconClientError.notLoggedIn }
        let path = "users/\(username)/conversations/\(chatType.rawValue)/\(conversation)/read"
        let answer: Envelope<ReadAnswer> = try await post(path, body: ReadBody(upTo: messageID.map(String.init)))
        return answer.data?.badge ?? 0
    }

    /// Marks every conversation read. Returns the user's badge afterwards.
    @discardableResult
    public func markAllConversationsAsRead() async throws -> Int {
        guard let username else { throw BeaconClientError.notLoggedIn }
        let answer: Envelope<ReadAnswer> = try await post("users/\(username)/conversations/read", body: ReadBody())
        return answer.data?.badge ?? 0
    }

    /// Tells the server the badge the app shows (e.g. its own unread total when it goes to background): the badges of
    /// later pushes count on from it.
    public func reportBadge(_ count: Int) async throws {
        guard let username else { throw BeaconClientError.notLoggedIn }
        let _: Envelope<BadgeBody> = try await request("PUT", "users/\(username)/push/badge", body: BadgeBody(badge: count))
    }

    /// The user's conversations, most recent first, with unread counts.
    public func conversations() async throws -> [ConversationInfo] {
        guard let username else { throw BeaconClientError.notLoggedIn }
        let answer: Envelope<[ConversationInfo]> = try await request("GET", "users/\(username)/conversations", body: Optional<JSONValue>.none)
        return answer.entities ?? []
    }
}
