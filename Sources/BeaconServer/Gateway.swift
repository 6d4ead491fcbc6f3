import BeaconCore
import BeaconProtocol
import BeaconStorage
import Foundation
import Logging
import NIOCore
import Synchronization

/// A moment a session remembers, shared by its copies.
final class Checkpoint: Sendable {
    private let instant = Mutex(ContinuousClock.now)

    var value: ContinuousClock.Instant {
        get { instant.withLock { $0 } }
        set { instant.withLock { $0 = newValue } }
    }
}

/// The WebSocket side of Beacon: what a connected device's session does (`DeviceConnection` runs it) — its greeting, the
/// frames it sends, what is written to it, and its end.
struct DeviceSession {
    let app: AppRecord
    /// What the connection's token says of its user.
    let credential: SessionCredential
    let deviceID: String
    /// The read-state version the device has seen (`reads_since`): markers changed after it are sent after `welcome`.
    let readsSince: Int64
    let messages: MessageService
    let reads: ReadService
    let switchboard: Switchboard
    let cursors: CursorBook
    let outboxLimit: Int
    /// `BeaconHooks.afterDeviceRegistered`.
    let afterRegistered: (@Sendable (String, String) async throws -> Void)?
    /// Authenticates the connection's token again (throws when it no longer holds).
    let reauthenticate: @Sendable () async throws -> Void
    /// When the token was last found to hold by the session itself (`stillSignedIn`).
    let authenticatedAt = Checkpoint()
    /// Checks the token with the node's other busy sessions.
    let audit: SessionAudit
    /// A frame that writes for the user (send, read, badge), and a delivery, re-check the token when it was last checked
    /// longer ago.
    static let reauthenticateAfter: Duration = .seconds(1)
    /// The close reason of a session whose user was deleted or signed out, whose token no longer holds, or whose device
    /// the app disconnected.
    static let kicked = "kicked"
    let logger: Logger

    static let maxFrameBytes = 64 * 1024
    /// How long the end of a session (going offline, cursors, pushes decided again) may take before the session ends anyway.
    static let cleanUpTimeout: Duration = .seconds(10)
    static let fetchPage = 256

    var store: any BeaconStore { messages.store }
    var username: String { credential.username }
    /// The user the connection's token was issued to.
    var user: UserIdentity { UserIdentity(username: credential.username, uuid: credential.uuid) }

    /// The session begins (counted until `ended`).
    func began() {
        switchboard.local.sessionBegan()
        messages.metrics.connects.increment()
        messages.metrics.connectedDevices.increment()
    }

    /// The device goes away (`wentAway`), bounded: a store that stopped answering must not hold the session, and a
    /// graceful shutdown, for good. What is cut short is cancelled: cursors not written stay pending for the next flush,
    /// and pushes not decided again are decided at the next start (`PushRouter.redecideOfflineSkips`).
    func leave(_ outbox: DeviceOutbox) async {
        audit.forget(ObjectIdentifier(outbox))
        do {
            try await withTimeout(Self.cleanUpTimeout) { await wentAway(outbox) }
        } catch {
            logger.error("the end of a device session did not finish in time", metadata: ["error": "\(error)"])
        }
    }

    /// The session has ended, its device gone away.
    func ended() {
        switchboard.local.sessionEnded()
        messages.metrics.disconnects.increment()
        messages.metrics.connectedDevices.decrement()
    }

    /// After the connection: offline unless replaced, last seen now, pushes decided again for what it never acknowledged.
    private func wentAway(_ outbox: DeviceOutbox) async {
        let wentOffline = await switchboard.unregister(outbox)
        do {
            // Seen until now (the device's last-seen time), whether or not it acknowledged anything since.
            cursors.advance(user, device: deviceID, app: app.id, to: 0)
            try await cursors.flush(username: username, app: app.id)
        } catch {
            logger.error("writing the cursor of a disconnected device failed", metadata: ["error": "\(error)"])
        }
        // Replaced by a new connection of the same device: it is still online.
        if wentOffline { await messages.router?.deviceWentOffline(username, app: app) }
    }

