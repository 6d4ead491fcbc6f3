import BeaconCore
import BeaconStorage
import BeaconTencent
import Crypto
import Hummingbird

/// `openim` (1:1 messages) and the message half of `group_open_http_svc`: Tencent's sends onto `MessageService`, the one
/// path every send takes, with the push rules of Easemob's `ext` keys (`MessageElements`, `OfflinePushInfo`).
extension TencentCommands {
    /// Most receivers of one `batchsendmsg`, as at Tencent.
    static let maxBatchTargets = 500

    /// What every Tencent send carries.
    struct MessageFields: Decodable {
        var fromAccount: String?
        var msgBody: JSONValue
        var offlinePushInfo: OfflinePushInfo?
        var cloudCustomData: String?
        /// 1 (or absent): the sender's other devices get a copy; 2: they do not.
        var syncOtherMachine: Int?
        /// 0: delivered to connected devices only, never stored or pushed.
        var msgLifeTime: Int?
        var msgRandom: Int64?
        var msgTimeStamp: Int64?
        /// `send_group_msg`'s names for `MsgRandom` and online-only.
        var random: Int64?
        var onlineOnlyFlag: Int?
        /// `importmsg`: 2 imports history (no push, not unread); 1 (and Tencent's newer 5) import as it happens.
        var syncFromOldSystem: Int?

        enum CodingKeys: String, CodingKey {
            case fromAccount = "From_Account", msgBody = "MsgBody", offlinePushInfo = "OfflinePushInfo"
            case cloudCustomData = "CloudCustomData", syncOtherMachine = "SyncOtherMachine", msgLifeTime = "MsgLifeTime"
            case msgRandom = "MsgRandom", msgTimeStamp = "MsgTimeStamp", random = "Random", onlineOnlyFlag = "OnlineOnlyFlag"
            case syncFromOldSystem = "SyncFromOldSystem"
        }
    }

    /// The message these fields describe, sent by `From_Account` (the app's admin when absent, which must then be no
    /// other account: 90008 when a named sender does not exist).
    private func outgoing(_ fields: MessageFields, chatType: ChatType, app: AppRecord) async throws -> OutgoingMessage {
        let elements = try MessageElements(fields.msgBody)
        var body = elements.body
        if let data = fields.cloudCustomData { body["CloudCustomData"] = .string(data) }
        var ext = elements.ext(with: fields.offlinePushInfo)
        if fields.syncFromOldSystem == 2 { ext["em_ignore_notification"] = true }
        let sender: String
        var senderIsUser = false
        if let from = fields.fromAccount, from != app.tencent?.adminIdentifier {
            guard try await account(from, app: app) != nil else {
                throw TencentFailure(90008, "From_Account \(from.prefix(64)) does not exist")
            }
            (sender, senderIsUser) = (from, true)
        } else {
            sender = app.tencent?.adminIdentifier ?? TencentIdentity.defaultAdmin
        }
        return OutgoingMessage(
            from: sender, chatType: chatType, type: elements.type, body: .object(body), ext: ext,
            onlineOnly: fields.msgLifeTime == 0 || fields.onlineOnlyFlag == 1, originDevice: nil,
            copyToSender: senderIsUser && fields.syncOtherMachine != 2)
    }

    /// A retry of a send — the same request, byte for byte, from the same sender — is answered with the first one's
    /// messages and stores nothing: Tencent's dedupe on `MsgRandom` (`Random` for groups), which the request holds, but
    /// narrower, as a different request never counts as a repeat. With `MsgTimeStamp`, a retry is recognised within 24
    /// hours; without it, within the same `window` (ms): Tencent's one second for 1:1 sends, five minutes for groups.
    private func receipt(_ call: TencentCall, _ fields: MessageFields, sender: String, window: Int64) -> SendReceipt? {
        guard fields.msgRandom ?? fields.random != nil else { return nil }
        let now = api.clock()
        let stamp = fields.msgTimeStamp.map { "t\($0)" } ?? "w\(now / window)"
        let digest = SHA256.hash(data: call.body).lowercaseHex
        return SendReceipt(scope: SendReceipt.senderScope(sender), reference: "v4:\(digest):\(stamp)", now: now)
    }

    struct SendRequest: Decodable {
        var toAccount: String

        enum CodingKeys: String, CodingKey {
            case toAccount = "To_Account"
        }
    }

    struct SendAnswer: Encodable {
        var msgTime: Int64
        var msgKey: String

        enum CodingKeys: String, CodingKey {
            case msgTime = "MsgTime", msgKey = "MsgKey"
        }
    }

    /// `openim/sendmsg`: one message to one account; answers `MsgTime` (seconds) and `MsgKey` (Beacon's message id).
    @Sendable func sendMessage(_ call: TencentCall) async throws -> Response {
        let target = try call.decode(SendRequest.self).toAccount
        let fields = try call.decode(MessageFields.self)
        let outgoing = try await outgoing(fields, chatType: .chat, app: call.app)
        guard try await account(target, app: call.app) != nil else {
            throw TencentFailure(20003, "To_Account \(target.prefix(64)) is not imported")
        }
        let sent = try await messages.send(
            outgoing, to: [target], app: call.app, enforceMembership: false,
            receipt: receipt(call, fields, sender: outgoing.from, window: 1000))
        guard let message = sent.first else { throw BeaconError(.internalError, "the send stored no message") }
        return try TencentDoor.answer(SendAnswer(msgTime: message.timestamp / 1000, msgKey: String(message.id)))
    }

