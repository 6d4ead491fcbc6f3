import BeaconClient
import BeaconCore
import BeaconTesting
import Foundation
import Testing

@Suite struct MessagingTests {
    @Test func twoUsersChatLive() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.createUsers("alice", "bob")
            let alice = try await beacon.connect("alice")
            let bob = try await beacon.connect("bob")
            try await bob.events.synced()
            let sent = try await alice.send(to: "bob", "hello bob")
            let received = try await bob.messages.wait(count: 1)
            #expect(received[0].id == sent.id)
            #expect(received[0].from == "alice")
            #expect(received[0].content == .text("hello bob"))
            _ = try await bob.send(to: "alice", "hi alice")
            #expect(try await alice.messages.wait(count: 1)[0].content == .text("hi alice"))
            await alice.client.logout()
            await bob.client.logout()
        }
    }

    @Test func offlineUserReceivesEverythingInOrderExactlyOnce() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.createUsers("alice", "bob")
            let alice = try await beacon.connect("alice")
            for i in 0..<30 { _ = try await alice.send(to: "bob", "m\(i)") }
            #expect(try await beacon.rest("GET", "/users/bob/offline_msg_count").json["data"]?["bob"] == "30")

            let bob = try await beacon.connect("bob")
            for i in 30..<40 { _ = try await alice.send(to: "bob", "m\(i)") }
            _ = try await alice.send(to: "bob", "end1")
            #expect(try await bob.texts(until: "end1") == (0..<40).map { "m\($0)" })

            // Away again: only what was sent meanwhile comes back on reconnect, once.
            await bob.client.logout()
            for i in 40..<50 { _ = try await alice.send(to: "bob", "m\(i)") }
            try await bob.client.login(username: "bob", password: "pw")
            _ = try await alice.send(to: "bob", "end2")
            let all = try await bob.messages.wait { $0.contains { $0.content == .text("end2") } }
            #expect(
                all.compactMap { if case .text(let t) = $0.content { t } else { nil } }
                    == (0..<40).map { "m\($0)" } + ["end1"] + (40..<50).map { "m\($0)" } + ["end2"])
            #expect(Set(all.map(\.id)).count == all.count)
        }
    }

    @Test func aNewDeviceOfTheUserGetsTheStoredMessagesToo() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.createUsers("alice", "bob")
            let alice = try await beacon.connect("alice")
            for i in 0..<5 { _ = try await alice.send(to: "bob", "m\(i)") }
            let phone = try await beacon.connect("bob", device: "phone")
            _ = try await alice.send(to: "bob", "end")
            #expect(try await phone.texts(until: "end") == (0..<5).map { "m\($0)" })
            let tablet = try await beacon.connect("bob", device: "tablet")
            #expect(try await tablet.texts(until: "end") == (0..<5).map { "m\($0)" })
        }
    }

    @Test func theSendersOtherDevicesGetACopyButNotTheSendingOne() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.createUsers("alice", "bob")
            let phone = try await beacon.connect("alice", device: "phone")
            let tablet = try await beacon.connect("alice", device: "tablet")
            let bob = try await beacon.connect("bob")
            _ = try await phone.send(to: "bob", "from phone")
            _ = try await bob.send(to: "alice", "end")
            #expect(try await tablet.texts(until: "end") == ["from phone"])
            #expect(try await phone.texts(until: "end") == [])
            #expect(try await bob.messages.wait(count: 1)[0].content == .text("from phone"))
            // A device that was away also gets its user's own messages sent from elsewhere.
            let laptop = try await beacon.connect("alice", device: "laptop")
            #expect(try await laptop.texts(until: "end") == ["from phone"])
        }
    }

    @Test func groupMessagesFanOutToEveryMember() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.createUsers("alice", "bob", "carol", "dave")
            let group = try await beacon.createGroup(owner: "alice", members: ["bob", "carol"])
            let alice = try await beacon.connect("alice")
            let alicePad = try await beacon.connect("alice", device: "pad")
            let bob = try await beacon.connect("bob")
            let dave = try await beacon.connect("dave")
            _ = try await alice.send(to: group, "hello team", chatType: .groupchat)
            let atBob = try await bob.messages.wait(count: 1)
            #expect(atBob[0].chatType == .groupchat)
            #expect(atBob[0].to == group)
            #expect(try await alicePad.messages.wait(count: 1)[0].content == .text("hello team"))
            let carol = try await beacon.connect("carol")
            #expect(try await carol.messages.wait(count: 1)[0].content == .text("hello team"))
            // Not a member: cannot send to the group, receives nothing from it.
            await #expect(throws: BeaconClientError.self) { try await dave.send(to: group, "let me in", chatType: .groupchat) }
            _ = try await alice.send(to: "dave", "end")
            #expect(try await dave.texts(until: "end") == [])
        }
    }

    @Test func onlineOnlyMessagesReachOnlineDevicesAndAreNeverStored() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.createUsers("alice", "bob", "carol")
            let alice = try await beacon.connect("alice")
            let bob = try await beacon.connect("bob")
            try await bob.events.synced()
            _ = try await alice.send(to: "bob", "typing…", onlineOnly: true)
            _ = try await alice.send(to: "carol", "typing…", onlineOnly: true)
            let atBob = try await bob.messages.wait(count: 1)
            #expect(atBob[0].onlineOnly)
            #expect(try await beacon.rest("GET", "/users/carol/offline_msg_count").json["data"]?["carol"] == "0")
            let carol = try await beacon.connect("carol")
            _ = try await alice.send(to: "carol", "end")
            #expect(try await carol.texts(until: "end") == [])
            // The REST form too.
            let (status, answer) = try await beacon.rest(
                "POST", "/messages/users",
                ["from": "alice", "to": ["carol"], "type": "txt", "body": ["msg": "x"], "routetype": "ROUTE_ONLINE"])
            #expect(status == 200)
            let id = try #require(answer["data"]?["carol"]?.stringValue)
            #expect(try await beacon.rest("GET", "/users/carol/offline_msg_status/\(id)").status == 404)
        }
    }

    @Test func restSendsInBothFormats() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.createUsers("alice", "bob", "carol")
            let group = try await beacon.createGroup(owner: "alice", members: ["bob"])
            let bob = try await beacon.connect("bob")
            try await bob.events.synced()

            let current = try await beacon.rest(
                "POST", "/messages/users",
                ["from": "alice", "to": ["bob", "carol"], "type": "txt", "body": ["msg": "current"], "ext": ["em_push_title": "t"]])
            #expect(current.status == 200)
            let bobID = try #require(current.json["data"]?["bob"]?.stringValue)
            #expect(current.json["data"]?["carol"]?.stringValue != nil)

            let toGroup = try await beacon.rest(
                "POST", "/messages/chatgroups",
                ["from": "alice", "to": .array([.string(group)]), "type": "img", "body": ["url": "https://x/a.png", "filename": "a.png"]])
            #expect(toGroup.status == 200)

            let legacy = try await beacon.rest(
                "POST", "/messages",
                [
                    "target_type": "users", "target": ["bob"], "msg": ["type": "loc", "lat": 35.6, "lng": 139.7, "addr": "Tokyo"],
                    "from": "alice",
                ])
            #expect(legacy.status == 200)
            #expect(legacy.json["data"]?["bob"]?.stringValue != nil)

            let received = try await bob.messages.wait(count: 3)
            #expect(String(received[0].id) == bobID)
            #expect(received[0].ext["em_push_title"] == "t")
            #expect(received[1].content == .image(url: "https://x/a.png", filename: "a.png"))
            #expect(received[1].chatType == .groupchat)
            #expect(received[2].content == .location(latitude: 35.6, longitude: 139.7, address: "Tokyo"))
            #expect(try await beacon.rest("GET", "/users/carol/offline_msg_count").json["data"]?["carol"] == "1")
            // bob's acknowledgements travel before his next send on the same connection.
            // (The SDK acknowledges a message when the app asks for the next one, which the test's collector does just after
            // it hands over the third: so the last ack may follow this send. Read until it is recorded, at most 10 s.)
            _ = try await bob.send(to: "alice", "got them")
            try await waitUntil("bob's acknowledgements recorded", timeout: .seconds(10)) {
                try await beacon.rest("GET", "/users/bob/offline_msg_count").json["data"]?["bob"] == "0"
            }
            #expect(try await beacon.rest("GET", "/users/bob/offline_msg_status/\(bobID)").json["data"]?[bobID] == "delivered")
        }
    }

    @Test func theSameDeviceConnectingAgainReplacesItsOldConnection() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.createUsers("alice", "bob")
            let first = try await beacon.connect("bob", device: "phone")
            let second = try await beacon.connect("bob", device: "phone")
            try await first.events.wait { $0.contains(.replaced) }
            let alice = try await beacon.connect("alice")
            _ = try await alice.send(to: "bob", "hi")
            #expect(try await second.messages.wait(count: 1)[0].content == .text("hi"))
        }
    }

    @Test func kickingAUserDisconnectsEveryDeviceAndRevokesTokens() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.createUsers("bob")
            let token = try await beacon.userToken("bob")
            let phone = try await beacon.connect("bob", device: "phone")
            let pad = try await beacon.connect("bob", device: "pad")
            try await phone.events.synced()
            try await pad.events.synced()
            func connected() async throws -> JSONValue? { try await beacon.rest("GET", "/users/bob/resources").json["entities"] }
            #expect(try await connected() == .array([.object(["res": .string("pad")]), .object(["res": .string("phone")])]))
            #expect(try await beacon.rest("POST", "/users/bob/disconnect").status == 200)
            try await phone.events.wait { $0.contains(.kicked) }
            try await pad.events.wait { $0.contains(.kicked) }
            try await waitUntil("no device of bob connected", timeout: .seconds(10)) { try await connected() == .array([]) }
            #expect(try await connected() == .array([]))
            #expect(try await beacon.rest("GET", "/users/bob", token: token).status == 401)
            // Logging in again works.
            let again = try await beacon.connect("bob", device: "phone")
            try await again.events.synced()
        }
    }

    /// One device disconnected (Easemob's forced logout of a device): the SDK there stops with `kicked`, the user's
    /// other device stays, tokens stay valid; every device seen is listed with when.
    @Test func disconnectingOneDeviceLeavesTheOthers() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.createUsers("bob")
            let token = try await beacon.userToken("bob")
            let phone = try await beacon.connect("bob", device: "phone")
            let pad = try await beacon.connect("bob", device: "pad")
            try await phone.events.synced()
            try await pad.events.synced()
            // Connected a while: its last-seen time is when it left, not when it came.
            try await Task.sleep(for: .milliseconds(300))
            let beforeDisconnect = Int64(Date().timeIntervalSince1970 * 1000)
            let (status, answer) = try await beacon.rest("DELETE", "/users/bob/disconnect/phone")
            #expect(status == 200 && answer["data"]?["result"] == true)
            try await phone.events.wait { $0.contains(.kicked) }
            func connected() async throws -> JSONValue? { try await beacon.rest("GET", "/users/bob/resources").json["entities"] }
            try await waitUntil("the pad alone connected", timeout: .seconds(10)) {
                try await connected() == .array([.object(["res": "pad"])])
            }
            #expect(try await connected() == .array([.object(["res": "pad"])]))
            #expect(!pad.events.items.contains(.kicked))
            #expect(try await beacon.rest("GET", "/users/bob", token: token).status == 200)
            // A device not connected: nothing to do.
            #expect(try await beacon.rest("DELETE", "/users/bob/disconnect/phone").json["data"]?["result"] == false)
            // Both are listed, the pad online, each with when it was seen (its connection's cursor write, ≤ 100 ms).
            var devices: [JSONValue] = []
            try await waitUntil("both devices listed with their last-seen times", timeout: .seconds(10)) {
                devices = try await beacon.rest("GET", "/users/bob/devices").json["entities"]?.arrayValue ?? []
                // The phone's last-seen time is written after it is gone from the resources, when its session's cursor is.
                let phoneSeen = devices.first { $0["device_id"] == "phone" }?["last_seen"]?.intValue
                return devices.count == 2 && devices.allSatisfy { $0["last_seen"]?.intValue != nil }
                    && phoneSeen.map { Int64($0) >= beforeDisconnect } == true
            }
            #expect(devices.map { $0["device_id"] } == ["pad", "phone"])
            #expect(devices.map { $0["online"] } == [true, false])
            #expect(devices.allSatisfy { ($0["last_seen"]?.intValue ?? 0) > 0 })
            #expect((devices.last?["last_seen"]?.intValue).map { Int64($0) >= beforeDisconnect } == true, "\(devices)")
            // Another user's token may not.
            try await beacon.createUsers("eve")
            let eve = try await beacon.userToken("eve")
            #expect(try await beacon.rest("DELETE", "/users/bob/disconnect/pad", token: eve).status == 403)
        }
    }
}
