import APNsSimulator
import BeaconAPNs
import BeaconClient
import BeaconCore
import BeaconServer
import BeaconStorage
import BeaconTesting
import Crypto
import Foundation
import NIOSSL
import SwiftASN1
import Testing
import X509

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

private let phone = String(repeating: "ab", count: 32)
private let tablet = String(repeating: "cd", count: 32)

@Suite struct BindingTests {
    @Test func bindingsFollowEasemobsRules() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.createUsers("alice", "bob")
            try await beacon.uploadP8(name: "ios-dev")
            try await beacon.uploadP8(name: "ios-voip")
            #expect(try await beacon.bind("alice", token: phone).1["entities"]?[0]?["device_token"]?.stringValue == phone)
            _ = try await beacon.bind("alice", token: phone, notifier: "ios-voip")
            let unknown = try await beacon.bind("alice", token: phone, notifier: "nope")
            #expect(unknown.0 == 400)
            #expect(unknown.1["error"] == "notifier_not_found")
            #expect(try await beacon.bind("alice", token: "not-hex").1["error"] == "illegal_argument")
            // An empty token unbinds that notifier only.
            let after = try await beacon.bind("alice", token: "", notifier: "ios-voip")
            #expect(after.1["entities"]?.arrayValue?.count == 1)
            // An empty notifier removes everything of the device.
            _ = try await beacon.bind("alice", token: phone, notifier: "ios-voip")
            #expect(try await beacon.bind("alice", token: "", notifier: "").1["entities"]?.arrayValue?.isEmpty == true)

            // A shared phone: the token moves to whoever bound it last.
            _ = try await beacon.bind("alice", token: phone)
            _ = try await beacon.bind("bob", device: "shared", token: phone)
            #expect(try await beacon.rest("GET", "/users/alice/push/binding").json["entities"]?.arrayValue?.isEmpty == true)
            #expect(try await beacon.rest("GET", "/users/bob/push/binding").json["count"]?.intValue == 1)

            // A user token manages its own bindings only; kicking removes them.
            let alice = try await beacon.userToken("alice")
            #expect(try await beacon.rest("GET", "/users/bob/push/binding", token: alice).status == 403)
            #expect(try await beacon.rest("POST", "/users/bob/disconnect").status == 200)
            #expect(try await beacon.rest("GET", "/users/bob/push/binding").json["count"]?.intValue == 0)
        }
    }
}
