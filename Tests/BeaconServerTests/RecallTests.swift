import APNsSimulator
import BeaconClient
import BeaconCore
import BeaconProtocol
import BeaconTesting
import Foundation
import Testing

private let phone = String(repeating: "ef", count: 32)

/// Recall through Easemob's door (`messages/msg_recall`), end to end: the message leaves the inbox and the offline
/// count, devices get a `recall` frame, and the device it was pushed to gets the background push that removes it.
@Suite struct RecallTests {
    private static func sendText(_ beacon: TestBeacon, from: String, to: String, _ text: String) async throws -> String {
        let sent = try await beacon.rest(
            "POST", "/messages/users", ["from": .string(from), "to": [.string(to)], "type": "txt", "body": ["msg": .string(text)]])
        return try #require(sent.json["data"]?[to]?.stringValue)
    }

    private static func recall(
        _ id: String, to: String = "bob", chatType: String = "chat", from: String? = "alice", force: Bool? = nil
    ) -> JSONValue {
        var body: [String: JSONValue] = ["msg_id": .string(id), "to": .string(to), "chat_type": .string(chatType)]
        if let from { body["from"] = .string(from) }
        if let force { body["force"] = .bool(force) }
        return .object(body)
    }

    @Test func aRecalledMessageLeavesTheInboxTheCountAndTheLockScreen() async throws {
        let clock = TestClock()
        try await withPushBeacon(clock: clock) { beacon, simulator in
            try await beacon.createUsers("alice", "bob", "carol")
            try await beacon.uploadP8()
            _ = try await beacon.bind("bob", device: "iphone", token: phone)
            let one = try await Self.sendText(beacon, from: "alice", to: "bob", "one")
            try await simulator.waitForDeliveries(deviceToken: phone, count: 1)
            let two = try await Self.sendText(beacon, from: "alice", to: "bob", "two")
            try await simulator.waitForDeliveries(deviceToken: phone, count: 2)
            #expect(simulator.deliveries(deviceToken: phone).map(\.payload.badge) == [1, 2])
            #expect(try await beacon.rest("GET", "/users/bob/offline_msg_count").json["data"]?["bob"] == "2")

            // The app recalls alice's second message on her behalf, within the limit: answered as Easemob does.
            let answer = try await beacon.rest("POST", "/messages/msg_recall", Self.recall(two))
            #expect(answer.status == 200)
            #expect(answer.json["action"] == "post")
            #expect(
                answer.json["data"]
                    == ["recalled": "yes", "chattype": "chat", "from": "alice", "to": "bob", "msg_id": .string(two)])
            #expect(try await beacon.rest("GET", "/users/bob/offline_msg_count").json["data"]?["bob"] == "1")
            #expect(try await beacon.rest("GET", "/users/bob/push/badge").json["data"]?["badge"]?.intValue == 1)
            // The phone gets one background push: the recalled id and the badge without it.
            try await simulator.waitForDeliveries(deviceToken: phone, count: 3)
            let withdrawal = try #require(simulator.deliveries(deviceToken: phone).last)
            #expect(withdrawal.pushType == "background")
            #expect(withdrawal.priority == 5)
            #expect(
                withdrawal.payload
                    == .object([
                        "aps": .object(["content-available": .number(1)]),
                        "beacon": .object(["recalled": .array([.string(two)]), "badge": .number(1)]),
                    ]))
            let parsed = try #require(try PushPayload(json: JSONEncoder().encode(withdrawal.payload)).withdrawal)
            let alerts = try simulator.deliveries(deviceToken: phone).prefix(2).map {
                try PushPayload(json: JSONEncoder().encode($0.payload))
            }
            #expect(alerts.map(parsed.covers) == [false, true])
            let records = try await beacon.deliveries(of: "bob")
            #expect(records.first?["push_type"] == "background")
            #expect(records.first?["message_id"]?.stringValue == two)

            // bob's device, connecting, gets the first message and the notice in the second's place.
            let laptop = try await RawDevice.connect(beacon, "bob", device: "laptop")
            let frames = laptop.frames.items
            let stored = frames.compactMap { frame -> Int64? in
                switch frame {
                case .message(let seq?, _): seq
                case .recall(let seq, _, _): seq
                default: nil
                }
            }
            #expect(stored == [1, 3])
            let notice = try #require(frames.compactMap { if case .recall(_, _, let notice) = $0 { notice } else { nil } }.first)
            #expect(notice.messageID == UInt64(two))
            #expect(notice.from == "alice" && notice.to == "bob" && notice.chatType == .chat && notice.recalledBy == "alice")

