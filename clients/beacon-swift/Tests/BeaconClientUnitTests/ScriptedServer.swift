import BeaconProtocol
import Foundation

@testable import BeaconClient

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// A server played by the test, as `BeaconOptions.transport`: REST requests are recorded and answered by `answer`;
/// each WebSocket the client opens arrives in `connections` for the test to drive (welcome, frames, drop, silence).
final class ScriptedServer: BeaconTransport {
    /// The REST requests so far: method and path.
    var requests: [String] { recorded.withLock { $0 } }
    /// The WebSockets the client opened, in order.
    let connections: AsyncStream<ScriptedConnection>
    private let connectionSink: AsyncStream<ScriptedConnection>.Continuation
    private let recorded = Locked<[String]>([])
    private let answer: @Sendable (_ method: String, _ path: String) -> (String, Int)

    /// `answer` gives each REST request's body and status; by default the user `GET` a login makes, and `{}` to the rest.
    init(answer: @escaping @Sendable (_ method: String, _ path: String) -> (String, Int) = ScriptedServer.defaultAnswer) {
        self.answer = answer
        (connections, connectionSink) = AsyncStream.makeStream(of: ScriptedConnection.self)
    }

    static func defaultAnswer(method: String, path: String) -> (String, Int) {
        if method == "GET", path.contains("/users/") { return (#"{"entities":[{"username":"ann","timezone":"UTC"}]}"#, 200) }
        if path.hasSuffix("/push/badge") { return (#"{"data":{"badge":0}}"#, 200) }
        return ("{}", 200)
    }

    func data(for request: URLRequest) async throws -> (Data, status: Int) {
        let method = request.httpMethod ?? "GET"
        let path = request.url?.path ?? ""
        recorded.withLock { $0.append("\(method) \(path)") }
        let (body, status) = answer(method, path)
        return (Data(body.utf8), status)
    }

    func webSocket(
        to url: URL, headers: [String: String], session: @escaping @Sendable (WebSocketConnection) async throws -> Void
    ) async throws {
        let connection = ScriptedConnection(url: url, headers: headers)
        connectionSink.yield(connection)
        defer { connection.closedByClient() }
        try await session(WebSocketConnection(frames: connection.toClient) { connection.received($0) })
    }
}

/// One WebSocket of a `ScriptedServer`.
final class ScriptedConnection: Sendable {
    let url: URL
    let headers: [String: String]
    /// What the client sent, decoded.
    let fromClient: AsyncStream<ClientFrame>
    /// Ends when the client is done with the connection (its session returned).
    let closed: AsyncStream<Void>
    let toClient: AsyncThrowingStream<String, any Error>
    private let toClientSink: AsyncThrowingStream<String, any Error>.Continuation
    private let fromClientSink: AsyncStream<ClientFrame>.Continuation
    private let closedSink: AsyncStream<Void>.Continuation

    init(url: URL, headers: [String: String]) {
        self.url = url
        self.headers = headers
        (toClient, toClientSink) = AsyncThrowingStream.makeStream(of: String.self)
        (fromClient, fromClientSink) = AsyncStream.makeStream(of: ClientFrame.self)
        (closed, closedSink) = AsyncStream.makeStream(of: Void.self)
    }

    /// Sends a frame to the client.
    func send(_ frame: ServerFrame) {
        toClientSink.yield(frame.json)
    }

    /// Sends raw text to the client.
    func send(text: String) {
        toClientSink.yield(text)
    }

    /// Welcomes the client and says it has everything stored up to `cursor`.
    func welcome(_ username: String = "ann", cursor: Int64 = 0) {
        send(.welcome(username: username, deviceID: "phone", cursor: cursor))
        send(.synced(seq: cursor))
    }

    /// The network fails under the connection.
    func drop() {
        toClientSink.finish(throwing: URLError(.networkConnectionLost))
    }

    /// The server closes the connection cleanly.
    func close() {
        toClientSink.finish()
    }

    fileprivate func received(_ text: String) {
        guard let frame = try? ClientFrame(json: text) else { return }
        fromClientSink.yield(frame)
    }

    fileprivate func closedByClient() {
        fromClientSink.finish()
        closedSink.finish()
    }

    /// The query item `name` of the connection's URL.
    func query(_ name: String) -> String? {
        URLComponents(url: url, resolvingAgainstBaseURL: false)?.queryItems?.first { $0.name == name }?.value
    }
}

struct TimedOut: Error, CustomStringConvertible {
    let what: String
    var description: String { "timed out waiting for \(what)" }
}

/// The next element of `iterator`, or `TimedOut` after `limit`.
func next<Element: Sendable>(
    _ iterator: inout AsyncStream<Element>.Iterator, _ what: String, within limit: Duration = .seconds(10)
) async throws -> Element {
    let box = UnsafeIteratorBox(iterator)
    defer { iterator = box.iterator }
    return try await withThrowingTaskGroup(of: Element?.self) { group in
        group.addTask { await box.next() }
        group.addTask {
            try await Task.sleep(for: limit)
            throw TimedOut(what: what)
        }
        defer { group.cancelAll() }
        guard let element = try await group.next() ?? nil else { throw TimedOut(what: "\(what) (the stream ended)") }
        return element
    }
}

/// Moves an iterator into a child task and back: the caller waits for the group, so one task at a time uses it.
private final class UnsafeIteratorBox<Element: Sendable>: @unchecked Sendable {
    var iterator: AsyncStream<Element>.Iterator
    init(_ iterator: AsyncStream<Element>.Iterator) { self.iterator = iterator }
    func next() async -> Element? { await iterator.next() }
}
