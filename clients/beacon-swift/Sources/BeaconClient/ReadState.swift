import BeaconCore
import BeaconProtocol
import Foundation

extension BeaconClient {
    /// Marks a conversation read up to `messageID` (everything received so far when nil), for every device of the user:
    /// the others get a `read` marker live, and those that were pushed its messages get a background push that removes
    /// the notifications and sets the badge. Returns the user's badge afterwards.
    @discardableResult
    public func markConversationAsRead(chatType: ChatType, conversation: String, upTo messageID: UInt64? = nil) async throws -> Int {
        guard let username else { throw BeaconClientError.notLoggedIn }
        let path = "users/\(username)/conversations/\(chatType.rawValue)/\(conversation)/read"
        let answer: Envelope<ReadAnswer> = try await post(path, body: ReadRequest(upTo: messageID.map(String.init)))
        return answer.data?.badge ?? 0
    }

    /// Marks every conversation read. Returns the user's badge afterwards.
    @discardableResult
    public func markAllConversationsAsRead() async throws -> Int {
        guard let username else { throw BeaconClientError.notLoggedIn }
        let answer: Envelope<ReadAnswer> = try await post("users/\(username)/conversations/read", body: ReadRequest())
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
        let answer: Envelope<[ConversationInfo]> = try await request(
            "GET", "users/\(username)/conversations", body: Optional<JSONValue>.none)
        return answer.entities ?? []
    }
}
