import BeaconCore
import BeaconProtocol
import Foundation
import Testing

@Suite struct MessageIDTests {
    @Test func idsIncreaseWithinAndAcrossMilliseconds() {
        var generator = MessageIDGenerator(node: 3)
        let t: Int64 = 1_800_000_000_000
        let ids = (0..<5000).map { generator.next(nowMilliseconds: t + Int64($0 / 1000)) }
        #expect(zip(ids, ids.dropFirst()).allSatisfy { $0 < $1 })
        #expect(MessageIDGenerator.timestamp(of: ids[0]) == t)
    }

    @Test func idsNeverGoBackwardsWhenTheClockDoes() {
        var generator = MessageIDGenerator()
        let first = generator.next(nowMilliseconds: 1_800_000_000_500)
        let second = generator.next(nowMilliseconds: 1_800_000_000_000)
        #expect(second > first)
    }
}

@Suite struct ValidationTests {
    @Test(arguments: ["alice", "a", "user_1.x-y", "...", ".a", String(repeating: "a", count: 64)])
    func acceptsUsernames(_ name: String) throws {
        try Validation.validateUsername(name)
    }

    @Test(arguments: ["", "Alice", "a b", "émile", String(repeating: "a", count: 65), "a/b", ".", ".."])
    func rejectsUsernames(_ name: String) {
        #expect(throws: BeaconError.self) { try Validation.validateUsername(name) }
    }

    @Test func timeZonesMustBeKnown() throws {
        try Validation.validateTimeZone("Asia/Tokyo")
        try Validation.validateTimeZone("UTC")
        #expect(throws: BeaconError.self) { try Validation.validateTimeZone("Mars/Olympus") }
        #expect(throws: BeaconError.self) { try Validation.validateTimeZone("") }
    }

    static let wellFormed: [(MessageType, JSONValue)] = [
        (.txt, ["msg": "hi"]), (.cmd, ["action": "typing"]), (.img, ["url": "https://x/y.png"]),
        (.loc, ["lat": 1.5, "lng": 2, "addr": "here"]), (.custom, ["customEvent": "gift"]),
    ]
    static let malformed: [(MessageType, JSONValue)] = [
        (.txt, ["msg": 1]), (.txt, "hi"), (.cmd, [:]), (.loc, ["lat": "1", "lng": 2]), (.custom, ["customExts": [:]]),
    ]

    @Test(arguments: wellFormed)
    func acceptsWellFormedBodies(type: MessageType, body: JSONValue) throws {
        try Validation.validateContent(type: type, body: body, ext: [:])
    }

    @Test(arguments: malformed)
    func rejectsBodiesThatDoNotMatchTheirType(type: MessageType, body: JSONValue) {
        #expect(throws: BeaconError.self) { try Validation.validateContent(type: type, body: body, ext: [:]) }
    }

    /// A body or ext nested `levels` deep: the object itself, then arrays.
    static func nested(_ levels: Int) -> JSONValue {
        var value: JSONValue = "leaf"
        for _ in 1..<levels { value = [value] }
        return ["msg": "x", "deep": value]
    }

    @Test func limitsNestingToSixtyFourLevelsInBodyAndExt() throws {
        try Validation.validateContent(type: .txt, body: Self.nested(Validation.maxMessageDepth), ext: [:])
        #expect(throws: BeaconError(.illegalArgument, "body nests objects and arrays deeper than 64 levels")) {
            try Validation.validateContent(type: .txt, body: Self.nested(Validation.maxMessageDepth + 1), ext: [:])
        }
        let deepExt = try #require(Self.nested(Validation.maxMessageDepth + 1).objectValue)
        #expect(throws: BeaconError(.illegalArgument, "ext nests objects and arrays deeper than 64 levels")) {
            try Validation.validateContent(type: .txt, body: ["msg": "x"], ext: deepExt)
        }
        // Empty containers count as a level too.
        #expect(throws: BeaconError.self) {
            var value: JSONValue = [:]
            for _ in 0..<Validation.maxMessageDepth { value = ["k": value] }
            try Validation.validateContent(type: .txt, body: ["msg": "x", "d": value], ext: [:])
        }
    }

    @Test func limitsBodyPlusExtToFiveKilobytes() throws {
        let half = String(repeating: "x", count: 2500)
        try Validation.validateContent(type: .txt, body: ["msg": .string(half)], ext: ["a": .string(half)])
        do {
            try Validation.validateContent(type: .txt, body: ["msg": .string(half)], ext: ["a": .string(half + half)])
            Issue.record("expected a size error")
        } catch {
            #expect(error.code == .requestTooLarge)  // answered 413 (ErrorAnswerTests)
        }
    }

    @Test func parsesAppKeys() throws {
        #expect(try AppKey(parsing: "acme/chat") == AppKey(org: "acme", name: "chat"))
        #expect(try AppKey(parsing: "acme#chat") == AppKey(org: "acme", name: "chat"))
        #expect(throws: BeaconError.self) { try AppKey(parsing: "acme") }
        #expect(throws: BeaconError.self) { try AppKey(parsing: "acme/chat/x") }
    }

    @Test func conversationIsThePeerOrTheGroup() {
        let direct = Message(id: 1, from: "alice", to: "bob", chatType: .chat, type: .txt, body: [:], timestamp: 0)
        #expect(direct.conversation(for: "bob").description == "chat:alice")
        #expect(direct.conversation(for: "alice").description == "chat:bob")
        let group = Message(id: 1, from: "alice", to: "g1", chatType: .groupchat, type: .txt, body: [:], timestamp: 0)
        #expect(group.conversation(for: "bob").description == "groupchat:g1")
        #expect(ConversationID("groupchat:g1") == ConversationID(chatType: .groupchat, key: "g1"))
    }
}

