import BeaconCore
import BeaconServer
import BeaconTesting
import Foundation
import Testing

/// Tencent's `/v4` door in process: who may call it and how it answers refusals (always HTTP 200, Tencent's codes). The
/// commands themselves are driven from outside by a Tencent server SDK (e2e/tencent/tencent_test.py).
@Suite struct TencentDoorTests {
    func door(_ beacon: TestBeacon, _ command: String, query: String = TencentFixture.query(), body: String = "{}") async throws
        -> JSONValue
    {
        let (status, answer) = try await REST.call(beacon.baseURL, "POST", "/v4/\(command)?\(query)", raw: Data(body.utf8))
        #expect(status == 200, "\(command): HTTP \(status)")
        return answer
    }

    @Test func onlyTheAdministratorWithAUserSigThatHoldsGetsIn() async throws {
        try await TestBeacon.run(clock: TestClock()) { beacon in
            try await TencentFixture.give(beacon)
            try await beacon.createUsers("alice")
            let check = #"{"CheckItem":[{"UserID":"alice"}]}"#
            let ok = try await door(beacon, "im_open_login_svc/account_check", body: check)
            #expect(ok["ActionStatus"] == "OK" && ok["ErrorCode"] == 0 && ok["ResultItem"]?[0]?["AccountStatus"] == "Imported")

            let refusals: [(String, String, Int)] = [
                ("no sdkappid", "identifier=administrator&usersig=\(TencentFixture.adminSig)", 60012),
                ("an SDKAppID no app has", TencentFixture.query(sdkAppID: "1400000778"), 70020),
                ("an SDKAppID that is no number", TencentFixture.query(sdkAppID: "-1"), 70020),
                ("no identifier", "sdkappid=\(TencentFixture.sdkAppID)&usersig=\(TencentFixture.adminSig)", 60004),
                ("no usersig", "sdkappid=\(TencentFixture.sdkAppID)&identifier=administrator", 70002),
                ("a user's own UserSig", TencentFixture.query(identifier: "alice", userSig: TencentFixture.aliceSig), 60010),
                ("the administrator's UserSig for another identifier", TencentFixture.query(identifier: "alice"), 70013),
                ("an expired UserSig", TencentFixture.query(userSig: TencentFixture.expiredAdminSig), 70001),
                ("a UserSig that is not one", TencentFixture.query(userSig: "eJyrVgrx"), 70003),
            ]
            for (label, query, code) in refusals {
                let answer = try await door(beacon, "im_open_login_svc/account_check", query: query, body: check)
                #expect(answer["ActionStatus"] == "FAIL" && answer["ErrorCode"] == .number(Double(code)), "\(label): \(answer)")
                #expect(answer["ResultItem"] == nil, "\(label)")
            }
        }
    }

