import BeaconCore
import BeaconStorage
import Hummingbird

/// Recall through Tencent's door: the administrator's `openim/admin_msgwithdraw` and `group_msg_recall`, with no time
/// limit, as at Tencent. Both go through `RecallService`, so they also withdraw the notifications (which Tencent does not).
extension TencentCommands {
    struct WithdrawRequest: Decodable {
        var fromAccount: String
        var toAccount: String
        var msgKey: String

        enum CodingKeys: String, CodingKey {
            case fromAccount = "From_Account", toAccount = "To_Account", msgKey = "MsgKey"
        }
    }

    /// `openim/admin_msgwithdraw`: the 1:1 message `MsgKey` (Beacon's message id, as `sendmsg` answered it) from
    /// `From_Account` to `To_Account`. A key that names no such message (from that sender), or one recalled already, is
    /// 20022.
    @Sendable func withdrawMessage(_ call: TencentCall) async throws -> Response {
        let body = try call.decode(WithdrawRequest.self)
        guard let messageID = UInt64(body.msgKey) else { throw TencentFailure(90054, "MsgKey '\(body.msgKey.prefix(40))' is not valid") }
        do {
            try await recalls.recall(
                RecallService.Request(messageID: messageID, to: body.toAccount, chatType: .chat, from: body.fromAccount),
                by: .app(name: administrator(call)), app: call.app)
        } catch let error as BeaconError where error.code == .forbidden {
            // Another sender's message: as Tencent, no such message (its 90009 means "not the administrator").
            throw TencentFailure(20022, error.message)
        }
        return try TencentDoor.answer(TencentEnvelope.NoFields())
    }

    struct GroupRecallRequest: Decodable {
        struct Sequence: Decodable {
            var msgSeq: UInt64

            enum CodingKeys: String, CodingKey {
                case msgSeq = "MsgSeq"
            }
        }
        var groupID: String
        var msgSeqList: [Sequence]

        enum CodingKeys: String, CodingKey {
            case groupID = "GroupId", msgSeqList = "MsgSeqList"
        }
    }

    struct GroupRecallResult: Encodable {
        var msgSeq: UInt64
        var retCode: Int

        enum CodingKeys: String, CodingKey {
            case msgSeq = "MsgSeq", retCode = "RetCode"
        }
    }

    struct GroupRecallAnswer: Encodable {
        var recallRetList: [GroupRecallResult]

        enum CodingKeys: String, CodingKey {
            case recallRetList = "RecallRetList"
        }
    }

    /// Group messages recalled at most per request, as at Tencent.
    static let maxRecalledPerRequest = 10

    /// `group_open_http_svc/group_msg_recall`: up to 10 of the group's messages by `MsgSeq` (Beacon's message id, as
    /// `send_group_msg` answered it); each is answered in `RecallRetList` with `RetCode` 0, or 10030 when the group
    /// holds no such message (or it was recalled already).
    @Sendable func recallGroupMessages(_ call: TencentCall) async throws -> Response {
        let body = try call.decode(GroupRecallRequest.self)
        guard (1...Self.maxRecalledPerRequest).contains(body.msgSeqList.count) else {
            throw TencentFailure(10004, "MsgSeqList names 1-\(Self.maxRecalledPerRequest) messages")
        }
        guard try await store.group(body.groupID, app: call.app.id) != nil else {
            throw BeaconError(.groupNotFound, "group \(body.groupID.prefix(128)) does not exist")
        }
        let recaller = RecallService.Recaller.app(name: administrator(call))
        var results: [GroupRecallResult] = []
        for sequence in body.msgSeqList {
            do {
                try await recalls.recall(
                    RecallService.Request(messageID: sequence.msgSeq, to: body.groupID, chatType: .groupchat), by: recaller, app: call.app)
                results.append(GroupRecallResult(msgSeq: sequence.msgSeq, retCode: 0))
            } catch let error as BeaconError where error.code == .messageNotFound {
                results.append(GroupRecallResult(msgSeq: sequence.msgSeq, retCode: 10030))
            }
        }
        return try TencentDoor.answer(GroupRecallAnswer(recallRetList: results))
    }

    /// The app's administrator identifier: who a notice says recalled.
    private func administrator(_ call: TencentCall) -> String {
        call.app.tencent?.adminIdentifier ?? TencentIdentity.defaultAdmin
    }
}
