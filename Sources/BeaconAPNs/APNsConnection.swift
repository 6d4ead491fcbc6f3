import Foundation
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import NIOSSL
import Synchronization

/// One HTTP/2 connection to APNs.
///
/// It follows the server's `SETTINGS_MAX_CONCURRENT_STREAMS` as it changes (APNs starts token connections at one
/// stream until it has seen a valid JWT), stops taking new work on GOAWAY, and keeps its own provider token:
/// one token per connection, reused until `tokenLifetime`, replaced sooner only when APNs says it expired.
final class APNsConnection: Sendable {
    struct Settings: Sendable {
        var tokenLifetime: Duration
        var pingInterval: Duration
        var pingTimeout: Duration
        var clock: @Sendable () -> Date
    }

    private let channel: any Channel
    private let streams: NIOLoopBound<StreamsHandler>
    private let authority: String
    private let signingKey: APNsSigningKey?
    private let settings: Settings
    let state: ConnectionState

    private init(
        channel: any Channel, streams: NIOLoopBound<StreamsHandler>, authority: String, signingKey: APNsSigningKey?,
        settings: Settings, state: ConnectionState
    ) {
        self.channel = channel
        self.streams = streams
        self.authority = authority
        self.signingKey = signingKey
        self.settings = settings
        self.state = state
    }

