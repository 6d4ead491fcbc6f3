import BeaconClient
import BeaconCore
import BeaconProtocol
import BeaconServer
import BeaconTesting
import Foundation
import HummingbirdWSClient
import Logging
import Testing

@Suite struct AuthorizationTests {
    @Test func tokensAreIssuedOnlyForRightCredentials() async throws {
        try await TestBeacon.run(restInProcess: true) { beacon in
            try await beacon.createUsers("alice")
            let wrongSecret = try await beacon.rest(
                "POST", "/token",
                ["grant_type": "client_credentials", "client_id": .string(beacon.credentials!.clientID), "client_secret": "nope"],
                anonymous: true)
            #expect(wrongSecret.status == 400)
            #expect(wrongSecret.json["error"] == "invalid_grant")
            let wrongPassword = try await beacon.rest(
                "POST", "/token", ["grant_type": "password", "username": "alice", "password": "nope"], anonymous: true)
            #expect(wrongPassword.json["error"] == "invalid_grant")
            let unknownGrant = try await beacon.rest("POST", "/token", ["grant_type": "magic"], anonymous: true)
            #expect(unknownGrant.status == 400)
            let good = try await beacon.rest(
                "POST", "/token", ["grant_type": "password", "username": "alice", "password": "pw"], anonymous: true)
            #expect(good.json["user"]?["username"] == "alice")
            #expect(good.json["expires_in"]?.intValue == 7 * 24 * 3600)
            let otherApp = try await REST.call(
                beacon.baseURL, "POST", "/acme/nope/token", body: ["grant_type": "password"], token: nil)
            #expect(otherApp.0 == 404)
            #expect(otherApp.1["error"] == "organization_application_not_found")
        }
    }

    @Test func userTokensActOnlyOnTheirOwnUser() async throws {
        try await TestBeacon.run(restInProcess: true) { beacon in
            try await beacon.createUsers("alice", "bob")
            let alice = try await beacon.userToken("alice")
            #expect(try await beacon.rest("GET", "/users/alice", token: alice).status == 200)
            let other = try await beacon.rest("GET", "/users/bob", token: alice)
            #expect(other.status == 403)
            #expect(other.json["error"] == "forbidden_op")
            #expect(try await beacon.rest("PUT", "/users/bob", ["nickname": "x"], token: alice).status == 403)
            #expect(try await beacon.rest("GET", "/users/bob/offline_msg_count", token: alice).status == 403)
            #expect(try await beacon.rest("POST", "/users", ["username": "eve", "password": "pw"], token: alice).status == 403)
            #expect(try await beacon.rest("DELETE", "/users/bob", token: alice).status == 403)
            let impersonation = try await beacon.rest(
                "POST", "/messages/users", ["from": "bob", "to": ["alice"], "type": "txt", "body": ["msg": "x"]], token: alice)
            #expect(impersonation.status == 403)
            let ownSend = try await beacon.rest(
                "POST", "/messages/users", ["to": ["bob"], "type": "txt", "body": ["msg": "x"]], token: alice)
            #expect(ownSend.status == 200)
        }
    }

    @Test func missingForgedForeignAndExpiredTokensAreRefused() async throws {
        let clock = TestClock()
        try await TestBeacon.run(clock: clock, restInProcess: true) { beacon in
            try await beacon.createUsers("alice")
            let missing = try await beacon.rest("GET", "/users/alice", anonymous: true)
            #expect(missing.status == 401)
            #expect(missing.json["error"] == "unauthorized")
            #expect(missing.json["exception"] != nil)
            #expect(missing.json["error_description"] != nil)
            #expect(missing.json["timestamp"]?.intValue == Int(clock.now))

            let forged = String(beacon.appToken.dropLast(2)) + "AA"
            #expect(try await beacon.rest("GET", "/users/alice", token: forged).json["error"] == "auth_bad_access_token")
            #expect(try await beacon.rest("GET", "/users/alice", token: "garbage").status == 401)

            // Another app's token never works here.
            let other = try await AppProvisioning.create(AppKey(org: "acme", name: "other"), in: beacon.store)
            let otherToken = try await REST.call(
                beacon.baseURL, "POST", "/acme/other/token",
                body: [
                    "grant_type": "client_credentials", "client_id": .string(other.clientID), "client_secret": .string(other.clientSecret),
                ],
                token: nil
            ).1["access_token"]?.stringValue
            #expect(try await beacon.rest("GET", "/users/alice", token: otherToken).status == 401)

            let short = try await beacon.rest(
                "POST", "/token", ["grant_type": "password", "username": "alice", "password": "pw", "ttl": 60], anonymous: true)
            let token = try #require(short.json["access_token"]?.stringValue)
            #expect(try await beacon.rest("GET", "/users/alice", token: token).status == 200)
            clock.advance(seconds: 61)
            #expect(try await beacon.rest("GET", "/users/alice", token: token).status == 401)
        }
    }

