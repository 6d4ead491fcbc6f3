import APNsSimulator
import BeaconCore
import BeaconTesting
import Foundation
import Testing

/// SPEC §6: the seeds' reference payloads, through the whole path (REST send → Beacon → APNs client → simulator).
@Suite struct GoldenPayloadTests {
    static let token = String(repeating: "6e", count: 32)

    /// (ext of the message, receiver's display style, expected payload with `<id>` for the message id)
    static let cases: [(String, JSONValue, Int, String)] = [
        (
            "simple banner", [:], 0,
            #"{"aps":{"alert":{"body":"You have a new message"},"badge":1,"sound":"default","thread-id":"6001"},"f":"6001","m":"<id>","t":"6006"}"#
        ),
        (
            "message summary", [:], 1,
            #"{"aps":{"alert":{"body":"Alice: hello"},"badge":1,"sound":"default","thread-id":"6001"},"f":"6001","m":"<id>","t":"6006"}"#
        ),
        (
            "custom field", ["em_apns_ext": ["extern": "custom string"]], 0,
            #"{"aps":{"alert":{"body":"You have a new message"},"badge":1,"sound":"default","thread-id":"6001"},"e":"custom string","f":"6001","m":"<id>","t":"6006"}"#
        ),
        (
            "custom display", ["em_apns_ext": ["em_push_content": "custom content"]], 0,
            #"{"aps":{"alert":{"body":"custom content"},"badge":1,"sound":"default","thread-id":"6001"},"f":"6001","m":"<id>","t":"6006"}"#
        ),
        (
            "sound", ["em_apns_ext": ["em_push_sound": "custom.caf"]], 0,
            #"{"aps":{"alert":{"body":"You have a new message"},"badge":1,"sound":"custom.caf","thread-id":"6001"},"f":"6001","m":"<id>","t":"6006"}"#
        ),
        (
            "extension", ["em_apns_ext": ["em_push_mutable_content": true]], 0,
            #"{"aps":{"alert":{"body":"You have a new message"},"badge":1,"mutable-content":1,"sound":"default","thread-id":"6001"},"f":"6001","m":"<id>","t":"6006"}"#
        ),
        (
            "image", ["em_apns_ext": ["em_push_image": "https://example.com/p.jpg"]], 0,
            #"{"aps":{"alert":{"body":"You have a new message"},"badge":1,"mutable-content":1,"sound":"default","thread-id":"6001"},"f":"6001","image":"https://example.com/p.jpg","m":"<id>","t":"6006"}"#
        ),
        (
            "localization",
            [
                "em_apns_ext": [
                    "em_push_title_loc_key": "TITLE", "em_push_title_loc_args": ["a"], "em_push_body_loc_key": "BODY",
                    "em_push_body_loc_args": ["b"],
                ]
            ], 0,
            #"{"aps":{"alert":{"body":"You have a new message","loc-args":["b"],"loc-key":"BODY","title-loc-args":["a"],"title-loc-key":"TITLE"},"badge":1,"sound":"default","thread-id":"6001"},"f":"6001","m":"<id>","t":"6006"}"#
        ),
    ]

    @Test(arguments: cases.indices)
    func referencePayload(_ index: Int) async throws {
        let (name, ext, style, expected) = Self.cases[index]
        try await withPushBeacon { beacon, simulator in
            try await beacon.createUsers("6001", "6006")
            _ = try await beacon.rest("PUT", "/users/6001", ["nickname": "Alice"])
            _ = try await beacon.rest("PUT", "/users/6006", ["notification_display_style": .number(Double(style))])
            try await beacon.uploadP8()
            _ = try await beacon.bind("6006", token: Self.token)
            let sent = try await beacon.rest(
                "POST", "/messages/users", ["from": "6001", "to": ["6006"], "type": "txt", "body": ["msg": "hello"], "ext": ext])
            let id = try #require(sent.json["data"]?["6006"]?.stringValue, "\(name)")
            _ = try await beacon.pushOutcomes.attempts(1)
            let delivery = try #require(simulator.deliveries(deviceToken: Self.token).first, "\(name)")
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            let got = String(decoding: try encoder.encode(delivery.payload), as: UTF8.self)
            #expect(got == expected.replacingOccurrences(of: "<id>", with: id), "\(name)")
        }
    }