    static func connect(
        to endpoint: APNsEndpoint, credentials: APNsCredentials, settings: Settings, group: any EventLoopGroup
    ) async throws -> APNsConnection {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.applicationProtocols = ["h2"]
        if let roots = endpoint.trustRoots { tls.trustRoots = .certificates(roots) }
        var signingKey: APNsSigningKey?
        switch credentials {
        case .token(let key): signingKey = key
        case .certificate(let chain, let key):
            tls.certificateChain = chain.map { .certificate($0) }
            tls.privateKey = .privateKey(key)
        }
        let context = try NIOSSLContext(configuration: tls)
        let state = ConnectionState()
        let isAddress = (try? SocketAddress(ipAddress: endpoint.host, port: 0)) != nil
        let (channel, streams) = try await ClientBootstrap(group: group)
            .connectTimeout(.seconds(10))
            .channelOption(ChannelOptions.socketOption(.tcp_nodelay), value: 1)
            .connect(host: endpoint.host, port: endpoint.port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    let streams = StreamsHandler(connection: state)
                    try sync.addHandlers([
                        NIOSSLClientHandler(context: context, serverHostname: isAddress ? nil : endpoint.host),
                        FlushCoalescingHandler(),
                        NIOHTTP2Handler(mode: .client, connectionConfiguration: StreamsHandler.http2Configuration),
                        ConnectionEventsHandler(state: state, pingInterval: settings.pingInterval, pingTimeout: settings.pingTimeout),
                        streams,
                    ])
                    return (channel, NIOLoopBound(streams, eventLoop: channel.eventLoop))
                }
            }
        return APNsConnection(
            channel: channel, streams: streams, authority: endpoint.host, signingKey: signingKey, settings: settings, state: state)
    }

    /// Sends one notification on its own stream, once its turn for a stream slot comes (within `waitTimeout`).
    /// Answers or throws `APNsFailure` within `timeout` of the stream opening; an `ExpiredProviderToken` answer
    /// replaces the token that failed (unless another request already did) and retries once.
    func send(
        _ notification: APNsNotification, timeout: Duration, waitTimeout: Duration, stillWanted: (@Sendable () async -> Bool)?
    ) async throws -> APNsAccepted {
        try await state.waitForTurn(timeout: waitTimeout)
        defer { if state.releaseStream() { close(reason: "drained after GOAWAY or replacement") } }
        if let stillWanted, !(await stillWanted()) { throw APNsFailure.withdrawn }
        let token = try signingKey.map { try providerToken($0, replacing: nil) }
        do {
            return try await send(notification, token: token, timeout: timeout)
        } catch let failure as APNsFailure {
            guard case .rejected(403, .expiredProviderToken, _, _) = failure, let signingKey else { throw failure }
            return try await send(notification, token: try providerToken(signingKey, replacing: token), timeout: timeout)
        }
    }

    private func send(_ notification: APNsNotification, token: String?, timeout: Duration) async throws -> APNsAccepted {
        var headers: HPACKHeaders = [
            ":method": "POST", ":scheme": "https", ":path": "/3/device/\(notification.deviceToken)", ":authority": authority,
            "apns-topic": notification.topic, "apns-push-type": notification.pushType.rawValue,
            "apns-id": notification.apnsID.uuidString.lowercased(),
        ]
        if let priority = notification.priority { headers.add(name: "apns-priority", value: String(priority)) }
        if let expiration = notification.expiration { headers.add(name: "apns-expiration", value: String(expiration)) }
        if let collapseID = notification.collapseID { headers.add(name: "apns-collapse-id", value: collapseID) }
        if let token { headers.add(name: "authorization", value: "bearer " + token, indexing: .indexable) }
        // One hop to the event loop, where the request is written on a new stream.
        let response = channel.eventLoop.makePromise(of: StreamResponse.self)
        let request = StreamsHandler.Request(headers: headers, body: ByteBuffer(bytes: notification.payload), timeout: timeout, response: response)
        let streams = self.streams
        channel.eventLoop.execute { streams.value.open(request) }
        let answer: StreamResponse
        do {
            answer = try await response.futureResult.get()
            state.markAnswered()
        } catch APNsFailure.timeout {
            // No answer in time: find out whether the connection itself is dead rather than wait for TCP to say so.
            channel.triggerUserOutboundEvent(ConnectionEventsHandler.Probe(), promise: nil)
            throw APNsFailure.timeout
        } catch let failure as APNsFailure {
            if case .connectionLost(let why) = failure { throw APNsFailure.connectionLost(await lossReason(default: why)) }
            throw failure
        } catch {
            throw APNsFailure.connectionLost(await lossReason(default: "\(error)"))
        }
        let apnsID = answer.headers.first(name: "apns-id") ?? notification.apnsID.uuidString.lowercased()
        if answer.status == 200 {
            return APNsAccepted(apnsID: apnsID, uniqueID: answer.headers.first(name: "apns-unique-id"))
        }
        let error = try? JSONDecoder().decode(ErrorBody.self, from: Data(answer.body.readableBytesView))
        throw APNsFailure.rejected(status: answer.status, reason: error.map { APNsReason($0.reason) }, apnsID: apnsID, timestamp: error?.timestamp)
    }

    /// Why a stream ended without an answer. A GOAWAY closes streams and is reported to `ConnectionEventsHandler`
    /// in the same event-loop tick, so after one hop through the event loop its reason is known.
    private func lossReason(default fallback: String) async -> String {
        try? await channel.eventLoop.submit {}.get()
        return state.goAwayReason.map { "GOAWAY: \($0) (\(fallback))" } ?? state.closedReason ?? fallback
    }

    private struct ErrorBody: Decodable {
        var reason: String
        var timestamp: Int64?
    }

    /// The connection's provider token, made anew when it is older than `tokenLifetime` or is the `failed` one
    /// (several requests hearing `ExpiredProviderToken` at once replace it once: APNs refuses frequent updates).
    private func providerToken(_ key: APNsSigningKey, replacing failed: String?) throws -> String {
        let now = settings.clock()
        return try state.token { current in
            if let current, current.value != failed, now.timeIntervalSince(current.issuedAt) < settings.tokenLifetime.seconds {
                return nil
            }
            // The configured clock is code, not input; a reading that is no instant (NaN, ±∞, beyond Int64) still
            // fails this send rather than trapping.
            guard let issuedAt = Int64(exactly: now.timeIntervalSince1970.rounded(.down)) else {
                throw APNsFailure.connectionLost("clock reading \(now.timeIntervalSince1970) cannot date a provider token")
            }
            return (try key.token(issuedAt: issuedAt), now)
        }
    }

    var isUsable: Bool { state.isUsable }
    var inFlight: Int { state.inFlight }

    func close() async {
        state.markClosed(reason: "closed by client")
        try? await channel.close()
    }

    /// Takes no new requests and closes once those in flight are answered (each within its timeout).
    func closeWhenDrained() {
        if state.closeWhenDrained() { close(reason: "closed by client") }
    }

    private func close(reason: String) {
        state.markClosed(reason: reason)
        channel.close(promise: nil)
    }
}