@Suite struct FrameTests {
    @Test func clientFramesRoundTrip() throws {
        let frames: [ClientFrame] = [
            .send(
                .init(id: "c1", to: "bob", chatType: .chat, type: .txt, body: ["msg": "hi"], ext: ["k": true], routetype: "ROUTE_ONLINE")),
            .send(.init(id: "c\"2", to: "g", chatType: .groupchat, type: .custom, body: ["list": [1, 2.5, true, nil, ["k": "名前"]]])),
            .send(.init(id: "c3", to: "bob", chatType: .chat, type: .txt, body: nil)),
            .ack(seq: 42), .ack(seq: 9_007_199_254), .sync, .ping, .logout, .readAll, .badge(count: 7),
            .read(chatType: .chat, conversation: "bob", upTo: "912205496344117248"),
            .read(chatType: .groupchat, conversation: "g", upTo: nil),
        ]
        for frame in frames {
            // As the SDK writes it (JSONWriter) and the server reads it (JSONReader), and through Codable: the same frame.
            #expect(try ClientFrame(json: frame.json) == frame)
            let data = try JSONEncoder().encode(frame)
            #expect(try JSONDecoder().decode(ClientFrame.self, from: data) == frame)
            #expect(try JSONDecoder().decode(JSONValue.self, from: data) == frame.jsonValue)
        }
        // Field names as the protocol documents them.
        #expect(
            ClientFrame.read(chatType: .chat, conversation: "bob", upTo: "7").json
                == #"{"chat_type":"chat","conversation":"bob","op":"read","up_to":"7"}"#)
        #expect(ClientFrame.badge(count: 3).json == #"{"count":3,"op":"badge"}"#)
    }

    @Test func clientFramesThatDoNotMatchTheProtocolAreJSONParseErrors() throws {
        let texts = [
            #"{"op":"fly"}"#, #"{"op":"ack"}"#, #"{"op":"ack","seq":"1"}"#, #"{"op":"ack","seq":1.5}"#,
            #"{"op":"send","id":"c1","to":"bob","chat_type":"chat","type":"txt"}"#,
            #"{"op":"send","id":"c1","to":"bob","chat_type":"channel","type":"txt","body":{}}"#,
            #"{"op":"send","id":"c1","to":"bob","chat_type":"chat","type":"txt","body":{},"ext":[1]}"#,
            #"{"op":"read","chat_type":"chat"}"#, #"{"op":"badge","count":true}"#, #"["op","ping"]"#, #"{"op":null}"#,
        ]
        for text in texts {
            #expect(throws: BeaconError.self, "\(text)") { try ClientFrame(json: text) }
            do {
                _ = try ClientFrame(json: text)
            } catch let error as BeaconError {
                #expect(error.code == .jsonParse)
            }
        }
        #expect(throws: JSONReader.Malformed.self) { try ClientFrame(json: #"{"op":"ping""#) }
        // Integers beyond 2^53 (a double's exact range) are clamped, not refused: the server bounds them itself.
        #expect(try ClientFrame(json: #"{"op":"ack","seq":9223372036854775807}"#) == .ack(seq: .max))
        #expect(try ClientFrame(json: #"{"op":"ack","seq":1e300}"#) == .ack(seq: .max))
        #expect(try ClientFrame(json: #"{"op":"badge","count":-1e30}"#) == .badge(count: Int(Int64.min)))
    }

