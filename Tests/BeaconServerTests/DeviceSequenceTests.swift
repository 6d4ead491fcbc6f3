import APNsSimulator
import BeaconTesting
import Foundation
import Testing

private let phone = String(repeating: "d1", count: 32)
private let tablet = String(repeating: "d2", count: 32)

/// The pushes a claim takes for one device go one after another, in the order they were recorded.
@Suite struct DeviceSequenceTests {
    private static func sendText(_ beacon: TestBeacon, to receiver: String, _ text: String) async throws {
        let sent = try await beacon.rest(
            "POST", "/messages/users", ["from": "alice", "to": [.string(receiver)], "type": "txt", "body": ["msg": .string(text)]])
        #expect(sent.status == 200)
    }

    /// While carol's push waits `hold` ms for its answer, `texts` are sent to bob: the worker's next claim takes them
    /// together. Then every answer takes `delay` ms.
    private static func claimTogether(
        _ beacon: TestBeacon, _ simulator: APNsSimulator, _ texts: [String], hold: Int = 3000, delay: Int
    ) async throws {
        var faults = SimulatorFaults()
        faults.delayMilliseconds = hold
        simulator.setFaults(faults)
        try await sendText(beacon, to: "carol", "first")
        try await simulator.waitForDeliveries(deviceToken: tablet, count: 1)
        for text in texts { try await sendText(beacon, to: "bob", text) }
        faults.delayMilliseconds = delay
        simulator.setFaults(faults)
    }

    /// Sent at once they could arrive in either order, and the phone would show the older badge last.
    @Test func aDevicesPushesGoOneAfterAnotherInOrder() async throws {
        try await withPushBeacon { beacon, simulator in
            try await beacon.createUsers("alice", "bob", "carol")
            try await beacon.uploadP8()
            _ = try await beacon.bind("bob", device: "iphone", token: phone)
            _ = try await beacon.bind("carol", device: "ipad", token: tablet)
            try await Self.claimTogether(beacon, simulator, ["one", "two", "three"], delay: 300)
            try await simulator.waitForDeliveries(deviceToken: phone, count: 3)
            let pushes = simulator.deliveries(deviceToken: phone)
            #expect(pushes.map(\.payload.badge) == [1, 2, 3])
            // Each went when the one before was answered (300 ms after it arrived), not beside it.
            #expect(zip(pushes, pushes.dropFirst()).allSatisfy { $1.receivedAt - $0.receivedAt >= 250 }, "\(pushes.map(\.receivedAt))")
        }
    }

    /// A later push waits for the earlier one's answer; if the phone changed hands meanwhile, it is not sent: the time
    /// after which the binding is checked again counts from the claim, not from when the push's turn came.
    @Test func aLaterPushToAPhoneThatChangedHandsMeanwhileIsNotSent() async throws {
        try await withPushBeacon { beacon, simulator in
            try await beacon.createUsers("alice", "bob", "carol", "dave")
            try await beacon.uploadP8()
            _ = try await beacon.bind("bob", device: "iphone", token: phone)
            _ = try await beacon.bind("carol", device: "ipad", token: tablet)
            try await Self.claimTogether(beacon, simulator, ["one", "two"], delay: 5000)
            try await simulator.waitForDeliveries(deviceToken: phone, count: 1)
            #expect(try await beacon.bind("dave", device: "daves", token: phone).0 == 200)  // while bob's first waits for its answer
            let records = try await beacon.deliveries(of: "bob") { records in
                records.count == 2 && records.allSatisfy { $0["status"] != "pending" }
            }
            #expect(records.compactMap { $0["status"]?.stringValue }.sorted() == ["sent", "skipped"], "\(records)")
            #expect(records.contains { $0["status"] == "skipped" && $0["reason"] == "binding_changed" })
            #expect(simulator.deliveries(deviceToken: phone).count == 1)
        }
    }
}