    /// The start of a registered session: `welcome` with the device's cursor, the read markers it missed, and a sync
    /// requested. Nil when the device was kicked meanwhile (told so).
    func greet(outbox: DeviceOutbox, socket: DeviceSocket) async throws -> Int64? {
        try await afterRegistered?(username, deviceID)
        // A kick or a deletion between the upgrade's authentication and the registration found no session to close.
        do {
            try await reauthenticate()
        } catch {
            try await write(.closing(reason: Self.kicked), to: socket)
            return nil
        }
        audit.watch(ObjectIdentifier(outbox), credential) { outbox.close(reason: Self.kicked) }
        let cursor = try await cursors.cursor(of: user, device: deviceID, app: app.id)
        // Seen now: the cursor of a device that comes back is kept through retention.
        cursors.advance(user, device: deviceID, app: app.id, to: cursor)
        try await write(.welcome(username: username, deviceID: deviceID, cursor: cursor), to: socket)
        // Read after registering: a marker that moves from here on also comes live (a repeat is harmless, versions tell).
        for marker in try await store.readMarkers(of: username, app: app.id, after: max(readsSince, 0), limit: ReadService.markersOnConnect)
        {
            try await write(.read(ReadService.state(marker, badge: nil)), to: socket)
        }
        outbox.requestSync()
        return cursor
    }

    // MARK: Reading

    /// One frame from the device; `acked` is the highest sequence number it acknowledged on this connection so far.
    /// Returns that number after this frame. `onlyAcks`: the session is ending, and only an `ack` is handled (nothing
    /// else is answered).
    func handle(_ message: DeviceMessage, outbox: DeviceOutbox, acked: Int64, onlyAcks: Bool = false) async throws -> Int64 {
        guard let frame = Self.frame(of: message, refusalsTo: onlyAcks ? nil : { answer($0, on: outbox) }) else { return acked }
        if onlyAcks {
            guard case .ack = frame else { return acked }
        }
        switch frame {
        case .ping:
            answer(.pong, on: outbox)
        case .sync:
            outbox.requestSync(fromAcknowledged: true)
        case .logout:
            // Offline from here on, before the device hears back: a message sent after its logout returns is pushed.
            if await switchboard.unregister(outbox) {
                try await cursors.flush(username: username, app: app.id)
                await messages.router?.deviceWentOffline(username, app: app)
            }
            outbox.close(reason: "logout")
        case .ack(let seq):
            guard outbox.mayAcknowledge(seq) else {
                // Acknowledging the future would hide messages stored later from this device.
                answer(
                    .error(id: nil, code: BeaconError.Code.illegalArgument.rawValue, description: "ack beyond the last message sent"),
                    on: outbox)
                return acked
            }
            guard seq > acked else { return acked }
            cursors.advance(user, device: deviceID, app: app.id, to: seq)
            return seq
        case .send, .read, .readAll, .badge:
            guard await stillSignedIn(outbox) else { return acked }
            try await write(frame, on: outbox)
        }
        return acked
    }

    /// The frame a message holds; nil when it holds none, after `refuse` was given the error frame that says why.
    private static func frame(of message: DeviceMessage, refusalsTo refuse: ((ServerFrame) -> Void)?) -> ClientFrame? {
        guard case .text(let text) = message else {
            refuse?(.error(id: nil, code: BeaconError.Code.jsonParse.rawValue, description: "frames must be JSON text"))
            return nil
        }
        do {
            let value = try JSONReader.value(of: text)
            do {
                return try ClientFrame(jsonValue: value)
            } catch {
                // The `id` of a send that does not match the protocol still comes back, so that the client can fail that send.
                refuse?(
                    .error(
                        id: value.objectValue?["id"]?.stringValue, code: error.code.rawValue, description: "bad frame: \(error.message)"))
                return nil
            }
        } catch {
            // JSONDecoder checks only the text's shape before it decodes the one field asked for, so a send whose body
            // alone is malformed (a lone surrogate escape, a number beyond a double) still gets its `id` back.
            let id = (try? JSONDecoder().decode(FrameReference.self, from: Data(text.utf8)))?.id
            refuse?(.error(id: id, code: BeaconError.Code.jsonParse.rawValue, description: "bad frame: \(error)"))
            return nil
        }
    }