    @Test func webSocketsNeedAUserTokenAndADeviceID() async throws {
        try await TestBeacon.run(restInProcess: true) { beacon in
            try await beacon.createUsers("alice")
            let token = try await beacon.userToken("alice")
            let url = "ws://127.0.0.1:\(beacon.port)/acme/chat/ws"
            for (query, reason) in [
                ("?device_id=d1", "no token"), ("?device_id=d1&access_token=\(beacon.appToken)", "app token"),
                ("?access_token=\(token)", "no device id"),
            ] {
                await #expect(throws: (any Error).self, "\(reason)") {
                    try await WebSocketClient.connect(url: url + query, logger: Logger(label: "test")) { _, _, _ in }
                }
            }
        }
    }
}

@Suite struct BadInputTests {
    @Test func malformedRequestsAreRefusedWithStableCodesAndStoreNothing() async throws {
        try await TestBeacon.run(restInProcess: true) { beacon in
            try await beacon.createUsers("alice", "bob")
            let malformed = try await beacon.rest("POST", "/messages/users", raw: Data("{\"to\":".utf8))
            #expect(malformed.status == 400)
            #expect(malformed.json["error"] == "json_parse")
            let wrongType = try await beacon.rest("POST", "/messages/users", ["to": "bob", "type": "txt", "body": ["msg": "x"]])
            #expect(wrongType.json["error"] == "json_parse")
            let unknownType = try await beacon.rest("POST", "/messages/users", ["to": ["bob"], "type": "sticker", "body": ["msg": "x"]])
            #expect(unknownType.json["error"] == "json_parse")
            let badBody = try await beacon.rest("POST", "/messages/users", ["to": ["bob"], "type": "txt", "body": ["text": "x"]])
            #expect(badBody.json["error"] == "illegal_argument")
            let unknownUser = try await beacon.rest(
                "POST", "/messages/users", ["to": ["bob", "ghost"], "type": "txt", "body": ["msg": "x"]])
            #expect(unknownUser.status == 404)
            #expect(unknownUser.json["error"] == "user_not_found")
            let unknownGroup = try await beacon.rest("POST", "/messages/chatgroups", ["to": ["123"], "type": "txt", "body": ["msg": "x"]])
            #expect(unknownGroup.json["error"] == "group_not_found")
            let big = String(repeating: "x", count: 5200)
            let tooBig = try await beacon.rest("POST", "/messages/users", ["to": ["bob"], "type": "txt", "body": ["msg": .string(big)]])
            #expect(tooBig.status == 413)
            #expect(tooBig.json["error"] == "request_entity_too_large")
            let tooMany = try await beacon.rest(
                "POST", "/messages/users", ["to": .array((0...600).map { .string("u\($0)") }), "type": "txt", "body": ["msg": "x"]])
            #expect(tooMany.json["error"] == "illegal_argument")
            let legacyTarget = try await beacon.rest(
                "POST", "/messages", ["target_type": "rooms", "target": ["bob"], "msg": ["type": "txt", "msg": "x"]])
            #expect(legacyTarget.json["error"] == "illegal_argument")
            let badRoute = try await beacon.rest(
                "POST", "/messages/users", ["to": ["bob"], "type": "txt", "body": ["msg": "x"], "routetype": "ROUTE_ALL"])
            #expect(badRoute.json["error"] == "illegal_argument")
            // Through the socket: the server answers while the body is still arriving.
            let hugeBody = try await REST.call(
                beacon.baseURL, "POST", "/acme/chat/users", raw: Data(repeating: UInt8(ascii: " "), count: 300 * 1024),
                token: beacon.appToken)
            #expect(hugeBody.status == 413)
            #expect(try await beacon.rest("GET", "/nowhere").json["error"] == "service_resource_not_found")

            #expect(try await beacon.rest("GET", "/users/bob/offline_msg_count").json["data"]?["bob"] == "0")
        }
    }

