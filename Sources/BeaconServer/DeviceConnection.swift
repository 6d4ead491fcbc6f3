import NIOWebSocket
import Synchronization

/// One device's connection after the upgrade, driven by its socket (`DeviceSocketHandler`) and its outbox: the session
/// started, the device's messages handled one at a time in the order they came, the outbox written whenever it wakes,
/// and the end. Each of these runs in a task that lives only while it has work, and nothing keeps a handle on it (a
/// task's allocator slabs stay until the task object goes), so an idle connection holds no task.
///
/// The connection ends when the session stops itself (told to close, or failed), when the device sends its close, or
/// when the socket closes. The end waits until nothing runs any more — the messages the device sent before its close
/// are handled — then the device goes offline, and only then is the close sent or answered: a device whose close was
/// answered, or that was told to close, is offline.
final class DeviceConnection: Sendable {
    let session: DeviceSession
    let outbox: DeviceOutbox
    private let state = Mutex(State())

    /// Messages queued before the socket stops reading (it reads again when half of them are handled).
    static let inboundLimit = 16

    enum ReadingAdvice: Equatable {
        case keepReading
        case pauseReading
    }

    private struct State {
        var socket: DeviceSocket?
        /// Welcomed: messages are handled and the outbox written from now on.
        var online = false
        var inbound: [DeviceMessage] = []
        var readingPaused = false
        var readerRunning = false
        var writerRunning = false
        /// The outbox woke since the writer last took it.
        var writerWoken = false
        /// The highest sequence number the device acknowledged on this connection.
        var acked: Int64 = 0
        /// The last sequence number written (or skipped as the device's own).
        var delivered: Int64 = 0
        /// Tasks running for this connection (its start, reader, writer): its end waits for them.
        var busy = 0
        /// The session stopped itself: nothing more is written, of what the device sends only acknowledgements count, and
        /// the socket is closed with this code and reason once the device has gone away.
        var stop: (code: WebSocketErrorCode, reason: String?)?
        /// Messages still taken after the stop (for their acknowledgements), at most `inboundLimit`: a device that keeps
        /// sending cannot hold the end off.
        var takenAfterStop = 0
        /// The connection closes from the socket's side: the device sent its close, to be answered with this code once it
        /// has gone away; or nil: the socket is closing already (the device broke the protocol or stopped answering pings).
        var socketClosing: WebSocketErrorCode??
        /// The socket closed.
        var socketClosed = false
        /// The end has started.
        var ending = false

        /// Whether the outbox is written: not once the connection ends, whoever ends it.
        var writing: Bool { stop == nil && socketClosing == nil && !socketClosed }
    }

    init(session: DeviceSession) {
        self.session = session
        outbox = DeviceOutbox(
            user: UserKey(app: session.app.id, username: session.username), deviceID: session.deviceID, limit: session.outboxLimit)
    }

    /// The upgrade is done (on the socket's event loop): registers the device and greets it.
    func start(socket: DeviceSocket) {
        session.began()
        outbox.onWake { [weak self] in self?.wake() }
        session.switchboard.local.socketOpened(socket, of: self)
        state.withLock { state in
            state.socket = socket
            run(&state) { await self.begin(socket) }
        }
    }

    /// Runs `work` in a task of its own, counted as busy until it returns. Detached: it inherits nothing from whatever
    /// woke it (a request's or a service's task-local values, such as a service's graceful shutdown).
    private func run(_ state: inout State, _ work: @escaping @Sendable () async -> Void) {
        state.busy += 1
        Task.detached {
            await work()
            self.finished()
        }
    }

    private func finished() {
        let end = state.withLock { state in
            state.busy -= 1
            return mayEnd(&state)
        }
        if end { self.end() }
    }

    /// Whether the end is to start now: the connection is ending, and nothing runs any more.
    private func mayEnd(_ state: inout State) -> Bool {
        guard state.stop != nil || state.socketClosing != nil || state.socketClosed, state.busy == 0, !state.ending else {
            return false
        }
        state.ending = true
        return true
    }

    /// The device goes away and the session ends; then the device's close is answered and the socket closed, or the
    /// session's close is sent (the socket closes when the device answers it, or after `DeviceSocketHandler.closeTimeout`).
    private func end() {
        Task.detached {
            await self.session.leave(self.outbox)
            self.session.ended()
            let (socket, stop, socketClosing, paused) = self.state.withLock { state in
                defer { state.readingPaused = false }
                return (state.socket, state.stop, state.socketClosing, state.readingPaused)
            }
            guard let socket else { return }
            if paused { socket.resumeReading() }  // the device's answer to the close must get through
            if let socketClosing {
                if let answer = socketClosing {
                    await socket.close(answer)
                    socket.channel.close(promise: nil)
                }
            } else if let stop {
                await socket.close(stop.code, reason: stop.reason)
            }
        }
    }