            // Again: not found. Nor is a message under another conversation, or an id that is no message.
            #expect(try await beacon.rest("POST", "/messages/msg_recall", Self.recall(two)).json["error"] == "message_not_found")
            #expect(
                try await beacon.rest("POST", "/messages/msg_recall", Self.recall(one, to: "carol")).json["error"] == "message_not_found")
            #expect(try await beacon.rest("POST", "/messages/msg_recall", Self.recall("12x")).json["error"] == "illegal_argument")
            #expect(
                try await beacon.rest("POST", "/messages/msg_recall", Self.recall(one, chatType: "chatroom")).json["error"]
                    == "illegal_argument")
            #expect(try await beacon.rest("POST", "/messages/msg_recall", ["msg_id": .string(one)]).json["error"] == "json_parse")
            // Only the sender: carol is not told the message exists; the app naming another sender, or carol naming alice,
            // is refused.
            let carol = try await beacon.userToken("carol")
            #expect(
                try await beacon.rest("POST", "/messages/msg_recall", Self.recall(one, from: nil), token: carol).json["error"]
                    == "message_not_found")
            #expect(try await beacon.rest("POST", "/messages/msg_recall", Self.recall(one, from: "alice"), token: carol).status == 403)
            #expect(try await beacon.rest("POST", "/messages/msg_recall", Self.recall(one, from: "carol")).status == 403)
            // Past the app's limit (two minutes), the sender cannot, nor the app on the sender's behalf; the app itself can
            // (no `from`, or `force`).
            clock.advance(seconds: 121)
            let alice = try await beacon.userToken("alice")
            let late = try await beacon.rest("POST", "/messages/msg_recall", Self.recall(one, from: nil), token: alice)
            #expect(late.status == 403)
            #expect(late.json["error"] == "forbidden_op")
            #expect(try await beacon.rest("POST", "/messages/msg_recall", Self.recall(one)).json["error"] == "forbidden_op")
            let three = try await Self.sendText(beacon, from: "alice", to: "bob", "three")
            let four = try await Self.sendText(beacon, from: "alice", to: "bob", "four")
            clock.advance(seconds: 121)
            #expect(try await beacon.rest("POST", "/messages/msg_recall", Self.recall(three, force: true)).json["data"]?["from"] == "alice")
            #expect(try await beacon.rest("POST", "/messages/msg_recall", Self.recall(four, from: nil)).json["data"]?["from"] == "admin")
            #expect(
                try await beacon.rest("PUT", "/push/policy", ["recall_limit_seconds": 600]).json["data"]?["recall_limit_seconds"] == 600)
            #expect(try await beacon.rest("PUT", "/push/policy", ["recall_limit_seconds": -1]).json["error"] == "illegal_argument")
            let inTime = try await beacon.rest("POST", "/messages/msg_recall", Self.recall(one, from: nil), token: alice)
            #expect(inTime.status == 200)
            #expect(inTime.json["data"]?["from"] == "alice")
            #expect(try await beacon.rest("GET", "/users/bob/offline_msg_count").json["data"]?["bob"] == "0")
            try await laptop.close()

            // A limit of 0: users cannot recall, even at once.
            #expect(try await beacon.rest("PUT", "/push/policy", ["recall_limit_seconds": 0]).status == 200)
            let five = try await Self.sendText(beacon, from: "alice", to: "bob", "five")
            #expect(try await beacon.rest("POST", "/messages/msg_recall", Self.recall(five, from: nil), token: alice).status == 403)
            // A user created again under alice's name is another user: not told the earlier alice's message exists.
            _ = try await beacon.rest("PUT", "/push/policy", ["recall_limit_seconds": 600])
            #expect(try await beacon.rest("DELETE", "/users/alice").status == 200)
            clock.advance(seconds: 1)
            try await beacon.createUsers("alice")
            let newAlice = try await beacon.userToken("alice")
            let earlier = try await beacon.rest("POST", "/messages/msg_recall", Self.recall(five, from: nil), token: newAlice)
            #expect(earlier.json["error"] == "message_not_found")
            #expect(try await beacon.rest("POST", "/messages/msg_recall", Self.recall(five)).json["error"] == "forbidden_op")

            // Nobody may send what looks like a notice.
            let forged = try await beacon.rest(
                "POST", "/messages/users",
                ["from": "alice", "to": ["bob"], "type": "cmd", "body": ["action": "beacon_recall", "msg_id": .string(one)]])
            #expect(forged.json["error"] == "illegal_argument")
        }
    }

    @Test func theSDKRecallsAndHandsOutTheNoticeInOrder() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.createUsers("alice", "bob", "carol")
            let created = try await beacon.rest("POST", "/chatgroups", ["groupname": "g", "owner": "alice", "members": ["bob", "carol"]])
            let group = try #require(created.json["data"]?["groupid"]?.stringValue, "\(created.json)")
            let alice = try await beacon.connect("alice", device: "phone")
            let aliceLaptop = try await beacon.connect("alice", device: "laptop")
            let bob = try await beacon.connect("bob", device: "phone")
            for device in [alice, aliceLaptop, bob] { try await device.events.synced() }
            let sent = try await alice.send(to: group, "oops", chatType: .groupchat)
            _ = try await bob.messages.wait { $0.count == 1 }
            try await alice.client.recall(sent)
            // bob, and alice's other device, get the notice after the message; the sending device gets it too.
            for device in [bob, aliceLaptop] {
                let received = try await device.messages.wait { $0.count == 2 }
                #expect(received[0].id == sent.id && received[0].recall == nil)
                #expect(received[1].recall?.messageID == sent.id)
                #expect(received[1].recall?.recalledBy == "alice")
                #expect(received[1].conversation(for: "bob") == ConversationID(chatType: .groupchat, key: group))
            }
            #expect(try await alice.messages.wait { $0.count == 1 }.first?.recall?.messageID == sent.id)
            // carol was offline: her sync holds only the notice.
            let carol = try await beacon.connect("carol", device: "phone")
            let held = try await carol.messages.wait { $0.count == 1 }
            #expect(held.map(\.recall?.messageID) == [sent.id])
            // Recalling twice fails with the server's code.
            await #expect(throws: BeaconClientError.self) { try await alice.client.recall(sent) }
        }
    }
}