    @Test func userFieldsAreValidated() async throws {
        try await TestBeacon.run(restInProcess: true) { beacon in
            try await beacon.createUsers("alice")
            #expect(
                try await beacon.rest("POST", "/users", ["username": "Bad Name", "password": "pw"]).json["error"] == "illegal_argument")
            #expect(
                try await beacon.rest("POST", "/users", ["username": "alice", "password": "pw"]).json["error"]
                    == "duplicate_unique_property_exists")
            #expect(try await beacon.rest("PUT", "/users/alice", ["timezone": "Mars/Olympus"]).json["error"] == "illegal_argument")
            #expect(try await beacon.rest("PUT", "/users/alice", ["nickname": .string(String(repeating: "n", count: 101))]).status == 400)
            let updated = try await beacon.rest("PUT", "/users/alice", ["nickname": "Alice", "timezone": "Asia/Tokyo"])
            #expect(updated.json["entities"]?[0]?["nickname"] == "Alice")
            let fetched = try await beacon.rest("GET", "/users/alice")
            #expect(fetched.json["entities"]?[0]?["timezone"] == "Asia/Tokyo")
            #expect(fetched.json["entities"]?[0]?["type"] == "user")
            #expect(try await beacon.rest("GET", "/users/ghost").json["error"] == "user_not_found")
            #expect(try await beacon.rest("DELETE", "/users/alice").status == 200)
            #expect(try await beacon.rest("GET", "/users/alice").status == 404)
        }
    }

    @Test func groupMembershipIsManagedByItsOwner() async throws {
        try await TestBeacon.run(restInProcess: true) { beacon in
            try await beacon.createUsers("alice", "bob", "carol")
            #expect(
                try await beacon.rest("POST", "/chatgroups", ["groupname": "g", "owner": "alice", "members": ["ghost"]]).json["error"]
                    == "user_not_found")
            let group = try await beacon.createGroup(owner: "alice", members: ["bob"])
            let bob = try await beacon.userToken("bob")
            let carol = try await beacon.userToken("carol")
            #expect(try await beacon.rest("GET", "/chatgroups/\(group)", token: carol).status == 403)
            #expect(try await beacon.rest("POST", "/chatgroups/\(group)/users/carol", token: bob).status == 403)
            #expect(try await beacon.rest("POST", "/chatgroups/\(group)/users/carol").json["data"]?["result"] == true)
            let members = try await beacon.rest("GET", "/chatgroups/\(group)/users", token: carol)
            #expect(members.json["data"] == [["owner": "alice"], ["member": "bob"], ["member": "carol"]])
            let details = try await beacon.rest("GET", "/chatgroups/\(group)", token: bob)
            #expect(details.json["data"]?[0]?["affiliations_count"]?.intValue == 3)
            #expect(try await beacon.rest("DELETE", "/chatgroups/\(group)/users/carol", token: carol).status == 200)
            #expect(try await beacon.rest("DELETE", "/chatgroups/\(group)/users/alice").status == 403)
            #expect(try await beacon.rest("GET", "/chatgroups/999").json["error"] == "group_not_found")
        }
    }

    @Test func aBadFrameGetsAnErrorFrameAndTheConnectionLivesOn() async throws {
        try await TestBeacon.run(restInProcess: true) { beacon in
            try await beacon.createUsers("alice")
            let token = try await beacon.userToken("alice")
            let frames = Collector<ServerFrame>(
                AsyncStream { continuation in
                    Task {
                        try await WebSocketClient.connect(
                            url: "ws://127.0.0.1:\(beacon.port)/acme/chat/ws?device_id=raw&access_token=\(token)",
                            logger: Logger(label: "test")
                        ) { inbound, outbound, _ in
                            try await outbound.write(.text("not json"))
                            try await outbound.write(.text(#"{"op":"fly"}"#))
                            try await outbound.write(
                                .text(#"{"op":"send","id":"x1","to":"ghost","chat_type":"chat","type":"txt","body":{"msg":"hi"}}"#))
                            try await outbound.write(.binary(.init(bytes: [1, 2, 3])))
                            try await outbound.write(.text(#"{"op":"ping"}"#))
                            for try await message in inbound.messages(maxSize: 1 << 20) {
                                guard case .text(let text) = message,
                                    let frame = try? JSONDecoder().decode(ServerFrame.self, from: Data(text.utf8))
                                else { continue }
                                continuation.yield(frame)
                                if frame == .pong { try await outbound.close(.normalClosure, reason: nil) }
                            }
                            continuation.finish()
                        }
                    }
                })
            let received = try await frames.wait { $0.contains(.pong) }
            let errors = received.compactMap { frame -> (String?, String)? in
                if case .error(let id, let code, _) = frame { return (id, code) }
                return nil
            }
            #expect(errors.map(\.1) == ["json_parse", "json_parse", "json_parse"])
            // A device is not told which names exist: its send to nobody is answered like any other (issue 22).
            #expect(received.contains { if case .sent("x1", _, _) = $0 { true } else { false } })
        }
    }

    @Test func aDeviceThatStopsReadingDoesNotHoldUpAnyoneElse() async throws {
        try await TestBeacon.run(restInProcess: true) { beacon in
            try await beacon.createUsers("alice", "bob", "carol")
            let token = try await beacon.userToken("bob")
            // bob's device connects and then never reads a byte.
            let stalled = Task {
                try await WebSocketClient.connect(
                    url: "ws://127.0.0.1:\(beacon.port)/acme/chat/ws?device_id=stuck&access_token=\(token)", logger: Logger(label: "test")
                ) { _, _, _ in
                    try await Task.sleep(for: .seconds(600))
                }
            }
            defer { stalled.cancel() }
            let carol = try await beacon.connect("carol")
            let alice = try await beacon.connect("alice")
            let text = String(repeating: "x", count: 4000)
            for _ in 0..<1500 { _ = try await alice.send(to: "bob", text) }
            _ = try await alice.send(to: "carol", "still here")
            #expect(try await carol.messages.wait(count: 1)[0].content == .text("still here"))
            // Everything for bob is safe in the store.
            let count = try await beacon.rest("GET", "/users/bob/offline_msg_count")
            #expect(count.json["data"]?["bob"] == "1500", "\(count)")
        }
    }
}