    private func begin(_ socket: DeviceSocket) async {
        do {
            guard state.withLock({ $0.writing }) else { return }
            guard try await session.switchboard.register(outbox) else {
                // The device opened a later connection to another node, registered before this one: this one is stale.
                try await session.write(.closing(reason: "replaced"), to: socket)
                return stop(.normalClosure)
            }
            guard state.withLock({ $0.writing }) else { return }
            guard let cursor = try await session.greet(outbox: outbox, socket: socket) else { return stop(.normalClosure) }
            socket.flush()
            state.withLock { state in
                state.online = true
                state.delivered = cursor
                outbox.noteSending(through: cursor)
                startReader(&state)
                state.writerWoken = true
                startWriter(&state)
            }
        } catch {
            stop(.unexpectedServerError)
        }
    }

    /// A message from the device (on the socket's event loop). Once the session stopped itself, only acknowledgements
    /// count, until the end starts (so that what the device saw is not pushed when it goes offline).
    func received(_ message: DeviceMessage) -> ReadingAdvice {
        state.withLock { state in
            guard !state.ending else { return .keepReading }
            if state.stop != nil {
                guard state.online, state.takenAfterStop < Self.inboundLimit else { return .keepReading }
                state.takenAfterStop += 1
            }
            state.inbound.append(message)
            startReader(&state)
            // Not once stopped: the device's answer to the close must get through.
            guard state.inbound.count >= Self.inboundLimit, state.stop == nil else { return .keepReading }
            state.readingPaused = true
            return .pauseReading
        }
    }

    private func startReader(_ state: inout State) {
        guard state.online, !state.ending, !state.readerRunning, !state.inbound.isEmpty, let socket = state.socket else { return }
        state.readerRunning = true
        run(&state) { await self.read(socket) }
    }

    /// Handles the queued messages one at a time, until none is left.
    private func read(_ socket: DeviceSocket) async {
        while true {
            let next = state.withLock { state -> (DeviceMessage, Int64, onlyAcks: Bool, resume: Bool)? in
                guard !state.inbound.isEmpty else {
                    state.readerRunning = false
                    return nil
                }
                let message = state.inbound.removeFirst()
                let resume = state.readingPaused && state.inbound.count <= Self.inboundLimit / 2
                if resume { state.readingPaused = false }
                return (message, state.acked, state.stop != nil, resume)
            }
            guard let (message, acked, onlyAcks, resume) = next else { return }
            if resume { socket.resumeReading() }
            do {
                let nowAcked = try await session.handle(message, outbox: outbox, acked: acked, onlyAcks: onlyAcks)
                state.withLock { $0.acked = nowAcked }
            } catch {
                return stop(.unexpectedServerError)
            }
        }
    }

    private func wake() {
        state.withLock { state in
            state.writerWoken = true
            startWriter(&state)
        }
    }

    private func startWriter(_ state: inout State) {
        guard state.online, state.writing, !state.writerRunning, state.writerWoken, let socket = state.socket else { return }
        state.writerRunning = true
        run(&state) { await self.write(socket) }
    }

    /// Writes what the outbox holds, again as long as it woke meanwhile.
    private func write(_ socket: DeviceSocket) async {
        while true {
            let delivered = state.withLock { state -> Int64? in
                guard state.writing, state.writerWoken else {
                    state.writerRunning = false
                    return nil
                }
                state.writerWoken = false
                return state.delivered
            }
            guard let delivered else { return }
            do {
                switch try await session.drain(outbox, socket, delivered: delivered) {
                case .delivered(let through):
                    socket.flush()
                    state.withLock { $0.delivered = through }
                case .closing(let reason):
                    socket.flush()
                    return stop(.normalClosure, reason: reason)
                }
            } catch {
                // A write that failed because the connection is closing anyway does not stop the session.
                guard state.withLock({ $0.socketClosing == nil && !$0.socketClosed }) else { return }
                return stop(.unexpectedServerError)
            }
        }
    }

    /// The session stops itself: nothing more is written, and of what the device sends only acknowledgements count; the
    /// socket is closed with `code` once the device has gone away (`end`).
    private func stop(_ code: WebSocketErrorCode, reason: String? = nil) {
        let (socket, resume) = state.withLock { state in
            if state.stop == nil { state.stop = (code, reason) }
            defer { state.readingPaused = false }
            return (state.socket, state.readingPaused)
        }
        socket?.flush()  // a `closing` frame written before
        // Reading again: acknowledgements and the device's answer to the close must get through.
        if resume { socket?.resumeReading() }
    }

    /// The connection closes from the socket's side (on its event loop): the device sent its close, to be answered with
    /// `answer`, or the socket is closing already (nil). Nothing more is written, what the device sent before is still
    /// handled, and the close is answered once the device has gone away (`end`).
    func closing(answer: WebSocketErrorCode?) {
        let end = state.withLock { state in
            if state.socketClosing == nil { state.socketClosing = .some(answer) }
            return mayEnd(&state)
        }
        if end { self.end() }
    }

    /// The socket closed (on its event loop): what the device sent before is still handled, then the device goes offline.
    func socketClosed() {
        let end = state.withLock { state -> Bool? in
            guard !state.socketClosed else { return nil }
            state.socketClosed = true
            return mayEnd(&state)
        }
        guard let end else { return }
        session.switchboard.local.socketClosed(of: self)
        outbox.finish()
        if end { self.end() }
    }
}
