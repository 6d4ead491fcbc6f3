import BeaconCore
import BeaconProtocol
import Foundation
import HTTPTypes
import HummingbirdWSClient
import Logging
import Synchronization

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

    private let messageSink: AsyncStream<MessageStream.Delivery>.Continuation
    private let eventSink: AsyncStream<ConnectionEvent>.Continuation
    private let readSink: AsyncStream<ReadState>.Continuation
    /// The newest read-state version received: a connection asks for the markers changed after it.
    private var readsVersion: Int64 = 0
    let logger: Logger
    private(set) var token: String?
    public private(set) var username: String?
    private var connection: Task<Void, Never>?
    private var outbound: WebSocketOutboundWriter?
    private var waitingForConnection: [CheckedContinuation<Void, any Error>] = []
    private var pendingSends: [String: CheckedContinuation<Message, any Error>] = [:]
    private var pendingDrafts: [String: OutgoingChatMessage] = [:]
    /// The newest stored message handed to `messages` (or known to need no delivery, as this device's own).
    private var lastSeq: Int64 = 0
    /// The newest stored message the app has finished with.
    private var takenSeq: Int64 = 0
    private var ackedSeq: Int64 = 0
    /// Everything up to this is in `messages` or needs no delivery (the last `synced`).
    private var syncedSeq: Int64 = 0
    /// Counts logins on this client: a message of an earlier session, taken after a logout, acknowledges nothing.
    private(set) var session = 0
    /// Between `welcome` and `synced`: the backlog streams in, and acks go out in batches.
    private var catchingUp = false
    /// While the app works through a backlog, acks go out every this many messages.
    private static let ackBatch: Int64 = 200
    /// Set when the server said this connection must not come back (kicked, replaced).
    private var stopReconnecting = false
    /// The last connection ended on a frame this SDK could not read: the next waits out a growing delay.
    private var endedOnUnreadableFrame = false

    public init(options: BeaconOptions, logger: Logger = Logger(label: "beacon.client")) {
        self.options = options
        self.logger = logger
        let (deliveries, messageSink) = AsyncStream.makeStream(of: MessageStream.Delivery.self)
        self.messageSink = messageSink
        (events, eventSink) = AsyncStream.makeStream(of: ConnectionEvent.self)
        (reads, readSink) = AsyncStream.makeStream(of: ReadState.self)
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
        let deadline = Task { [weak self, timeout = options.loginTimeout] in
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
        let task = connection
        connection = nil
        if let outbound {
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
                try? await outbound.writeTextMessage(ClientFrame.logout.json)
                await group.next()
                group.cancelAll()
            }
        }
        task?.cancel()
        await task?.value
        failPending(with: BeaconClientError.notLoggedIn)
        username = nil
        // The next login may be another user (or this one on another inbox): its positions start from its `welcome`.
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
            ext: draft.ext.isEmpty ? nil : draft.ext, routetype: draft.onlineOnly ? RouteType.online : nil)
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
        let (data, response) = try await URLSession.shared.dataIgnoringCancellation(for: request)
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
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

    // MARK: Connection

    private func startConnection() {
        connection?.cancel()
        connection = Task { await self.connectionLoop() }
    }

    private func connectionLoop() async {
        var delay = options.reconnectDelay
        while !Task.isCancelled, let token {
            // Checked at login (`invalidServerURL`): the options do not change.
            guard let url = options.webSocketURL(readsSince: readsVersion) else { return }
            var headers = HTTPFields()
            headers[.authorization] = "Bearer \(token)"
            stopReconnecting = false
            do {
                try await WebSocketClient.connect(
                    url: url, configuration: .init(maxFrameSize: 64 * 1024, additionalHeaders: headers), logger: logger
                ) { inbound, outbound, _ in
                    await self.connected(outbound)
                    for try await message in inbound.messages(maxSize: 1 << 20) {
                        guard case .text(let text) = message else { continue }
                        switch await self.read(text) {
                        case .frame(let frame): await self.handle(frame, outbound: outbound)
                        case .unknown: continue
                        case .unreadable: return  // ends the connection: nothing after it is acknowledged
                        }
                    }
                }
                // A connection ended on an unreadable frame backs off like a failed one instead of looping on it.
                if !endedOnUnreadableFrame { delay = options.reconnectDelay }
            } catch {
                logger.debug("connection failed", metadata: ["error": "\(error)"])
                if await tokenWasRefused() { stopReconnecting = true }
            }
            disconnected()
            if stopReconnecting || Task.isCancelled { return }
            try? await Task.sleep(for: delay)
            delay = min(delay * 2, options.maxReconnectDelay)
        }
    }

    /// What a text frame from the server is to this SDK.
    private enum Reading {
        case frame(ServerFrame)
        /// A frame of a kind this version does not know (a newer server's): skipped.
        case unknown
        /// Not JSON this SDK reads (too deep, malformed), or a `msg` or `recall` frame that cannot be read: reported as
        /// `unreadableFrame`, and the connection ends.
        case unreadable
    }

    private func read(_ text: String) -> Reading {
        endedOnUnreadableFrame = false
        let reason: String
        do {
            let value = try JSONReader.value(of: text)
            do {
                let frame = try ServerFrame(jsonValue: value)
                guard case .message(_, let wire) = frame, wire.message == nil else { return .frame(frame) }
                reason = "a msg frame whose message id is not a 64-bit number"
            } catch {
                // Frames that carry a `seq`: skipping one would acknowledge it unread.
                guard ["msg", "recall"].contains(value["op"]?.stringValue) else { return .unknown }
                reason = "\(error)"
            }
        } catch {
            reason = "\(error)"
        }
        logger.error("unreadable frame from the server", metadata: ["reason": "\(reason)"])
        endedOnUnreadableFrame = true
        eventSink.yield(.unreadableFrame(reason: reason))
        return .unreadable
    }

    private func handle(_ frame: ServerFrame, outbound: WebSocketOutboundWriter) async {
        switch frame {
        case .welcome(let username, _, let cursor):
            self.username = username
            lastSeq = max(lastSeq, cursor)
            takenSeq = max(takenSeq, cursor)
            syncedSeq = max(syncedSeq, cursor)
            ackedSeq = cursor
            catchingUp = true
            eventSink.yield(.connected)
            resumeWaiters()
        case .message(let seq, let wire):
            guard let message = wire.message else { break }
            deliver(message, seq: seq)
        case .recall(let seq, let noticeID, let notice):
            // In `messages`, in its place in the inbox's order, with `Message.recall` set.
            deliver(notice.message(id: noticeID), seq: seq)
        case .sent(let id, let messageID, let timestamp):
            guard let continuation = pendingSends.removeValue(forKey: id), let draft = pendingDrafts.removeValue(forKey: id) else { break }
            continuation.resume(
                returning: Message(
                    id: UInt64(messageID) ?? 0, from: username ?? "", to: draft.to, chatType: draft.chatType, type: draft.content.type,
                    body: draft.content.body, ext: draft.ext, timestamp: timestamp, onlineOnly: draft.onlineOnly))
        case .synced(let seq):
            // Everything up to `seq` was sent before this frame (this device's own messages are not: nothing to deliver).
            lastSeq = max(lastSeq, seq)
            syncedSeq = max(syncedSeq, seq)
            catchingUp = false
            await acknowledgeTaken()
            eventSink.yield(.synced(seq: seq))
        case .pong:
            break
        case .read(let state):
            readsVersion = max(readsVersion, state.version)
            readSink.yield(state)
        case .error(let id, let code, let description):
            if let id, let continuation = pendingSends.removeValue(forKey: id) {
                pendingDrafts[id] = nil
                continuation.resume(throwing: BeaconClientError.server(status: 400, code: code, description: description))
            } else {
                logger.warning("server error", metadata: ["code": "\(code)", "description": "\(description)"])
            }
        case .closing(let reason):
            if reason == "kicked" {
                token = nil
                eventSink.yield(.kicked)
                failPending(with: BeaconClientError.kicked)
                stopReconnecting = true
            } else if reason == "replaced" {
                eventSink.yield(.replaced)
                stopReconnecting = true
            } else if reason == "logout" {
                stopReconnecting = true
            }
        }
    }

    /// Hands a message to `messages`, unless its `seq` was handed out already (a resend after a reconnect).
    private func deliver(_ message: Message, seq: Int64?) {
        if let seq {
            guard seq > lastSeq else { return }
            lastSeq = seq
        }
        messageSink.yield(MessageStream.Delivery(message: message, seq: seq, session: session))
    }

    /// Tells the app of a connection event.
    func announce(_ event: ConnectionEvent) {
        eventSink.yield(event)
    }

    /// The app finished with the stored message `seq` (its loop asked `messages` for the next one).
    func taken(_ seq: Int64, session: Int) async {
        guard session == self.session else { return }
        takenSeq = max(takenSeq, seq)
        if (!catchingUp && takenSeq == lastSeq) || takenSeq - ackedSeq >= Self.ackBatch { await acknowledgeTaken() }
    }

    /// Acknowledges what the app finished with; once it has everything, up to the last `synced` too.
    private func acknowledgeTaken() async {
        let upTo = takenSeq == lastSeq ? max(takenSeq, syncedSeq) : takenSeq
        guard upTo > ackedSeq, let outbound else { return }
        ackedSeq = upTo
        try? await outbound.writeTextMessage(ClientFrame.ack(seq: upTo).json)
    }

    /// After a failed connect: whether the server refuses the token (revoked, expired, user deleted). Then the client
    /// logs out as when kicked instead of retrying forever.
    private func tokenWasRefused() async -> Bool {
        guard token != nil, let username else { return false }
        do {
            let _: JSONValue = try await request("GET", "users/\(username)", body: Optional<JSONValue>.none)
            return false
        } catch BeaconClientError.server(status: 401, _, _) {
            token = nil
            eventSink.yield(.kicked)
            failPending(with: BeaconClientError.kicked)
            return true
        } catch {
            return false
        }
    }

    private func connected(_ outbound: WebSocketOutboundWriter) {
        self.outbound = outbound
    }

    private func disconnected() {
        outbound = nil
        eventSink.yield(.disconnected)
        for (id, continuation) in pendingSends {
            pendingDrafts[id] = nil
            continuation.resume(throwing: BeaconClientError.disconnected)
        }
        pendingSends.removeAll()
    }

    private func waitUntilConnected() async throws {
        guard token != nil else { throw BeaconClientError.notLoggedIn }
        if outbound != nil, username != nil { return }
        try await withCheckedThrowingContinuation { waitingForConnection.append($0) }
    }

    private func resumeWaiters() {
        let waiters = waitingForConnection
        waitingForConnection.removeAll()
        for waiter in waiters { waiter.resume() }
    }

    private func failWaitingForConnection(with error: BeaconClientError) {
        let waiters = waitingForConnection
        waitingForConnection.removeAll()
        for waiter in waiters { waiter.resume(throwing: error) }
    }

    private func failPending(with error: BeaconClientError) {
        failWaitingForConnection(with: error)
        for (_, continuation) in pendingSends { continuation.resume(throwing: error) }
        pendingSends.removeAll()
        pendingDrafts.removeAll()
    }

    private func write(_ frame: ClientFrame, failing id: String) async {
        do {
            guard let outbound else { throw BeaconClientError.disconnected }
            try await outbound.writeTextMessage(frame.json)
        } catch {
            pendingDrafts[id] = nil
            pendingSends.removeValue(forKey: id)?.resume(throwing: BeaconClientError.disconnected)
        }
    }
}
