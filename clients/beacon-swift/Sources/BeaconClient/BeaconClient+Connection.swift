import BeaconCore
import BeaconProtocol
import Foundation

/// The connection's life: connect, read, heartbeat, reconnect with backoff.
extension BeaconClient {
    /// Starts a connection loop in place of any other; in the background, it closes again after the grace.
    func startConnection() {
        _ = stopConnection()
        let generation = self.generation
        connectionTask = Task { await self.connectionLoop(generation) }
        if inBackground { closeAfterBackgroundGrace() }
    }

    /// Ends the connection loop: from now on what it does touches nothing (its generation is over), and the sends waiting
    /// on its connection fail. Returns its task, to wait for it.
    func stopConnection() -> Task<Void, Never>? {
        generation += 1
        let task = connectionTask
        connectionTask = nil
        task?.cancel()
        dropConnection()
        return task
    }

    private func connectionLoop(_ generation: Int) async {
        defer { if generation == self.generation { loopEnded() } }
        var backoff = ReconnectBackoff(initial: options.reconnectDelay, maximum: options.maxReconnectDelay)
        while !Task.isCancelled, generation == self.generation, let token {
            // Checked at login (`invalidServerURL`): the options do not change.
            guard let url = options.webSocketURL(readsSince: readsVersion) else { return }
            stopReconnecting = false
            enter(.connecting)
            do {
                try await options.transport.webSocket(to: url, headers: ["Authorization": "Bearer \(token)"]) { connection in
                    try await self.run(connection, generation: generation)
                }
            } catch is HeartbeatTimeout {
                logger.info("no answer to the heartbeat: reconnecting")
            } catch {
                logger.debug("connection failed", metadata: ["error": "\(error)"])
                if connection == nil, !Task.isCancelled, await tokenWasRefused(token) { stopReconnecting = true }
            }
            guard generation == self.generation, !Task.isCancelled else { return }
            // A connection the server welcomed worked: the next attempt starts from the shortest delay. One that ended on
            // an unreadable frame backs off like a failed one instead of looping on it.
            let welcomed = connection != nil
            dropConnection()
            if welcomed, !endedOnUnreadableFrame { backoff.reset() }
            if stopReconnecting || self.token == nil { return }
            enter(.waitingToReconnect)
            // Cut short by a network change (`networkDidBecomeAvailable`) or by the loop's end.
            let timer = Task { [wait = backoff.next(random: Double.random(in: 0...1))] in _ = try? await Task.sleep(for: wait) }
            reconnectWait = timer
            await withTaskCancellationHandler {
                await timer.value
            } onCancel: {
                timer.cancel()
            }
            if generation == self.generation { reconnectWait = nil }
        }
    }

    /// The current loop stopped by itself (kicked, replaced, the token refused): nothing reconnects until a login, or the
    /// app's coming back to the foreground when the user is still logged in.
    private func loopEnded() {
        connectionTask = nil
        dropConnection()
        failWaitingForConnection(with: token == nil ? .notLoggedIn : .disconnected)
        enter(.loggedOut)
    }

