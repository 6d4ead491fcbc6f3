import BeaconCore
import BeaconProtocol
import BeaconStorage
import Foundation
import Logging
import Synchronization

/// Where devices are connected: on this node (`ConnectionRegistry`) and, on several nodes, on the others (`ClusterLink`).
/// Sessions, sends and kicks go through it, so that none of them needs to know how many nodes there are.
final class Switchboard: PresenceRegistry {
    let local: ConnectionRegistry
    let link: ClusterLink?

    init(local: ConnectionRegistry, link: ClusterLink?) {
        self.local = local
        self.link = link
    }

    func onlineDevices(of usernames: [String], app: Int64) async throws -> [String: Set<String>] {
        guard let link else { return local.onlineDevices(of: usernames, app: app) }
        return try await link.onlineDevices(of: usernames, app: app)
    }

    /// Users whose expected devices are all connected to this node are answered from memory: such a device's going
    /// offline starts here, after this answer, so whatever was stored before it is found by its leaving. The others are
    /// read from the shared store.
    func onlineDevices(expecting devices: [String: Set<String>], app: Int64) async throws -> [String: Set<String>] {
        guard let link else { return local.onlineDevices(of: Array(devices.keys), app: app) }
        var online: [String: Set<String>] = [:]
        var elsewhere: [String] = []
        for (username, expected) in devices {
            let here = Set(local.connectedDevices(of: username, app: app))
            if !expected.isEmpty, expected.isSubset(of: here) { online[username] = here } else { elsewhere.append(username) }
        }
        guard !elsewhere.isEmpty else { return online }
        return online.merging(try await link.onlineDevices(of: elsewhere, app: app)) { _, read in read }
    }

    /// Devices of the app connected now, on every node.
    func connectedDeviceCount(app: Int64) async throws -> Int {
        guard let link else { return local.connectedDeviceCount(app: app) }
        return try await link.store.connectedDeviceCount(app: app)
    }

    /// Registers a device's connection: from here on it counts as online, on every node. An earlier connection of the
    /// device, here or on another node, is told to close (`replaced`). False when the device opened a later connection on
    /// another node that registered first: this one is stale (its caller closes it with `replaced`).
    func register(_ outbox: DeviceOutbox) async throws -> Bool {
        local.register(outbox)
        return try await link?.connected(outbox) ?? true
    }

    /// Removes the connection; true if the device may have gone offline, so that what it was online for is decided again
    /// (which reads presence first): its presence was removed, or it was the connection this node held for the device.
    /// The second covers connections this node answered for from memory without owning the shared row (one whose
    /// registration was still in flight or failed, one taken over by another node whose close notice has not come, those
    /// of a node declared dead): their leaving still decides again what was skipped while they counted as online here.
    func unregister(_ outbox: DeviceOutbox) async -> Bool {
        let wasRegistered = local.unregister(outbox)
        guard let link else { return wasRegistered }
        let removed = await link.disconnected(outbox)
        return removed || wasRegistered
    }

    /// Hands freshly stored inbox entries to the connected devices of their users, here and on other nodes. In a
    /// cluster, returns the devices of those users online then, as read to relay the entries (from the shared store, or
    /// from memory while this node is alone; nil when that read failed, and without a cluster: presence is in memory):
    /// read after the entries were stored, so a device connecting later syncs them, as the push router's own reading of
    /// presence would be.
    @discardableResult
    func deliver(_ entries: [InboxEntry], app: Int64) async -> [String: Set<String>]? {
        local.deliver(entries, app: app)
        return await link?.relay(entries, app: app)
    }

    /// Hands an online-only message to the connected devices of `usernames`, except the device it came from.
    func deliverOnline(_ message: Message, to usernames: [String], app: Int64, exceptDevice origin: String?) async {
        local.deliverOnline(message, to: usernames, app: app, exceptDevice: origin)
        await link?.relay(.online(app: app, message: message, to: usernames, exceptDevice: origin), to: usernames, app: app)
    }

    /// Queues frames for every connected device of the user, on every node.
    func send(_ frames: [ServerFrame], toDevicesOf username: String, app: Int64) async {
        local.send(frames, toDevicesOf: username, app: app)
        await link?.relay(.frames(app: app, username: username, frames: frames), to: [username], app: app)
    }

    /// Closes the device's connection, on whichever node it is.
    func disconnect(_ device: DeviceKey, reason: String) async {
        local.disconnect(device, connection: nil, reason: reason)
        await link?.relay(
            .closeDevice(app: device.app, username: device.username, deviceID: device.deviceID, connection: nil, reason: reason),
            to: [device.username], app: device.app)
    }

    /// Closes every connection of the user, on every node.
    func disconnectAll(of username: String, app: Int64, reason: String) async {
        local.disconnectAll(of: username, app: app, reason: reason)
        await link?.relay(.closeUser(app: app, username: username, reason: reason), to: [username], app: app)
    }
}
