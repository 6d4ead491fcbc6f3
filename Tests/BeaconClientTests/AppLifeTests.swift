import BeaconClient
import BeaconCore
import BeaconTesting
import Foundation
import Testing

/// The app's life against a real server: background, foreground, a restarted server.
@Suite struct AppLifeTests {
    private static let phone = String(repeating: "ab", count: 32)

    @Test func inTheBackgroundTheServerPushesAtOnceAndTheForegroundSyncsWhatCame() async throws {
        try await withPushBeacon { beacon, simulator in
            try await beacon.createUsers("alice", "bob")
            try await beacon.uploadP8(name: "ios-dev")
            let client = BeaconClient(
                options: BeaconOptions(
                    appKey: beacon.appKey, serverURL: beacon.baseURL, apnsCertName: "ios-dev", deviceID: "iphone", storage: MemoryStorage(),
                    backgroundGrace: .milliseconds(100)))
            try await client.registerForRemoteNotifications(deviceToken: Data(repeating: 0xab, count: 32))
            try await client.login(username: "bob", password: "pw")
            let messages = Collector(client.messages)
            let states = Collector(client.states)
            func texts() -> [MessageContent?] { messages.items.map(\.content) }
            func send(_ text: String) async throws {
                let (status, _) = try await beacon.rest(
                    "POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": .string(text)]])
                #expect(status == 200)
            }
            // In the foreground: live, and not pushed.
            try await send("live")
            _ = try await messages.wait(count: 1)
            _ = try await beacon.deliveries(of: "bob") { $0.contains { $0["reason"] == "online" } }

            // To the background: the badge is reported, and after the grace the connection closes, so the next message is
            // pushed at once (not after the server notices a dead connection).
            await client.applicationDidEnterBackground(badge: 5)
            #expect(try await beacon.rest("GET", "/users/bob/push/badge").json["data"]?["badge"] == 5)
            _ = try await states.wait { $0.last == .suspended }
            try await send("while away")
            try await waitUntil("the push to bob's phone", timeout: .seconds(20)) { !simulator.deliveries(deviceToken: Self.phone).isEmpty }
            let push = try #require(simulator.deliveries(deviceToken: Self.phone).first)
            #expect(try PushPayload(json: Data(push.body)).badge == 6)

            // Back: the connection opens again and syncs the message, without a new login.
            await client.applicationWillEnterForeground()
            _ = try await messages.wait(count: 2)
            #expect(texts() == [.text("live"), .text("while away")])
            _ = try await states.wait { $0.last == .connected }
            await client.logout()
        }
    }

    @Test func theSDKReconnectsByItselfWhenTheServerRestarts() async throws {
        try await StoreKind.server.withStore { store in
            let directory = StoreKind.temporaryDirectory("beacon-restart")
            defer { try? FileManager.default.removeItem(at: directory) }
            let options = TestBeacon.Options()
            let (client, port) = try await TestBeacon.run(store: store, directory: directory, options: options) { beacon in
                try await beacon.createUsers("alice", "bob")
                let client = BeaconClient(
                    options: BeaconOptions(
                        appKey: beacon.appKey, serverURL: beacon.baseURL, deviceID: "iphone", storage: MemoryStorage(),
                        reconnectDelay: .milliseconds(50), maxReconnectDelay: .milliseconds(200)))
                try await client.login(username: "bob", password: "pw")
                return (client, beacon.port)
            }
            // The server is down: the client waits to reconnect, still logged in.
            let states = Collector(client.states)
            _ = try await states.wait { $0.last == .waitingToReconnect }
            var restarted = options
            restarted.configure = { $0.port = port }
            try await TestBeacon.run(store: store, directory: directory, options: restarted) { beacon in
                let (status, _) = try await beacon.rest(
                    "POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "after the restart"]])
                #expect(status == 200)
                let messages = try await Collector(client.messages).wait(count: 1)
                #expect(messages.map(\.content) == [.text("after the restart")])
                _ = try await states.wait { $0.last == .connected }
                await client.logout()
            }
        }
    }
}
