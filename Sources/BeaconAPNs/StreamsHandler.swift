import NIOCore
import NIOHPACK
import NIOHTTP2

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
        /// The last moment the request may be written (its sender's deadline, less the answer's time): past it the request
        /// fails with `APNsFailure.deadlinePassed`, unwritten.
        var writeBy: NIODeadline?
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
        // The last check before the HEADERS: a request written later could still be in flight when its sender's lease on
        // the job runs out, and another sender sends it again.
        if let writeBy = request.writeBy, writeBy <= .now() {
            return request.response.fail(APNsFailure.deadlinePassed)
        }
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
        context.write(
            wrapOutboundOut(HTTP2Frame(streamID: id, payload: .headers(.init(headers: request.headers)))), promise: headersWritten)
        context.writeAndFlush(
            wrapOutboundOut(HTTP2Frame(streamID: id, payload: .data(.init(data: .byteBuffer(request.body), endStream: true)))), promise: nil
        )
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
                wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: increment))), promise: written
            )
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
