import BeaconCore
import BeaconPush
import Testing

/// `MessagePayloads` answers exactly what `PayloadBuilder.build` answers, receiver after receiver, whatever they share.
@Suite struct MessagePayloadsTests {
    static let templates = [
        "default": PushTemplate(name: "default", titlePattern: "{$dynamicFrom}", contentPattern: "{$msg}"),
        "short": PushTemplate(name: "short", titlePattern: "New", contentPattern: "{0} wrote"),
    ]

    /// Messages whose payloads differ in every way the shared rendering must respect.
    static func messages() -> [Message] {
        let text = "Dinner at eight? Bring the photos."
        // Texts that leave the payload a few bytes under APNs' limit: longer usernames tip it over (shortened).
        let nearLimit = [3_940, 3_960, 3_980].enumerated().map { index, length in
            Message(
                id: UInt64(10 + index), from: "alice", to: "g1", chatType: .groupchat, type: .txt,
                body: ["msg": .string(String(repeating: "x", count: length))], ext: [:], timestamp: 0)
        }
        return nearLimit + [
            Message(
                id: 1, from: "alice", to: "g1", chatType: .groupchat, type: .txt,
                body: ["msg": .string(text), "translations": ["ja": "8時に"]],
                ext: ["em_apns_ext": ["em_push_sound": "ping.caf", "extern": ["k": "v"]]], timestamp: 0),
            Message(id: 2, from: "alice", to: "bob", chatType: .chat, type: .txt, body: ["msg": .string(text)], ext: [:], timestamp: 0),
            Message(
                id: 4, from: "alice", to: "g1", chatType: .groupchat, type: .txt, body: ["msg": .string(text)],
                ext: ["em_apns_ext": ["em_push_badge": 7], "em_push_ext": ["type": "call"]], timestamp: 0),
            Message(
                id: 5, from: "alice", to: "g1", chatType: .groupchat, type: .img, body: ["url": "u"],
                ext: [
                    "em_push_template": [
                        "name": "short", "content_args": ["Al"],
                        "directed_template": ["name": "default", "target": ["bob"]],
                    ]
                ], timestamp: 0),
            Message(
                id: 6, from: "alice", to: "g1", chatType: .groupchat, type: .txt, body: ["msg": .string(text)],
                ext: ["em_push_template": ["name": "short", "content_args": ["Al"]]], timestamp: 0),
        ]
    }

    static let receivers = [
        "bob", "alice", "b", "carol", "a\"quote", "back\\slash", "名前", String(repeating: "long", count: 16), "bob", "dave", "x",
        String(repeating: "z", count: 64),
    ]

    @Test func everyReceiverGetsWhatBuildingAloneGives() throws {
        var compared = 0
        var shortened = 0
        for message in Self.messages() {
            var payloads = MessagePayloads()
            for (index, receiver) in Self.receivers.enumerated() {
                for style in [DisplayStyle.simpleBanner, .messageSummary] {
                    for language in [nil, "ja"] {
                        for template in [nil, "short"] {
                            for allowsVoIP in [true, false] {
                                let input = PayloadInput(
                                    message: message, receiver: receiver, badge: index, senderNickname: index % 3 == 0 ? nil : "Alice",
                                    style: style,
                                    language: language, templates: Self.templates, receiverTemplate: template, allowsVoIP: allowsVoIP)
                                let alone = try PayloadBuilder.build(input)
                                let shared = try payloads.build(input)
                                #expect(
                                    shared == alone,
                                    "message \(message.id), receiver \(receiver), \(style), \(String(describing: language))")
                                #expect(shared.json == alone.json)
                                if alone.withoutBadge.contains("…") { shortened += 1 }
                                compared += 1
                            }
                        }
                    }
                }
            }
        }
        #expect(compared == Self.messages().count * Self.receivers.count * 16)
        #expect(shortened > 0, "the near-limit message must make some payloads shortened")
    }

    @Test func aNewMessageStartsAfresh() throws {
        var payloads = MessagePayloads()
        let messages = Self.messages()
        for message in [messages[3], messages[4], messages[3]] {
            let input = PayloadInput(message: message, receiver: "carol", badge: 2, templates: Self.templates)
            #expect(try payloads.build(input) == PayloadBuilder.build(input))
        }
    }
}
