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
        var clock: @Sendable () -> Date
    }

    private let channel: any Channel
    private let multiplexer: NIOHTTP2Handler.StreamMultiplexer
    private let authority: String
    private let signingKey: APNsSigningKey?
    private let settings: Settings
    let state: ConnectionState

    private init(
        channel: any Channel, multiplexer: NIOHTTP2Handler.StreamMultiplexer, authority: String, signingKey: APNsSigningKey?,
        settings: Settings, state: ConnectionState
    ) {
        self.channel = channel
        self.multiplexer = multiplexer
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
        let (channel, multiplexer) = try await ClientBootstrap(group: group)
            .connectTimeout(.seconds(10))
            .channelOption(ChannelOptions.socketOption(.tcp_nodelay), value: 1)
            .connect(host: endpoint.host, port: endpoint.port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    try sync.addHandler(NIOSSLClientHandler(context: context, serverHostname: isAddress ? nil : endpoint.host))
                    let multiplexer = try sync.configureHTTP2Pipeline(
                        mode: .client, connectionConfiguration: .init(), streamConfiguration: .init()
                    ) { $0.eventLoop.makeSucceededVoidFuture() }
                    try sync.addHandler(ConnectionEventsHandler(state: state, pingInterval: settings.pingInterval))
                    return (channel, multiplexer)
                }
            }
        return APNsConnection(
            channel: channel, multiplexer: multiplexer, authority: endpoint.host, signingKey: signingKey, settings: settings, state: state)
    }

    /// Sends one notification on its own stream; answers or throws `APNsFailure`.
    /// Answers or throws `APNsFailure` within `timeout` of the stream opening.
    func send(_ notification: APNsNotification, timeout: Duration, forceNewToken: Bool = false) async throws -> APNsAccepted {
        try await state.acquireStream()
        defer { state.releaseStream() }
        var headers: HPACKHeaders = [
            ":method": "POST", ":scheme": "https", ":path": "/3/device/\(notification.deviceToken)", ":authority": authority,
            "apns-topic": notification.topic, "apns-push-type": notification.pushType.rawValue,
            "apns-id": notification.apnsID.uuidString.lowercased(),
        ]
        if let priority = notification.priority { headers.add(name: "apns-priority", value: String(priority)) }
        if let expiration = notification.expiration { headers.add(name: "apns-expiration", value: String(expiration)) }
        if let collapseID = notification.collapseID { headers.add(name: "apns-collapse-id", value: collapseID) }
        if let signingKey {
            headers.add(name: "authorization", value: "bearer " + (try providerToken(signingKey, forceNew: forceNewToken)), indexing: .indexable)
        }
        // One hop to the event loop: the stream is created, and its handler writes the request once it is active.
        let response = channel.eventLoop.makePromise(of: StreamResponse.self)
        let request = (headers, ByteBuffer(bytes: notification.payload))
        let created = channel.eventLoop.makePromise(of: (any Channel).self)
        created.futureResult.whenFailure { error in response.fail(APNsFailure.connectionLost("could not open a stream: \(error)")) }
        multiplexer.createStreamChannel(promise: created) { stream in
            stream.eventLoop.makeCompletedFuture {
                try stream.pipeline.syncOperations.addHandler(StreamResponseHandler(request: request, response: response, timeout: timeout))
            }
        }
        let answer: StreamResponse
        do {
            answer = try await response.futureResult.get()
            state.markAnswered()
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
        return state.goAwayReason.map { "GOAWAY: \($0)" } ?? state.closedReason ?? fallback
    }

    private struct ErrorBody: Decodable {
        var reason: String
        var timestamp: Int64?
    }

    /// The connection's provider token, made anew when it is older than `tokenLifetime` or when forced.
    private func providerToken(_ key: APNsSigningKey, forceNew: Bool) throws -> String {
        let now = settings.clock()
        return try state.token { current in
            if let current, !forceNew, now.timeIntervalSince(current.issuedAt) < settings.tokenLifetime.seconds {
                return nil
            }
            let issuedAt = now
            return (try key.token(issuedAt: Int64(issuedAt.timeIntervalSince1970)), issuedAt)
        }
    }

    var isUsable: Bool { state.isUsable }
    var inFlight: Int { state.inFlight }

    func close() async {
        state.markClosed(reason: "closed by client")
        try? await channel.close()
    }
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

/// The mutable side of a connection: stream slots, SETTINGS, GOAWAY, provider token.
final class ConnectionState: Sendable {
    private struct State {
        /// APNs allows one stream until it has seen a valid token; SETTINGS raises it.
        var maxStreams = 1
        var inFlight = 0
        var waiters: [CheckedContinuation<Void, any Error>] = []
        var closedReason: String?
        var goAwayReason: String?
        var token: (value: String, issuedAt: Date)?
        var lastActivity = ContinuousClock.now
        var hasAnswered = false
    }

    private let state = Mutex(State())

    var isUsable: Bool { state.withLock { $0.closedReason == nil && $0.goAwayReason == nil } }
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

    func acquireStream() async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let outcome: Result<Void, APNsFailure>? = state.withLock { state in
                if let reason = state.closedReason ?? state.goAwayReason { return .failure(.connectionLost(reason)) }
                if state.inFlight < state.maxStreams {
                    state.inFlight += 1
                    state.lastActivity = .now
                    return .success(())
                }
                state.waiters.append(continuation)
                return nil
            }
            if let outcome { continuation.resume(with: outcome) }
        }
    }

    func releaseStream() {
        let next = state.withLock { state -> CheckedContinuation<Void, any Error>? in
            state.lastActivity = .now
            guard !state.waiters.isEmpty, state.inFlight <= state.maxStreams else {
                state.inFlight -= 1
                return nil
            }
            return state.waiters.removeFirst()  // hand the slot over
        }
        next?.resume()
    }

    func updateMaxStreams(_ value: Int) {
        let woken = state.withLock { state -> [CheckedContinuation<Void, any Error>] in
            state.maxStreams = max(1, value)
            var woken: [CheckedContinuation<Void, any Error>] = []
            while state.inFlight < state.maxStreams, !state.waiters.isEmpty {
                state.inFlight += 1
                woken.append(state.waiters.removeFirst())
            }
            return woken
        }
        for waiter in woken { waiter.resume() }
    }

    func markGoingAway(reason: String) {
        let waiters = state.withLock { state in
            state.goAwayReason = state.goAwayReason ?? reason
            defer { state.waiters.removeAll() }
            return state.waiters
        }
        for waiter in waiters { waiter.resume(throwing: APNsFailure.connectionLost("GOAWAY: \(reason)")) }
    }

    func markClosed(reason: String) {
        let waiters = state.withLock { state in
            state.closedReason = state.closedReason ?? reason
            defer { state.waiters.removeAll() }
            return state.waiters
        }
        for waiter in waiters { waiter.resume(throwing: APNsFailure.connectionLost(reason)) }
    }

    /// Reads the token; `refresh` returns a replacement when the current one must not be used.
    func token(_ refresh: ((value: String, issuedAt: Date)?) throws -> (String, Date)?) throws -> String {
        try state.withLock { state in
            if let replacement = try refresh(state.token) { state.token = (replacement.0, replacement.1) }
            return state.token!.value
        }
    }
}