/// The mutable side of a connection: stream slots, SETTINGS, GOAWAY, provider token.
final class ConnectionState: TurnQueue {
    private struct State {
        /// APNs allows one stream until it has seen a valid token; SETTINGS raises it.
        var maxStreams = 1
        var inFlight = 0
        var waiters = Waiters()
        var closedReason: String?
        var goAwayReason: String?
        /// Retired: close once the last stream in flight ends.
        var draining = false
        var token: (value: String, issuedAt: Date)?
        var lastActivity = ContinuousClock.now
        var hasAnswered = false

        var unusableReason: String? { closedReason ?? goAwayReason ?? (draining ? "connection retired" : nil) }
    }

    private let state = Mutex(State())

    var isUsable: Bool { state.withLock { $0.unusableReason == nil } }
    var inFlight: Int { state.withLock { $0.inFlight } }
    var maxStreams: Int { state.withLock { $0.maxStreams } }
    var goAwayReason: String? { state.withLock { $0.goAwayReason } }
    var closedReason: String? { state.withLock { $0.closedReason } }
    /// Whether APNs answered anything on this connection (a connection that never did counts as a failed one).
    var hasAnswered: Bool { state.withLock { $0.hasAnswered } }

    func markAnswered() {
        state.withLock { $0.hasAnswered = true }
    }
    var idleSince: ContinuousClock.Instant { state.withLock { $0.inFlight == 0 ? $0.lastActivity : .now } }

    func takeTurnIfFree() -> Result<Void, APNsFailure>? {
        state.withLock { Self.takeStream(&$0) }
    }

    func takeTurnOrQueue(_ waiter: Waiter) -> Result<Void, any Error>? {
        state.withLock { state in
            if let now = Self.takeStream(&state) { return now.mapError { $0 } }
            if Task.isCancelled { return .failure(CancellationError()) }
            state.waiters.append(waiter)
            return nil
        }
    }

    /// Ends the waits for a stream whose deadline has passed with `APNsFailure.timeout`.
    func expireOverdue() {
        let overdue = state.withLock { $0.waiters.removeOverdue(now: .now) }
        for waiter in overdue { waiter.resume(throwing: APNsFailure.timeout) }
    }

    private static func takeStream(_ state: inout State) -> Result<Void, APNsFailure>? {
        if let reason = state.unusableReason { return .failure(.connectionLost(reason)) }
        guard state.inFlight < state.maxStreams else { return nil }
        state.inFlight += 1
        state.lastActivity = .now
        return .success(())
    }

    func withdraw(_ id: UInt64) -> CheckedContinuation<Void, any Error>? {
        state.withLock { $0.waiters.remove(id) }
    }

    /// Ends a stream; true when it was the last of a connection that is to close once drained.
    func releaseStream() -> Bool {
        let (next, drained) = state.withLock { state -> (CheckedContinuation<Void, any Error>?, Bool) in
            state.lastActivity = .now
            if state.inFlight <= state.maxStreams, let next = state.waiters.popFirst() {
                return (next, false)  // hand the slot over
            }
            state.inFlight -= 1
            return (nil, state.draining && state.inFlight == 0)
        }
        next?.resume()
        return drained
    }

