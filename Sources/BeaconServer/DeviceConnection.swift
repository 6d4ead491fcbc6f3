import NIOWebSocket
import Synchronization

/// One device's connection after the upgrade, driven by its socket (`DeviceSocketHandler`) and its outbox: the session
/// started, the device's messages handled one at a time in the order they came, the outbox written whenever it wakes,
/// and the end cleaned up. Each of these runs in a task that lives only while it has work, and nothing keeps a handle on
/// it (a task's allocator slabs stay until the task object goes), so an idle connection holds no task.
///
/// The device counts as online from its registration, before `welcome` is written, until it is unregistered — whatever
/// ends the connection, errors included, and once the work it started has finished: before the socket closes when the
/// session ends itself or the device sends its close, after it when the connection drops.
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
        /// A reason to handle and write nothing more: the socket closed, the session failed, or it was told to close.
        var stopped = false
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
        /// The socket closed.
        var ended = false
        /// The device sent its close: the socket closes once the device has gone away.
        var closeReceived = false
        /// How to answer it (nil: it answered the session's own).
        var closeAnswer: WebSocketErrorCode?
        /// The end (`leave`, then `DeviceSession.ended`) has been started.
        var ending = false
        /// The device went away (`DeviceSession.leave`).
        var left = false
    }

    init(session: DeviceSession) {
        self.session = session
        outbox = DeviceOutbox(
            user: UserKey(app: session.app.id, username: session.username), deviceID: session.deviceID, limit: session.outboxLimit)
    }

    /// The upgrade is done: registers the device and greets it.
    func start(socket: DeviceSocket) {
        outbox.onWake { [weak self] in self?.wake() }
        session.switchboard.local.socketOpened(socket, of: self)
        state.withLock { state in
            state.socket = socket
            run(&state) { await self.begin(socket) }
        }
    }

    /// Runs `work` in a task of its own, counted as busy until it returns.
    private func run(_ state: inout State, _ work: @escaping @Sendable () async -> Void) {
        state.busy += 1
        Task {
            await work()
            finished()
        }
    }

    private func finished() {
        let end = state.withLock { state in
            state.busy -= 1
            return mayEnd(&state)
        }
        if end { self.end() }
    }

    /// Whether the end is to start now: the socket closed or the device closed it, and nothing runs any more.
    private func mayEnd(_ state: inout State) -> Bool {
        guard state.ended || state.closeReceived, state.busy == 0, !state.ending else { return false }
        state.ending = true
        return true
    }

    /// The device goes away (if it has not yet), the session ends, then the device's close is answered and the socket
    /// closes: a device whose close was answered is offline.
    private func end() {
        Task {
            await leave()
            session.ended()
            let (socket, answer) = state.withLock { ($0.socket, $0.closeAnswer) }
            guard let socket else { return }
            if let answer { await socket.close(answer) }
            socket.channel.close(promise: nil)
        }
    }

    private func begin(_ socket: DeviceSocket) async {
        session.began()
        do {
            guard try await session.switchboard.register(outbox) else {
                // The device opened a later connection to another node, registered before this one: this one is stale.
                try await session.write(.closing(reason: "replaced"), to: socket)
                return await stop(socket, .normalClosure)
            }
            guard !state.withLock({ $0.stopped }), let cursor = try await session.greet(outbox: outbox, socket: socket) else {
                return await stop(socket, .normalClosure)
            }
            state.withLock { state in
                state.online = true
                state.delivered = cursor
                outbox.noteSending(through: cursor)
                startReader(&state)
                state.writerWoken = true
                startWriter(&state)
            }
        } catch {
            await stop(socket, .unexpectedServerError)
        }
    }

    /// A message from the device (on the socket's event loop).
    func received(_ message: DeviceMessage) -> ReadingAdvice {
        state.withLock { state in
            guard !state.stopped else { return .keepReading }
            state.inbound.append(message)
            startReader(&state)
            guard state.inbound.count >= Self.inboundLimit else { return .keepReading }
            state.readingPaused = true
            return .pauseReading
        }
    }

    private func startReader(_ state: inout State) {
        guard state.online, !state.stopped, !state.readerRunning, !state.inbound.isEmpty, let socket = state.socket else { return }
        state.readerRunning = true
        run(&state) { await self.read(socket) }
    }

    /// Handles the queued messages one at a time, until none is left.
    private func read(_ socket: DeviceSocket) async {
        while true {
            let next = state.withLock { state -> (DeviceMessage, Int64, resume: Bool)? in
                guard !state.stopped, !state.inbound.isEmpty else {
                    state.readerRunning = false
                    return nil
                }
                let message = state.inbound.removeFirst()
                let resume = state.readingPaused && state.inbound.count <= Self.inboundLimit / 2
                if resume { state.readingPaused = false }
                return (message, state.acked, resume)
            }
            guard let (message, acked, resume) = next else { return }
            if resume { socket.resumeReading() }
            do {
                let nowAcked = try await session.handle(message, outbox: outbox, acked: acked)
                state.withLock { $0.acked = nowAcked }
            } catch {
                return await stop(socket, .unexpectedServerError)
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
        guard state.online, !state.stopped, !state.writerRunning, state.writerWoken, let socket = state.socket else { return }
        state.writerRunning = true
        run(&state) { await self.write(socket) }
    }

    /// Writes what the outbox holds, again as long as it woke meanwhile.
    private func write(_ socket: DeviceSocket) async {
        while true {
            let delivered = state.withLock { state -> Int64? in
                guard !state.stopped, state.writerWoken else {
                    state.writerRunning = false
                    return nil
                }
                state.writerWoken = false
                return state.delivered
            }
            guard let delivered else { return }
            do {
                guard let through = try await session.drain(outbox, socket, delivered: delivered) else {
                    return await stop(socket, nil)  // told to close, and closed
                }
                state.withLock { $0.delivered = through }
            } catch {
                return await stop(socket, .unexpectedServerError)
            }
        }
    }

    /// The session ends itself: handles and writes nothing more, the device goes away, then the socket is closed with
    /// `code` (nil: it is closing already).
    private func stop(_ socket: DeviceSocket, _ code: WebSocketErrorCode?) async {
        state.withLock { state in
            state.stopped = true
            state.inbound.removeAll()
            state.readerRunning = false
            state.writerRunning = false
        }
        await leave()
        if let code { await socket.close(code) }
    }

    /// The device goes away, once.
    private func leave() async {
        let first = state.withLock { state in
            defer { state.left = true }
            return !state.left
        }
        if first { await session.leave(outbox) }
    }

    /// The device sent its close frame (on the socket's event loop), to be answered with `answer` (nil when it answers the
    /// session's own): nothing more is handled or written, and the close is answered once the device has gone away (`end`).
    func closeReceived(answer: WebSocketErrorCode?) {
        let end = state.withLock { state in
            state.closeReceived = true
            state.closeAnswer = answer
            state.stopped = true
            state.inbound.removeAll()
            return mayEnd(&state)
        }
        if end { self.end() }
    }

    /// The socket closed (on its event loop): once the work started for the connection has finished, the device goes
    /// offline.
    func socketClosed() {
        let end = state.withLock { state -> Bool? in
            guard !state.ended else { return nil }
            state.ended = true
            state.stopped = true
            state.inbound.removeAll()
            return mayEnd(&state)
        }
        guard let end else { return }
        session.switchboard.local.socketClosed(of: self)
        outbox.finish()
        if end { self.end() }
    }
}
