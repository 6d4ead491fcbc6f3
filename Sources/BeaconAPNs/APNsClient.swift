import Foundation
import NIOCore
import NIOPosix
import Synchronization

/// Sends notifications to APNs (or a stand-in) over a small pool of HTTP/2 connections for one set of
/// credentials and one endpoint.
///
/// Built directly on swift-nio-http2 rather than AsyncHTTPClient: APNs' rules live at the connection level
/// (a provider token per connection, the stream limit that starts at 1 and moves with SETTINGS, GOAWAY,
/// idle PINGs), which AsyncHTTPClient hides. Measured (`beacon-bench apns`, BENCHMARKS.md): 17,860/s at 49 µs CPU
/// each here, against 9,217/s at 118 µs for AsyncHTTPClient, which also lost 15 % of the requests to the
/// one-stream-until-authenticated rule.
public final class APNsClient: Sendable {
    public struct Configuration: Sendable {
        /// Connections in the pool.
        public var connections: Int
        /// Notifications in flight across the pool; more wait their turn.
        public var maxInFlight: Int
        /// Every request gets an answer or `APNsFailure.timeout` within this of its stream opening.
        public var requestTimeout: Duration
        /// The longest a notification waits for its turn (first the in-flight limit, then a stream slot on its
        /// connection); past it, `APNsFailure.timeout`. A cancelled task stops waiting at once.
        public var waitTimeout: Duration
        /// A provider token is reused this long (Apple: refresh between 20 and 60 minutes).
        public var tokenLifetime: Duration
        /// PING a connection that has been idle this long, and whenever a request on it times out.
        public var pingInterval: Duration
        /// A connection whose PING is not acknowledged within this is taken for dead and closed.
        public var pingTimeout: Duration
        /// First wait before reconnecting after a failed connect; doubles up to `maxReconnectDelay`.
        public var reconnectDelay: Duration
        public var maxReconnectDelay: Duration
        /// Wall clock for provider tokens (tests move it).
        public var clock: @Sendable () -> Date

        public init(
            connections: Int = 2, maxInFlight: Int = 1000, requestTimeout: Duration = .seconds(10), waitTimeout: Duration = .seconds(30),
            tokenLifetime: Duration = .seconds(50 * 60), pingInterval: Duration = .seconds(300), pingTimeout: Duration = .seconds(5),
            reconnectDelay: Duration = .milliseconds(200), maxReconnectDelay: Duration = .seconds(30),
            clock: @escaping @Sendable () -> Date = Date.init
        ) {
            self.connections = connections
            self.maxInFlight = maxInFlight
            self.requestTimeout = requestTimeout
            self.waitTimeout = waitTimeout
            self.tokenLifetime = tokenLifetime
            self.pingInterval = pingInterval
            self.pingTimeout = pingTimeout
            self.reconnectDelay = reconnectDelay
            self.maxReconnectDelay = maxReconnectDelay
            self.clock = clock
        }
    }

    public let endpoint: APNsEndpoint
    private let credentials: APNsCredentials
    private let configuration: Configuration
    private let group: any EventLoopGroup
    private let slots: [Slot]
    private let limiter: Limiter
    private let limiterSweep: RepeatedTask
    private let next = Atomic<Int>(0)
    private let retired = Atomic<Bool>(false)

    public init(
        credentials: APNsCredentials, endpoint: APNsEndpoint, configuration: Configuration = Configuration(),
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) {
        self.credentials = credentials
        self.endpoint = endpoint
        self.configuration = configuration
        self.group = eventLoopGroup
        self.slots = (0..<max(1, configuration.connections)).map { _ in Slot() }
        let limiter = Limiter(limit: max(1, configuration.maxInFlight))
        self.limiter = limiter
        // Waits for the in-flight limit are checked against their deadline here (ends with `shutdown`).
        self.limiterSweep = eventLoopGroup.any().scheduleRepeatedTask(
            initialDelay: ConnectionEventsHandler.sweepInterval, delay: ConnectionEventsHandler.sweepInterval
        ) { _ in limiter.expireOverdue() }
    }

