import BeaconCore
import BeaconPush
import Foundation
import Testing

@Suite struct WithdrawalPayloadTests {
    @Test func aWithdrawalHoldsOnlyContentAvailableInApsAndTheNewestReads() throws {
        let json = WithdrawalPayload.json(
            badge: 2, reads: [WithdrawalPayload.Read(conversation: ConversationID(chatType: .groupchat, key: "g\"1"), upTo: 42)])
        #expect(
            json
                == #"{"aps":{"content-available":1},"beacon":{"badge":2,"read":[{"chat_type":"groupchat","conversation":"g\"1","up_to":"42"}]}}"#
        )
        // However many conversations and however long their keys, the payload stays within APNs' 4 KB and keeps the newest.
        let many = (0..<40).map {
            WithdrawalPayload.Read(
                conversation: ConversationID(chatType: .chat, key: String(repeating: "k", count: 128) + "\($0)"), upTo: UInt64.max)
        }
        let big = WithdrawalPayload.json(badge: Int.max, reads: many)
        #expect(big.utf8.count <= 4096)
        let parsed = try JSONDecoder().decode(JSONValue.self, from: Data(big.utf8))
        let reads = try #require(parsed["beacon"]?["read"]?.arrayValue)
        #expect(reads.count == WithdrawalPayload.maxReads)
        #expect(reads.last?["conversation"]?.stringValue?.hasSuffix("39") == true)
        #expect(parsed["beacon"]?["badge"]?.intValue == JSONWriter.maxBadge)
    }

    @Test func aRecallsWithdrawalTakesTheBadgeLastInBeacon() throws {
        let (json, offset) = WithdrawalPayload.recall(of: UInt64.max)
        let withBadge = JSONWriter.insertBadge(3, into: json, atUTF8Offset: offset)
        #expect(withBadge == #"{"aps":{"content-available":1},"beacon":{"recalled":["18446744073709551615"],"badge":3}}"#)
        let parsed = try JSONDecoder().decode(JSONValue.self, from: Data(withBadge.utf8))
        #expect(parsed["beacon"]?["badge"]?.intValue == 3)
    }
}
