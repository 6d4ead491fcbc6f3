import BeaconCore
import BeaconStorage
import BeaconTencent
import Hummingbird

/// The commands of Tencent's REST door (`TencentDoor`), by service: `im_open_login_svc` (accounts), `openim` (1:1
/// messages), `group_open_http_svc` (groups), `profile`. Each takes Tencent's body (`TencentCall`) and answers its fields.
struct TencentCommands: Sendable {
    typealias Handler = @Sendable (TencentCall) async throws -> Response

    let api: API
    let messages: MessageService
    let recalls: RecallService
    let switchboard: Switchboard

    var store: any BeaconStore { api.store }
    var accounts: AccountActions { AccountActions(store: store, switchboard: switchboard, clock: api.clock) }

    /// The handler of `service/command`, nil for one Beacon does not serve.
    func handler(service: String, command: String) -> Handler? {
        switch (service, command) {
        case ("im_open_login_svc", "account_import"): importAccount
        case ("im_open_login_svc", "multiaccount_import"): importAccounts
        case ("im_open_login_svc", "account_delete"): deleteAccounts
        case ("im_open_login_svc", "account_check"): checkAccounts
        case ("im_open_login_svc", "kick"): kick
        case ("openim", "sendmsg"): sendMessage
        case ("openim", "batchsendmsg"): sendBatch
        case ("openim", "querystate"), ("openim", "query_online_status"): queryState
        case ("openim", "importmsg"): importMessage
        case ("openim", "admin_msgwithdraw"): withdrawMessage
        case ("group_open_http_svc", "create_group"): createGroup
        case ("group_open_http_svc", "get_group_info"): groupInfo
        case ("group_open_http_svc", "get_group_member_info"): groupMembers
        case ("group_open_http_svc", "add_group_member"): addGroupMembers
        case ("group_open_http_svc", "delete_group_member"): deleteGroupMembers
        case ("group_open_http_svc", "destroy_group"): destroyGroup
        case ("group_open_http_svc", "send_group_msg"): sendGroupMessage
        case ("group_open_http_svc", "group_msg_recall"): recallGroupMessages
        case ("group_open_http_svc", "get_joined_group_list"): joinedGroups
        case ("profile", "portrait_set"): setPortrait
        case ("profile", "portrait_get"): getPortrait
        default: nil
        }
    }

    /// The commands that only read: the ones answered to GET as well (some server SDKs send `account_check` so).
    static let reads: Set<String> = [
        "im_open_login_svc/account_check", "openim/querystate", "openim/query_online_status", "group_open_http_svc/get_group_info",
        "group_open_http_svc/get_group_member_info", "group_open_http_svc/get_joined_group_list", "profile/portrait_get",
    ]

    /// Tencent's UserIDs as Beacon's usernames: the same rules (`Validation.validateUsername`), so an ID Beacon cannot
    /// hold (upper case, say) is refused rather than changed.
    static func username(_ id: String) throws -> String {
        try Validation.validateUsername(id)
        return id
    }

    /// The account `id` names, nil when there is none (or `id` is no name Beacon can hold).
    func account(_ id: String, app: AppRecord) async throws -> UserRecord? {
        guard (try? Self.username(id)) != nil else { return nil }
        return try await store.user(id, app: app.id)
    }

    /// Which of `ids` name accounts.
    func existingAccounts(_ ids: [String], app: AppRecord) async throws -> Set<String> {
        try await store.existingUsers(ids.filter { (try? Self.username($0)) != nil }, app: app.id)
    }
}

/// `[{"UserID": …}]` items of Tencent's account commands.
struct TencentUserItem: Decodable {
    var userID: String

    enum CodingKeys: String, CodingKey {
        case userID = "UserID"
    }
}

/// A per-account result of Tencent's account commands.
struct TencentResultItem: Encodable {
    var userID: String
    var resultCode: Int
    var resultInfo: String
    var accountStatus: String?

    enum CodingKeys: String, CodingKey {
        case userID = "UserID", resultCode = "ResultCode", resultInfo = "ResultInfo", accountStatus = "AccountStatus"
    }
}
