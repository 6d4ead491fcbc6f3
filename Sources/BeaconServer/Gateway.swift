import BeaconCore
import BeaconProtocol
import BeaconStorage
import Foundation
import HummingbirdWebSocket
import Logging
import NIOCore

/// The WebSocket side of Beacon: one `DeviceSession` per connected device.
struct DeviceSession {
    let app: AppRecord
    let username: String
    let deviceID: String
    let messages: MessageService
    let registry: ConnectionRegistry
    let cursors: CursorBook
    let outboxLimit: Int
    let logger: Logger

    static let maxFrameBytes = 64 * 1024
    static let fetchPage = 256

    var store: any BeaconStore { messages.store }

    /// Runs until the device disconnects, is replaced by a new connection of the same device, or is kicked.
    func run(inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter) async throws {
        let outbox = DeviceOutbox(user: UserKey(app: app.id, username: username), deviceID: deviceID, limit: outboxLimit)
        let cursor = try await cursors.cursor(of: username, device: deviceID, app: app.id)
        try await write(.welcome(username: username, deviceID: deviceID, cursor: cursor), to: outbound)
        registry.register(outbox)
        // The user is back: the badge counts from zero again.
        try await store.setBadge(of: username, app: app.id, to: 0)
        outbox.requestSync()
        defer { registry.unregister(outbox) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await runWriter(outbox: outbox, outbound: outbound, from: cursor) }
            defer { outbox.finish() }
            try await runReader(inbound: inbound, outbox: outbox)
        }
        try await cursors.flush(username: username, app: app.id)
    }

    // MARK: Reading

    private func runReader(inbound: WebSocketInboundStream, outbox: DeviceOutbox) async throws {
        let decoder = JSONDecoder()
        var acked: Int64 = 0
        for try await message in inbound.messages(maxSize: Self.maxFrameBytes) {
            guard case .text(let text) = message else {
                outbox.reply(.error(id: nil, code: BeaconError.Code.jsonParse.rawValue, description: "frames must be JSON text"))
                continue
            }
            let frame: ClientFrame
            do {
                frame = try decoder.decode(ClientFrame.self, from: Data(text.utf8))
            } catch {
                outbox.reply(.error(id: nil, code: BeaconError.Code.jsonParse.rawValue, description: "bad frame: \(describe(error))"))
                continue
            }
            switch frame {
            case .ping:
                outbox.reply(.pong)
            case .sync:
                outbox.requestSync()
            case .logout:
                // Offline from here on, before the device hears back: a message sent after its logout returns is pushed.
                registry.unregister(outbox)
                try await cursors.flush(username: username, app: app.id)
                outbox.close(reason: "logout")
            case .ack(let seq):
                guard seq > acked else { continue }
                acked = seq
                cursors.advance(username, device: deviceID, app: app.id, to: seq)
            case .send(let request):
                outbox.reply(await send(request))
            }
        }
    }

    private func send(_ request: ClientFrame.SendRequest) async -> ServerFrame {
        let outgoing = OutgoingMessage(
            from: username, chatType: request.chatType, type: request.type, body: request.body, ext: request.ext ?? [:],
            onlineOnly: request.routetype == RouteType.online, originDevice: deviceID, copyToSender: true)
        do {
            let sent = try await messages.send(outgoing, to: [request.to], app: app, enforceMembership: true)
            let message = sent[0].1
            return .sent(id: request.id, messageID: String(message.id), timestamp: message.timestamp)
        } catch {
            let failure = BeaconError(wrapping: error, logger: logger)
            return .error(id: request.id, code: failure.code.rawValue, description: failure.message)
        }
    }

    // MARK: Writing

    private func runWriter(outbox: DeviceOutbox, outbound: WebSocketOutboundWriter, from cursor: Int64) async throws {
        var delivered = cursor
        for await _ in outbox.wakeups {
            let pending = outbox.take()
            for reply in pending.replies {
                try await write(reply, to: outbound)
            }
            if let reason = pending.closeReason {
                try await write(.closing(reason: reason), to: outbound)
                try await outbound.close(.normalClosure, reason: reason)
                return
            }
            var mustFetch = pending.mustFetch
            if !mustFetch {
                for entry in pending.stored where entry.seq > delivered {
                    guard entry.seq == delivered + 1 else {
                        mustFetch = true  // a gap: an earlier append is still on its way; the store has it
                        break
                    }
                    try await deliver(entry, to: outbound)
                    delivered = entry.seq
                }
            }
            if mustFetch {
                delivered = try await fetch(after: delivered, to: outbound)
            }
            if pending.announceSynced {
                try await write(.synced(seq: delivered), to: outbound)
            }
            for message in pending.onlineOnly {
                try await write(.message(seq: nil, message: WireMessage(message)), to: outbound)
            }
        }
    }

    /// Sends everything the store holds after `seq`; returns the last sequence number sent.
    private func fetch(after seq: Int64, to outbound: WebSocketOutboundWriter) async throws -> Int64 {
        var delivered = seq
        while true {
            let page = try await store.inbox(of: username, app: app.id, after: delivered, limit: Self.fetchPage)
            for entry in page {
                try await deliver(entry, to: outbound)
                delivered = entry.seq
            }
            if page.count < Self.fetchPage { return delivered }
        }
    }

    private func deliver(_ entry: InboxEntry, to outbound: WebSocketOutboundWriter) async throws {
        // The device a message was sent from already has it.
        guard entry.originDevice != deviceID else { return }
        try await write(.message(seq: entry.seq, message: WireMessage(entry.message)), to: outbound)
    }

    private func write(_ frame: ServerFrame, to outbound: WebSocketOutboundWriter) async throws {
        let data = try JSONEncoder().encode(frame)
        try await outbound.writeTextMessage(String(decoding: data, as: UTF8.self))
    }
}

func describe(_ error: any Error) -> String {
    switch error {
    case DecodingError.keyNotFound(let key, _): "missing field '\(key.stringValue)'"
    case DecodingError.typeMismatch(_, let context), DecodingError.valueNotFound(_, let context):
        "wrong type at '\(context.codingPath.map(\.stringValue).joined(separator: "."))'"
    case DecodingError.dataCorrupted(let context):
        context.codingPath.isEmpty
            ? "malformed JSON" : "bad value at '\(context.codingPath.map(\.stringValue).joined(separator: "."))': \(context.debugDescription)"
    default: "\(error)"
    }
}

extension BeaconError {
    /// A `BeaconError` for any error: decoding errors become `json_parse`, unknown ones `internal_error` (logged).
    init(wrapping error: any Error, logger: Logger) {
        switch error {
        case let error as BeaconError: self = error
        case is DecodingError: self.init(.jsonParse, describe(error))
        default:
            logger.error("unexpected error", metadata: ["error": "\(String(reflecting: error))"])
            self.init(.internalError, "internal error")
        }
    }
}
