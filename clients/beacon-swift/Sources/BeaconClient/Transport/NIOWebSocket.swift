#if !canImport(Darwin)
    import Foundation
    import HTTPTypes
    import Logging
    import WSClient

    /// The WebSocket on Linux: swift-websocket's client (SwiftNIO), its messages reassembled up to the frame limit.
    enum NIOWebSocket {
        static func run(
            url: URL, headers: [String: String], session: @escaping @Sendable (WebSocketConnection) async throws -> Void
        ) async throws {
            var fields = HTTPFields()
            for (name, value) in headers {
                guard let name = HTTPField.Name(name) else { continue }
                fields[name] = value
            }
            // A short close handshake: the connection is dropped when the server does not answer it (half-open).
            let configuration = WebSocketClientConfiguration(
                maxFrameSize: SystemTransport.maxFrameSize, additionalHeaders: fields, closeTimeout: .seconds(1))
            try await WebSocketClient.connect(
                url: url.absoluteString, configuration: configuration, logger: Logger(label: "beacon.client.websocket")
            ) { inbound, outbound, _ in
                let (frames, sink) = AsyncThrowingStream.makeStream(of: String.self)
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        do {
                            for try await message in inbound.messages(maxSize: SystemTransport.maxFrameSize) {
                                if case .text(let text) = message { sink.yield(text) }
                            }
                            sink.finish()
                        } catch {
                            sink.finish(throwing: error)
                        }
                    }
                    try await session(WebSocketConnection(frames: frames) { try await outbound.writeTextMessage($0) })
                    group.cancelAll()
                }
            }
        }
    }
#endif
