import BeaconCore
import BeaconStorage
import Testing

@testable import BeaconServer

@Suite struct OutboxTests {
    private func entry(_ seq: Int64) -> InboxEntry {
        InboxEntry(
            username: "bob", seq: seq,
            message: Message(id: UInt64(seq), from: "alice", to: "bob", chatType: .chat, type: .txt, body: ["msg": "x"], timestamp: 0),
            originDevice: nil)
    }

    @Test func keepsStoredEntriesInOrderUpToItsLimit() {
        let outbox = DeviceOutbox(user: UserKey(app: 1, username: "bob"), deviceID: "d", limit: 4)
        outbox.enqueue([entry(1), entry(2)])
        outbox.enqueue([entry(3)])
        let pending = outbox.take()
        #expect(pending.stored.map(\.seq) == [1, 2, 3])
        #expect(!pending.mustFetch)
        #expect(outbox.take().stored.isEmpty)
    }

    @Test func overflowDropsEntriesFromMemoryAndSwitchesToTheStore() {
        let outbox = DeviceOutbox(user: UserKey(app: 1, username: "bob"), deviceID: "d", limit: 4)
        outbox.enqueue((1...5).map(entry))
        outbox.enqueue([entry(6)])
        let pending = outbox.take()
        #expect(pending.stored.isEmpty)
        #expect(pending.mustFetch)
    }

    @Test func repliesAreBoundedAndCloseIsSticky() {
        let outbox = DeviceOutbox(user: UserKey(app: 1, username: "bob"), deviceID: "d", limit: 2)
        #expect(outbox.reply(.pong))
        #expect(outbox.reply(.pong))
        #expect(!outbox.reply(.pong))
        outbox.close(reason: "kicked")
        outbox.close(reason: "replaced")
        #expect(outbox.take().closeReason == "kicked")
        #expect(outbox.take().closeReason == "kicked")
    }

    /// A kick after another reason to close is still noted (nothing about the user goes out any more), while the device is
    /// told the first reason.
    @Test func aKickAfterAnotherReasonIsNoted() {
        let outbox = DeviceOutbox(user: UserKey(app: 1, username: "bob"), deviceID: "d", limit: 8)
        outbox.close(reason: "shutdown")
        #expect(!outbox.wasKicked && !outbox.take().kicked)
        outbox.close(reason: DeviceSession.kicked)
        #expect(outbox.wasKicked && outbox.closeReason == "shutdown")
        let pending = outbox.take()
        #expect(pending.kicked && pending.closeReason == "shutdown")
        #expect(outbox.take().kicked)  // kept, as the reason is
    }

    @Test func presenceListsConnectedDevicesAndReplacesTheSameDevice() {
        let registry = ConnectionRegistry()
        let first = DeviceOutbox(user: UserKey(app: 1, username: "bob"), deviceID: "phone", limit: 8)
        let second = DeviceOutbox(user: UserKey(app: 1, username: "bob"), deviceID: "phone", limit: 8)
        let pad = DeviceOutbox(user: UserKey(app: 1, username: "bob"), deviceID: "pad", limit: 8)
        registry.register(first)
        registry.register(pad)
        registry.register(second)
        #expect(first.take().closeReason == "replaced")
        #expect(Set(registry.connectedDevices(of: "bob", app: 1)) == ["phone", "pad"])
        registry.unregister(first)  // stale: must not remove the new connection
        #expect(Set(registry.connectedDevices(of: "bob", app: 1)) == ["phone", "pad"])
        registry.unregister(second)
        registry.unregister(pad)
        #expect(registry.connectedDevices(of: "bob", app: 1).isEmpty)
        #expect(registry.connectedDevices(of: "bob", app: 2).isEmpty)
    }
}
