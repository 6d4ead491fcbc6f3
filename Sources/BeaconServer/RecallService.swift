import BeaconCore
import BeaconPush
import BeaconStorage
import Logging

/// Recall, the one path every recall takes (Easemob's `msg_recall`, Tencent's `admin_msgwithdraw` and
/// `group_msg_recall`): checks who may recall what, then removes the message from every inbox, tells every device that
/// may hold it (a `recall` frame, live or in its next sync) and withdraws its notification from the devices it was
/// pushed to with a background push (docs/protocol.md, "Recall").
struct RecallService: Sendable {
    let store: any BeaconStore
    let switchboard: Switchboard
    let messages: MessageService
    /// Told when withdrawal jobs were stored; nil when this server pushes nothing (no secret key).
    let jobsStored: (@Sendable () -> Void)?
    let logger: Logger

    /// The message a recall names, as the caller names it.
    struct Request: Sendable {
        var messageID: UInt64
        /// The conversation it was sent to (a username or a group id), and its chat type: they must match.
        var to: String
        var chatType: ChatType
        /// Its sender as the caller names it (nil: not checked). A recall by a user must name the user.
        var from: String?
    }

    /// Who recalls.
    enum Recaller: Sendable, Equatable {
        /// The app (its token, or Tencent's administrator) as `name`: any message, at any time.
        case app(name: String)
        /// The app on behalf of the message's sender (Easemob's `from` without `force`): within the app's limit.
        case appAsSender
        /// A user (its token): their own messages, within the app's limit.
        case user(String)
    }

    /// Recalls the message; throws `message_not_found` when it is not stored (never, or recalled already) or is not
    /// the one the request describes (or, to a user, not theirs: a user is not told which messages exist), and
    /// `forbidden_op` when the recaller may not recall it.
    @discardableResult
    func recall(_ request: Request, by recaller: Recaller, app: AppRecord) async throws -> RecallResult {
        let notFound = BeaconError(.messageNotFound, "no message \(request.messageID) to \(request.to.prefix(128)) is stored")
        guard let message = try await store.message(request.messageID, app: app.id), message.to == request.to,
            message.chatType == request.chatType, message.recall == nil
        else { throw notFound }
        if case .user(let name) = recaller, name != message.from { throw notFound }
        if let from = request.from, from != message.from {
            throw BeaconError(.forbidden, "message \(message.id) was not sent by \(from.prefix(64))")
        }
        let now = messages.now()
        let recalledBy: String
        switch recaller {
        case .app(let name):
            recalledBy = name
        case .appAsSender, .user:
            // A user created again under the name is another user: the messages of the name's earlier holder are not theirs
            // (nor, to a user token, known).
            if let sender = try await store.user(message.from, app: app.id), message.timestamp < sender.createdAt {
                if case .user = recaller { throw notFound }
                throw BeaconError(.forbidden, "message \(message.id) was sent by an earlier user of the name \(message.from.prefix(64))")
            }
            // Clamped: a stored value out of range (a damaged row) can neither overflow nor lift the limit past 7 days.
            let limit = min(max(try await store.pushPolicy(app: app.id).recallLimitSeconds, 0), PushPolicyRecord.maxRecallLimitSeconds)
            // Compared so that no stored timestamp, however damaged, can overflow.
            guard limit > 0, message.timestamp >= now - limit * 1000 else {
                throw BeaconError(.forbidden, "message \(message.id) is older than the app's recall limit (\(limit) s)")
            }
            recalledBy = message.from
        }
        let notice = RecallNotice(recalling: message, by: recalledBy, at: now).message(id: messages.nextID().id)
        let recall = MessageRecall(messageID: message.id, notice: notice, withdrawal: Self.withdrawal(of: message.id, now: now), now: now)
        guard let result = try await store.recall(recall, app: app.id) else {
            throw BeaconError(.messageNotFound, "message \(message.id) was recalled meanwhile")
        }
        await switchboard.deliver(result.notices, app: app.id)
        if result.withdrawals > 0 { jobsStored?() }
        return result
    }

    /// The background push that removes the notification of the recalled message from the device `sent` went to, to the
    /// same token and topic (a binding that changed since ends it `binding_changed`, as any push).
    static func withdrawal(of messageID: UInt64, now: Int64) -> @Sendable (NewPushJob) -> NewPushJob {
        let payload = WithdrawalPayload.recall(of: messageID)
        return { sent in
            ReadService.withdrawal(
                username: sent.username, deviceID: sent.deviceID, notifier: sent.notifier, deviceToken: sent.deviceToken, topic: sent.topic,
                payload: payload.json, badgeOffset: payload.badgeOffset, now: now)
        }
    }
}
