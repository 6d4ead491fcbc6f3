import NIOCore
import NIOWebSocket
import Synchronization

/// A message from a device: a text or binary WebSocket message, its fragments joined.
enum DeviceMessage: Sendable {
    case text(String)
    case binary
}

/// A device's WebSocket, written from any task.
struct DeviceSocket: Sendable {
    let channel: any Channel
    /// The largest frame written: a longer message goes in several.
    let maxFrameBytes: Int
    /// Set by `DeviceSocketHandler` when it sends the close frame.
    let closeSent: CloseSentFlag

    /// Queues one text message, sent at the next `flush` (or sooner); waits only while the socket's buffer is full, so
    /// that a device that stops reading holds its writer, and throws once the socket is closed or its close frame sent.
    func writeText(_ text: String) async throws {
        // A closed channel stays "writable" in NIO, and writes after the close frame are dropped without a promise: tell
        // the writer instead.
        guard channel.isActive, !closeSent.isSet else { throw ChannelError.outputClosed }
        var data = channel.allocator.buffer(string: text)
        var opcode = WebSocketOpcode.text
        while data.readableBytes > maxFrameBytes, let part = data.readSlice(length: maxFrameBytes) {
            channel.write(WebSocketFrame(fin: false, opcode: opcode, data: part), promise: nil)
            opcode = .continuation
        }
        let last = WebSocketFrame(fin: true, opcode: opcode, data: data)
        guard channel.isWritable else { return try await channel.writeAndFlush(last).get() }
        channel.write(last, promise: nil)
    }

    /// Sends what `writeText` queued.
    func flush() {
        channel.flush()
    }

    /// Starts the closing handshake: the connection ends when the device answers it, or after `closeTimeout`.
    func close(_ code: WebSocketErrorCode, reason: String? = nil) async {
        try? await channel.triggerUserOutboundEvent(DeviceSocketHandler.Close(code: code, reason: reason)).get()
    }

    /// Reads from the socket again after `DeviceSocketHandler` stopped because the session had too many messages queued.
    func resumeReading() {
        channel.setOption(ChannelOptions.autoRead, value: true).whenFailure { _ in }
    }
}

/// Whether a socket's close frame was sent, shared by its handler and its writers.
final class CloseSentFlag: Sendable {
    private let sent = Atomic(false)

    var isSet: Bool { sent.load(ordering: .acquiring) }

    func set() {
        sent.store(true, ordering: .releasing)
    }
}

