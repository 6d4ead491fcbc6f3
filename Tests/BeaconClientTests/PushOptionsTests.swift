import BeaconClient
import BeaconCore
import BeaconTesting
import Foundation
import Testing

/// A sender's typed push options, from the SDK through the server to the receiver's phone and back through the parser.
@Suite struct PushOptionsTests {
    @Test func typedPushOptionsShapeTheNotificationTheReceiverGets() async throws {
        try await withPushBeacon { beacon, simulator in
            try await beacon.createUsers("alice", "bob", "carol")
            try await beacon.uploadP8(name: "ios-dev")
            let phone = String(repeating: "ab", count: 32)
            #expect(try await beacon.bind("bob", token: phone).0 == 200)
            let alice = try await beacon.client("alice")
            let push = MessagePushOptions(
                title: "Alice", subtitle: "Trip", content: "sent a photo", sound: "chime.caf", category: "reply", collapseKey: "trip",
                imageURL: "https://example.com/p.jpg", locKey: "PHOTO_FROM", locArguments: ["Alice"], extra: ["order": 7])
            let look = try await alice.send(OutgoingChatMessage(to: "bob", content: .text("look"), push: push))
            try await waitUntil("bob's push", timeout: .seconds(20)) { !simulator.deliveries(deviceToken: phone).isEmpty }
            let delivery = try #require(simulator.deliveries(deviceToken: phone).first)
            // The key (scoped to the app by the server) instead of the message id, which is the default.
            #expect(delivery.collapseID != nil && delivery.collapseID != String(look.id))
            let payload = try PushPayload(json: Data(delivery.body))
            #expect(payload.title == "Alice" && payload.subtitle == "Trip" && payload.body == "sent a photo")
            #expect(payload.sound == "chime.caf" && payload.category == "reply")
            #expect(payload.imageURL == "https://example.com/p.jpg" && payload.mutableContent)
            #expect(payload.locKey == "PHOTO_FROM" && payload.locArgs == ["Alice"])
            #expect(payload.extra == ["order": 7] && payload.from == "alice")

            // Silent: stored and delivered, no push. Forced: through bob's do-not-disturb.
            #expect(try await beacon.rest("PUT", "/users/bob/notification/user/bob", ["type": "NONE"]).status == 200)
            try await alice.send(OutgoingChatMessage(to: "bob", content: .text("quiet"), push: MessagePushOptions(silent: true)))
            let urgent = try await alice.send(
                OutgoingChatMessage(to: "bob", content: .text("urgent"), push: MessagePushOptions(force: true)))
            let records = try await beacon.deliveries(of: "bob") { $0.count >= 3 }
            #expect(records.contains { $0["reason"] == "silent" })
            try await waitUntil("the forced push", timeout: .seconds(20)) { simulator.deliveries(deviceToken: phone).count == 2 }
            let forced = try #require(simulator.deliveries(deviceToken: phone).last)
            #expect(try PushPayload(json: Data(forced.body)).messageID == String(urgent.id))
            #expect(forced.collapseID == String(urgent.id))
            await alice.logout()
        }
    }
}