    /// Takes no new streams; true when none is in flight (close now), else the last one to end closes it.
    func closeWhenDrained() -> Bool {
        let (waiters, idle) = state.withLock { state in
            state.draining = true
            return (state.waiters.removeAll(), state.inFlight == 0)
        }
        for waiter in waiters { waiter.resume(throwing: APNsFailure.connectionLost("connection retired")) }
        return idle
    }

    func updateMaxStreams(_ value: Int) {
        let woken = state.withLock { state -> [CheckedContinuation<Void, any Error>] in
            state.maxStreams = max(1, value)
            var woken: [CheckedContinuation<Void, any Error>] = []
            while state.inFlight < state.maxStreams, let next = state.waiters.popFirst() {
                state.inFlight += 1
                woken.append(next)
            }
            return woken
        }
        for waiter in woken { waiter.resume() }
    }

    func markGoingAway(reason: String) {
        let waiters = state.withLock { state in
            state.goAwayReason = state.goAwayReason ?? reason
            return state.waiters.removeAll()
        }
        for waiter in waiters { waiter.resume(throwing: APNsFailure.connectionLost("GOAWAY: \(reason)")) }
    }

    func markClosed(reason: String) {
        let waiters = state.withLock { state in
            state.closedReason = state.closedReason ?? reason
            return state.waiters.removeAll()
        }
        for waiter in waiters { waiter.resume(throwing: APNsFailure.connectionLost(reason)) }
    }

    /// Reads the token; `refresh` returns a replacement when the current one must not be used.
    func token(_ refresh: ((value: String, issuedAt: Date)?) throws -> (String, Date)?) throws -> String {
        try state.withLock { state in
            if let replacement = try refresh(state.token) { state.token = (replacement.0, replacement.1) }
            guard let token = state.token else { throw APNsFailure.connectionLost("no provider token") }
            return token.value
        }
    }
}

/// Watches connection-level frames: SETTINGS (stream limit), GOAWAY, closure. PINGs the connection when it has
/// been idle for `pingInterval` or when asked to (`Probe`, after a request timed out), and closes it when the PING
/// is not acknowledged within `pingTimeout`: a dead TCP path would otherwise look usable until the OS gives up.
final class ConnectionEventsHandler: ChannelDuplexHandler, @unchecked Sendable {
    typealias InboundIn = HTTP2Frame
    typealias OutboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    /// Asks for a PING now (sent with `triggerUserOutboundEvent`).
    struct Probe {}

    /// How often waits for a stream are checked against their deadline.
    static let sweepInterval = TimeAmount.milliseconds(50)

    let state: ConnectionState
    let pingInterval: Duration
    let pingTimeout: Duration
    // Touched only on the connection's event loop.
    private var unacknowledgedPing: Scheduled<Void>?
    private var timers: [RepeatedTask] = []

    init(state: ConnectionState, pingInterval: Duration, pingTimeout: Duration) {
        self.state = state
        self.pingInterval = pingInterval
        self.pingTimeout = pingTimeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let sweep = context.eventLoop.scheduleRepeatedTask(initialDelay: Self.sweepInterval, delay: Self.sweepInterval) { [state] _ in
            state.expireOverdue()
        }
        let interval = TimeAmount.nanoseconds(max(pingInterval.nanoseconds, 1_000_000))
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        let pinger = context.eventLoop.scheduleRepeatedTask(initialDelay: interval, delay: interval) { [state, pingInterval] _ in
            let (handler, context) = loopBound.value
            if context.channel.isActive, state.idleSince.duration(to: .now) >= pingInterval { handler.ping(context: context) }
        }
        timers = [sweep, pinger]
    }

    /// The channel closed, whether or not it ever became active (a failed connect never does): the timers stop with it.
    func handlerRemoved(context: ChannelHandlerContext) {
        for timer in timers { timer.cancel() }
        timers = []
        unacknowledgedPing?.cancel()
        unacknowledgedPing = nil
        state.markClosed(reason: state.goAwayReason ?? "connection closed")
    }

