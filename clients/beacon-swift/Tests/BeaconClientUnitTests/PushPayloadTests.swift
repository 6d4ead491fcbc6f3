import BeaconNotifications
import Foundation
import Testing

/// What an app (or its notification service extension) reads from Beacon's pushes.
@Suite struct PushPayloadTests {
    @Test func theAppSideParserReadsBeaconsPayload() throws {
        let json =
            #"{"aps":{"alert":{"title":"T","subtitle":"S","body":"B"},"badge":3,"sound":"default","thread-id":"g1"},"e":{"k":"v"},"f":"alice","g":"g1","m":"42","t":"bob"}"#
        let payload = try PushPayload(json: Data(json.utf8))
        #expect(payload.title == "T")
        #expect(payload.subtitle == "S")
        #expect(payload.body == "B")
        #expect(payload.badge == 3)
        #expect(payload.threadID == "g1")
        #expect(payload.from == "alice")
        #expect(payload.to == "bob")
        #expect(payload.group == "g1")
        #expect(payload.messageID == "42")
        #expect(payload.extra == ["k": "v"])
        let userInfo: [AnyHashable: Any] = ["aps": ["alert": "plain"], "f": "a", "m": "1"]
        #expect(try PushPayload(userInfo: userInfo).body == "plain")
    }

    @Test func theAppSideParserReadsAWithdrawalAndMatchesTheNotificationsItRemoves() throws {
        let json = #"""
            {"aps":{"content-available":1},"beacon":{"badge":4,"read":[
              {"chat_type":"chat","conversation":"alice","up_to":"100"},{"chat_type":"groupchat","conversation":"g1","up_to":"7"},
              {"chat_type":"chat","conversation":"broken","up_to":"x"}]}}
            """#
        let withdrawal = try #require(try PushPayload(json: Data(json.utf8)).withdrawal)
        #expect(withdrawal.badge == 4)
        #expect(withdrawal.reads.map(\.conversation) == ["alice", "g1"])  // the malformed entry is left out
        func notification(_ json: String) throws -> PushPayload { try PushPayload(json: Data(json.utf8)) }
        #expect(withdrawal.covers(try notification(#"{"aps":{"thread-id":"alice"},"f":"alice","m":"100"}"#)))
        #expect(withdrawal.covers(try notification(#"{"aps":{"thread-id":"g1"},"f":"bob","g":"g1","m":"3"}"#)))
        #expect(!withdrawal.covers(try notification(#"{"aps":{"thread-id":"alice"},"f":"alice","m":"101"}"#)))  // arrived after
        #expect(!withdrawal.covers(try notification(#"{"aps":{"thread-id":"carol"},"f":"carol","m":"1"}"#)))
        #expect(!withdrawal.covers(try notification(#"{"aps":{"thread-id":"alice"},"f":"alice"}"#)))
        // A group that happens to be named like a user is another conversation.
        #expect(!withdrawal.covers(try notification(#"{"aps":{"thread-id":"alice"},"f":"x","g":"alice","m":"1"}"#)))
        #expect(!withdrawal.covers(try notification(#"{"aps":{"thread-id":"g1"},"f":"g1","m":"1"}"#)))
        // A message notification is no withdrawal.
        #expect(try PushPayload(json: Data(#"{"aps":{"alert":"x","badge":1},"m":"1"}"#.utf8)).withdrawal == nil)
    }

    @Test func theAppSideParserReadsWhatAnExtensionNeeds() throws {
        let json = #"""
            {"aps":{"alert":{"body":"b","loc-key":"BODY","loc-args":["x",1],"title-loc-key":"TITLE","title-loc-args":["y"]},
              "category":"reply","mutable-content":1,"sound":"default"},
             "ext":"{\"order\":7}","f":"alice","image":"https://example.com/p.jpg","m":"1","t":"bob"}
            """#
        let payload = try PushPayload(json: Data(json.utf8))
        #expect(payload.imageURL == "https://example.com/p.jpg" && payload.category == "reply" && payload.mutableContent)
        #expect(payload.tencentExt == "{\"order\":7}")
        #expect(payload.titleLocKey == "TITLE" && payload.titleLocArgs == ["y"])
        #expect(payload.locKey == "BODY" && payload.locArgs == ["x", "1"])
        let plain = try PushPayload(json: Data(#"{"aps":{"alert":"x"},"m":"1"}"#.utf8))
        #expect(!plain.mutableContent && plain.imageURL == nil && plain.locArgs.isEmpty)
    }

    @Test func aRecallsWithdrawalRemovesThatMessageWhateverItsConversation() throws {
        let json = #"{"aps":{"content-available":1},"beacon":{"recalled":["100","x"],"badge":2}}"#
        let withdrawal = try #require(try PushPayload(json: Data(json.utf8)).withdrawal)
        #expect(withdrawal.badge == 2 && withdrawal.reads.isEmpty && withdrawal.recalled == [100])
        func notification(_ json: String) throws -> PushPayload { try PushPayload(json: Data(json.utf8)) }
        #expect(withdrawal.covers(try notification(#"{"aps":{"thread-id":"alice"},"f":"alice","m":"100"}"#)))
        #expect(withdrawal.covers(try notification(#"{"aps":{},"f":"bob","g":"g1","m":"100"}"#)))
        #expect(!withdrawal.covers(try notification(#"{"aps":{"thread-id":"alice"},"f":"alice","m":"99"}"#)))
    }

    @Test func aUserInfoThatIsNotJSONIsAnErrorNotATrap() {
        let userInfo: [AnyHashable: Any] = ["aps": ["alert": "x"], "date": Date()]
        #expect(throws: PushPayloadError.notJSON) { try PushPayload(userInfo: userInfo) }
    }
}
