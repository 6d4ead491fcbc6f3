import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The system's networking: REST through `URLSession`; the WebSocket through `URLSessionWebSocketTask` on Apple
/// platforms (it wakes the radio and follows the system's VPN and proxy settings) and SwiftNIO's client elsewhere.
public struct SystemTransport: BeaconTransport {
    let urlSession: URLSession
    /// The largest frame the server may send (a message is at most 1 MiB of JSON).
    static let maxFrameSize = 1 << 20

    public init(urlSession: URLSession = .shared) {
        self.urlSession = urlSession
    }

    public func data(for request: URLRequest) async throws -> (Data, status: Int) {
        let (data, response) = try await urlSession.dataIgnoringCancellation(for: request)
        return (data, (response as? HTTPURLResponse)?.statusCode ?? 0)
    }

    public func webSocket(
        to url: URL, headers: [String: String], session: @escaping @Sendable (WebSocketConnection) async throws -> Void
    ) async throws {
        #if canImport(Darwin)
            try await URLSessionWebSocket.run(urlSession, url: url, headers: headers, session: session)
        #else
            try await NIOWebSocket.run(url: url, headers: headers, session: session)
        #endif
    }
}
