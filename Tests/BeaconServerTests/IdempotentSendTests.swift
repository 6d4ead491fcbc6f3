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

@Suite struct IdempotentSendTests {
    @Test func aRetriedRESTSendStoresOnceAndAnswersTheSameIDs() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.createUsers("alice", "bob", "carol")
            var request = URLRequest(url: URL(string: beacon.baseURL.absoluteString + "/acme/chat/messages/users")!)
            request.httpMethod = "POST"
            request.setValue("Bearer \(beacon.appToken)", forHTTPHeaderField: "Authorization")
            request.setValue("retry-1", forHTTPHeaderField: "Idempotency-Key")
            request.httpBody = Data(#"{"from":"alice","to":["bob","carol"],"type":"txt","body":{"msg":"once"}}"#.utf8)
            let first = try JSONDecoder().decode(JSONValue.self, from: try await URLSession.shared.dataIgnoringCancellation(for: request).0)
            let second = try JSONDecoder().decode(
                JSONValue.self, from: try await URLSession.shared.dataIgnoringCancellation(for: request).0)
            #expect(first["data"] == second["data"])
            #expect(first["data"]?["carol"]?.stringValue != nil)
            let body: JSONValue = ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "twice?"], "msg_id": "client-7"]
            let a = try await beacon.rest("POST", "/messages/users", body)
            let b = try await beacon.rest("POST", "/messages/users", body)
            #expect(a.json["data"] == b.json["data"])
            #expect(try await beacon.rest("GET", "/users/bob/offline_msg_count").json["data"]?["bob"] == "2")
            #expect(try await beacon.rest("GET", "/users/carol/offline_msg_count").json["data"]?["carol"] == "1")
            // References are per sender: another sender's "client-7" is another message (before: carol's was dropped).
            let fromCarol = try await beacon.rest(
                "POST", "/messages/users", ["from": "carol", "to": ["bob"], "type": "txt", "body": ["msg": "mine"], "msg_id": "client-7"])
            #expect(fromCarol.json["data"]?["bob"] != a.json["data"]?["bob"])
            #expect(try await beacon.rest("GET", "/users/bob/offline_msg_count").json["data"]?["bob"] == "3")
            // All or nothing: one unknown target stores nothing for the others.
            _ = try await beacon.rest(
                "POST", "/messages/users", ["from": "alice", "to": ["bob", "ghost"], "type": "txt", "body": ["msg": "no"]])
            #expect(try await beacon.rest("GET", "/users/bob/offline_msg_count").json["data"]?["bob"] == "3")
        }
    }

    @Test func aRetriedWebSocketSendIsAnsweredWithTheFirstMessage() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.createUsers("alice", "bob")
            let device = try await RawDevice.connect(beacon, "alice", device: "d1")
            let send = #"{"op":"send","id":"s-1","to":"bob","chat_type":"chat","type":"txt","body":{"msg":"hi"}}"#
            device.send(send)
            device.send(send)
            device.send(#"{"op":"send","id":"bad-1","to":5}"#)
            // Malformed JSON in the body alone (a string cut through an emoji, a number beyond a double): the id still comes back.
            device.send(#"{"op":"send","id":"bad-2","to":"bob","chat_type":"chat","type":"txt","body":{"msg":"hi \ud83d"}}"#)
            device.send(#"{"op":"send","id":"bad-3","to":"bob","chat_type":"chat","type":"txt","body":{"n":1e400}}"#)
            let errorIDs: @Sendable ([ServerFrame]) -> [String] = { frames in
                frames.compactMap { if case .error(let id, "json_parse", _) = $0 { id } else { nil } }
            }
            let frames = try await device.frames.wait {
                $0.filter { if case .sent = $0 { true } else { false } }.count == 2 && errorIDs($0).count == 3
            }
            let ids = frames.compactMap { frame -> String? in if case .sent(_, let id, _) = frame { id } else { nil } }
            #expect(ids.count == 2 && ids[0] == ids[1])
            #expect(errorIDs(frames) == ["bad-1", "bad-2", "bad-3"])
            #expect(try await beacon.rest("GET", "/users/bob/offline_msg_count").json["data"]?["bob"] == "1")
            try await device.close()
        }
    }

    @Test func syncResendsEverythingAfterTheAcknowledgedCursor() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.createUsers("alice", "bob")
            let device = try await RawDevice.connect(beacon, "bob", device: "d1")
            for text in ["1", "2", "3"] {
                _ = try await beacon.rest(
                    "POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": .string(text)]])
            }
            try await device.frames.wait { RawDevice.stored(in: $0).count == 3 }
            device.send(#"{"op":"ack","seq":1}"#)
            try await Task.sleep(for: .milliseconds(200))  // the cursor is batched; the sync reads the book anyway
            device.send(#"{"op":"sync"}"#)
            try await device.frames.wait { RawDevice.stored(in: $0).count == 5 }
            #expect(device.stored.map(\.seq) == [1, 2, 3, 2, 3])
            try await device.close()
        }
    }
}
