import BeaconCore
import BeaconStorage
import Hummingbird

/// `im_open_login_svc`: importing, deleting, checking and kicking accounts. An imported account has no password: its
/// user logs in with a UserSig (`POST /{org}/{app}/token`, `grant_type: usersig`) or a token the app issues.
extension TencentCommands {
    /// Most accounts in one request, as at Tencent.
    static let maxAccounts = 100

    struct ImportRequest: Decodable {
        var userID: String?
        /// Tencent's older name for `UserID`, which some server SDKs still send.
        var identifier: String?
        var nick: String?

        enum CodingKeys: String, CodingKey {
            case userID = "UserID", identifier = "Identifier", nick = "Nick"
        }

        func username() throws -> String {
            guard let id = userID ?? identifier else { throw BeaconError.illegal("UserID is missing") }
            return try TencentCommands.username(id)
        }
    }

    /// Creates the accounts that do not exist (an existing one is left as it is, its nickname updated when given: a repeated
    /// import succeeds, as at Tencent). An account that is the app's administrator is refused: the administrator is the
    /// backend, never a user.
    private func importUsers(_ users: [(username: String, nick: String?)], app: AppRecord) async throws {
        for user in users {
            if let nick = user.nick { try Validation.validateNickname(nick) }
            if user.username == app.tencent?.adminIdentifier {
                throw BeaconError.illegal("\(user.username) is the app's Tencent administrator, not an account")
            }
        }
        var existing: Set<String> = []
        var imported = false
        // Creating is all or nothing: when another request imported one of them meanwhile, the rest is created again, a
        // few times at most; an import that still cannot be made is an error, never an OK.
        for _ in 0..<5 {
            existing = try await store.existingUsers(users.map(\.username), app: app.id)
            let new = users.filter { !existing.contains($0.username) }
            guard !new.isEmpty else {
                imported = true
                break
            }
            do {
                _ = try await store.createUsers(
                    new.map { NewUser(username: $0.username, passwordHash: Credentials.noPassword, nickname: $0.nick) }, app: app.id,
                    now: api.clock())
                imported = true
                break
            } catch let error as BeaconError where error.code == .duplicate {
                continue
            }
        }
        guard imported else { throw BeaconError(.internalError, "the accounts could not be imported beside concurrent changes; try again") }
        for user in users where existing.contains(user.username) {
            guard let nick = user.nick else { continue }
            _ = try await store.updateUser(user.username, app: app.id, changes: UserChanges(nickname: nick), now: api.clock())
        }
    }

    @Sendable func importAccount(_ call: TencentCall) async throws -> Response {
        let body = try call.decode(ImportRequest.self)
        try await importUsers([(try body.username(), body.nick)], app: call.app)
        return try TencentDoor.answer(TencentEnvelope.NoFields())
    }

    struct MultiImportRequest: Decodable {
        var accounts: [String]?
        var accountList: [ImportRequest]?

        enum CodingKeys: String, CodingKey {
            case accounts = "Accounts", accountList = "AccountList"
        }
    }

    struct MultiImportAnswer: Encodable {
        var failAccounts: [String]

        enum CodingKeys: String, CodingKey {
            case failAccounts = "FailAccounts"
        }
    }

    /// Imports up to 100 accounts; those whose UserID Beacon cannot hold (or the administrator's) are answered in
    /// `FailAccounts`.
    @Sendable func importAccounts(_ call: TencentCall) async throws -> Response {
        let body = try call.decode(MultiImportRequest.self)
        let requested: [(id: String, nick: String?)] =
            (body.accounts ?? []).map { ($0, nil) } + (body.accountList ?? []).map { ($0.userID ?? $0.identifier ?? "", $0.nick) }
        guard (1...Self.maxAccounts).contains(requested.count) else {
            throw TencentFailure(70206, "import 1-\(Self.maxAccounts) accounts per request")
        }
        var valid: [(username: String, nick: String?)] = []
        var failed: [String] = []
        for account in requested where !valid.contains(where: { $0.username == account.id }) {
            if (try? Self.username(account.id)) != nil, account.id != call.app.tencent?.adminIdentifier {
                valid.append((account.id, account.nick))
            } else {
                failed.append(account.id)
            }
        }
        if !valid.isEmpty { try await importUsers(valid, app: call.app) }
        return try TencentDoor.answer(MultiImportAnswer(failAccounts: failed))
    }

    struct DeleteRequest: Decodable {
        var deleteItem: [TencentUserItem]

        enum CodingKeys: String, CodingKey {
            case deleteItem = "DeleteItem"
        }
    }

    struct ResultItems: Encodable {
        var resultItem: [TencentResultItem]

        enum CodingKeys: String, CodingKey {
            case resultItem = "ResultItem"
        }
    }

    /// Deletes up to 100 accounts with everything they had (`AccountActions.delete`); a missing one is answered 70107.
    @Sendable func deleteAccounts(_ call: TencentCall) async throws -> Response {
        let items = try call.decode(DeleteRequest.self).deleteItem
        guard (1...Self.maxAccounts).contains(items.count) else {
            throw TencentFailure(70206, "delete 1-\(Self.maxAccounts) accounts per request")
        }
        var results: [TencentResultItem] = []
        for item in items {
            let deleted = (try? Self.username(item.userID)) != nil ? try await accounts.delete(item.userID, app: call.app) : false
            results.append(
                TencentResultItem(
                    userID: item.userID, resultCode: deleted ? 0 : 70107,
                    resultInfo: deleted ? "" : "Err_TLS_PT_Open_Login_Account_Not_Exist"))
        }
        return try TencentDoor.answer(ResultItems(resultItem: results))
    }

    struct CheckRequest: Decodable {
        var checkItem: [TencentUserItem]

        enum CodingKeys: String, CodingKey {
            case checkItem = "CheckItem"
        }
    }

    /// Whether each of up to 100 accounts is imported (`Imported`) or not (`NotImported`).
    @Sendable func checkAccounts(_ call: TencentCall) async throws -> Response {
        let items = try call.decode(CheckRequest.self).checkItem
        guard (1...Self.maxAccounts).contains(items.count) else {
            throw TencentFailure(70206, "check 1-\(Self.maxAccounts) accounts per request")
        }
        let existing = try await store.existingUsers(items.map(\.userID), app: call.app.id)
        let results = items.map {
            TencentResultItem(
                userID: $0.userID, resultCode: 0, resultInfo: "", accountStatus: existing.contains($0.userID) ? "Imported" : "NotImported")
        }
        return try TencentDoor.answer(ResultItems(resultItem: results))
    }

    /// Ends the account's login state (`AccountActions.kick`): its tokens, its bindings, its connections.
    @Sendable func kick(_ call: TencentCall) async throws -> Response {
        let username = try call.decode(ImportRequest.self).username()
        guard try await store.user(username, app: call.app.id) != nil else {
            throw BeaconError(.userNotFound, "account \(username) does not exist")
        }
        try await accounts.kick(username, app: call.app)
        return try TencentDoor.answer(TencentEnvelope.NoFields())
    }
}