/// Watches connection-level frames: SETTINGS (stream limit), GOAWAY, closure; sends PING when idle.
final class ConnectionEventsHandler: ChannelInboundHandler, Sendable {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    let state: ConnectionState
    let pingInterval: Duration

    init(state: ConnectionState, pingInterval: Duration) {
        self.state = state
        self.pingInterval = pingInterval
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let nanos = max(pingInterval.components.seconds, 1) * 1_000_000_000
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        context.eventLoop.scheduleRepeatedTask(initialDelay: .nanoseconds(nanos), delay: .nanoseconds(nanos)) { [state, pingInterval] task in
            let context = loopBound.value
            guard context.channel.isActive else {
                task.cancel()
                return
            }
            if state.idleSince.duration(to: .now) >= pingInterval {
                context.writeAndFlush(NIOAny(HTTP2Frame(streamID: .rootStream, payload: .ping(HTTP2PingData(), ack: false))), promise: nil)
            }
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.payload {
        case .settings(.settings(let settings)):
            if let limit = settings.last(where: { $0.parameter == .maxConcurrentStreams }) {
                state.updateMaxStreams(limit.value)
            }
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
        state.markClosed(reason: state.goAwayReason ?? "connection closed")
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        state.markClosed(reason: "\(error)")
        context.close(promise: nil)
    }
}

/// A response as read from one stream.
struct StreamResponse: Sendable {
    var status: Int
    var headers: HPACKHeaders
    var body: ByteBuffer
}

/// Reads one response on a request stream into a promise; fails it on reset, closure or timeout.
/// (A plain handler rather than `NIOAsyncChannel`: one promise per notification keeps the client's CPU per push low.)
final class StreamResponseHandler: ChannelDuplexHandler, @unchecked Sendable {
    typealias InboundIn = HTTP2Frame.FramePayload
    typealias OutboundIn = HTTP2Frame.FramePayload
    typealias OutboundOut = HTTP2Frame.FramePayload

    private let request: (headers: HPACKHeaders, body: ByteBuffer)
    private let response: EventLoopPromise<StreamResponse>
    private let timeout: Duration
    // Touched only on the stream's event loop.
    private var status: Int?
    private var headers = HPACKHeaders()
    private var body = ByteBuffer()
    private var timer: Scheduled<Void>?
    private var done = false

    init(request: (HPACKHeaders, ByteBuffer), response: EventLoopPromise<StreamResponse>, timeout: Duration) {
        self.request = request
        self.response = response
        self.timeout = timeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        timer = context.eventLoop.scheduleTask(in: .nanoseconds(Int64(timeout.components.seconds) * 1_000_000_000 + timeout.components.attoseconds / 1_000_000_000)) {
            let (handler, context) = loopBound.value
            handler.finish(.failure(APNsFailure.timeout))
            context.close(promise: nil)
        }
    }

    func channelActive(context: ChannelHandlerContext) {
        context.write(wrapOutboundOut(.headers(.init(headers: request.headers))), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.data(.init(data: .byteBuffer(request.body), endStream: true))), promise: nil)
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .headers(let block):
            if status == nil {
                headers = block.headers
                status = block.headers.first(name: ":status").flatMap { Int($0) }
            }
            if block.endStream { complete() }
        case .data(let frame):
            if case .byteBuffer(var buffer) = frame.data { body.writeBuffer(&buffer) }
            if frame.endStream { complete() }
        case .rstStream(let code):
            finish(.failure(APNsFailure.connectionLost("stream reset: \(code)")))
        default:
            break
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        finish(.failure(APNsFailure.connectionLost("stream closed without an answer")))
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        finish(.failure(APNsFailure.connectionLost("\(error)")))
        context.close(promise: nil)
    }

    private func complete() {
        guard let status else {
            finish(.failure(APNsFailure.connectionLost("response without :status")))
            return
        }
        finish(.success(StreamResponse(status: status, headers: headers, body: body)))
    }

    private func finish(_ result: Result<StreamResponse, any Error>) {
        guard !done else { return }
        done = true
        timer?.cancel()
        response.completeWith(result)
    }
}