    /// Sends one notification. Throws `APNsFailure`: `.invalidRequest` at once for a notification HTTP/2 cannot carry
    /// (`APNsNotification.unwritableField`), `.rejected` with APNs' status and reason, or a transport failure
    /// (`.timeout` also when its turn did not come within `waitTimeout`). An `ExpiredProviderToken` answer makes a new
    /// token (one per connection, however many requests heard it) and retries once.
    ///
    /// `stillWanted`, when given, is asked once the notification has its turn and a stream, just before it is written:
    /// false ends it with `APNsFailure.withdrawn` (the waits before can be long when APNs is slow or unreachable).
    ///
    /// `deadline`, when given, is when the send must be over, answer included (a sender's lease on the job): the request
    /// is written only while its whole `requestTimeout` still fits before it, checked on the connection's event loop just
    /// before its HEADERS go out, and every wait before (the in-flight limit, a connection, a stream slot) ends by that
    /// moment too. Past it the send ends with `APNsFailure.deadlinePassed`: nothing was written, so another try cannot
    /// make a duplicate.
    public func send(
        _ notification: APNsNotification, deadline: ContinuousClock.Instant? = nil, stillWanted: (@Sendable () async -> Bool)? = nil
    ) async throws(APNsFailure) -> APNsAccepted {
        if let field = notification.unwritableField { throw .invalidRequest("\(field) holds a character HTTP/2 does not allow there") }
        let writeBy = deadline.map { $0 - configuration.requestTimeout }
        if let writeBy, writeBy <= .now { throw .deadlinePassed }
        do {
            try await limiter.waitForTurn(timeout: configuration.waitTimeout, until: writeBy)
        } catch let failure as APNsFailure {
            throw failure == .timeout && Self.deadlinePassed(writeBy) ? .deadlinePassed : failure
        } catch {
            throw .connectionLost("cancelled")
        }
        defer { limiter.release() }
        do {
            return try await connection(by: writeBy).send(
                notification, timeout: configuration.requestTimeout, waitTimeout: configuration.waitTimeout, writeBy: writeBy,
                stillWanted: stillWanted)
        } catch let failure as APNsFailure {
            throw failure
        } catch is CancellationError {
            throw .connectionLost("cancelled")
        } catch {
            throw .connectionLost("\(error)")
        }
    }

    /// Whether `writeBy` is given and has passed (a wait that timed out then ended because of it).
    static func deadlinePassed(_ writeBy: ContinuousClock.Instant?) -> Bool {
        writeBy.map { $0 <= .now } ?? false
    }

    /// Closes every connection; sends waiting for their turn fail, later ones too.
    public func shutdown() async {
        stopTakingWork(reason: "client shut down")
        for slot in slots { await slot.close() }
    }

    /// Takes no new work (sends waiting for their turn fail) and closes each connection once its requests are answered
    /// (a replaced configuration).
    public func retire() {
        stopTakingWork(reason: "client retired")
        for slot in slots { slot.retire() }
    }

    private func stopTakingWork(reason: String) {
        retired.store(true, ordering: .relaxed)
        limiter.close(reason: reason)
        limiterSweep.cancel()
    }

    /// A usable connection: the least busy of the pool. Load opens the pool's other connections as it grows
    /// (fewer streams per connection cost less in HTTP/2 bookkeeping), and a slot whose connection went away
    /// is reconnected.
    private func connection(by writeBy: ContinuousClock.Instant?) async throws -> APNsConnection {
        if retired.load(ordering: .relaxed) { throw APNsFailure.connectionLost("client retired") }
        let start = next.wrappingAdd(1, ordering: .relaxed).oldValue
        var best: APNsConnection?
        var idleSlot: Slot?
        for offset in 0..<slots.count {
            let slot = slots[(start + offset) % slots.count]
            if let live = slot.liveConnection {
                if best == nil || live.inFlight < best!.inFlight { best = live }
            } else if idleSlot == nil {
                idleSlot = slot
            }
        }
        if let best, best.inFlight == 0 || idleSlot == nil, best.inFlight < best.state.maxStreams { return best }
        let slot = idleSlot ?? slots[start % slots.count]
        return try await slot.connection(by: writeBy) {
            try await APNsConnection.connect(
                to: self.endpoint, credentials: self.credentials,
                settings: .init(
                    tokenLifetime: self.configuration.tokenLifetime, pingInterval: self.configuration.pingInterval,
                    pingTimeout: self.configuration.pingTimeout, clock: self.configuration.clock),
                group: self.group)
        } backoff: {
            (self.configuration.reconnectDelay, self.configuration.maxReconnectDelay)
        }
    }