    /// Whether the session may still act and read for its user: not told to close (a kick on this node, the user's
    /// deletion included), and its token still holds — checked against the store at most `reauthenticateAfter` ago (by
    /// the session, or by a round of the node's `SessionAudit` that began then), so that a session of a deleted user on
    /// another node, whose kick is late, acts for or reads of a new user of the name that long at most.
    /// `whileClosing`: a connection that is closing is checked too (false then means its token no longer holds).
    private func stillSignedIn(_ outbox: DeviceOutbox, whileClosing: Bool = false) async -> Bool {
        guard whileClosing || !outbox.isClosing else { return false }
        let ownCheck = authenticatedAt.value
        let checked = max(ownCheck, audit.verifiedAt(ObjectIdentifier(outbox)) ?? ownCheck)
        if checked.duration(to: .now) <= Self.reauthenticateAfter, messages.now() < credential.expiresAt { return true }
        // Dated before the read, as the audit's marks are.
        let began = ContinuousClock.now
        do {
            try await reauthenticate()
            authenticatedAt.value = began
            return true
        } catch {
            outbox.close(reason: Self.kicked)
            return false
        }
    }

    /// A frame that writes for the user.
    private func write(_ frame: ClientFrame, on outbox: DeviceOutbox) async throws {
        switch frame {
        case .send(let request):
            answer(await send(request), on: outbox)
        case .read(let chatType, let conversation, let upTo):
            await markRead(ConversationID(chatType: chatType, key: conversation), upTo: upTo, on: outbox)
        case .readAll:
            await markRead(nil, upTo: nil, on: outbox)
        case .badge(let count):
            do {
                try await store.reportBadge(of: username, app: app.id, value: count)
            } catch {
                answer(errorFrame(for: error, id: nil), on: outbox)
            }
        case .ping, .sync, .logout, .ack:
            break
        }
    }

    /// Queues an answer; a device that stopped reading its answers is disconnected rather than left without one
    /// (it reconnects, and a retried `send` with the same `id` gets its `sent`).
    private func answer(_ frame: ServerFrame, on outbox: DeviceOutbox) {
        if !outbox.reply(frame) { outbox.close(reason: "overloaded") }
    }

    /// Records a read; every device of the user, this one included, gets the `read` frames (an error comes back instead).
    private func markRead(_ conversation: ConversationID?, upTo: String?, on outbox: DeviceOutbox) async {
        do {
            let upToID = try upTo.map { text throws(BeaconError) in try Validation.messageID(text) }
            _ = try await reads.markRead(username, app: app, conversation: conversation, upTo: upToID, readingDevice: deviceID)
        } catch {
            answer(errorFrame(for: error, id: nil), on: outbox)
        }
    }

    private func send(_ request: ClientFrame.SendRequest) async -> ServerFrame {
        guard (1...128).contains(request.id.utf8.count) else {
            return .error(id: request.id, code: BeaconError.Code.illegalArgument.rawValue, description: "id must be 1-128 bytes")
        }
        let outgoing = OutgoingMessage(
            from: username, chatType: request.chatType, type: request.type, body: request.body, ext: request.ext ?? [:],
            onlineOnly: request.routetype == RouteType.online, originDevice: deviceID, copyToSender: true)
        do {
            // A retried send (same `id` from this device) is answered with the first one's message.
            let receipt = SendReceipt(
                scope: SendReceipt.deviceScope(user: username, device: deviceID), reference: request.id, now: messages.now())
            let sent = try await messages.send(outgoing, to: [request.to], app: app, enforceMembership: true, receipt: receipt)
            guard let message = sent.first else { throw BeaconError(.internalError, "a send stored no message") }
            return .sent(id: request.id, messageID: String(message.id), timestamp: message.timestamp)
        } catch {
            return errorFrame(for: error, id: request.id)
        }
    }

    /// The `error` frame for a failure (unexpected ones are logged and answered as `internal_error`).
    private func errorFrame(for error: any Error, id: String?) -> ServerFrame {
        let failure = BeaconError(wrapping: error, logger: logger)
        return .error(id: id, code: failure.code.rawValue, description: failure.message)
    }

    // MARK: Writing

    /// What a drain of the outbox did.
    enum Drained {
        /// Wrote up to this sequence number.
        case delivered(Int64)
        /// Told the device that the connection closes, and why (the session stops).
        case closing(String)
    }