    /// The life of one open WebSocket: its frames read in order while the heartbeat watches the server's silence.
    private nonisolated func run(_ connection: WebSocketConnection, generation: Int) async throws {
        await opened()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await self.heartbeat(connection) }
            group.addTask {
                for try await text in connection.frames {
                    switch await self.read(text) {
                    case .frame(let frame): await self.handle(frame, on: connection, generation: generation)
                    case .unknown: continue
                    case .unreadable: return  // ends the connection: nothing after it is acknowledged
                    }
                }
            }
            // The first to end (the server closed, a frame was unreadable, the heartbeat got no answer) ends the other.
            try await group.next()
            group.cancelAll()
        }
    }

    /// After `heartbeatInterval` without a frame from the server, pings it; without any frame `heartbeatTimeout` after
    /// that, the connection is taken for dead (a half-open TCP connection, a network that changed) and thrown away.
    private nonisolated func heartbeat(_ connection: WebSocketConnection) async throws {
        let clock = ContinuousClock()
        let interval = options.heartbeatInterval.bounded(below: .milliseconds(10))
        let timeout = options.heartbeatTimeout.bounded(below: .milliseconds(10))
        // While a ping waits for its answer, the silence is looked at this often (any frame answers it).
        let step = timeout / 10
        var pingSent: ContinuousClock.Instant?
        while true {
            let now = clock.now
            let heard = await lastHeardFromServer
            if let sent = pingSent, heard < sent {
                guard now < sent + timeout else { throw HeartbeatTimeout() }
                try await Task.sleep(until: min(sent + timeout, now + step), clock: clock)
            } else if now >= heard + interval {
                pingSent = now
                try await connection.send(ClientFrame.ping.json)
            } else {
                pingSent = nil
                try await Task.sleep(until: heard + interval, clock: clock)
            }
        }
    }

    private func opened() {
        lastHeardFromServer = .now
        endedOnUnreadableFrame = false
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
        lastHeardFromServer = .now
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

    private func handle(_ frame: ServerFrame, on connection: WebSocketConnection, generation: Int) async {
        // A loop already replaced (a new login, the background) may still read a frame or two: they are its own.
        guard generation == self.generation else { return }
        switch frame {
        case .welcome(let username, _, let cursor):
            self.username = username
            self.connection = connection
            lastSeq = max(lastSeq, cursor)
            takenSeq = max(takenSeq, cursor)
            syncedSeq = max(syncedSeq, cursor)
            ackedSeq = cursor
            catchingUp = true
            eventSink.yield(.connected)
            enter(.connected)
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
                    body: draft.content.body, ext: draft.sentExt, timestamp: timestamp, onlineOnly: draft.onlineOnly))
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

    /// Moves to `state` and tells `states`.
    func enter(_ state: ConnectionState) {
        guard state != self.state else { return }
        self.state = state
        stateSink.yield(state)
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
        guard upTo > ackedSeq, let connection else { return }
        ackedSeq = upTo
        try? await connection.send(ClientFrame.ack(seq: upTo).json)
    }

    /// After a failed connect: whether the server refuses the token (revoked, expired, user deleted). Then the client
    /// logs out as when kicked instead of retrying forever.
    private func tokenWasRefused(_ refused: String) async -> Bool {
        guard token == refused, let username else { return false }
        do {
            let _: JSONValue = try await request("GET", "users/\(username)", body: Optional<JSONValue>.none)
            return false
        } catch BeaconClientError.server(status: 401, _, _) {
            // Meanwhile the app may have logged in with a fresh token: that one stands.
            guard token == refused else { return false }
            token = nil
            eventSink.yield(.kicked)
            failPending(with: BeaconClientError.kicked)
            return true
        } catch {
            return false
        }
    }

    /// The connection is gone: its sends waiting for an answer fail (they may or may not have been stored).
    private func dropConnection() {
        guard connection != nil || !pendingSends.isEmpty else { return }
        if connection != nil { eventSink.yield(.disconnected) }
        connection = nil
        for (id, continuation) in pendingSends {
            pendingDrafts[id] = nil
            continuation.resume(throwing: BeaconClientError.disconnected)
        }
        pendingSends.removeAll()
    }

    /// Returns once connected; throws `disconnected` at once when no connection is on its way (in the background, or after
    /// the server ended the session).
    func waitUntilConnected() async throws {
        guard token != nil else { throw BeaconClientError.notLoggedIn }
        if connection != nil, username != nil { return }
        guard connectionTask != nil else { throw BeaconClientError.disconnected }
        try await withCheckedThrowingContinuation { waitingForConnection.append($0) }
    }

    private func resumeWaiters() {
        let waiters = waitingForConnection
        waitingForConnection.removeAll()
        for waiter in waiters { waiter.resume() }
    }

    func failWaitingForConnection(with error: BeaconClientError) {
        let waiters = waitingForConnection
        waitingForConnection.removeAll()
        for waiter in waiters { waiter.resume(throwing: error) }
    }

    func failPending(with error: BeaconClientError) {
        failWaitingForConnection(with: error)
        for (_, continuation) in pendingSends { continuation.resume(throwing: error) }
        pendingSends.removeAll()
        pendingDrafts.removeAll()
    }

    func write(_ frame: ClientFrame, failing id: String) async {
        // Already failed (the connection dropped before this ran): sent on a later connection, it would come twice.
        guard pendingSends[id] != nil else { return }
        do {
            guard let connection else { throw BeaconClientError.disconnected }
            try await connection.send(frame.json)
        } catch {
            pendingDrafts[id] = nil
            pendingSends.removeValue(forKey: id)?.resume(throwing: BeaconClientError.disconnected)
        }
    }
}

/// The server stayed silent past the heartbeat's timeout.
struct HeartbeatTimeout: Error {}
