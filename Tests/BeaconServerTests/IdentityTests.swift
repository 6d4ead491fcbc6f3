import BeaconClient
import BeaconCore
import BeaconProtocol
import BeaconServer
import BeaconStorage
import BeaconTesting
import Foundation
import Testing

private let phone = String(repeating: "cd", count: 32)

/// A deleted user is a stranger everywhere, and one embedded database serves one server (issue 22, items 1–3).
@Suite struct IdentityTests {
    /// alice is deleted and created again (apps recycle names from phone numbers): the new alice reads none of the old
    /// one's records — pushes with their previews and device token, bindings, conversations, badge, offline messages.
    @Test func aUserCreatedAgainReadsNoneOfTheOldAccountsRecords() async throws {
        try await withPushBeacon { beacon, simulator in
            try await beacon.createUsers("alice", "bob")
            try await beacon.uploadP8()
            _ = try await beacon.bind("alice", token: phone)
            let sent = try await beacon.rest(
                "POST", "/messages/users", ["from": "bob", "to": ["alice"], "type": "txt", "body": ["msg": "my PIN is 4711"]])
            #expect(sent.status == 200)
            _ = try await beacon.pushOutcomes.attempts(1)
            #expect(try await beacon.deliveries(of: "alice").count == 1)

            #expect(try await beacon.rest("DELETE", "/users/alice").status == 200)
            try await beacon.createUsers("alice")
            let token = try await beacon.userToken("alice")
            let mine = try await beacon.rest("GET", "/push/deliveries?username=alice", token: token)
            #expect(mine.status == 200)
            #expect(mine.json["entities"]?.arrayValue?.isEmpty == true, "\(mine.json)")
            #expect(try await beacon.deliveries(of: "alice").isEmpty)  // nor to the app under her name
            #expect(try await beacon.rest("GET", "/users/alice/push/binding", token: token).json["entities"]?.arrayValue?.isEmpty == true)
            let conversations = try await beacon.rest("GET", "/users/alice/conversations", token: token)
            #expect(conversations.status == 200)
            #expect(!"\(conversations.json)".contains("bob"), "\(conversations.json)")
            #expect(try await beacon.rest("GET", "/users/alice/offline_msg_count", token: token).json["data"]?["alice"] == "0")
            let devices = try await beacon.rest("GET", "/users/alice/devices", token: token)
            #expect(devices.status == 200 && !"\(devices.json)".contains("iphone"), "\(devices.json)")
            #expect(simulator.deliveries(deviceToken: phone).count == 1)
        }
    }

    /// The new alice holds no right of the old alice's: the old one's groups went to their longest-standing member (or
    /// were dissolved), so she cannot add herself, read them or remove members.
    @Test func aUserCreatedAgainInheritsNoGroup() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.createUsers("alice", "bob", "carol")
            let team = try await beacon.createGroup(owner: "alice", members: ["bob", "carol"])
            let solo = try await beacon.createGroup(owner: "alice", members: [])
            #expect(try await beacon.rest("DELETE", "/users/alice").status == 200)
            try await beacon.createUsers("alice")
            let token = try await beacon.userToken("alice")