    /// One place in the pool. Connects once at a time, and never faster than the backoff allows after failures,
    /// so that a broken endpoint does not see a rapid open/close loop.
    private final class Slot: Sendable {
        private struct State {
            var connection: APNsConnection?
            var connecting: Task<APNsConnection, any Error>?
            var failures = 0
            var lastAttempt: ContinuousClock.Instant?
        }
        private let state = Mutex(State())

        var liveConnection: APNsConnection? {
            state.withLock { $0.connection?.isUsable == true ? $0.connection : nil }
        }

        /// The slot's connection, opened (or being opened) for a caller that gives up waiting at `writeBy`
        /// (`APNsFailure.deadlinePassed`; the connect goes on for the next caller).
        func connection(
            by writeBy: ContinuousClock.Instant?,
            _ connect: @escaping @Sendable () async throws -> APNsConnection, backoff: @escaping @Sendable () -> (Duration, Duration)
        ) async throws -> APNsConnection {
            let task = state.withLock { state -> Task<APNsConnection, any Error> in
                if let connection = state.connection, connection.isUsable {
                    return Task { connection }
                }
                if let connecting = state.connecting { return connecting }
                // A connection that died without ever answering counts as a failure: the next one waits longer.
                if let old = state.connection { state.failures = old.state.hasAnswered ? 0 : state.failures + 1 }
                let (first, maximum) = backoff()
                let wait: Duration
                if state.failures > 0, let last = state.lastAttempt {
                    let delay = min(first * (1 << min(state.failures - 1, 16)), maximum)
                    wait = max(.zero, delay - last.duration(to: .now))
                } else if let last = state.lastAttempt {
                    wait = max(.zero, first - last.duration(to: .now))  // a lost connection: pause before reopening
                } else {
                    wait = .zero
                }
                let old = state.connection
                // A connection told to go away (GOAWAY) still answers the requests it took: let them finish.
                old?.closeWhenDrained()
                let task = Task {
                    if wait > .zero { try await Task.sleep(for: wait) }
                    return try await connect()
                }
                state.connecting = task
                return task
            }
            do {
                let connection = try await waitForValue(of: task, by: writeBy)
                state.withLock { state in
                    if state.connecting != nil {
                        state.connection = connection
                        state.connecting = nil
                        state.lastAttempt = .now
                    }
                }
                return connection
            } catch let failure as APNsFailure where failure == .deadlinePassed {
                throw failure  // this caller stopped waiting; the connect goes on
            } catch is CancellationError where Task.isCancelled {
                // This caller was cancelled (not the connect, which goes on for the others): nothing was sent.
                throw APNsFailure.deadlinePassed
            } catch {
                state.withLock { state in
                    if state.connecting != nil {
                        state.connecting = nil
                        state.failures += 1
                        state.lastAttempt = .now
                    }
                }
                throw APNsFailure.connectFailed("\(error)")
            }
        }

        func retire() {
            takeConnection()?.closeWhenDrained()
        }

        func close() async {
            await takeConnection()?.close()
        }

        /// Empties the slot, stopping a connect under way.
        private func takeConnection() -> APNsConnection? {
            state.withLock { state in
                state.connecting?.cancel()
                state.connecting = nil
                defer { state.connection = nil }
                return state.connection
            }
        }
    }
}

/// The value of `task`, or `APNsFailure.deadlinePassed` once `deadline` has passed first, or `CancellationError` once the
/// caller is cancelled; the task goes on either way (other callers may be waiting for it). Without a deadline, simply
/// the task's value.
func waitForValue<T: Sendable>(of task: Task<T, any Error>, by deadline: ContinuousClock.Instant?) async throws -> T {
    guard let deadline else { return try await task.value }
    let outcome = FirstOutcome<T>()
    // Relays the task's value; ends with it (the connect it waits for is itself bounded).
    Task {
        do {
            outcome.resolve(.success(try await task.value))
        } catch {
            outcome.resolve(.failure(error))
        }
    }
    let timer = Task {
        // Cancelled once the value came: then it resolves nothing.
        guard (try? await Task.sleep(until: deadline, clock: .continuous)) != nil else { return }
        outcome.resolve(.failure(APNsFailure.deadlinePassed))
    }
    defer { timer.cancel() }
    return try await withTaskCancellationHandler {
        try await outcome.value()
    } onCancel: {
        outcome.resolve(.failure(CancellationError()))
    }
}
