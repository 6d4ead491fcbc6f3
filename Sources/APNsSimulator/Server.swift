import BeaconAPNs
import Foundation
import Logging
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import NIOSSL
import NIOTLS
import X509

/// The APNs side of the simulator: TLS + HTTP/2, one stream per notification, Apple's answers.
struct APNsListener: Sendable {
    let state: SimulatorState
    let environment: APNsEnvironment
    let maxConcurrentStreams: Int
    let clock: @Sendable () -> Date
    let logger: Logger

    func bind(host: String, port: Int, group: any EventLoopGroup) async throws -> any Channel {
        try await ServerBootstrap(group: group)
            .serverChannelOption(ChannelOptions.backlog, value: 256)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(ChannelOptions.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let auth = ConnectionAuth()
                    let context = state.tlsContext.withLock { $0 }
                    let sync = channel.pipeline.syncOperations
                    try sync.addHandler(StallFault(state: state))
                    try sync.addHandler(NIOSSLServerHandler(context: context))
                    try sync.addHandler(ClientCertificateReader(auth: auth, state: state))
                    var connection = NIOHTTP2Handler.ConnectionConfiguration()
                    connection.initialSettings = [
                        HTTP2Setting(parameter: .maxConcurrentStreams, value: 1),
                        HTTP2Setting(parameter: .maxHeaderListSize, value: 8000),
                    ]
                    _ = try sync.configureHTTP2Pipeline(
                        mode: .server, connectionConfiguration: connection, streamConfiguration: .init()
                    ) { stream in
                        stream.eventLoop.makeCompletedFuture {
                            try stream.pipeline.syncOperations.addHandler(
                                StreamHandler(
                                    auth: auth, state: state, environment: environment, maxConcurrentStreams: maxConcurrentStreams,
                                    clock: clock))
                        }
                    }
                }
            }
            .bind(host: host, port: port).get()
    }
}

/// The `stall` fault: a connection that was open when it was set drops every byte it receives, for good.
final class StallFault: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer

    let state: SimulatorState
    let generation: Int

    init(state: SimulatorState) {
        self.state = state
        generation = state.data.withLock { $0.stallGeneration }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if state.data.withLock({ $0.stallGeneration == generation }) { context.fireChannelRead(data) }
    }
}

/// After the TLS handshake, notes the client certificate's topics (certificate auth) on the connection.
final class ClientCertificateReader: ChannelInboundHandler, Sendable {
    typealias InboundIn = Any

    let auth: ConnectionAuth
    let state: SimulatorState

    init(auth: ConnectionAuth, state: SimulatorState) {
        self.auth = auth
        self.state = state
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case TLSUserEvent.handshakeCompleted = event,
            let peer = try? context.pipeline.syncOperations.nioSSL_peerCertificate(),
            let certificate = try? Certificate(derEncoded: peer.toDERBytes()),
            let authority = state.authority(issuing: certificate)
        {
            auth.state.withLock {
                $0.certificateTopics = authority.topics
                $0.certificateEnvironment = authority.environment
            }
        }
        context.fireUserInboundEventTriggered(event)
    }
}

