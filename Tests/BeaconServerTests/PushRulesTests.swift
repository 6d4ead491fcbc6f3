import APNsSimulator
import BeaconCore
import BeaconStorage
import BeaconTesting
import Foundation
import Testing

private let phone = String(repeating: "ab", count: 32)

extension TestClock {
    func advance(hours: Int64) { advance(seconds: hours * 3600) }
}

@Suite struct PushSettingsTests {
    @Test func settingsAreStoredReadBackAndValidated() async throws {
        let clock = TestClock()
        try await TestBeacon.run(clock: clock, restInProcess: true) { beacon in
            try await beacon.createUsers("bob", "alice")
            let group = try await beacon.createGroup(owner: "alice", members: ["bob"])
            let set = try await beacon.rest(
                "PUT", "/users/bob/notification/user/bob", ["type": "AT", "ignoreInterval": "22:00-07:00", "ignoreDuration": 86_400_000])
            #expect(set.status == 200)
            #expect(set.json["data"]?["type"] == "AT")
            #expect(set.json["data"]?["ignoreInterval"] == "22:0-7:0")
            #expect(set.json["data"]?["ignoreDuration"]?.intValue == Int(clock.now) + 86_400_000)
            #expect(try await beacon.rest("GET", "/users/bob/notification/user/bob").json["data"]?["type"] == "AT")
            _ = try await beacon.rest("PUT", "/users/bob/notification/chatgroup/\(group)", ["type": "NONE"])
            _ = try await beacon.rest("PUT", "/users/bob/notification/user/alice", ["ignoreDuration": 60_000])
            _ = try await beacon.rest("PUT", "/users/bob/notification/user/carol", ["type": "DEFAULT"])

            let query = try await beacon.rest(
                "POST", "/users/bob/notification/query",
                [
                    "conversations": [
                        ["chattype": "chatgroup", "key": .string(group)], ["chattype": "user", "key": "alice"],
                        ["chattype": "user", "key": "carol"],
                    ]
                ])
            #expect(query.json["data"]?.arrayValue?.map { $0["key"]?.stringValue } == [group, "alice"])
            clock.advance(seconds: 61)
            let later = try await beacon.rest(
                "POST", "/users/bob/notification/query", ["conversations": [["chattype": "user", "key": "alice"]]])
            #expect(later.json["data"]?.arrayValue?.isEmpty == true)  // its only setting expired

            // Clearing a conversation's mode makes it inherit again.
            _ = try await beacon.rest("PUT", "/users/bob/notification/chatgroup/\(group)", ["type": "DEFAULT"])
            #expect(try await beacon.rest("GET", "/users/bob/notification/chatgroup/\(group)").json["data"]?["type"] == nil)

            // Bad input: 400 with a stable code, nothing changed.
            let bad: [(String, JSONValue)] = [
                ("/users/bob/notification/user/bob", ["ignoreInterval": "25:00-1:00"]),
                ("/users/bob/notification/user/bob", ["ignoreInterval": "8-10"]),
                ("/users/bob/notification/user/bob", ["ignoreInterval": "a:b-c:d"]),
                ("/users/bob/notification/user/bob", ["ignoreDuration": 604_800_001]),
                ("/users/bob/notification/user/bob", ["ignoreDuration": -1]),
                ("/users/bob/notification/user/bob", ["type": "DEFAULT"]),
                ("/users/bob/notification/user/bob", ["type": "SOMETIMES"]),
                ("/users/bob/notification/user/alice", ["ignoreInterval": "1:00-2:00"]),
                ("/users/bob/notification/room/x", ["type": "ALL"]),
            ]
            for (path, body) in bad {
                let answer = try await beacon.rest("PUT", path, body)
                #expect(answer.status == 400, "\(path) \(body)")
                #expect(answer.json["error"] == "illegal_argument", "\(path) \(body)")
            }
            #expect(
                try await beacon.rest("PUT", "/users/bob/notification/chatgroup/404", ["type": "ALL"]).json["error"] == "group_not_found")
            let unchanged = try await beacon.rest("GET", "/users/bob/notification/user/bob").json["data"]
            #expect(unchanged?["type"] == "AT")
            #expect(unchanged?["ignoreInterval"] == "22:0-7:0")
            let tooMany = try await beacon.rest(
                "POST", "/users/bob/notification/query",
                ["conversations": .array((0..<21).map { ["chattype": "user", "key": .string("u\($0)")] })])
            #expect(tooMany.json["error"] == "illegal_argument")

            // A user sets their own settings; not someone else's.
            let alice = try await beacon.userToken("alice")
            #expect(try await beacon.rest("PUT", "/users/alice/notification/user/alice", ["type": "NONE"], token: alice).status == 200)
            #expect(try await beacon.rest("PUT", "/users/bob/notification/user/bob", ["type": "ALL"], token: alice).status == 403)

            #expect(try await beacon.rest("PUT", "/push/policy", ["multi_device": "sometimes"]).json["error"] == "illegal_argument")
            #expect(try await beacon.rest("PUT", "/push/policy", ["timezone": "Mars/Olympus"]).json["error"] == "illegal_argument")
            let policy = try await beacon.rest("PUT", "/push/policy", ["multi_device": "any_offline", "timezone": "Europe/Berlin"])
            #expect(
                policy.json["data"] == [
                    "multi_device": "any_offline", "timezone": "Europe/Berlin", "display_strings": [:], "badge_counts_muted": false,
                    "recall_limit_seconds": 120,
                ])
            #expect(try await beacon.rest("PUT", "/push/policy", ["display_strings": ["sticker": "x"]]).json["error"] == "illegal_argument")
            let strings = try await beacon.rest("PUT", "/push/policy", ["display_strings": ["new_message": "Neue Nachricht"]])
            #expect(strings.json["data"]?["display_strings"] == ["new_message": "Neue Nachricht"])
            // Merged: another key joins; an empty string removes an override.
            let merged = try await beacon.rest("PUT", "/push/policy", ["display_strings": ["image": "[Bild]"]])
            #expect(merged.json["data"]?["display_strings"] == ["new_message": "Neue Nachricht", "image": "[Bild]"])
            let removed = try await beacon.rest("PUT", "/push/policy", ["display_strings": ["new_message": "", "image": "[Bild]"]])
            #expect(removed.json["data"]?["display_strings"] == ["image": "[Bild]"])
            #expect(try await beacon.rest("PUT", "/push/policy", ["multi_device": "all_offline"], token: alice).status == 403)
        }
    }

    /// The README's worked example: bob lives in Tokyo, does not want to be disturbed from 22:00 to 07:00,
    /// and has muted a busy group; a forced message still reaches him.
    @Test func aTokyoUserWithQuietNightsAndAMutedGroupIsStillReachedByAForcedMessage() async throws {
        let clock = TestClock()  // starts at 08:00 UTC = 17:00 in Tokyo
        try await withSimulator { simulator in
            try await TestBeacon.run(clock: clock, push: simulator, restInProcess: true) { beacon in
                try await beacon.createUsers("alice", "bob")
                _ = try await beacon.rest("PUT", "/users/bob", ["timezone": "Asia/Tokyo"])
                let group = try await beacon.createGroup(owner: "alice", members: ["bob"])
                try await beacon.uploadP8()
                _ = try await beacon.bind("bob", token: phone)
                _ = try await beacon.rest("PUT", "/users/bob/notification/user/bob", ["ignoreInterval": "22:00-7:00"])
                _ = try await beacon.rest("PUT", "/users/bob/notification/chatgroup/\(group)", ["type": "NONE"])

                clock.advance(hours: 6)  // 23:00 in Tokyo
                func send(_ path: String, to target: String, _ text: String, ext: [String: JSONValue] = [:]) async throws {
                    _ = try await beacon.rest(
                        "POST", path,
                        [
                            "from": "alice", "to": .array([.string(target)]), "type": "txt", "body": ["msg": .string(text)],
                            "ext": .object(ext),
                        ])
                }
                try await send("/messages/users", to: "bob", "late chat")
                try await send("/messages/chatgroups", to: group, "late group")
                try await send("/messages/chatgroups", to: group, "urgent", ext: ["em_force_notification": true])
                #expect(try await beacon.pushOutcomes.attempts(1).map(\.status) == [.sent])

                clock.advance(hours: 9)  // 08:00 in Tokyo: the quiet hours are over, the group is still muted
                try await send("/messages/chatgroups", to: group, "morning group")
                try await send("/messages/users", to: "bob", "morning chat")
                _ = try await beacon.pushOutcomes.attempts(2)

                let records = try await beacon.deliveries(of: "bob").reversed().map {
                    ($0["status"]?.stringValue ?? "", $0["reason"]?.stringValue)
                }
                #expect(records.map(\.0) == ["skipped", "skipped", "sent", "skipped", "sent"])
                #expect(records.map(\.1) == ["dnd", "dnd", nil, "mode_none", nil])
                #expect(simulator.deliveries(deviceToken: phone).count == 2)
            }
        }
    }

    @Test func anyOfflinePushesTheDevicesThatAreAway() async throws {
        try await withPushBeacon { beacon, simulator in
            try await beacon.createUsers("alice", "bob")
            try await beacon.uploadP8()
            _ = try await beacon.bind("bob", device: "phone", token: phone)
            _ = try await beacon.bind("bob", device: "pad", token: String(repeating: "cd", count: 32))
            let pad = try await beacon.connect("bob", device: "pad")
            try await pad.events.synced()
            _ = try await beacon.rest("POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "1"]])
            _ = try await pad.messages.wait(count: 1)
            #expect(try await beacon.deliveries(of: "bob").map { $0["reason"]?.stringValue } == ["online", "online"])
            _ = try await beacon.rest("PUT", "/push/policy", ["multi_device": "any_offline"])
            _ = try await beacon.rest("POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "2"]])
            #expect(try await beacon.pushOutcomes.attempts(1).map(\.status) == [.sent])
            #expect(simulator.deliveries().map(\.deviceToken) == [phone])
        }
    }
}