            let group = try await beacon.rest("GET", "/chatgroups/\(team)")
            #expect(group.json["data"]?[0]?["owner"] == "bob", "\(group.json)")
            #expect(try await beacon.rest("GET", "/chatgroups/\(solo)").json["error"] == "group_not_found")
            #expect(try await beacon.rest("GET", "/chatgroups/\(team)", token: token).status == 403)  // not a member
            #expect(try await beacon.rest("DELETE", "/chatgroups/\(team)/users/carol", token: token).status == 403)
            #expect(try await beacon.rest("GET", "/chatgroups/\(team)/users").json["data"]?.arrayValue?.count == 2)
        }
    }

    /// A device session of a deleted user acts for and reads of the next holder of the name nothing: on its node the
    /// deletion closes it; where its kick did not arrive (here: the user deleted in the store directly, as another node
    /// would be told late), the node's audit of its sessions' tokens closes it, or, with the audit's rounds too far apart
    /// (the second argument), what it would read or write re-checks its token once it was last checked over a second ago,
    /// and the session is closed instead.
    @Test(arguments: [BeaconHooks().sessionAuditInterval, .seconds(3600)])
    func aDeletedUsersSessionCannotActForOrReadOfTheNextHolderOfTheName(auditInterval: Duration) async throws {
        var hooks = BeaconHooks()
        hooks.sessionAuditInterval = auditInterval
        try await TestBeacon.run(hooks: hooks) { beacon in
            try await beacon.createUsers("alice", "bob")
            let app = try #require(try await beacon.store.app(AppKey(org: "acme", name: "chat")))
            @Sendable func synced(_ frames: [ServerFrame]) -> Bool { frames.contains { if case .synced = $0 { true } else { false } } }
            @Sendable func kicked(_ frames: [ServerFrame]) -> Bool {
                frames.contains { if case .closing("kicked") = $0 { true } else { false } }
            }
            func recycleAlice() async throws {
                #expect(try await beacon.store.deleteUser("alice", app: app.id, now: 1))
                try await beacon.createUsers("alice")
                try await Task.sleep(for: .milliseconds(1100))  // past the session's re-check interval (a bound, not a race)
            }

            // With the audit, a session that neither acts nor is delivered anything is closed all the same.
            if auditInterval < .seconds(1) {
                let idle = try await RawDevice.connect(beacon, "alice", device: "tablet")
                _ = try await idle.frames.wait(until: synced)
                try await recycleAlice()
                _ = try await idle.frames.wait(until: kicked)
                try await idle.close()
            }

            // Reading: a message for the new alice does not reach the old one's session.
            let reader = try await RawDevice.connect(beacon, "alice", device: "phone")
            _ = try await reader.frames.wait(until: synced)
            try await recycleAlice()
            #expect(
                try await beacon.rest("POST", "/messages/users", ["from": "bob", "to": ["alice"], "type": "txt", "body": ["msg": "hers"]])
                    .status == 200)
            let read = try await reader.frames.wait(until: kicked)
            #expect(!read.contains { if case .message = $0 { true } else { false } }, "\(read)")
            try await reader.close()

            // Nor the new alice's read state.
            let marker = try await RawDevice.connect(beacon, "alice", device: "watch")
            _ = try await marker.frames.wait(until: synced)
            try await recycleAlice()
            // A message of hers stored without a live delivery (which would close the session itself), then read.
            let hers = Message(id: 42, from: "bob", to: "alice", chatType: .chat, type: .txt, body: ["msg": "hers"], timestamp: 1)
            _ = try await beacon.store.append(hers, app: app.id, deliveries: [Delivery(username: "alice")])
            #expect(try await beacon.rest("POST", "/users/alice/conversations/chat/bob/read").status == 200)
            let marked = try await marker.frames.wait(until: kicked)
            #expect(!marked.contains { if case .read = $0 { true } else { false } }, "\(marked)")
            try await marker.close()

            // Writing: a send and a badge of the old session do nothing.
            let writer = try await RawDevice.connect(beacon, "alice", device: "pad")
            _ = try await writer.frames.wait(until: synced)
            try await recycleAlice()
            writer.send(#"{"op":"send","id":"s1","to":"bob","chat_type":"chat","type":"txt","body":{"msg":"as the new alice"}}"#)
            writer.send(#"{"op":"badge","count":7}"#)
            let written = try await writer.frames.wait(until: kicked)
            #expect(!written.contains { if case .sent = $0 { true } else { false } })
            #expect(try await beacon.rest("GET", "/users/bob/offline_msg_count").json["data"]?["bob"] == "0")
            #expect(try await beacon.rest("GET", "/users/alice/push/badge").json["data"]?["badge"] != 7)
            try await writer.close()

            // On its own node, the deletion closes the session at once.
            let again = try await RawDevice.connect(beacon, "alice", device: "tv")
            _ = try await again.frames.wait(until: synced)
            #expect(try await beacon.rest("DELETE", "/users/alice").status == 200)
            _ = try await again.frames.wait(until: kicked)
            try await again.close()
        }
    }

    /// Two `beacon serve` on one data directory: the second refuses to start, naming the reason, and exits non-zero; the
    /// CLI's `app create` and `backup` keep working beside the running server; once it stops, a server starts again.
    @Test func aSecondServerOnTheSameEmbeddedDatabaseRefusesToStart() async throws {
        try await withTemporaryDirectory { directory in
            let data = directory.appendingPathComponent("data").path
            let first = try await BeaconProcess(["serve", "--port", "0", "--data-dir", data])
            _ = try await first.line(containing: "Beacon listening on")

            let second = try await BeaconProcess(["serve", "--port", "0", "--data-dir", data])
            _ = try await second.line(containing: "another beacon serve")
            let status = await second.exitStatus(within: .seconds(30))
            #expect(status != nil && status != 0)
            // Through a link to the same file, too.
            let link = directory.appendingPathComponent("link.sqlite").path
            try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: data + "/beacon.sqlite")
            let linked = try await BeaconProcess(["serve", "--port", "0", "--data-dir", data, "--database", "sqlite:" + link])
            _ = try await linked.line(containing: "another beacon serve")
            #expect(await linked.exitStatus(within: .seconds(30)).map { $0 != 0 } == true)

            let created = try await runToExit(BeaconProcess.executable, ["app", "create", "acme/chat", "--json", "--data-dir", data])
            #expect(created.status == 0, "\(String(decoding: created.output, as: UTF8.self))")
            let copy = directory.appendingPathComponent("copy.sqlite").path
            #expect(try await runToExit(BeaconProcess.executable, ["backup", copy, "--data-dir", data]).status == 0)

            first.signal(SIGKILL)
            #expect(await first.exitStatus(within: .seconds(30)) != nil)
            let third = try await BeaconProcess(["serve", "--port", "0", "--data-dir", data])
            _ = try await third.line(containing: "Beacon listening on")
            await third.stop()
        }
    }
}