    @Test func serverFramesRoundTrip() throws {
        let message = WireMessage(Message(id: 7, from: "a", to: "b", chatType: .chat, type: .txt, body: ["msg": "x"], timestamp: 5))
        let rich = WireMessage(
            Message(
                id: 912_205_496_344_117_248, from: "a\"q", to: "g", chatType: .groupchat, type: .custom,
                body: ["customEvent": "e", "list": [1, 2.5, true, nil, ["k": "名前"]]], ext: ["em_at_list": ["b"], "n": 1_795_321_311_812],
                timestamp: 1_795_321_311_812, onlineOnly: true))
        let frames: [ServerFrame] = [
            .welcome(username: "a", deviceID: "d", cursor: 3), .message(seq: 4, message: message), .message(seq: nil, message: message),
            .message(seq: 9_007_199_254, message: rich), .sent(id: "c1", messageID: "7", timestamp: 5), .synced(seq: 9), .pong,
            .error(id: nil, code: "json_parse", description: "x"), .error(id: "c2", code: "forbidden_op", description: "line\nbreak"),
            .closing(reason: "kicked"),
            .read(ReadState(chatType: .chat, conversation: "b", upTo: "7", seq: 4, version: 2, badge: 3)),
            .read(ReadState(chatType: .groupchat, conversation: "g", upTo: "8", seq: 5, version: 3)),
            .recall(
                seq: 6, noticeID: 9,
                notice: RecallNotice(messageID: 7, from: "a", to: "g", chatType: .groupchat, recalledBy: "admin", timestamp: 8)),
        ]
        for frame in frames {
            // As the server writes it (JSONWriter) and through Codable: both read back as the same frame.
            #expect(try JSONDecoder().decode(ServerFrame.self, from: Data(frame.json.utf8)) == frame)
            let data = try JSONEncoder().encode(frame)
            #expect(try JSONDecoder().decode(ServerFrame.self, from: data) == frame)
            #expect(try JSONDecoder().decode(JSONValue.self, from: data) == frame.jsonValue)
        }
        // Field names as the protocol documents them.
        #expect(
            ServerFrame.message(seq: 4, message: message).json
                == #"{"message":{"body":{"msg":"x"},"chat_type":"chat","ext":{},"from":"a","msg_id":"7","timestamp":5,"to":"b","type":"txt"},"op":"msg","seq":4}"#
        )
    }

    @Test func aRecallNoticeIsAReservedCommandThatNoSenderMayForge() throws {
        let recalled = Message(id: 7, from: "a", to: "b", chatType: .chat, type: .txt, body: ["msg": "x"], timestamp: 5)
        let notice = RecallNotice(recalling: recalled, by: "admin", at: 9)
        let stored = notice.message(id: 10)
        #expect(stored.type == .cmd && stored.id == 10 && stored.timestamp == 9 && !stored.countsAsUnread)
        #expect(stored.recall == notice)
        #expect(stored.conversation(for: "b") == recalled.conversation(for: "b"))
        #expect(recalled.recall == nil)
        #expect(
            Message(id: 1, from: "a", to: "b", chatType: .chat, type: .cmd, body: ["action": "beacon_recall"], timestamp: 1).recall == nil)
        #expect(throws: BeaconError.self) {
            try Validation.validateContent(type: .cmd, body: ["action": "beacon_recall", "msg_id": "7"], ext: [:])
        }
        try Validation.validateContent(type: .cmd, body: ["action": "recall"], ext: [:])
        // In JSON, the ids are decimal strings; one that is not is the frame's error, not a trap.
        #expect(
            ServerFrame.recall(seq: 6, noticeID: 10, notice: notice).json
                == #"{"by":"admin","chat_type":"chat","from":"a","msg_id":"7","notice_id":"10","op":"recall","seq":6,"timestamp":9,"to":"b"}"#
        )
        #expect(throws: BeaconError.self) {
            try ServerFrame(
                json:
                    #"{"by":"x","chat_type":"chat","from":"a","msg_id":"-7","notice_id":"10","op":"recall","seq":6,"timestamp":9,"to":"b"}"#
            )
        }
    }

    @Test func sendFrameUsesDocumentedFieldNames() throws {
        let json = #"{"op":"send","id":"c1","to":"bob","chat_type":"groupchat","type":"txt","body":{"msg":"hi"}}"#
        let frame = try ClientFrame(json: json)
        #expect(frame == .send(.init(id: "c1", to: "bob", chatType: .groupchat, type: .txt, body: ["msg": "hi"])))
        #expect(try JSONDecoder().decode(ClientFrame.self, from: Data(json.utf8)) == frame)
    }

    @Test func jsonValuesKeepIntegersExact() throws {
        let value: JSONValue = ["n": 1_795_321_311_812, "f": .number(1.5), "s": "x", "a": [true, nil]]
        let text = String(decoding: try JSONEncoder().encode(value), as: UTF8.self)
        #expect(text.contains("1795321311812"))
        #expect(try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8)) == value)
    }
}

@Suite struct JSONWriterTests {
    @Test(arguments: [
        ["a": 1, "b": [true, false, nil], "c": "x"] as JSONValue,
        ["quote": "say \"hi\"\\ now", "lines": "a\nb\r\tc", "control": "\u{01}\u{1f}", "unicode": "日本語 🎉 é"],
        ["n": .number(1.5), "big": 1_795_321_311_812, "neg": -3, "nested": ["z": ["y": []], "a": [:]]],
        "plain", 42, [],
    ])
    func matchesJSONEncoderWithSortedKeys(_ value: JSONValue) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let expected = String(decoding: try encoder.encode(value), as: UTF8.self)
        let written = JSONWriter.string(value)
        #expect(try JSONDecoder().decode(JSONValue.self, from: Data(written.utf8)) == value)
        #expect(written == expected)
    }
}

@Suite struct HexTests {
    @Test func bytesAreTwoLowercaseDigitsEach() {
        #expect([UInt8]().lowercaseHex == "")
        #expect([0x00, 0x0f, 0xa0, 0xff, 0x12].lowercaseHex == "000fa0ff12")
        #expect(Array(UInt8.min...UInt8.max).lowercaseHex == (0...255).map { String(format: "%02x", $0) }.joined())
    }
}
