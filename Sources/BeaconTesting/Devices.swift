import BeaconClient
import BeaconCore
import BeaconProtocol
import Foundation
import HummingbirdWSClient
import Logging

/// An SDK client whose incoming messages and events are recorded for assertions.
public struct TestDevice: Sendable {
    public let client: BeaconClient
    public let messages: Collector<Message>
    public let events: Collector<ConnectionEvent>
    public let reads: Collector<ReadState>

    public init(client: BeaconClient) {
        self.client = client
        messages = Collector(client.messages)
        events = Collector(client.events)
        reads = Collector(client.reads)
    }

    public func send(to: String, _ text: String, chatType: ChatType = .chat, ext: [String: JSONValue] = [:], onlineOnly: Bool = false)
        async throws -> Message
    {
        try await client.send(OutgoingChatMessage(to: to, chatType: chatType, content: .text(text), ext: ext, onlineOnly: onlineOnly))
    }

    /// The texts received until (and without) `sentinel`, which must arrive.
    public func texts(until sentinel: String) async throws -> [String] {
        let all = try await messages.wait { $0.contains { $0.content == .text(sentinel) } }
        let texts = all.compactMap { message -> String? in
            if case .text(let text) = message.content { return text }
            return nil
        }
        return Array(texts.prefix { $0 != sentinel })
    }
}

extension Collector where Element == ConnectionEvent {
    /// Waits for the `n`th `.synced` event.
    public func synced(_ n: Int = 1) async throws {
        try await wait { $0.filter { if case .synced = $0 { true } else { false } }.count >= n }
    }
}

/// A device speaking the WebSocket protocol frame by frame (no SDK: it acknowledges nothing unless told to).
public final class RawDevice: Sendable {
    public let frames: Collector<ServerFrame>
    private let outgoing: AsyncStream<String>.Continuation
    private let task: Task<Void, any Error>

    /// `query` is added to the upgrade URL (e.g. `&reads_since=3`).
    public init(beacon: TestBeacon, token: String, device: String, query: String = "") {
        let (frames, frameSink) = AsyncStream.makeStream(of: ServerFrame.self)
        let (outgoing, outgoingSink) = AsyncStream.makeStream(of: String.self)
        self.frames = Collector(frames)
        self.outgoing = outgoingSink
        let url = "ws://127.0.0.1:\(beacon.port)/\(beacon.app.org)/\(beacon.app.name)/ws?device_id=\(device)&access_token=\(token)\(query)"
        task = Task {
            defer { frameSink.finish() }
            try await WebSocketClient.connect(url: url, logger: Logger(label: "test")) { inbound, outbound, _ in
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        for await text in outgoing { try await outbound.write(.text(text)) }
                        try await outbound.close(.normalClosure, reason: nil)
                    }
                    for try await message in inbound.messages(maxSize: 1 << 20) {
                        guard case .text(let text) = message, let frame = try? JSONDecoder().decode(ServerFrame.self, from: Data(text.utf8))
                        else {
                            continue
                        }
                        frameSink.yield(frame)
                    }
                    group.cancelAll()
                }
            }
        }
    }

    /// Connects `username`'s device and waits for `synced`.
    public static func connect(_ beacon: TestBeacon, _ username: String, device: String, query: String = "") async throws -> RawDevice {
        let raw = RawDevice(beacon: beacon, token: try await beacon.userToken(username), device: device, query: query)
        try await raw.frames.wait { $0.contains { if case .synced = $0 { true } else { false } } }
        return raw
    }

    public func send(_ text: String) {
        outgoing.yield(text)
    }

    /// Closes the connection (a clean close) and waits until it is gone: at most 30 s, after which the connection is
    /// cancelled and `TestFailure` thrown (a connection that does not end is a bug to see, not a run to hang; seen once in
    /// CI). The server may take up to 20 s to end a failed session: 10 s for its clean-up, 10 s for the close handshake.
    public func close() async throws {
        outgoing.finish()
        // Waiting for another task cannot be cancelled, and a connection may ignore cancellation: the first of the two
        // ends the wait, whatever the other does.
        let (ended, endedSink) = AsyncStream.makeStream(of: Bool.self)
        let waiter = Task { [task] in
            _ = try? await task.value
            endedSink.yield(true)
        }
        let timer = Task {
            guard (try? await Task.sleep(for: .seconds(30))) != nil else { return }
            endedSink.yield(false)
        }
        // Nil: the caller was cancelled, which is not the connection's fault.
        guard let inTime = await ended.first(where: { _ in true }) else {
            timer.cancel()
            return
        }
        timer.cancel()
        if !inTime {
            task.cancel()
            waiter.cancel()
            throw TestFailure("the connection did not end within 30 s of its close; frames received: \(frames.items)")
        }
    }

    /// The stored messages received, by `seq`.
    public var stored: [(seq: Int64, text: String?)] { Self.stored(in: frames.items) }

    /// The stored messages among `frames`.
    public static func stored(in frames: [ServerFrame]) -> [(seq: Int64, text: String?)] {
        frames.compactMap { frame in
            if case .message(let seq?, let message) = frame { return (seq, message.body["msg"]?.stringValue) }
            return nil
        }
    }
}
