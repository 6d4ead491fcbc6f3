import BeaconCore
import BeaconProtocol
import Foundation
import Logging

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The Beacon client SDK: logs in, keeps a WebSocket open (reconnecting and syncing by itself),
/// sends messages and delivers incoming ones, each exactly once, in order.
public actor BeaconClient {
    public let options: BeaconOptions
    /// Incoming messages: live ones and, after each reconnect, everything missed while away. A stored message is
    /// acknowledged to the server only once the app's loop has finished with it (asks for the next one): messages still
    /// buffered, or being handled when the app is killed, come again at the next connection.
    public nonisolated let messages: MessageStream
    /// Connection changes.
    public nonisolated let events: AsyncStream<ConnectionEvent>
    /// Read markers of this user's conversations as they move (read on any device, this one included, each with the new
    /// badge), and after each connect those that moved while this device was away.
    public nonisolated let reads: AsyncStream<ReadState>

    /// The connection's state as it changes, the current one first. Iterate it from one task (as `events` and `reads`).
    public nonisolated let states: AsyncStream<ConnectionState>
    /// The connection's state now.
    public internal(set) var state = ConnectionState.loggedOut

    let messageSink: AsyncStream<MessageStream.Delivery>.Continuation
    let eventSink: AsyncStream<ConnectionEvent>.Continuation
    let readSink: AsyncStream<ReadState>.Continuation
    let stateSink: AsyncStream<ConnectionState>.Continuation
    /// The newest read-state version received: a connection asks for the markers changed after it.
    var readsVersion: Int64 = 0
    let logger: Logger
    var token: String?
    public internal(set) var username: String?
    /// The task that keeps a connection open (connects, reconnects), while logged in and not in the background.
    var connectionTask: Task<Void, Never>?
    /// The open connection, once the server said `welcome`.
    var connection: WebSocketConnection?
    var waitingForConnection: [CheckedContinuation<Void, any Error>] = []
    var pendingSends: [String: CheckedContinuation<Message, any Error>] = [:]
    var pendingDrafts: [String: OutgoingChatMessage] = [:]
    /// The newest stored message handed to `messages` (or known to need no delivery, as this device's own).
    var lastSeq: Int64 = 0
    /// The newest stored message the app has finished with.
    var takenSeq: Int64 = 0
    var ackedSeq: Int64 = 0
    /// Everything up to this is in `messages` or needs no delivery (the last `synced`).
    var syncedSeq: Int64 = 0
    /// Counts logins on this client: a message of an earlier session, taken after a logout, acknowledges nothing.
    private(set) var session = 0
    /// Between `welcome` and `synced`: the backlog streams in, and acks go out in batches.
    var catchingUp = false
    /// While the app works through a backlog, acks go out every this many messages.
    static let ackBatch: Int64 = 200
    /// Set when the server said this connection must not come back (kicked, replaced).
    var stopReconnecting = false
    /// The last connection ended on a frame this SDK could not read: the next waits out a growing delay.
    var endedOnUnreadableFrame = false
    /// When the open connection's last frame came (or it opened): the heartbeat measures the silence from it.
    var lastHeardFromServer = ContinuousClock.now
    /// The wait before the next reconnect attempt, which a network change cuts short.
    var reconnectWait: Task<Void, Never>?
    /// The app is in the background: no connection until it comes back.
    var inBackground = false
    /// Closes the connection once the background grace has passed.
    var backgroundClose: Task<Void, Never>?
    /// Counts connection loops: a loop whose generation is over (replaced, stopped) changes nothing any more.
    var generation = 0

    public init(options: BeaconOptions, logger: Logger = Logger(label: "beacon.client")) {
        self.options = options
        self.logger = logger
        let (deliveries, messageSink) = AsyncStream.makeStream(of: MessageStream.Delivery.self)
        self.messageSink = messageSink
        (events, eventSink) = AsyncStream.makeStream(of: ConnectionEvent.self)
        (reads, readSink) = AsyncStream.makeStream(of: ReadState.self)
        (states, stateSink) = AsyncStream.makeStream(of: ConnectionState.self, bufferingPolicy: .bufferingNewest(1))
        stateSink.yield(.loggedOut)
        messages = MessageStream(deliveries: deliveries)
        messages.owner.attach(self)
    }

    // MARK: Session

    /// Logs in with a username and password, then connects.
    public func login(username: String, password: String) async throws {
        try await login(with: .password(username: username, password: password), username: username)
    }

    /// Logs in with a Tencent UserSig that the app's backend made for `userID` (an app moving from Tencent Cloud IM keeps
    /// making them, and Beacon keeps no password), then connects.
    public func login(userID: String, userSig: String) async throws {
        try await login(with: .userSig(username: userID, userSig: userSig), username: userID)
    }

    private func login(with grant: TokenRequest, username: String) async throws {
        let response: TokenResponse = try await post("token", body: grant)
        try await login(token: response.accessToken, username: username)
    }

    /// Logs in with a user token obtained elsewhere (e.g. from the app's own backend), then connects, then binds the
    /// installation's push tokens to the user and sends the options' time zone if the server holds another (a failure
    /// there is the event `installationNotAnnounced`, not the login's). Throws the server's refusal (401 `unauthorized`)
    /// for a bad, expired or revoked token, and `timedOut` when no connection could be made within
    /// `BeaconOptions.loginTimeout`.
    public func login(token: String, username: String) async throws {
        guard options.webSocketURL(readsSince: 0) != nil else { throw BeaconClientError.invalidServerURL }
        await stopConnection()?.value
        startSession()
        self.token = token
        self.username = username
        let user: JSONValue
        do {
            user = try await request("GET", "users/\(username)", body: Optional<JSONValue>.none)
        } catch {
            self.token = nil
            self.username = nil
            throw error
        }
        startConnection()
        // The wait for `welcome` is a continuation the connection loop resumes; the deadline fails it from outside.
        let deadline = Task { [weak self, timeout = options.loginTimeout.bounded(below: .zero)] in
            guard (try? await Task.sleep(for: timeout)) != nil else { return }  // cancelled: connected in time
            await self?.failWaitingForConnection(with: .timedOut)
        }
        defer { deadline.cancel() }
        do {
            try await waitUntilConnected()
        } catch {
            await logout()
            throw error
        }
        await announceInstallation(to: username, serverTimeZone: user["entities"]?[0]?["timezone"]?.stringValue)
    }

    /// Logs out; with `unbindDeviceToken`, this device stops receiving pushes for the user (otherwise, as with
    /// Easemob, pushes keep coming while the token and certificate stay valid).
    public func logout(unbindDeviceToken: Bool) async throws {
        if unbindDeviceToken, let username {
            let _: JSONValue = try await request(
                "PUT", "users/\(username)/push/binding",
                body: PushBindingRequest(deviceID: options.deviceID, deviceToken: "", notifierName: ""))
        }
        await logout()
    }

    /// Disconnects and forgets the token. Messages arriving meanwhile wait on the server.
    public func logout() async {
        token = nil
        let task = connectionTask
        backgroundClose?.cancel()
        if let connection {
            // Tell the server first and wait for its answer (bounded), so that it treats this device as offline
            // by the time `logout` returns.
            stopReconnecting = true
            await withTaskGroup(of: Void.self) { group in
                // Waiting for another task's end cannot be cancelled: when the 5 s pass first, the connection itself is
                // cancelled, so that this child (and the group, which waits for it) ends too.
                group.addTask {
                    await withTaskCancellationHandler {
                        await task?.value
                    } onCancel: {
                        task?.cancel()
                    }
                }
                group.addTask { try? await Task.sleep(for: .seconds(5)) }
                try? await connection.send(ClientFrame.logout.json)
                await group.next()
                group.cancelAll()
            }
        }
        await stopConnection()?.value
        failPending(with: BeaconClientError.notLoggedIn)
        username = nil
        startSession()
        enter(.loggedOut)
    }

    /// The next login may be another user (or this one on another inbox): its positions start from its `welcome`, and
    /// messages of the session before acknowledge nothing.
    private func startSession() {
        session += 1
        (lastSeq, takenSeq, ackedSeq, syncedSeq) = (0, 0, 0, 0)
        readsVersion = 0
    }

    /// Sends a message; returns it as the server stored it (id, timestamp).
    @discardableResult
    public func send(_ draft: OutgoingChatMessage) async throws -> Message {
        try await waitUntilConnected()
        // Unique per device for the server's 24 h of send receipts: a counter would repeat after a relaunch.
        let id = UUID().uuidString.lowercased()
        let request = ClientFrame.SendRequest(
            id: id, to: draft.to, chatType: draft.chatType, type: draft.content.type, body: draft.content.body,
            ext: draft.sentExt.isEmpty ? nil : draft.sentExt, routetype: draft.onlineOnly ? RouteType.online : nil)
        pendingDrafts[id] = draft
        return try await withCheckedThrowingContinuation { continuation in
            pendingSends[id] = continuation
            Task { await self.write(.send(request), failing: id) }
        }
    }

    // MARK: REST

    /// POSTs `body` to `/{org}/{app}/{path}` with the user token (if any) and decodes the answer.
    func post<Body: Encodable & Sendable, Answer: Decodable>(_ path: String, body: Body) async throws -> Answer {
        try await request("POST", path, body: body)
    }

    func request<Body: Encodable & Sendable, Answer: Decodable>(_ method: String, _ path: String, body: Body?) async throws -> Answer {
        var request = URLRequest(url: options.serverURL.appendingPathComponent(options.appPath).appendingPathComponent(path))
        request.httpMethod = method
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        if let token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        if let body { request.httpBody = try JSONEncoder().encode(body) }
        let (data, status) = try await options.transport.data(for: request)
        guard (200..<300).contains(status) else {
            if let error = try? JSONDecoder().decode(ErrorBody.self, from: data) {
                throw BeaconClientError.server(status: status, code: error.error, description: error.errorDescription)
            }
            throw BeaconClientError.badResponse("HTTP \(status)")
        }
        do {
            return try JSONDecoder().decode(Answer.self, from: data)
        } catch {
            throw BeaconClientError.badResponse("\(error)")
        }
    }
}
