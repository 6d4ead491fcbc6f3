import BeaconCore
import BeaconProtocol

extension BeaconClient {
    /// Recalls a message this user sent, within the app's recall limit (two minutes unless the app sets another): it
    /// leaves every inbox, every device that may hold it gets the notice in `messages` (`Message.recall`, after the
    /// messages received before it), and the devices
    /// it was pushed to get a background push that removes its notification (`PushPayload.withdrawal`).
    public func recall(_ message: Message) async throws {
        guard username != nil else { throw BeaconClientError.notLoggedIn }
        let _: Envelope<RecallAnswer> = try await post(
            "messages/msg_recall", body: RecallRequest(msgID: String(message.id), to: message.to, chatType: message.chatType.rawValue))
    }
}
