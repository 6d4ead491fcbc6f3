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
    private let multiplexer: NIOHTTP2Handler.AsyncStreamMultiplexer<Void>
    private let authority: String
    private let signingKey: APNsSigningKey?
    private let settings: Settings
    let state: ConnectionState

    private init(
        channel: any Channel, multiplexer: NIOHTTP2Handler.AsyncStreamMultiplexer<Void>, authority: String, signingKey: APNsSigningKey?,
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
                    let multiplexer = try sync.configureAsyncHTTP2Pipeline(mode: .client) { $0.eventLoop.makeSucceededVoidFuture() }
                    try sync.addHandler(ConnectionEventsHandler(state: state, pingInterval: settings.pingInterval))
                    return (channel, multiplexer)
                }
            }
        return APNsConnection(
            channel: channel, multiplexer: multiplexer, authority: endpoint.host, signingKey: signingKey, settings: settings, state: state)
    }

    /// Sends one notification on its own stream; answers or throws `APNsFailure`.
    func send(_ notification: APNsNotification, forceNewToken: Bool = false) async throws -> APNsAccepted {
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
        let stream: NIOAsyncChannel<HTTP2Frame.FramePayload, HTTP2Frame.FramePayload>
        do {
            stream = try await multiplexer.openStream { channel in
                channel.eventLoop.makeCompletedFuture {
                    try NIOAsyncChannel<HTTP2Frame.FramePayload, HTTP2Frame.FramePayload>(wrappingChannelSynchronously: channel)
                }
            }
        } catch {
            throw APNsFailure.connectionLost("could not open a stream: \(error)")
        }
        return try await stream.executeThenClose { inbound, outbound in
            do {
                try await outbound.write(.headers(.init(headers: headers)))
                try await outbound.write(.data(.init(data: .byteBuffer(ByteBuffer(bytes: notification.payload)), endStream: true)))
                var status: Int?
                var responseHeaders = HPACKHeaders()
                var body = ByteBuffer()
                var ended = false
                loop: for try await frame in inbound {
                    switch frame {
                    case .headers(let block):
                        if status == nil {
                            responseHeaders = block.headers
                            status = block.headers.first(name: ":status").flatMap { Int($0) }
                        }
                        if block.endStream { ended = true; break loop }
                    case .data(let data):
                        if case .byteBuffer(var buffer) = data.data { body.writeBuffer(&buffer) }
                        if data.endStream { ended = true; break loop }
                    case .rstStream(let code):
                        throw APNsFailure.connectionLost("stream reset: \(code)")
                    default:
                        continue
                    }
                }
                guard ended, let status else { throw APNsFailure.connectionLost(await lossReason(default: "stream closed without an answer")) }
                let apnsID = responseHeaders.first(name: "apns-id") ?? notification.apnsID.uuidString.lowercased()
                if status == 200 {
                    return APNsAccepted(apnsID: apnsID, uniqueID: responseHeaders.first(name: "apns-unique-id"))
                }
                let error = try? JSONDecoder().decode(ErrorBody.self, from: Data(body.readableBytesView))
                throw APNsFailure.rejected(status: status, reason: error.map { APNsReason($0.reason) }, apnsID: apnsID, timestamp: error?.timestamp)
            } catch let failure as APNsFailure {
                throw failure
            } catch {
                throw APNsFailure.connectionLost(await lossReason(default: "\(error)"))
            }
        }
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
    }

    private let state = Mutex(State())

    var isUsable: Bool { state.withLock { $0.closedReason == nil && $0.goAwayReason == nil } }
    var inFlight: Int { state.withLock { $0.inFlight } }
    var maxStreams: Int { state.withLock { $0.maxStreams } }
    var goAwayReason: String? { state.withLock { $0.goAwayReason } }
    var closedReason: String? { state.withLock { $0.closedReason } }
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
