import APNsSimulator
import BeaconClient
import BeaconCore
import BeaconProtocol
import BeaconServer
import BeaconTesting
import Crypto
import Foundation
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

private let phone = String(repeating: "a1", count: 32)

@Suite struct CollapseTests {
    @Test func everyPushCarriesACollapseID() async throws {
        try await withPushBeacon { beacon, simulator in
            try await beacon.createUsers("alice", "bob")
            try await beacon.uploadP8()
            _ = try await beacon.bind("bob", token: phone)
            let sent = try await beacon.rest(
                "POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "x"]])
            _ = try await beacon.rest(
                "POST", "/messages/users",
                [
                    "from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "y"],
                    "ext": ["em_apns_ext": ["em_push_collapse_key": "thread-9"]],
                ])
            _ = try await beacon.pushOutcomes.attempts(2)
            // The documented form: base64url (unpadded) of SHA-256 over the sender, a NUL and the key.
            let keyed = Data(SHA256.hash(data: Array("alice\u{0}thread-9".utf8))).base64EncodedString()
                .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
            #expect(keyed.count == 43)
            #expect(simulator.deliveries(deviceToken: phone).map(\.collapseID) == [sent.json["data"]?["bob"]?.stringValue, keyed])
        }
    }

    /// mallory cannot replace alice's notification on bob's lock screen: neither alice's message id nor alice's own key,
    /// used as mallory's collapse key, gives mallory's push the collapse id of alice's (issue 22).
    @Test func aSenderCannotCollapseAnotherSendersNotification() async throws {
        try await withPushBeacon { beacon, simulator in
            try await beacon.createUsers("alice", "bob", "mallory")
            try await beacon.uploadP8()
            _ = try await beacon.bind("bob", token: phone)
            func send(_ from: String, key: String?) async throws -> String? {
                let ext: JSONValue = key.map { ["em_apns_ext": ["em_push_collapse_key": .string($0)]] } ?? [:]
                let body: JSONValue = ["from": .string(from), "to": ["bob"], "type": "txt", "body": ["msg": "x"], "ext": ext]
                return try await beacon.rest("POST", "/messages/users", body).json["data"]?["bob"]?.stringValue
            }
            let plain = try #require(try await send("alice", key: nil))
            _ = try await send("alice", key: "thread-9")
            _ = try await send("mallory", key: plain)
            _ = try await send("mallory", key: "thread-9")
            _ = try await beacon.pushOutcomes.attempts(4)
            let ids = simulator.deliveries(deviceToken: phone).map(\.collapseID)
            #expect(ids.count == 4 && Set(ids).count == 4, "\(ids)")
            #expect(ids.first == plain)
        }
    }
}