    @Test func groupPayloadsCarryTheGroup() async throws {
        try await withPushBeacon { beacon, simulator in
            try await beacon.createUsers("6001", "6006")
            let group = try await beacon.createGroup(owner: "6001", members: ["6006"])
            try await beacon.uploadP8()
            _ = try await beacon.bind("6006", token: Self.token)
            let sent = try await beacon.rest(
                "POST", "/messages/chatgroups", ["from": "6001", "to": .array([.string(group)]), "type": "txt", "body": ["msg": "hi"]])
            let id = try #require(sent.json["data"]?[group]?.stringValue)
            _ = try await beacon.pushOutcomes.attempts(1)
            let payload = try #require(simulator.deliveries(deviceToken: Self.token).first?.payload)
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            #expect(
                String(decoding: try encoder.encode(payload), as: UTF8.self)
                    == #"{"aps":{"alert":{"body":"You have a new message"},"badge":1,"sound":"default","thread-id":"\#(group)"},"f":"6001","g":"\#(group)","m":"\#(id)","t":"6006"}"#
            )
        }
    }

    @Test func pushFieldsThatCannotFitAreRefusedAtSendTime() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.createUsers("6001", "6006")
            let tooBig = try await beacon.rest(
                "POST", "/messages/users",
                [
                    "from": "6001", "to": ["6006"], "type": "txt", "body": ["msg": "x"],
                    "ext": ["em_apns_ext": ["extern": .string(String(repeating: "e", count: 4200))]],
                ])
            // (body + ext is under 5 KB, but the payload could never be under 4096 bytes)
            #expect(tooBig.status == 413)
            #expect(tooBig.json["error"] == "request_entity_too_large")
            #expect(try await beacon.rest("GET", "/users/6006/offline_msg_count").json["data"]?["6006"] == "0")
            #expect(try await beacon.rest("PUT", "/users/6006", ["notification_display_style": 2]).json["error"] == "illegal_argument")
        }
    }
}

@Suite struct TencentSenderTests {
    @Test func offlinePushInfoMapsOntoTheSameRules() async throws {
        let token = String(repeating: "7c", count: 32)
        try await withPushBeacon { beacon, simulator in
            try await beacon.createUsers("alice", "bob")
            try await beacon.uploadP8()
            _ = try await beacon.bind("bob", token: token)
            _ = try await beacon.rest("POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "1"]])
            _ = try await beacon.rest(
                "POST", "/messages/users",
                [
                    "from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "2"],
                    "offline_push_info": [
                        "push_flag": 0, "title": "Title", "desc": "Desc", "ext": "{\"order\":7}",
                        "apns_info": [
                            "sound": "bell.caf", "badge_mode": 1, "sub_title": "Sub", "mutable_content": 1,
                            "image": "https://example.com/i.png",
                        ],
                    ],
                ])
            _ = try await beacon.rest(
                "POST", "/messages/users",
                ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "3"], "offline_push_info": ["push_flag": 1]])
            _ = try await beacon.pushOutcomes.attempts(2)
            let payloads = simulator.deliveries(deviceToken: token).map(\.payload)
            #expect(payloads.count == 2)
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            let second = String(decoding: try encoder.encode(payloads[1]), as: UTF8.self)
            #expect(second.contains(#""alert":{"body":"Desc","subtitle":"Sub","title":"Title"}"#))
            #expect(second.contains(#""badge":1"#))  // BadgeMode 1: not raised
            #expect(second.contains(#""mutable-content":1"#))
            #expect(second.contains(#""sound":"bell.caf""#))
            #expect(second.contains(#""ext":"{\"order\":7}""#))
            #expect(second.contains(#""image":"https://example.com/i.png""#))
            #expect(try await beacon.deliveries(of: "bob").first?["reason"] == "silent")
        }
    }
}