/// Message bodies nested deeper than every reader allows are refused at the door, and the SDK never acknowledges past a
/// frame it cannot read (issue 22, item 5).
@Suite struct NestingTests {
    static func nested(_ levels: Int) -> JSONValue {
        var value: JSONValue = "leaf"
        for _ in 1..<levels { value = [value] }
        return ["msg": "x", "deep": value]
    }

    @Test func bodiesNestedDeeperThanTheLimitAreRefusedOverRESTAndWebSocket() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.createUsers("alice", "bob")
            let refused = try await beacon.rest(
                "POST", "/messages/users",
                ["from": "alice", "to": ["bob"], "type": "txt", "body": Self.nested(Validation.maxMessageDepth + 1)])
            #expect(refused.status == 400)
            #expect(refused.json["error"] == "illegal_argument")
            let deepExt: JSONValue = [
                "from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "x"], "ext": Self.nested(Validation.maxMessageDepth + 1),
            ]
            #expect(try await beacon.rest("POST", "/messages/users", deepExt).json["error"] == "illegal_argument")

            let bob = try await beacon.connect("bob")
            let alice = try await beacon.connect("alice")
            func deep(_ levels: Int) throws -> OutgoingChatMessage {
                OutgoingChatMessage(to: "bob", content: .text("deep"), ext: try #require(Self.nested(levels).objectValue))
            }
            await #expect(throws: (any Error).self) { _ = try await alice.client.send(try deep(Validation.maxMessageDepth + 1)) }
            // At the limit, the message reaches the receiver's SDK.
            _ = try await alice.client.send(try deep(Validation.maxMessageDepth))
            let received = try await bob.messages.wait(count: 1)
            #expect(received.first?.ext == (try deep(Validation.maxMessageDepth)).ext)
            await alice.client.logout()
            await bob.client.logout()
        }
    }

    /// A stored message the SDK cannot read (nested beyond its reader, stored by an older server): the SDK reports it
    /// and closes the connection instead of skipping it and acknowledging the next message past it.
    @Test func theSDKReportsAnUnreadableFrameAndAcknowledgesNothingPastIt() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.createUsers("alice", "bob")
            let app = try #require(try await beacon.store.app(AppKey(org: "acme", name: "chat")))
            var deep: JSONValue = "leaf"
            for _ in 0..<(JSONReader.maxDepth - 3) { deep = [deep] }
            for (id, body) in [(UInt64(1), ["msg": "deep", "d": deep] as JSONValue), (2, ["msg": "after"])] {
                let message = Message(id: id, from: "alice", to: "bob", chatType: .chat, type: .txt, body: body, ext: [:], timestamp: 1)
                _ = try await beacon.store.append(message, app: app.id, deliveries: [Delivery(username: "bob")])
            }
            let bob = try await beacon.connect("bob")
            let events = try await bob.events.wait { $0.contains { if case .unreadableFrame = $0 { true } else { false } } }
            #expect(events.contains(.connected))
            #expect(bob.messages.items.isEmpty)  // "after" never came through that connection
            await bob.client.logout()
            #expect(try await beacon.rest("GET", "/users/bob/offline_msg_count").json["data"]?["bob"] == "2")
        }
    }
}
