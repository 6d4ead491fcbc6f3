import Foundation
import NIOCore
import NIOHPACK
import NIOHTTP2

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
        // A stream opened after APNs' GOAWAY, or a protocol error in one of our own outbound streams, concerns that stream
        // alone: the others still get their answers. An error in what the server sent comes unwrapped whether NIOHTTP2
        // treated it as the stream's (and reset that stream) or the connection's, so it ends the connection: its requests
        // fail as not answered and are retried (the same apns-id and collapse id).
        if error is NIOHTTP2Errors.CreatedStreamAfterGoaway || error is NIOHTTP2Errors.StreamError {
            context.fireErrorCaught(error)
            return
        }
        state.markClosed(reason: "\(error)")
        context.close(promise: nil)
    }
}
