#if canImport(Darwin)
    import Foundation

    /// The WebSocket on Apple platforms: `URLSessionWebSocketTask`.
    enum URLSessionWebSocket {
        static func run(
            _ urlSession: URLSession, url: URL, headers: [String: String],
            session: @escaping @Sendable (WebSocketConnection) async throws -> Void
        ) async throws {
            var request = URLRequest(url: url)
            for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
            let task = urlSession.webSocketTask(with: request)
            task.maximumMessageSize = SystemTransport.maxFrameSize
            task.resume()
            // Cancelling the task fails a pending `receive()`, which ends the reader below.
            defer { task.cancel(with: .normalClosure, reason: nil) }
            let (frames, sink) = AsyncThrowingStream.makeStream(of: String.self)
            let reader = Task {
                do {
                    while true {
                        switch try await task.receive() {
                        case .string(let text): sink.yield(text)
                        case .data: continue  // Beacon's server sends text frames only
                        @unknown default: continue
                        }
                    }
                } catch {
                    sink.finish(throwing: error)
                }
            }
            defer { reader.cancel() }
            try await session(WebSocketConnection(frames: frames) { try await task.send(.string($0)) })
        }
    }
#endif