    /// `To_Account` as a list: `batchsendmsg`, `querystate`, `portrait_get`.
    struct AccountsRequest: Decodable {
        var toAccount: [String]

        enum CodingKeys: String, CodingKey {
            case toAccount = "To_Account"
        }
    }

    struct AccountError: Encodable {
        var toAccount: String
        var errorCode: Int

        enum CodingKeys: String, CodingKey {
            case toAccount = "To_Account", errorCode = "ErrorCode"
        }
    }

    struct BatchAnswer: Encodable {
        var msgKey: String
        var errorList: [AccountError]

        enum CodingKeys: String, CodingKey {
            case msgKey = "MsgKey", errorList = "ErrorList"
        }
    }

    /// `openim/batchsendmsg`: one message to each of up to 500 accounts; accounts that do not exist are answered in
    /// `ErrorList` (70107) and the others get it. `MsgKey` is the first receiver's message id.
    @Sendable func sendBatch(_ call: TencentCall) async throws -> Response {
        let targets = try call.decode(AccountsRequest.self).toAccount
        guard (1...Self.maxBatchTargets).contains(targets.count) else {
            throw TencentFailure(90011, "To_Account names 1-\(Self.maxBatchTargets) accounts")
        }
        let fields = try call.decode(MessageFields.self)
        let outgoing = try await outgoing(fields, chatType: .chat, app: call.app)
        let existing = try await existingAccounts(targets, app: call.app)
        let errors = targets.filter { !existing.contains($0) }.map { AccountError(toAccount: $0, errorCode: 70107) }
        var seen: Set<String> = []
        let receivers = targets.filter { existing.contains($0) && seen.insert($0).inserted }
        var key = ""
        if !receivers.isEmpty {
            let sent = try await messages.send(
                outgoing, to: receivers, app: call.app, enforceMembership: false,
                receipt: receipt(call, fields, sender: outgoing.from, window: 1000))
            key = sent.first { $0.target == receivers[0] }.map { String($0.id) } ?? ""
        }
        return try TencentDoor.answer(BatchAnswer(msgKey: key, errorList: errors))
    }

    /// `openim/importmsg`: a message from an earlier system. History (`SyncFromOldSystem` 2) is stored without a push
    /// and does not count as unread; it is stored at the time of the import, not at `MsgTimeStamp`.
    @Sendable func importMessage(_ call: TencentCall) async throws -> Response {
        _ = try await sendMessage(call)
        return try TencentDoor.answer(TencentEnvelope.NoFields())
    }

    struct AccountState: Encodable {
        var toAccount: String
        /// `State` in Tencent's documentation, `Status` in its server SDKs: both are given.
        var state: String

        enum CodingKeys: String, CodingKey {
            case toAccount = "To_Account", state = "State", status = "Status"
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(toAccount, forKey: .toAccount)
            try container.encode(state, forKey: .state)
            try container.encode(state, forKey: .status)
        }
    }

    struct StateAnswer: Encodable {
        var queryResult: [AccountState]
        var errorList: [AccountError]

        enum CodingKeys: String, CodingKey {
            case queryResult = "QueryResult", errorList = "ErrorList"
        }
    }

    /// `openim/querystate` (`query_online_status`): `Online` (a device connected, on any node), `PushOnline` (none
    /// connected, a device bound for pushes) or `Offline`, for up to 500 accounts.
    @Sendable func queryState(_ call: TencentCall) async throws -> Response {
        let targets = try call.decode(AccountsRequest.self).toAccount
        guard (1...Self.maxBatchTargets).contains(targets.count) else {
            throw TencentFailure(90011, "To_Account names 1-\(Self.maxBatchTargets) accounts")
        }
        let existing = try await existingAccounts(targets, app: call.app)
        let users = Array(existing)
        let online = try await switchboard.onlineDevices(of: users, app: call.app.id)
        let bound = try await store.bindings(of: users, app: call.app.id)
        var results: [AccountState] = []
        var errors: [AccountError] = []
        for target in targets {
            guard existing.contains(target) else {
                errors.append(AccountError(toAccount: target, errorCode: 70107))
                continue
            }
            let state =
                !(online[target] ?? []).isEmpty ? "Online" : !(bound[target] ?? []).isEmpty ? "PushOnline" : "Offline"
            results.append(AccountState(toAccount: target, state: state))
        }
        return try TencentDoor.answer(StateAnswer(queryResult: results, errorList: errors))
    }

    struct GroupSendAnswer: Encodable {
        var msgTime: Int64
        /// Beacon's message id: unique in the app and increasing within the group, but 64-bit and not gapless (Tencent's
        /// counts 1, 2, 3… per group).
        var msgSeq: UInt64

        enum CodingKeys: String, CodingKey {
            case msgTime = "MsgTime", msgSeq = "MsgSeq"
        }
    }

    /// `group_open_http_svc/send_group_msg`: to every member but the sender (the app may send to any group).
    @Sendable func sendGroupMessage(_ call: TencentCall) async throws -> Response {
        let group = try call.decode(GroupRequest.self).groupID
        let fields = try call.decode(MessageFields.self)
        let outgoing = try await outgoing(fields, chatType: .groupchat, app: call.app)
        let sent = try await messages.send(
            outgoing, to: [group], app: call.app, enforceMembership: false,
            receipt: receipt(call, fields, sender: outgoing.from, window: 300_000))
        guard let message = sent.first else { throw BeaconError(.internalError, "the send stored no message") }
        return try TencentDoor.answer(GroupSendAnswer(msgTime: message.timestamp / 1000, msgSeq: message.id))
    }
}
