import BeaconCore
import BeaconPush
import Testing

@Suite struct PayloadTests {
    static func message(_ ext: [String: JSONValue] = [:], type: MessageType = .txt, body: JSONValue = ["msg": "hello"], group: Bool = false)
        -> Message
    {
        Message(
            id: 42, from: "6001", to: group ? "g1" : "6006", chatType: group ? .groupchat : .chat, type: type, body: body, ext: ext,
            timestamp: 0)
    }

    static func json(_ input: PayloadInput) throws -> String { try PayloadBuilder.build(input).json }

    // SPEC §6, the seeds' reference payloads (plus thread-id, SPEC §4).
    @Test func simpleBanner() throws {
        #expect(
            try Self.json(PayloadInput(message: Self.message(), receiver: "6006", badge: 1))
                == #"{"aps":{"alert":{"body":"You have a new message"},"badge":1,"sound":"default","thread-id":"6001"},"f":"6001","m":"42","t":"6006"}"#
        )
    }

    /// An image goes with `mutable-content` to an alert, for the notification service extension; a VoIP push (which no
    /// extension sees) carries neither. Localization arguments go as strings, each in its place.
    @Test func anImageGoesToAlertsOnlyAndLocArgsAreStrings() throws {
        let ext: [String: JSONValue] = [
            "em_apns_ext": [
                "em_push_image": "https://example.com/p.jpg", "em_push_body_loc_key": "B", "em_push_body_loc_args": ["x", 1, true],
            ],
            "em_push_ext": ["type": "call"],
        ]
        let alert = try Self.json(PayloadInput(message: Self.message(ext), receiver: "6006", badge: 1, allowsVoIP: false))
        #expect(alert.contains(#""mutable-content":1"#) && alert.contains(#""image":"https://example.com/p.jpg""#))
        #expect(alert.contains(#""loc-args":["x","1","true"]"#))
        let call = try PayloadBuilder.build(PayloadInput(message: Self.message(ext), receiver: "6006", badge: 1))
        #expect(call.voip)
        #expect(!call.json.contains("mutable-content") && !call.json.contains("image"))
    }

    /// The template preview tells when fitting shortened a text; a payload that fits is the same either way.
    @Test func fittingIsReported() throws {
        let short = PayloadInput(message: Self.message(), receiver: "6006", badge: 1, style: .messageSummary)
        let (payload, shortened) = try PayloadBuilder.buildReportingFit(short)
        let built = try PayloadBuilder.build(short)
        #expect(!shortened && payload == built)
        let long = PayloadInput(
            message: Self.message(body: ["msg": .string(String(repeating: "x", count: 5000))]), receiver: "6006", badge: 1,
            style: .messageSummary)
        let fitted = try PayloadBuilder.buildReportingFit(long)
        #expect(fitted.shortened && fitted.payload.json.utf8.count <= PayloadBuilder.limit && fitted.payload.json.contains("…"))
    }

    @Test func groupAddsTheGroupID() throws {
        #expect(
            try Self.json(PayloadInput(message: Self.message(group: true), receiver: "6006", badge: 1))
                == #"{"aps":{"alert":{"body":"You have a new message"},"badge":1,"sound":"default","thread-id":"g1"},"f":"6001","g":"g1","m":"42","t":"6006"}"#
        )
    }

    @Test func messageSummaryUsesThePushNicknameElseTheUsername() throws {
        let withNickname = PayloadInput(
            message: Self.message(), receiver: "6006", badge: 1, senderNickname: "Alice", style: .messageSummary)
        #expect(try Self.json(withNickname).contains(#""body":"Alice: hello""#))
        let without = PayloadInput(message: Self.message(), receiver: "6006", badge: 1, style: .messageSummary)
        #expect(try Self.json(without).contains(#""body":"6001: hello""#))
        for (type, body, summary) in [
            (MessageType.img, ["url": "u"] as JSONValue, "[Image]"), (.audio, ["url": "u"], "[Voice]"), (.video, ["url": "u"], "[Video]"),
            (.file, ["url": "u"], "[File]"), (.loc, ["lat": 1, "lng": 2], "[Location]"),
            (.custom, ["customEvent": "e"], "[Custom message]"),
        ] {
            let input = PayloadInput(message: Self.message(type: type, body: body), receiver: "6006", badge: 1, style: .messageSummary)
            #expect(try Self.json(input).contains(#""body":"6001: \#(summary)""#))
        }
    }

    @Test func theSendersApnsFields() throws {
        let custom = try Self.json(
            PayloadInput(message: Self.message(["em_apns_ext": ["extern": "custom string"]]), receiver: "6006", badge: 1))
        #expect(custom.hasSuffix(#""e":"custom string","f":"6001","m":"42","t":"6006"}"#))
        let content = try Self.json(
            PayloadInput(message: Self.message(["em_apns_ext": ["em_push_content": "custom content"]]), receiver: "6006", badge: 1))
        #expect(content.contains(#""alert":{"body":"custom content"}"#))
        let sound = try Self.json(
            PayloadInput(message: Self.message(["em_apns_ext": ["em_push_sound": "custom.caf"]]), receiver: "6006", badge: 1))
        #expect(sound.contains(#""sound":"custom.caf""#))
        let mutable = try Self.json(
            PayloadInput(message: Self.message(["em_apns_ext": ["em_push_mutable_content": true]]), receiver: "6006", badge: 1))
        #expect(mutable.contains(#""mutable-content":1"#))
        let localized = try Self.json(
            PayloadInput(
                message: Self.message([
                    "em_apns_ext": [
                        "em_push_title_loc_key": "T", "em_push_title_loc_args": ["a"], "em_push_body_loc_key": "B",
                        "em_push_body_loc_args": ["b", "c"],
                    ]
                ]), receiver: "6006", badge: 1))
        #expect(
            localized.contains(
                #""alert":{"body":"You have a new message","loc-args":["b","c"],"loc-key":"B","title-loc-args":["a"],"title-loc-key":"T"}"#)
        )
        let argsOnly = try Self.json(
            PayloadInput(message: Self.message(["em_apns_ext": ["em_push_body_loc_args": ["x"]]]), receiver: "6006", badge: 1))
        #expect(!argsOnly.contains("loc-args"))
        let rest = try Self.json(
            PayloadInput(
                message: Self.message([
                    "em_apns_ext": ["em_push_title": "Title", "em_alert_subTitle": "Sub", "em_push_category": "chat", "em_push_badge": 7],
                    "em_push_ext": ["custom": ["k": "v"]],
                ]), receiver: "6006", badge: 1))
        #expect(rest.contains(#""alert":{"body":"You have a new message","subtitle":"Sub","title":"Title"}"#))
        #expect(rest.contains(#""badge":7"#))
        #expect(rest.contains(#""category":"chat""#))
        #expect(rest.contains(#""e":{"k":"v"}"#))
    }

    @Test func bodySourcesInPriorityOrder() throws {
        let templates = [
            "default": PushTemplate(name: "default", titlePattern: "D {$fromNickname}", contentPattern: "D {$msg}"),
            "mine": PushTemplate(name: "mine", titlePattern: "M", contentPattern: "M {0}"),
            "sent": PushTemplate(name: "sent", titlePattern: "S {0}", contentPattern: "S {0} {1}"),
        ]
        func body(_ ext: [String: JSONValue], receiverTemplate: String? = nil) throws -> String {
            try Self.json(
                PayloadInput(
                    message: Self.message(ext), receiver: "6006", badge: 1, senderNickname: "Al", templates: templates,
                    receiverTemplate: receiverTemplate))
        }
        #expect(try body([:]).contains(#""alert":{"body":"D hello","title":"D Al"}"#))
        #expect(try body(["em_apns_ext": ["em_push_content": "C"]]).contains(#""body":"C","title":"D Al""#))
        #expect(try body(["em_apns_ext": ["em_push_content": "C"]], receiverTemplate: "mine").contains(#""body":"M ","title":"M""#))
        let sent = try body(
            ["em_push_template": ["name": "sent", "title_args": ["{$fromNickname}"], "content_args": ["x", "{$msg}"]]],
            receiverTemplate: "mine")
        #expect(sent.contains(#""body":"S x hello","title":"S Al""#))
        // An unknown template falls back to the rule below.
        #expect(try body(["em_push_template": ["name": "nope"]], receiverTemplate: "mine").contains(#""body":"M ""#))
        let directed: [String: JSONValue] = [
            "em_push_template": [
                "name": "sent", "title_args": ["a"], "directed_template": ["target": ["6006"], "name": "mine", "content_args": ["you"]],
            ]
        ]
        #expect(try body(directed).contains(#""body":"M you""#))
    }

    @Test func theAppsDisplayStringsReplaceTheDefaults() throws {
        let strings = DisplayStrings(overrides: ["new_message": "新消息", "image": "[图片]"])
        #expect(
            try Self.json(PayloadInput(message: Self.message(), receiver: "6006", badge: 1, strings: strings)).contains(#""body":"新消息""#))
        let image = Self.message(type: .img, body: ["url": "u"])
        #expect(
            try Self.json(PayloadInput(message: image, receiver: "6006", badge: 1, style: .messageSummary, strings: strings)).contains(
                "6001: [图片]"))
    }

    @Test func translationsFollowThePreferredLanguage() throws {
        let message = Self.message(body: ["msg": "hello", "translations": ["ja": "こんにちは"]])
        #expect(
            try Self.json(PayloadInput(message: message, receiver: "6006", badge: 1, style: .messageSummary, language: "ja")).contains(
                "6001: こんにちは"))
        #expect(
            try Self.json(PayloadInput(message: message, receiver: "6006", badge: 1, style: .messageSummary, language: "fr")).contains(
                "6001: hello"))
    }

    @Test func payloadsAreShortenedToFitAndRefusedWhenTheSendersFieldsCannot() throws {
        let long = String(repeating: "長", count: 3000)  // 9000 bytes
        let built = try PayloadBuilder.build(
            PayloadInput(message: Self.message(["em_apns_ext": ["em_push_content": .string(long)]]), receiver: "6006", badge: 1))
        #expect(built.json.utf8.count <= 4096)
        #expect(built.json.utf8.count > 4000)
        #expect(built.json.contains("長…"))
        let voip = try PayloadBuilder.build(
            PayloadInput(
                message: Self.message(["em_apns_ext": ["em_push_content": .string(long)], "em_push_ext": ["type": "call"]]),
                receiver: "6006", badge: 1))
        #expect(voip.voip)
        #expect(voip.json.utf8.count <= 5120 && voip.json.utf8.count > 4096)
        let hugeExtern = String(repeating: "x", count: 5000)
        do {
            _ = try PayloadBuilder.build(
                PayloadInput(message: Self.message(["em_apns_ext": ["extern": .string(hugeExtern)]]), receiver: "6006", badge: 1))
            Issue.record("expected 413")
        } catch {
            #expect(error.code == .requestTooLarge)
        }
    }

    @Test func collapseIDsLongerThanAPNsAllowsAreDropped() throws {
        #expect(
            try PayloadBuilder.build(
                PayloadInput(message: Self.message(["em_apns_ext": ["em_push_collapse_key": "c1"]]), receiver: "6006", badge: 1)
            ).collapseID == "c1")
        let long: JSONValue = .string(String(repeating: "c", count: 65))
        #expect(
            try PayloadBuilder.build(
                PayloadInput(message: Self.message(["em_apns_ext": ["em_push_collapse_key": long]]), receiver: "6006", badge: 1)
            ).collapseID == nil)
        // A control character cannot go in an HTTP/2 header: the key is left out and the push still goes.
        for key in ["a\nb", "a\rb", "nul\u{0}", "tab\t", " lead", "trail "] {
            #expect(
                try PayloadBuilder.build(
                    PayloadInput(message: Self.message(["em_apns_ext": ["em_push_collapse_key": .string(key)]]), receiver: "6006", badge: 1)
                ).collapseID == nil)
        }
    }
}