    private func ping(context: ChannelHandlerContext) {
        guard unacknowledgedPing == nil, context.channel.isActive else { return }
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        unacknowledgedPing = context.eventLoop.scheduleTask(in: .nanoseconds(pingTimeout.nanoseconds)) { [state, pingTimeout] in
            let (handler, context) = loopBound.value
            handler.unacknowledgedPing = nil
            state.markClosed(reason: "no PING acknowledgement within \(pingTimeout)")
            context.close(promise: nil)
        }
        context.writeAndFlush(wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .ping(HTTP2PingData(), ack: false))), promise: nil)
    }

    func triggerUserOutboundEvent(context: ChannelHandlerContext, event: Any, promise: EventLoopPromise<Void>?) {
        guard event is Probe else { return context.triggerUserOutboundEvent(event, promise: promise) }
        ping(context: context)
        promise?.succeed()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.payload {
        case .settings(.settings(let settings)):
            if let limit = settings.last(where: { $0.parameter == .maxConcurrentStreams }) {
                state.updateMaxStreams(limit.value)
            }
        case .ping(_, ack: true):
            unacknowledgedPing?.cancel()
            unacknowledgedPing = nil
        case .goAway(_, let code, let debugData):
            var reason = "\(code)"
            if var debugData, let text = debugData.readString(length: debugData.readableBytes),
                let json = try? JSONDecoder().decode([String: String].self, from: Data(text.utf8)), let apnsReason = json["reason"]
            {
                reason = apnsReason
            }
            state.markGoingAway(reason: reason)
        default:
            break
        }
        context.fireChannelRead(data)
    }

    func channelInactive(context: ChannelHandlerContext) {
        unacknowledgedPing?.cancel()
        unacknowledgedPing = nil
        state.markClosed(reason: state.goAwayReason ?? "connection closed")
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A stream opened after APNs' GOAWAY, or one stream's protocol error, concerns that stream alone: the others still
        // get their answers.
        if error is NIOHTTP2Errors.CreatedStreamAfterGoaway || error is NIOHTTP2Errors.StreamError {
            context.fireErrorCaught(error)
            return
        }
        state.markClosed(reason: "\(error)")
        context.close(promise: nil)
    }
}

/// Makes the flushes of one event-loop turn one flush. HTTP/2 flushes the connection for every stream it opens, and each
/// flush is a TLS flush and a `write` system call; under load, the streams opened in one turn leave in one write.
/// (Between TLS and HTTP/2: what is written in the meantime waits at most until the tasks queued before it have run.)
final class FlushCoalescingHandler: ChannelOutboundHandler {
    typealias OutboundIn = Any
    // Touched only on the connection's event loop.
    private var flushQueued = false

    func flush(context: ChannelHandlerContext) {
        guard !flushQueued else { return }
        flushQueued = true
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        context.eventLoop.execute {
            let (handler, context) = loopBound.value
            handler.flushQueued = false
            context.flush()
        }
    }

    /// What waits for the turn's flush leaves before the close (an HTTP/2 GOAWAY written just before it, say).
    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        if flushQueued {
            flushQueued = false
            context.flush()
        }
        context.close(mode: mode, promise: promise)
    }
}

/// A response as read from one stream.
struct StreamResponse: Sendable {
    var status: Int
    var headers: HPACKHeaders
    var body: ByteBuffer
}