    @Test func refusalsOfTheCommandsAreTencentsCodes() async throws {
        try await TestBeacon.run(clock: TestClock()) { beacon in
            try await TencentFixture.give(beacon)
            let cases: [(String, String, Int)] = [
                ("openim/no_such_command", "{}", 60009),
                ("openim/sendmsg", "not json", 90001),
                ("group_open_http_svc/get_group_info", "[1]", 10011),
                ("im_open_login_svc/account_import", #"{"UserID":"Upper"}"#, 70402),
                ("im_open_login_svc/account_check", #"{"CheckItem":[]}"#, 70206),
                ("group_open_http_svc/destroy_group", #"{"GroupId":"none"}"#, 10010),
                ("openim/batchsendmsg", #"{"To_Account":[],"MsgRandom":1,"MsgBody":[]}"#, 90011),
                (
                    "openim/sendmsg",
                    #"{"To_Account":"nobody","MsgRandom":1,"MsgBody":[{"MsgType":"TIMTextElem","MsgContent":{"Text":"x"}}]}"#, 20003
                ),
                ("openim/sendmsg", #"{"To_Account":"nobody","MsgRandom":1,"MsgBody":[]}"#, 90010),
                ("profile/portrait_set", #"{"From_Account":"x","ProfileItem":[{"Tag":"Tag_Profile_IM_Gender","Value":1}]}"#, 40009),
                ("im_open_login_svc/kick", #"{"UserID":"nobody"}"#, 70107),
                ("openim/admin_msgwithdraw", #"{"From_Account":"a","To_Account":"b","MsgKey":"31906_833502"}"#, 90054),
                ("openim/admin_msgwithdraw", #"{"From_Account":"a","To_Account":"b","MsgKey":"123"}"#, 20022),
                ("openim/admin_msgwithdraw", #"{"To_Account":"b","MsgKey":"123"}"#, 90001),
                ("group_open_http_svc/group_msg_recall", #"{"GroupId":"none","MsgSeqList":[{"MsgSeq":1}]}"#, 10010),
                ("group_open_http_svc/group_msg_recall", #"{"GroupId":"none","MsgSeqList":[]}"#, 10004),
            ]
            for (command, body, code) in cases {
                let answer = try await door(beacon, command, body: body)
                #expect(answer["ActionStatus"] == "FAIL" && answer["ErrorCode"] == .number(Double(code)), "\(command) \(body): \(answer)")
            }
            let large = try await door(beacon, "openim/sendmsg", body: "[" + String(repeating: "1,", count: 200_000) + "1]")
            #expect(large["ErrorCode"] == 80002, "\(large)")
        }
    }

    /// A rotated key refuses the UserSigs made with the old one at once: at the door (which reads the app on every
    /// request) and at the login (which reads it afresh), though this node's copy of the app is younger than its lifetime.
    @Test func aRotatedKeyRefusesOldUserSigsAtOnce() async throws {
        try await TestBeacon.run(clock: TestClock()) { beacon in
            try await TencentFixture.give(beacon)
            let login: JSONValue = ["grant_type": "usersig", "username": "alice", "usersig": .string(TencentFixture.aliceSig)]
            let first = try await beacon.rest("POST", "/token", login, anonymous: true)
            #expect(first.status == 200 && first.json["user"]?["username"] == "alice", "\(first)")
            let admin = try await beacon.rest(
                "POST", "/token", ["grant_type": "usersig", "username": "administrator", "usersig": .string(TencentFixture.adminSig)],
                anonymous: true)
            #expect(admin.status == 400 && admin.json["error"] == "invalid_grant", "the administrator is no user: \(admin)")

            // A rotation of the client secret that keeps the Tencent key: the backend's UserSigs still open the door.
            let secret = try #require(beacon.credentials?.clientSecret)
            let kept = try await beacon.rest("POST", "/credentials/rotate", ["client_secret": .string(secret), "keep_tencent_key": true])
            #expect(
                kept.status == 200 && kept.json["data"]?["client_secret"] != nil && kept.json["data"]?["sdk_secret_key"] == nil, "\(kept)")
            let still = try await door(beacon, "im_open_login_svc/account_check", body: #"{"CheckItem":[{"UserID":"alice"}]}"#)
            #expect(still["ErrorCode"] == 0, "\(still)")

            let rotated = try await AppProvisioning.rotateSecret(beacon.app, in: beacon.store, box: SecretBox(key: testSecretKey))
            #expect(rotated.sdkAppID == TencentFixture.sdkAppID && rotated.sdkSecretKey != TencentFixture.secretKey)
            let answer = try await door(beacon, "im_open_login_svc/account_check", body: #"{"CheckItem":[{"UserID":"alice"}]}"#)
            #expect(answer["ErrorCode"] == 70009, "\(answer)")
            let again = try await beacon.rest("POST", "/token", login, anonymous: true)
            #expect(again.status == 400 && again.json["error"] == "invalid_grant", "\(again)")
        }
    }

    /// The administrator is the backend, never an account, through either door; a group keeps its owner; a command that
    /// changes things is not answered to GET.
    @Test func theAdministratorIsNoAccountAndAGroupKeepsItsOwner() async throws {
        try await TestBeacon.run(clock: TestClock()) { beacon in
            try await TencentFixture.give(beacon)
            let easemob = try await beacon.rest("POST", "/users", ["username": "administrator", "password": "pw"])
            #expect(easemob.status == 400 && easemob.json["error"] == "duplicate_unique_property_exists", "\(easemob)")
            let imported = try await door(beacon, "im_open_login_svc/account_import", body: #"{"UserID":"administrator"}"#)
            #expect(imported["ErrorCode"] == 70402, "\(imported)")
            try await beacon.createUsers("alice", "bob")
            let app = try #require(try await beacon.store.app(beacon.app))
            await #expect(throws: BeaconError.self) {
                try await TencentIdentities.assign(to: app, in: beacon.store, box: SecretBox(key: testSecretKey), admin: "alice")
            }
            #expect(try await beacon.store.app(beacon.app)?.tencent?.adminIdentifier == "administrator")
            // An imported account has no password: a password login fails for it.
            #expect(try await door(beacon, "im_open_login_svc/account_import", body: #"{"UserID":"carol"}"#)["ErrorCode"] == 0)
            let login = try await beacon.rest(
                "POST", "/token", ["grant_type": "password", "username": "carol", "password": "none"], anonymous: true)
            #expect(login.status == 400 && login.json["error"] == "invalid_grant", "\(login)")

            let created = try await door(
                beacon, "group_open_http_svc/create_group",
                body: #"{"Name":"G","Owner_Account":"alice","MemberList":[{"Member_Account":"bob"}]}"#)
            let group = try #require(created["GroupId"]?.stringValue)
            let removeOwner = try await door(
                beacon, "group_open_http_svc/delete_group_member", body: #"{"GroupId":"\#(group)","MemberToDel_Account":["alice"]}"#)
            #expect(removeOwner["ErrorCode"] == 10004, "\(removeOwner)")
            #expect(try await beacon.store.groupMembers(group, app: app.id) == ["alice", "bob"])

            // (Foundation's client sends no body with GET: the refusal comes before the body is read.)
            let (status, viaGet) = try await REST.call(
                beacon.baseURL, "GET", "/v4/group_open_http_svc/destroy_group?\(TencentFixture.query())")
            #expect(status == 200 && viaGet["ErrorCode"] == 60009, "\(viaGet)")
            #expect(try await beacon.store.group(group, app: app.id) != nil)
            await #expect(throws: BeaconError.self) {
                try await AppProvisioning.create(AppKey(org: "v4", name: "chat"), in: beacon.store)
            }
        }
    }
}
