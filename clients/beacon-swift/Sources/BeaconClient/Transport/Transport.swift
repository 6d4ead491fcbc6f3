import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// How a `BeaconClient` reaches its server: REST requests and one WebSocket at a time. `SystemTransport` is the real
/// one; tests put a scripted one in `BeaconOptions.transport` to drop, stall or slow the server down at will.
public protocol BeaconTransport: Sendable {
    /// Performs a REST request; the answer's body and status.
    func data(for request: URLRequest) async throws -> (Data, status: Int)

    /// Opens a WebSocket to `url` with `headers` and runs `session` on it. Returns (after closing the connection) when
    /// `session` returns; throws when the connection cannot be made or fails, which `session` sees as its frames
    /// ending with the error. Cancelling the calling task closes the connection.
    func webSocket(
        to url: URL, headers: [String: String], session: @escaping @Sendable (WebSocketConnection) async throws -> Void
    ) async throws
}

/// One open WebSocket, as `BeaconTransport.webSocket` hands it to its session.
public struct WebSocketConnection: Sendable {
    /// The server's text frames in order; it ends when the server closes the connection, and throws when it fails.
    public var frames: AsyncThrowingStream<String, any Error>
    /// Sends one text frame.
    public var send: @Sendable (String) async throws -> Void

    public init(frames: AsyncThrowingStream<String, any Error>, send: @escaping @Sendable (String) async throws -> Void) {
        self.frames = frames
        self.send = send
    }
}