/// The connection's request streams, driven as HTTP/2 frames on the connection itself: a request is a HEADERS and a
/// DATA frame on a new stream id, its answer the frames that come back on that id. (NIOHTTP2's multiplexer makes a child
/// channel with its own pipeline for every stream: half of the client's CPU per notification in `perf`.)
///
/// Each open stream ends exactly once: answered, reset, closed by the peer or the connection, timed out (then reset), or
/// refused before it was written. Answers' DATA is handed back to the connection's flow-control window as it is read; a
/// stream's own window (64 KiB) is not refilled: APNs answers are a few hundred bytes, and a larger one waits for the
/// stream's timeout.
final class StreamsHandler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    struct Request {
        var headers: HPACKHeaders
        var body: ByteBuffer
        var timeout: Duration
        var response: EventLoopPromise<StreamResponse>
    }

    private struct OpenStream {
        var response: EventLoopPromise<StreamResponse>
        var deadline: NIODeadline
        var status: Int?
        var headers = HPACKHeaders()
        var body = ByteBuffer()
    }

    /// How often open streams are checked against their deadline.
    static let sweepInterval = TimeAmount.milliseconds(50)
    /// The connection-level window this side keeps open for answers (HTTP/2's initial 65,535 bytes).
    static let connectionWindow = 65_535

    /// NIOHTTP2 remembers this many streams this side reset, and takes a late answer on one of them for a protocol
    /// error that closes the connection: a burst of timeouts (each reset) can be as large as the streams in flight.
    /// Header blocks are not validated again by NIOHTTP2 (9 % of the client's CPU in `perf`): ours have constant names and
    /// values `APNsNotification.unwritableField` checked, and of an answer only `:status` (parsed as a number) and the
    /// `apns-id` / `apns-unique-id` values are read.
    static var http2Configuration: NIOHTTP2Handler.ConnectionConfiguration {
        var configuration = NIOHTTP2Handler.ConnectionConfiguration()
        configuration.maximumRecentlyResetStreams = 4096
        configuration.headerBlockValidation = .disabled
        return configuration
    }

    let connection: ConnectionState
    // Touched only on the connection's event loop.
    private var context: ChannelHandlerContext?
    private var streams: [HTTP2StreamID: OpenStream] = [:]
    private var nextStreamID: Int32 = 1
    private var sweep: RepeatedTask?
    /// Connection window granted in WINDOW_UPDATE frames NIOHTTP2 has not written yet (its window counts them once written).
    private var windowGrantedAhead = 0

    init(connection: ConnectionState) {
        self.connection = connection
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        sweep = context.eventLoop.scheduleRepeatedTask(initialDelay: Self.sweepInterval, delay: Self.sweepInterval) { _ in
            loopBound.value.expireOverdue()
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        sweep?.cancel()
        sweep = nil
        failAll("stream closed without an answer")
        self.context = nil
    }

    /// Writes `request` on a new stream; its answer or failure completes `request.response`.
    func open(_ request: Request) {
        // A GOAWAY read before this turn came (the event loop handles I/O before queued tasks, so under load this is the
        // usual order): a stream now would be created after GOAWAY, a connection error in swift-nio-http2. Nothing was
        // sent, so it fails as unprocessed (safe to send elsewhere).
        if let reason = connection.goAwayReason {
            return request.response.fail(APNsFailure.connectionLost("GOAWAY: \(reason) (not sent)"))
        }
        if let reason = connection.closedReason {
            return request.response.fail(APNsFailure.connectionLost("\(reason) (not sent)"))
        }
        guard let context, context.channel.isActive else {
            return request.response.fail(APNsFailure.connectionLost("connection closed (not sent)"))
        }
        let id = HTTP2StreamID(nextStreamID)
        let (next, overflow) = nextStreamID.addingReportingOverflow(2)
        if overflow {
            // 2^30 streams on one connection: it takes no more, and the next send opens another connection.
            connection.markGoingAway(reason: "stream ids used up")
        } else {
            nextStreamID = next
        }
        streams[id] = OpenStream(response: request.response, deadline: .now() + .nanoseconds(request.timeout.nanoseconds))
        let headersWritten = context.eventLoop.makePromise(of: Void.self)
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        headersWritten.futureResult.whenFailure { error in
            loopBound.value.finish(id, .failure(APNsFailure.connectionLost("\(error) (not sent)")))
        }
        context.write(wrapOutboundOut(HTTP2Frame(streamID: id, payload: .headers(.init(headers: request.headers)))), promise: headersWritten)
        context.writeAndFlush(
            wrapOutboundOut(HTTP2Frame(streamID: id, payload: .data(.init(data: .byteBuffer(request.body), endStream: true)))), promise: nil)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        let id = frame.streamID
        guard streams[id] != nil else { return }  // the connection's own frames, or a stream already ended
        switch frame.payload {
        case .headers(let block):
            if streams[id]?.status == nil {
                streams[id]?.headers = block.headers
                streams[id]?.status = block.headers.first(name: ":status").flatMap { Int($0) }
            }
            if block.endStream { complete(id) }
        case .data(let frame):
            if case .byteBuffer(var buffer) = frame.data { streams[id]?.body.writeBuffer(&buffer) }
            if frame.endStream { complete(id) }
        case .rstStream(let code):
            finish(id, .failure(APNsFailure.connectionLost("stream reset: \(code)")))
        default:
            break
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let closed = event as? StreamClosedEvent {
            // After the frames that ended it: a stream still open here ended without an answer (a GOAWAY that did not
            // take it, a reset).
            let why = closed.reason.map { "stream reset: \($0)" } ?? "stream closed without an answer"
            finish(closed.streamID, .failure(APNsFailure.connectionLost(why)))
        } else if let window = event as? NIOHTTP2WindowUpdatedEvent, window.streamID == .rootStream, let inbound = window.inboundWindowSize,
            inbound + windowGrantedAhead <= Self.connectionWindow / 2
        {
            // Answers' bodies were read: the window they used is open again — once, however many DATA frames come
            // before the WINDOW_UPDATE is written (NIOHTTP2 counts it when it leaves its buffer, this until the write
            // completes: counted twice in between, which can only delay the next grant).
            let increment = Self.connectionWindow - inbound - windowGrantedAhead
            windowGrantedAhead += increment
            let written = context.eventLoop.makePromise(of: Void.self)
            let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
            written.futureResult.whenComplete { _ in loopBound.value.windowGrantedAhead -= increment }
            context.writeAndFlush(
                wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: increment))), promise: written)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelInactive(context: ChannelHandlerContext) {
        failAll("stream closed without an answer")
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // Errors of the whole connection close it (`ConnectionEventsHandler`); one stream's error ends that stream.
        if let streamError = error as? NIOHTTP2Errors.StreamError {
            finish(streamError.streamID, .failure(APNsFailure.connectionLost("\(streamError.baseError)")))
        }
        context.fireErrorCaught(error)
    }

    private func complete(_ id: HTTP2StreamID) {
        guard let stream = streams[id] else { return }
        guard let status = stream.status else {
            return finish(id, .failure(APNsFailure.connectionLost("response without :status")))
        }
        finish(id, .success(StreamResponse(status: status, headers: stream.headers, body: stream.body)))
    }

    private func finish(_ id: HTTP2StreamID, _ result: Result<StreamResponse, any Error>) {
        guard let stream = streams.removeValue(forKey: id) else { return }
        stream.response.completeWith(result)
    }

    /// Streams past their deadline fail with `.timeout` and are reset, so that a late answer is not waited for.
    private func expireOverdue() {
        let now = NIODeadline.now()
        let overdue = streams.compactMap { $0.value.deadline <= now ? $0.key : nil }
        guard !overdue.isEmpty else { return }
        for id in overdue {
            finish(id, .failure(APNsFailure.timeout))
            context?.write(wrapOutboundOut(HTTP2Frame(streamID: id, payload: .rstStream(.cancel))), promise: nil)
        }
        context?.flush()
    }

    private func failAll(_ reason: String) {
        let open = streams
        streams = [:]
        for stream in open.values { stream.response.fail(APNsFailure.connectionLost(reason)) }
    }
}
