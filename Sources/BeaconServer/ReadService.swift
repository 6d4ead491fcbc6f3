import BeaconAPNs
import BeaconCore
import BeaconProtocol
import BeaconPush
import BeaconStorage
import Foundation
import Logging

/// Read state, the one path every "read" takes (WebSocket or REST): records the markers, tells every connected device of
/// the user (on every node), and withdraws the notifications of what was read from the user's other devices with a
/// background push carrying the new badge (docs/protocol.md, "Read state and badge").
struct ReadService: Sendable {
    let store: any BeaconStore
    let switchboard: Switchboard
    let clock: @Sendable () -> Int64
    /// Told when withdrawal jobs were stored; nil when this server pushes nothing (no secret key).
    let jobsStored: (@Sendable () -> Void)?
    let logger: Logger

    /// A device gets at most one withdrawal this often (ms); the later reads of the window ride on the waiting one.
    static let withdrawalSpacing: Int64 = 3000
    /// `apns-expiration` of a withdrawal: stale read state is not worth delivering later than this.
    static let withdrawalExpirationSeconds: Int64 = 3600
    /// Read markers sent to a connecting device, at most (the most recently changed).
    static let markersOnConnect = 1000

    /// Marks `conversation` (all conversations when nil) read up to `upTo` (everything so far when nil).
    func markRead(
        _ username: String, app: AppRecord, conversation: ConversationID?, upTo: UInt64?, readingDevice: String?
    ) async throws -> ReadUpdate {
        if let conversation { try Validation.validateConversationKey(conversation.key) }
        let update = try await store.markRead(
            username, app: app.id, conversation: conversation, upTo: upTo, readingDevice: readingDevice, now: clock())
        guard !update.markers.isEmpty else { return update }
        // Oldest change first: a device that cannot take them all (it stopped reading: closed `overloaded`) has a prefix,
        // and the rest comes after its reconnect (`reads_since` = the newest it got).
        await switchboard.send(update.markers.map { .read(Self.state($0, badge: update.badge)) }, toDevicesOf: username, app: app.id)
        do {
            try await withdraw(update, of: username, app: app)
        } catch {
            // The read itself is recorded and every device learns it when it connects; only the lock-screen cleanup is lost.
            logger.error("queueing withdrawal pushes failed", metadata: ["user": "\(username)", "error": "\(error)"])
        }
        return update
    }

    /// A withdrawal to one device (a read's or a recall's): a background push at priority 5, expiring after
    /// `withdrawalExpirationSeconds`, its badge put in at `badgeOffset` when stored (nil: the payload is final).
    static func withdrawal(
        username: String, deviceID: String, notifier: String, deviceToken: String, topic: String, payload: String,
        badgeOffset: Int? = nil, now: Int64
    ) -> NewPushJob {
        NewPushJob(
            username: username, deviceID: deviceID, notifier: notifier, deviceToken: deviceToken, topic: topic, pushType: .background,
            priority: .considerate, expiration: now / 1000 + withdrawalExpirationSeconds, collapseID: nil, apnsID: .random(),
            payload: payload, badgeOffset: badgeOffset)
    }

    /// The read marker as a `read` frame carries it.
    static func state(_ marker: ReadMarker, badge: Int?) -> ReadState {
        ReadState(
            chatType: marker.conversation.chatType, conversation: marker.conversation.key, upTo: String(marker.upTo), seq: marker.seq,
            version: marker.version, badge: badge)
    }

    /// One background push per device that was sent an alert for a message now read and is not connected (a connected device got
    /// the `read` frame), to its current binding.
    private func withdraw(_ update: ReadUpdate, of username: String, app: AppRecord) async throws {
        guard let jobsStored, !update.pushedDevices.isEmpty, let newest = update.markers.last else { return }
        let online = try await switchboard.onlineDevices(of: [username], app: app.id)[username] ?? []
        let wanted = Set(update.pushedDevices.filter { !online.contains($0.deviceID) })
        let bindings = try await store.bindings(of: username, app: app.id)
            .filter { wanted.contains(SkippedDevice(deviceID: $0.deviceID, notifier: $0.notifier)) }
        guard !bindings.isEmpty else { return }
        let configs = Dictionary(try await store.pushConfigs(app: app.id).map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        // The payload names the conversations read most recently, not only this one: a withdrawal still waiting takes the
        // newer payload, which must not forget what the older one was to withdraw.
        let recent = try await store.readMarkers(of: username, app: app.id, after: 0, limit: WithdrawalPayload.maxReads)
        // Read now, with the markers: a read that committed meanwhile is in both.
        let badge = try await store.badge(of: username, app: app.id)
        let payload = WithdrawalPayload.json(
            badge: badge, reads: recent.map { WithdrawalPayload.Read(conversation: $0.conversation, upTo: $0.upTo) })
        let now = clock()
        let jobs = bindings.compactMap { binding -> NewPushJob? in
            guard let config = configs[binding.notifier] else { return nil }
            return Self.withdrawal(
                username: username, deviceID: binding.deviceID, notifier: binding.notifier, deviceToken: binding.deviceToken,
                topic: config.bundleID, payload: payload, now: now)
        }
        guard !jobs.isEmpty else { return }
        try await store.queueWithdrawals(
            jobs, messageID: newest.upTo, readVersion: newest.version, app: app.id, spacing: Self.withdrawalSpacing, now: now)
        jobsStored()
    }
}
