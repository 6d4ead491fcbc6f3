import APNsSimulator
import BeaconClient
import BeaconCore
import BeaconProtocol
import BeaconTesting
import Foundation
import Testing

private let phone = String(repeating: "cd", count: 32)

/// Read state, badge = unread count, and the background push that withdraws what was read elsewhere (issue 11).
@Suite struct ReadStateTests {
    private static func sendText(_ beacon: TestBeacon, from: String, to: String, _ text: String) async throws -> String {
        let sent = try await beacon.rest(
            "POST", "/messages/users", ["from": .string(from), "to": [.string(to)], "type": "txt", "body": ["msg": .string(text)]])
        return try #require(sent.json["data"]?[to]?.stringValue)
    }

    @Test func readingOnTheLaptopWithdrawsThePhonesNotificationsWithTheNewBadge() async throws {
        try await withPushBeacon { beacon, simulator in
            try await beacon.createUsers("alice", "bob")
            try await beacon.uploadP8()
            _ = try await beacon.bind("bob", device: "iphone", token: phone)
            // Both of bob's devices are offline: each message is pushed with the unread count.
            var ids: [String] = []
            for (index, text) in ["one", "two", "three"].enumerated() {
                ids.append(try await Self.sendText(beacon, from: "alice", to: "bob", text))
                _ = try await beacon.pushOutcomes.attempts(index + 1)
            }
            #expect(simulator.deliveries(deviceToken: phone).map(\.payload.badge) == [1, 2, 3])
            let listed = try await beacon.rest("GET", "/users/bob/conversations").json["entities"]?[0]
            #expect(listed?["unread"]?.intValue == 3)
            #expect(listed?["conversation"] == "alice")
            #expect(listed?["last_msg_id"]?.stringValue == ids[2])

            // The laptop connects and reads the conversation.
            let laptop = try await RawDevice.connect(beacon, "bob", device: "laptop")
            laptop.send(#"{"op":"read","chat_type":"chat","conversation":"alice","up_to":"\#(ids[2])"}"#)
            let frames = try await laptop.frames.wait { $0.contains { if case .read = $0 { true } else { false } } }
            let marker = try #require(frames.compactMap { if case .read(let state) = $0 { state } else { nil } }.first)
            #expect(marker.upTo == ids[2])
            #expect(marker.conversation == "alice")
            #expect(marker.badge == 0)
            // The phone gets one background push: no alert, priority 5, the new badge and what was read.
            _ = try await beacon.pushOutcomes.attempts(4)
            let withdrawal = try #require(simulator.deliveries(deviceToken: phone).last)
            #expect(withdrawal.pushType == "background")
            #expect(withdrawal.priority == 5)
            #expect(withdrawal.collapseID == nil)
            #expect(withdrawal.topic == "com.example.chat")
            #expect(
                withdrawal.payload
                    == .object([
                        "aps": .object(["content-available": .number(1)]),
                        "beacon": .object([
                            "badge": .number(0),
                            "read": .array([
                                .object(["chat_type": .string("chat"), "conversation": .string("alice"), "up_to": .string(ids[2])])
                            ]),
                        ]),
                    ]))
            let parsed = try PushPayload(json: JSONEncoder().encode(withdrawal.payload))
            #expect(parsed.withdrawal?.badge == 0)
            let first = try #require(simulator.deliveries(deviceToken: phone).first)
            #expect(parsed.withdrawal?.covers(try PushPayload(json: JSONEncoder().encode(first.payload))) == true)
            // Recorded with the deliveries like any push.
            let records = try await beacon.deliveries(of: "bob")
            #expect(records.first?["push_type"] == "background")
            #expect(records.first?["status"] == "sent")
            #expect(try await beacon.rest("GET", "/users/bob/conversations").json["entities"]?[0]?["unread"]?.intValue == 0)
            // Reading again what is read changes nothing and pushes nothing.
            laptop.send(#"{"op":"read_all"}"#)
            laptop.send(#"{"op":"ping"}"#)
            let reread = try await beacon.rest("POST", "/users/bob/conversations/chat/alice/read")
            #expect(reread.status == 200)
            #expect(reread.json["data"]?["read"]?.arrayValue?.isEmpty == true)
            _ = try await laptop.frames.wait { $0.contains { if case .pong = $0 { true } else { false } } }  // read_all handled
            #expect(try await beacon.deliveries(of: "bob").filter { $0["push_type"] == "background" }.count == 1)
            // The next messages count from the read state.
            try await laptop.close()
            _ = try await Self.sendText(beacon, from: "alice", to: "bob", "four")
            try await simulator.waitForDeliveries(deviceToken: phone, count: 5)
            _ = try await Self.sendText(beacon, from: "alice", to: "bob", "five")
            try await simulator.waitForDeliveries(deviceToken: phone, count: 6)
            #expect(simulator.deliveries(deviceToken: phone).suffix(2).map(\.payload.badge) == [1, 2])
        }
    }

    @Test func mutedConversationsAndSilentMessagesLeaveTheBadgeAndAReportedBadgeIsCountedOn() async throws {
        try await withPushBeacon { beacon, simulator in
            try await beacon.createUsers("alice", "bob", "carol")
            try await beacon.uploadP8()
            _ = try await beacon.bind("bob", device: "iphone", token: phone)
            // bob mutes alice (push mode NONE): her messages are neither pushed nor counted in the badge.
            #expect(try await beacon.rest("PUT", "/users/bob/notification/user/alice", ["type": "NONE"]).status == 200)
            _ = try await Self.sendText(beacon, from: "carol", to: "bob", "c1")
            _ = try await Self.sendText(beacon, from: "alice", to: "bob", "a1")
            let silent = try await beacon.rest(
                "POST", "/messages/users",
                ["from": "carol", "to": ["bob"], "type": "txt", "body": ["msg": "quiet"], "ext": ["em_ignore_notification": true]])
            #expect(silent.status == 200)
            _ = try await Self.sendText(beacon, from: "carol", to: "bob", "c2")
            try await simulator.waitForDeliveries(deviceToken: phone, count: 2)
            #expect(simulator.deliveries(deviceToken: phone).map(\.payload.badge) == [1, 2])
            #expect(try await beacon.rest("GET", "/users/bob/push/badge").json["data"]?["badge"]?.intValue == 2)
            // The app's policy may count muted conversations.
            #expect(try await beacon.rest("PUT", "/push/policy", ["badge_counts_muted": true]).json["data"]?["badge_counts_muted"] == true)
            #expect(try await beacon.rest("GET", "/users/bob/push/badge").json["data"]?["badge"]?.intValue == 3)
            _ = try await beacon.rest("PUT", "/push/policy", ["badge_counts_muted": false])

            // The app reports its own total (REST, or the `badge` frame): later pushes count on from it.
            #expect(try await beacon.rest("PUT", "/users/bob/push/badge", ["badge": 10]).json["data"]?["badge"]?.intValue == 10)
            _ = try await Self.sendText(beacon, from: "carol", to: "bob", "c3")
            try await simulator.waitForDeliveries(deviceToken: phone, count: 3)
            #expect(simulator.deliveries(deviceToken: phone).last?.payload.badge == 11)
            let device = try await RawDevice.connect(beacon, "bob", device: "laptop")
            device.send(#"{"op":"badge","count":5}"#)
            device.send(#"{"op":"read","chat_type":"chat","conversation":"nobody-there"}"#)
            device.send(#"{"op":"read","chat_type":"chat","conversation":"carol","up_to":"not-a-number"}"#)
            device.send(#"{"op":"read","chat_type":"chat","conversation":""}"#)
            let errors = try await device.frames.wait { frames in frames.filter { if case .error = $0 { true } else { false } }.count >= 2 }
            #expect(
                errors.compactMap { if case .error(_, let code, _) = $0 { code } else { nil } } == ["illegal_argument", "illegal_argument"])
            #expect(try await beacon.rest("GET", "/users/bob/push/badge").json["data"]?["badge"]?.intValue == 5)
            try await device.close()
            // Bad REST input gets a stable code.
            #expect(try await beacon.rest("PUT", "/users/bob/push/badge", ["badge": -1]).json["error"] == "illegal_argument")
            #expect(try await beacon.rest("POST", "/users/bob/conversations/people/carol/read").json["error"] == "illegal_argument")
            #expect(try await beacon.rest("POST", "/users/bob/conversations/chat/carol/read", ["up_to": 12]).json["error"] == "json_parse")
            let alice = try await beacon.userToken("alice")
            #expect(try await beacon.rest("POST", "/users/bob/conversations/read", token: alice).status == 403)
        }
    }

    @Test func theSDKSharesReadStateAcrossDevicesLiveAndAfterReconnecting() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.createUsers("alice", "bob")
            let phone = try await beacon.connect("bob", device: "phone")
            let laptop = try await beacon.connect("bob", device: "laptop")
            try await phone.events.synced()
            try await laptop.events.synced()
            let first = try await Self.sendText(beacon, from: "alice", to: "bob", "hello")
            _ = try await laptop.messages.wait { $0.count == 1 }
            #expect(try await laptop.client.conversations().first?.unread == 1)
            #expect(try await laptop.client.markConversationAsRead(chatType: .chat, conversation: "alice") == 0)
            // Live on the other device (and on the one that read).
            let live = try await phone.reads.wait { $0.count == 1 }
            #expect(live.map(\.upTo) == [first])
            #expect(live.first?.badge == 0)
            _ = try await laptop.reads.wait { $0.count == 1 }
            // The phone is away while the laptop reads more; it learns on reconnecting.
            await phone.client.logout()
            let second = try await Self.sendText(beacon, from: "alice", to: "bob", "again")
            _ = try await laptop.messages.wait { $0.count == 2 }
            #expect(try await laptop.client.markAllConversationsAsRead() == 0)
            try await phone.client.login(username: "bob", password: "pw")
            let caughtUp = try await phone.reads.wait { $0.contains { $0.upTo == second } }
            #expect(caughtUp.last?.conversation == "alice")
            let info = try #require(try await phone.client.conversations().first)
            #expect(info.unread == 0)
            #expect(info.readUpTo == second)
            // A device that saw version 1 gets the marker changed since; one that saw version 2 gets none.
            func markersOnConnect(since version: Int) async throws -> [ReadState] {
                let device = try await RawDevice.connect(beacon, "bob", device: "raw-\(version)", query: "&reads_since=\(version)")
                try await device.close()
                return device.frames.items.compactMap { if case .read(let state) = $0 { state } else { nil } }
            }
            #expect(try await markersOnConnect(since: 1).map(\.version) == [2])
            #expect(try await markersOnConnect(since: 2).isEmpty)
            // The badge reported through the SDK.
            try await phone.client.reportBadge(3)
            #expect(try await beacon.rest("GET", "/users/bob/push/badge").json["data"]?["badge"]?.intValue == 3)
        }
    }
}

extension APNsSimulator {
    /// Waits (polling, bounded) until the device has received `count` pushes.
    func waitForDeliveries(deviceToken: String, count: Int) async throws {
        try await waitUntil("\(count) pushes to the device", timeout: .seconds(20)) { deliveries(deviceToken: deviceToken).count >= count }
        #expect(deliveries(deviceToken: deviceToken).count >= count)
    }
}