    /// Writes what the outbox holds: answers, new messages (or what the store has after `delivered`, when there is a gap
    /// or a sync was asked for), online-only messages; or, when the connection is to close, `closing`.
    func drain(_ outbox: DeviceOutbox, _ socket: DeviceSocket, delivered: Int64) async throws -> Drained {
        var delivered = delivered
        let pending = outbox.take()
        // Messages and frames about the user go only to a session whose token still holds (checked as for a writing
        // frame): a session of a deleted user whose kick is late reads nothing of a new user of the name, from the store
        // or live, nor its read state or badge.
        // A connection kicked on this node (its user deleted or signed out, or the device disconnected by the app), even
        // after it was closing for another reason, gets none of it either; one closing only for another reason (replaced,
        // logout, overloaded, shutdown) still gets what was queued for its user (an overloaded device keeps a prefix of its
        // read markers), its token checked all the same.
        var revoked = outbox.wasKicked  // sticky: a kick before `take` included
        if !revoked, pending.readsForTheUser {
            revoked = !(await stillSignedIn(outbox, whileClosing: true)) || outbox.wasKicked  // or kicked meanwhile
        }
        let reason = pending.closeReason ?? (revoked ? outbox.closeReason ?? Self.kicked : nil)
        for reply in pending.replies where !(revoked && reply.aboutTheUser) {
            try await write(reply.frame, to: socket)
        }
        if let reason {
            try await write(.closing(reason: reason), to: socket)
            return .closing(reason)
        }
        var mustFetch = pending.mustFetch
        if !mustFetch {
            for entry in pending.stored where entry.seq > delivered {
                guard entry.seq == delivered + 1 else {
                    mustFetch = true  // a gap: an earlier append is still on its way; the store has it
                    break
                }
                try await deliver(entry, to: outbox, socket)
                delivered = entry.seq
            }
        }
        if pending.fromAcknowledged {
            // The device asked to sync: everything after what it acknowledged comes again.
            delivered = try await cursors.cursor(of: user, device: deviceID, app: app.id)
        }
        var fetched = 0
        if mustFetch {
            (delivered, fetched) = try await fetch(after: delivered, to: outbox, socket)
        }
        if pending.announceSynced {
            messages.metrics.syncCatchUp.record(fetched)
            try await write(.synced(seq: delivered), to: socket)
        }
        for message in pending.onlineOnly {
            try await write(.message(seq: nil, message: WireMessage(message)), to: socket)
        }
        return .delivered(delivered)
    }

    /// Sends everything the store holds after `seq`; returns the last sequence number sent and how many messages were
    /// written.
    private func fetch(after seq: Int64, to outbox: DeviceOutbox, _ socket: DeviceSocket) async throws -> (Int64, Int) {
        var delivered = seq
        var written = 0
        while true {
            let page = try await store.inbox(of: username, app: app.id, after: delivered, limit: Self.fetchPage)
            for entry in page {
                if try await deliver(entry, to: outbox, socket) { written += 1 }
                delivered = entry.seq
            }
            if page.count < Self.fetchPage { return (delivered, written) }
        }
    }

    /// Writes the entry to the device unless it came from this device; returns whether it was written.
    @discardableResult
    private func deliver(_ entry: InboxEntry, to outbox: DeviceOutbox, _ socket: DeviceSocket) async throws -> Bool {
        outbox.noteSending(through: entry.seq)
        // The device a message was sent from already has it.
        guard entry.originDevice != deviceID else { return false }
        try await write(Self.frame(of: entry), to: socket)
        return true
    }

    /// How a device gets an inbox entry: a message, or the notice that one was recalled.
    static func frame(of entry: InboxEntry) -> ServerFrame {
        if let notice = entry.message.recall {
            return .recall(seq: entry.seq, noticeID: entry.message.id, notice: notice)
        }
        return .message(seq: entry.seq, message: WireMessage(entry.message))
    }

    func write(_ frame: ServerFrame, to socket: DeviceSocket) async throws {
        try await socket.writeText(frame.json)
    }
}

/// The `id` of a device frame that could not be read as a whole.
private struct FrameReference: Decodable {
    var id: String?
}
