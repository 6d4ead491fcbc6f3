import BeaconClient
import BeaconCore
import BeaconTesting
import Foundation
import Testing

@Suite struct PushManagerTests {
    @Test func theSDKReadsAndWritesTheSameSettingsAsREST() async throws {
        let clock = TestClock()
        try await TestBeacon.run(clock: clock) { beacon in
            try await beacon.createUsers("alice", "bob")
            let group = try await beacon.createGroup(owner: "alice", members: ["bob"])
            let client = BeaconClient(
                options: BeaconOptions(appKey: beacon.appKey, serverURL: beacon.baseURL, timeZone: "Asia/Tokyo", storage: MemoryStorage()))
            try await client.login(username: "bob", password: "pw")
            // The time zone of the options, sent at login: do-not-disturb windows run in it.
            #expect(try await beacon.rest("GET", "/users/bob").json["entities"]?[0]?["timezone"] == "Asia/Tokyo")

            let all = try await client.setSilentModeForAll(
                SilentModeParam(
                    remindType: .mentionsOnly, durationMinutes: 60,
                    interval: SilentInterval(startHour: 22, startMinute: 0, endHour: 7, endMinute: 30)))
            #expect(all.remindType == .mentionsOnly)
            #expect(all.expireTimestamp == clock.now + 3_600_000)
            #expect(all.start == 22 * 60)
            #expect(all.end == 7 * 60 + 30)
            #expect(try await client.getSilentModeForAll().remindType == .mentionsOnly)
            #expect(try await beacon.rest("GET", "/users/bob/notification/user/bob").json["data"]?["ignoreInterval"] == "22:0-7:30")

            try await client.setSilentModeForConversation(group, type: .groupchat, param: SilentModeParam(remindType: RemindType.none))
            #expect(try await client.getSilentModeForConversation(group, type: .groupchat).remindType == RemindType.none)
            let listed = try await client.getSilentModeForConversations([(group, .groupchat), ("alice", .chat)])
            #expect(listed.map(\.conversationID) == [group])
            try await client.clearRemindTypeForConversation(group, type: .groupchat)
            #expect(try await client.getSilentModeForConversations([(group, .groupchat)]).isEmpty)
            await #expect(throws: BeaconClientError.self) {
                try await client.setSilentModeForAll(SilentModeParam(durationMinutes: 10_081))
            }

            try await client.updatePushDisplayName("Bobby")
            try await client.updatePushDisplayStyle(1)
            #expect(try await client.getPushNotificationOptionsFromServer() == PushOptions(displayName: "Bobby", displayStyle: 1))
            try await client.setPreferredNotificationLanguage("ja")
            #expect(try await client.getPreferredNotificationLanguage() == "ja")
            await client.logout()
        }
    }
}
