import BeaconCore
import BeaconStorage
import Hummingbird

/// `profile`: the one profile field Beacon keeps, `Tag_Profile_IM_Nick`, the nickname that push alerts show.
extension TencentCommands {
    static let nickTag = "Tag_Profile_IM_Nick"

    struct ProfileItem: Codable {
        var tag: String
        var value: JSONValue

        enum CodingKeys: String, CodingKey {
            case tag = "Tag", value = "Value"
        }
    }

    struct PortraitSetRequest: Decodable {
        var fromAccount: String
        var profileItem: [ProfileItem]

        enum CodingKeys: String, CodingKey {
            case fromAccount = "From_Account", profileItem = "ProfileItem"
        }
    }

    /// Sets the account's nickname; any other tag is refused (40009), not dropped.
    @Sendable func setPortrait(_ call: TencentCall) async throws -> Response {
        let body = try call.decode(PortraitSetRequest.self)
        if let other = body.profileItem.first(where: { $0.tag != Self.nickTag }) {
            throw TencentFailure(40009, "Beacon keeps only \(Self.nickTag), not \(other.tag.prefix(64))")
        }
        guard let nick = body.profileItem.last?.value.stringValue else { throw BeaconError.illegal("\(Self.nickTag) needs a string Value") }
        try Validation.validateNickname(nick)
        guard (try? Self.username(body.fromAccount)) != nil,
            try await store.updateUser(body.fromAccount, app: call.app.id, changes: UserChanges(nickname: nick), now: api.clock()) != nil
        else { throw BeaconError(.userNotFound, "account \(body.fromAccount.prefix(64)) is not imported") }
        return try TencentDoor.answer(TencentEnvelope.NoFields())
    }

    struct UserProfile: Encodable {
        var toAccount: String
        var profileItem: [ProfileItem]
        var resultCode: Int
        var resultInfo: String

        enum CodingKeys: String, CodingKey {
            case toAccount = "To_Account", profileItem = "ProfileItem", resultCode = "ResultCode", resultInfo = "ResultInfo"
        }
    }

    struct PortraitGetAnswer: Encodable {
        var userProfileItem: [UserProfile]

        enum CodingKeys: String, CodingKey {
            case userProfileItem = "UserProfileItem"
        }
    }

    /// Up to 100 accounts' nicknames (`ResultCode` 40003 for one that is not imported).
    @Sendable func getPortrait(_ call: TencentCall) async throws -> Response {
        let names = try call.decode(AccountsRequest.self).toAccount
        guard (1...100).contains(names.count) else { throw BeaconError.illegal("To_Account names 1-100 accounts") }
        var profiles: [UserProfile] = []
        for name in names {
            let user = try await account(name, app: call.app)
            profiles.append(
                UserProfile(
                    toAccount: name, profileItem: user.map { [ProfileItem(tag: Self.nickTag, value: .string($0.nickname ?? ""))] } ?? [],
                    resultCode: user == nil ? 40003 : 0, resultInfo: user == nil ? "account \(name.prefix(64)) is not imported" : ""))
        }
        return try TencentDoor.answer(PortraitGetAnswer(userProfileItem: profiles))
    }
}