/// One request stream: gathers HEADERS and DATA, validates, applies faults, answers.
final class StreamHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = HTTP2Frame.FramePayload
    typealias OutboundOut = HTTP2Frame.FramePayload

    let auth: ConnectionAuth
    let state: SimulatorState
    let environment: APNsEnvironment
    let maxConcurrentStreams: Int
    let clock: @Sendable () -> Date
    // Touched only on the stream's event loop.
    private var headers = HPACKHeaders()
    private var body: [UInt8] = []

    init(
        auth: ConnectionAuth, state: SimulatorState, environment: APNsEnvironment, maxConcurrentStreams: Int,
        clock: @escaping @Sendable () -> Date
    ) {
        self.auth = auth
        self.state = state
        self.environment = environment
        self.maxConcurrentStreams = maxConcurrentStreams
        self.clock = clock
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .headers(let block):
            if headers.isEmpty { headers = block.headers } else { headers.add(contentsOf: block.headers) }
            if block.endStream { respond(context: context) }
        case .data(let frame):
            if case .byteBuffer(var buffer) = frame.data, let bytes = buffer.readBytes(length: buffer.readableBytes) {
                body.append(contentsOf: bytes)
            }
            if frame.endStream { respond(context: context) }
        default:
            break
        }
    }

    private func respond(context: ChannelHandlerContext) {
        let now = clock()
        let stream = try? context.channel.syncOptions?.getOption(HTTP2StreamChannelOptions.streamID)
        let connectionRequest = auth.state.withLock { state -> Int? in
            // A stream opened after this connection's GOAWAY is refused unprocessed, as APNs does.
            if let last = state.lastStreamID, let stream, stream > last { return nil }
            state.requests += 1
            state.unanswered += 1
            if let stream { state.highestStreamID = max(state.highestStreamID ?? stream, stream) }
            return state.requests
        }
        guard let connectionRequest else {
            context.close(promise: nil)
            return
        }
        let faults = state.data.withLock { data in
            data.requestsReceived += 1
            return data.faults
        }
        if let after = faults.drainAfter, connectionRequest == after, let parent = context.channel.parent,
            let last = auth.state.withLock({ state in
                state.draining = true
                state.lastStreamID = state.highestStreamID  // every request taken so far, whatever order they were read in
                return state.lastStreamID
            })
        {
            parent.writeAndFlush(
                HTTP2Frame(streamID: .rootStream, payload: .goAway(lastStreamID: last, errorCode: .noError, opaqueData: nil)), promise: nil)
        }
        if let after = faults.goAwayAfter, connectionRequest > after {
            goAway(context: context, reason: faults.goAwayReason ?? "Shutdown")
            return
        }
        if let after = faults.resetAfter, connectionRequest > after {
            context.channel.parent?.close(promise: nil)
            return
        }
        if faults.neverAnswer == true { return }

        let validator = RequestValidator(state: state, environment: environment, now: now)
        var (answer, delivery) = validator.validate(headers: headers, body: body, connection: auth)
        if case .accepted = answer, let injected = injectedFailure(for: delivery!.deviceToken, faults: faults, now: now) {
            answer = .rejected(injected, apnsID: delivery?.apnsID)
            delivery = nil
        }
        if let delivery { state.data.withLock { $0.deliveries.append(delivery) } }

        let write: @Sendable () -> Void
        let loopBound = NIOLoopBound((context, self), eventLoop: context.eventLoop)
        let environment = self.environment
        switch answer {
        case .accepted(let apnsID):
            write = {
                let (context, handler) = loopBound.value
                var headers: HPACKHeaders = [":status": "200", "apns-id": apnsID]
                if environment == .development { headers.add(name: "apns-unique-id", value: UUID().uuidString.lowercased()) }
                context.writeAndFlush(handler.wrapOutboundOut(.headers(.init(headers: headers, endStream: true))), promise: nil)
            }
        case .rejected(let reason, let apnsID, let timestamp):
            write = {
                let (context, handler) = loopBound.value
                var headers: HPACKHeaders = [":status": String(reason.status), "content-type": "application/json"]
                if let apnsID { headers.add(name: "apns-id", value: apnsID) }
                var json = #"{"reason":"\#(reason)""#
                if let timestamp { json += #","timestamp":\#(timestamp)"# }
                json += "}"
                context.write(handler.wrapOutboundOut(.headers(.init(headers: headers))), promise: nil)
                context.writeAndFlush(
                    handler.wrapOutboundOut(.data(.init(data: .byteBuffer(ByteBuffer(string: json)), endStream: true))), promise: nil)
            }
        }
        let auth = self.auth
        let parent = context.channel.parent
        let finalAnswer = answer
        let raiseLimit: @Sendable () -> Void = {
            let (context, handler) = loopBound.value
            handler.raiseStreamLimitOnFirstSuccess(finalAnswer, context: context)
        }
        let answerThenDrain: @Sendable () -> Void = {
            // As APNs: the stream limit rises once the first authenticated request is answered.
            raiseLimit()
            write()
            let drained = auth.state.withLock { state in
                state.unanswered -= 1
                return state.draining && state.unanswered == 0
            }
            // The answer reaches the connection within this event-loop tick: close on the next.
            if drained, let parent { parent.eventLoop.execute { parent.close(promise: nil) } }
        }
        if let delay = faults.delayMilliseconds, delay > 0 {
            // Clamped here too: `setFaults` in-process does not go through the control API's validation.
            let milliseconds = Int64(min(delay, SimulatorFaults.maxDelayMilliseconds))
            context.eventLoop.scheduleTask(in: .milliseconds(milliseconds)) { answerThenDrain() }
        } else {
            answerThenDrain()
        }
    }

    /// 429 for listed or over-rate tokens, then the configured status failures.
    private func injectedFailure(for token: String, faults: SimulatorFaults, now: Date) -> APNsReason? {
        state.data.withLock { data in
            if faults.tooManyRequestsTokens?.contains(token) == true { return .tooManyRequests }
            if let limit = faults.maxPerTokenPerSecond {
                let nowMs = Int64(now.timeIntervalSince1970 * 1000)
                var recent = (data.recentByToken[token] ?? []).filter { nowMs - $0 < 1000 }
                recent.append(nowMs)
                data.recentByToken[token] = recent
                if recent.count > limit { return .tooManyRequests }
            }
            if let status = faults.failStatus, data.failuresLeft.map({ $0 > 0 }) ?? true {
                if let left = data.failuresLeft { data.failuresLeft = left - 1 }
                let reason = faults.failReason.map(APNsReason.init) ?? (status == 500 ? .internalServerError : .serviceUnavailable)
                return reason
            }
            return nil
        }
    }

    /// APNs allows one stream until it sees a valid token; then it raises the limit with a new SETTINGS frame.
    private func raiseStreamLimitOnFirstSuccess(_ answer: SimulatorAnswer, context: ChannelHandlerContext) {
        let authenticated: Bool
        switch answer {
        case .accepted: authenticated = true
        case .rejected(let reason, _, _): authenticated = reason.status != 403
        }
        guard authenticated else { return }
        let first = auth.state.withLock { state -> Bool in
            defer { state.authenticated = true }
            return !state.authenticated
        }
        if first {
            let settings = HTTP2Frame(
                streamID: .rootStream,
                payload: .settings(.settings([HTTP2Setting(parameter: .maxConcurrentStreams, value: maxConcurrentStreams)])))
            context.channel.parent?.writeAndFlush(settings, promise: nil)
        }
    }

    private func goAway(context: ChannelHandlerContext, reason: String) {
        guard let parent = context.channel.parent else { return }
        let frame = HTTP2Frame(
            streamID: .rootStream,
            payload: .goAway(lastStreamID: .rootStream, errorCode: .noError, opaqueData: ByteBuffer(string: #"{"reason":"\#(reason)"}"#)))
        parent.writeAndFlush(frame).whenComplete { _ in parent.close(promise: nil) }
    }
}
