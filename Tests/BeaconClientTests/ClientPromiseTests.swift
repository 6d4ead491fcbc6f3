import BeaconClient
import BeaconCore
import BeaconTesting
import Foundation
import Testing

/// The SDK's own promises: nothing acknowledged before the app has it, a bad token is an error, a stable device id.
@Suite struct ClientPromiseTests {
    @Test func aMessageIsAcknowledgedOnlyOnceTheAppFinishedWithIt() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.createUsers("alice", "bob")
            for index in 1...3 {
                let (status, _) = try await beacon.rest(
                    "POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": .string("m\(index)")]])
                #expect(status == 200)
            }
            // The app takes m1, finishes with it (asks for the next), takes m2 and is killed while handling it.
            let first = BeaconClient(
                options: BeaconOptions(appKey: beacon.appKey, serverURL: beacon.baseURL, deviceID: "phone", storage: MemoryStorage()))
            try await first.login(username: "bob", password: "pw")
            var iterator = first.messages.makeAsyncIterator()
            #expect(await iterator.next()?.content == .text("m1"))
            #expect(await iterator.next()?.content == .text("m2"))
            await first.logout()
            // Before: all three were acknowledged on arrival, and the relaunched app never saw m2 and m3. (While the app
            // works through a backlog, acks go out in batches: m1, finished, may come again; m2 must.)
            let relaunched = try await beacon.connect("bob", device: "phone")
            let again = try await relaunched.texts(until: "m3")
            #expect(again == ["m2"] || again == ["m1", "m2"], "\(again)")
            await relaunched.client.logout()
        }
    }

    @Test func loggingInWithABadTokenThrows() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.createUsers("bob")
            let client = BeaconClient(
                options: BeaconOptions(appKey: beacon.appKey, serverURL: beacon.baseURL, deviceID: "phone", storage: MemoryStorage()))
            // Before: login(token:) waited forever while the connection was refused again and again.
            do {
                try await client.login(token: "not-a-token", username: "bob")
                Issue.record("expected the login to fail")
            } catch BeaconClientError.server(let status, let code, _) {
                #expect(status == 401 && code == "auth_bad_access_token")
            }
            await #expect(throws: BeaconClientError.notLoggedIn) {
                _ = try await client.send(OutgoingChatMessage(to: "bob", content: .text("x")))
            }
        }
    }

    /// A Tencent app's login: the UserSig its backend made, for a user Beacon has never seen (imported on its first login).
    @Test func loggingInWithAUserSigConnectsAndImportsTheUser() async throws {
        try await TestBeacon.run(clock: TestClock()) { beacon in
            try await TencentFixture.give(beacon)
            try await beacon.createUsers("bob")
            let client = BeaconClient(
                options: BeaconOptions(appKey: beacon.appKey, serverURL: beacon.baseURL, deviceID: "phone", storage: MemoryStorage()))
            try await client.login(userID: "alice", userSig: TencentFixture.aliceSig)
            let sent = try await client.send(OutgoingChatMessage(to: "bob", content: .text("hi from a UserSig")))
            #expect(sent.from == "alice")
            #expect(try await beacon.rest("GET", "/users/alice").status == 200)
            await client.logout()
            let other = BeaconClient(
                options: BeaconOptions(appKey: beacon.appKey, serverURL: beacon.baseURL, deviceID: "phone", storage: MemoryStorage()))
            do {
                try await other.login(userID: "bob", userSig: TencentFixture.aliceSig)
                Issue.record("expected alice's UserSig to open nothing for bob")
            } catch BeaconClientError.server(let status, let code, _) {
                #expect(status == 400 && code == "invalid_grant")
            }
        }
    }

    @Test func loginGivesUpWhenNoConnectionComesInTime() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.createUsers("bob")
            // The token is fine (REST answers) but every connection is refused: a device_id over 128 bytes.
            let client = BeaconClient(
                options: BeaconOptions(
                    appKey: beacon.appKey, serverURL: beacon.baseURL, deviceID: String(repeating: "d", count: 200),
                    storage: MemoryStorage(), loginTimeout: .milliseconds(500)))
            await #expect(throws: BeaconClientError.timedOut) { try await client.login(username: "bob", password: "pw") }
            await #expect(throws: BeaconClientError.notLoggedIn) {
                _ = try await client.send(OutgoingChatMessage(to: "bob", content: .text("x")))
            }
        }
    }

    @Test func theDefaultDeviceIDSurvivesARelaunch() throws {
        let suite = "beacon-tests-\(UUID())"
        let defaults = try #require(UserDefaults(suiteName: suite))
        defer { defaults.removePersistentDomain(forName: suite) }
        let storage = UserDefaultsStorage(suiteName: suite)
        let first = BeaconOptions.installationID(appKey: "acme#chat", storage: storage)
        #expect(BeaconOptions.installationID(appKey: "acme#chat", storage: UserDefaultsStorage(suiteName: suite)) == first)
        #expect(BeaconOptions.installationID(appKey: "acme#other", storage: storage) != first)
        // Without an explicit id, options use the stored one (UserDefaults.standard).
        let options = BeaconOptions(appKey: "acme#chat-\(UUID())", serverURL: URL(string: "http://127.0.0.1:1")!)
        #expect(BeaconOptions(appKey: options.appKey, serverURL: options.serverURL).deviceID == options.deviceID)
        UserDefaults.standard.removeObject(forKey: "beacon.deviceID.\(options.appKey)")
    }
}