/// The WebSocket protocol of a device's connection, on its event loop: control frames answered here (ping, pong, close),
/// data frames joined into messages for the connection, a ping every `pingInterval` and the connection closed when the
/// device stops answering them. Neither it nor its connection holds a task while the device is idle.
///
/// (Hummingbird's WebSocket support runs each connection in a task of its own, with a task group and an auto-ping task,
/// for the connection's whole life; their allocator slabs made most of an idle connection's memory.)
final class DeviceSocketHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    /// The outbound event that starts the closing handshake (`DeviceSocket.close`).
    struct Close: Sendable {
        var code: WebSocketErrorCode
        var reason: String?
    }

    /// How long the device has to answer a close before the connection is closed anyway.
    static let closeTimeout = TimeAmount.seconds(10)

    private let connection: DeviceConnection
    private let maxMessageBytes: Int
    /// How often the device is pinged; one that has not answered a ping by the next is cut off.
    private let pingInterval: TimeAmount
    /// The fragments of a message still coming, and whether it is text.
    private var fragments: (data: ByteBuffer, isText: Bool)?
    private var closeSent = false
    private let closeSentFlag = CloseSentFlag()
    /// The device sent its close: nothing it sends after counts.
    private var closeReceived = false
    /// The payload of the last ping sent, until the device answers it (only its own answer counts, not any pong).
    private var awaitedPong: UInt64?
    private var pingsSent: UInt64 = 0
    /// A ping from the device not answered yet because the socket's buffer was full: only the latest is answered.
    private var pendingPong: ByteBuffer?
    private var pinger: RepeatedTask?
    private var closeTimer: Scheduled<Void>?

    init(connection: DeviceConnection, maxMessageBytes: Int, pingInterval: Duration) {
        self.connection = connection
        self.maxMessageBytes = maxMessageBytes
        // Bounded, so that the conversion cannot overflow nor the timer spin.
        self.pingInterval = TimeAmount(max(.milliseconds(10), min(pingInterval, .seconds(3600))))
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        pinger = context.eventLoop.scheduleRepeatedTask(initialDelay: pingInterval, delay: pingInterval) { _ in
            let (handler, context) = loopBound.value
            handler.keepAlive(context: context)
        }
        connection.start(socket: DeviceSocket(channel: context.channel, maxFrameBytes: maxMessageBytes, closeSent: closeSentFlag))
        // Added by the upgrade; a connection that closed meanwhile sees no `channelInactive` here.
        if !context.channel.isActive {
            stopTimers()
            connection.socketClosed()
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        stopTimers()
        connection.socketClosed()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        stopTimers()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        guard frame.reservedBits.isEmpty else { return fail(.protocolError, context: context) }
        switch frame.opcode {
        case .ping:
            guard frame.fin else { return fail(.protocolError, context: context) }
            guard !closeSent, !closeReceived else { return }
            // A device that sends pings without reading the answers must not fill the server's memory with them.
            pendingPong = frame.unmaskedData
            if context.channel.isWritable { answerPing(context: context) }
        case .pong:
            var data = frame.unmaskedData
            if let awaited = awaitedPong, data.readableBytes == 8, data.readInteger(as: UInt64.self) == awaited { awaitedPong = nil }
        case .connectionClose:
            receivedClose(frame, context: context)
        case .text, .binary, .continuation:
            receivedData(frame, context: context)
        default:
            fail(.protocolError, context: context)
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable, !closeSent, !closeReceived { answerPing(context: context) }
        context.fireChannelWritabilityChanged()
    }

    /// The device closed its side (a TCP FIN without a close frame): the connection ends. The server quiesces (a device
    /// that connected after the shutdown notice): the session ends.
    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? ChannelEvent, event == .inputClosed {
            context.close(promise: nil)
        } else if event is ChannelShouldQuiesceEvent, context.channel.isActive, !closeReceived {
            fail(.goingAway, reason: "shutdown", context: context)
        }
        context.fireUserInboundEventTriggered(event)
    }

    private func answerPing(context: ChannelHandlerContext) {
        guard let data = pendingPong else { return }
        pendingPong = nil
        context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .pong, data: data)), promise: nil)
    }

    func triggerUserOutboundEvent(context: ChannelHandlerContext, event: Any, promise: EventLoopPromise<Void>?) {
        guard let close = event as? Close else { return context.triggerUserOutboundEvent(event, promise: promise) }
        sendClose(close.code, reason: close.reason, context: context, promise: promise)
    }

    /// No data frame goes out after the close frame (RFC 6455 section 5.5.1).
    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard !closeSent else {
            promise?.fail(ChannelError.outputClosed)
            return
        }
        context.write(data, promise: promise)
    }

    private func receivedData(_ frame: WebSocketFrame, context: ChannelHandlerContext) {
        var data = frame.unmaskedData
        var isText = frame.opcode == .text
        if frame.opcode == .continuation {
            guard var joined = fragments else { return fail(.protocolError, context: context) }
            fragments = nil  // not to copy the buffer on append
            guard joined.data.readableBytes + data.readableBytes <= maxMessageBytes else {
                return fail(.messageTooLarge, context: context)
            }
            joined.data.writeBuffer(&data)
            (data, isText) = joined
        } else if fragments != nil {
            return fail(.protocolError, context: context)  // a new message before the last one ended
        }
        guard frame.fin else {
            fragments = (data, isText)
            return
        }
        guard !closeSent, !closeReceived else { return }
        if connection.received(isText ? .text(String(buffer: data)) : .binary) == .pauseReading {
            context.channel.setOption(ChannelOptions.autoRead, value: false).whenFailure { _ in }
        }
    }

    /// A close from the device. The connection answers it (unless it answers ours) once the session has ended, then
    /// closes: a device whose close was answered is offline. The connection closes after `closeTimeout` in any case.
    private func receivedClose(_ frame: WebSocketFrame, context: ChannelHandlerContext) {
        guard !closeReceived else { return }
        closeReceived = true
        guard !closeSent else {
            // The device answers the session's close, sent once the session had ended.
            context.close(promise: nil)
            return
        }
        var data = frame.unmaskedData
        let size = data.readableBytes
        // As RFC 6455 section 7.4: codes this side does not know are answered `protocolError`, except the ones reserved
        // for libraries (3000-3999) and applications (4000-4999).
        let answer: WebSocketErrorCode
        switch data.readWebSocketErrorCode() {
        case .unknown(let code) where code < 3000 || code > 4999: answer = .protocolError
        case nil where size > 0: answer = .protocolError
        default: answer = .normalClosure
        }
        let channel = context.channel
        closeTimer = context.eventLoop.scheduleTask(in: Self.closeTimeout) { channel.close(promise: nil) }
        connection.closing(answer: answer)
    }

    private func keepAlive(context: ChannelHandlerContext) {
        guard !closeSent, !closeReceived else { return }
        guard awaitedPong == nil else { return fail(.goingAway, reason: "ping timeout", context: context) }
        pingsSent &+= 1
        awaitedPong = pingsSent
        var data = context.channel.allocator.buffer(capacity: 8)
        data.writeInteger(pingsSent)
        context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .ping, data: data)), promise: nil)
    }

    /// Closes the connection for a protocol violation or a ping not answered, telling the device why: the session ends at
    /// once; the socket stops writing after the close frame, and closes when the device answers or closes its side, or
    /// after `closeTimeout` (closing at once could reset the connection before the device read why).
    private func fail(_ code: WebSocketErrorCode, reason: String? = nil, context: ChannelHandlerContext) {
        guard !closeSent else { return }
        sendClose(code, reason: reason, context: context)
        context.close(mode: .output, promise: nil)
        connection.closing(answer: nil)
    }

    /// Sends the close frame (`promise` completes once it is written); when it answers the device's close, the connection
    /// closes once it is written.
    private func sendClose(
        _ code: WebSocketErrorCode, reason: String?, context: ChannelHandlerContext, promise: EventLoopPromise<Void>? = nil
    ) {
        guard !closeSent else {
            promise?.succeed()
            return
        }
        closeSent = true
        closeSentFlag.set()
        closeTimer?.cancel()
        var data = context.channel.allocator.buffer(capacity: 2 + (reason?.utf8.count ?? 0))
        data.write(webSocketErrorCode: code)
        if let reason { data.writeString(reason) }
        let channel = context.channel
        let written = context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, data: data)))
        if closeReceived {
            // The handshake is over once the answer is out.
            written.whenComplete { _ in channel.close(promise: nil) }
        }
        written.cascade(to: promise)
        closeTimer = context.eventLoop.scheduleTask(in: Self.closeTimeout) { channel.close(promise: nil) }
    }

    private func stopTimers() {
        pinger?.cancel()
        pinger = nil
        closeTimer?.cancel()
        closeTimer = nil
    }
}
