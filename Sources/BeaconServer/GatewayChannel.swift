import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1
import NIOWebSocket
import Synchronization

/// Beacon's connections: HTTP/1.1 for the REST API and the console, upgraded to a device's WebSocket on the gateway's
/// path. After the upgrade the connection's task ends: the session lives in the channel's pipeline
/// (`DeviceSocketHandler`) and a state object (`DeviceConnection`), which run tasks only while there is work.
///
/// Written instead of using Hummingbird's `HTTP1WebSocketUpgradeChannel`, which keeps the connection's task, a task group
/// and an auto-ping task for each WebSocket's whole life: their allocator slabs were most of an idle device's memory.
/// The HTTP/1 side is Hummingbird's, as in that channel.
struct GatewayChannel: ServerChildChannel, HTTPChannelHandler {
    enum UpgradeResult: Sendable {
        case webSocket
        case notUpgraded(NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>)
        case failedUpgrade(NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>)
    }

    struct Value: ServerChildChannelValue {
        let upgradeResult: EventLoopFuture<UpgradeResult>
        let channel: any Channel
    }

    let responder: HTTPChannelHandler.Responder
    /// Decides an upgrade request: the connection to run, or nil when it is refused (its answer left in `refused`).
    let upgrade: @Sendable (HTTPRequest, any Channel, Logger) async -> DeviceConnection?
    let refused: RefusedUpgrades
    let maxMessageBytes: Int
    let pingInterval: Duration
    /// Hummingbird's defaults.
    let http1 = HTTP1Channel.Configuration()

    init(
        responder: @escaping HTTPChannelHandler.Responder, maxMessageBytes: Int, pingInterval: Duration, refused: RefusedUpgrades,
        upgrade: @escaping @Sendable (HTTPRequest, any Channel, Logger) async -> DeviceConnection?
    ) {
        self.responder = Self.redirectingLateUpgrades(responder)
        self.maxMessageBytes = maxMessageBytes
        self.pingInterval = pingInterval
        self.refused = refused
        self.upgrade = upgrade
    }

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture {
            let upgradeAttempted = NIOLoopBoundBox(false, eventLoop: channel.eventLoop)
            let accepted = NIOLockedValueBox<DeviceConnection?>(nil)
            let upgrader = NIOTypedWebSocketServerUpgrader<UpgradeResult>(
                maxFrameSize: maxMessageBytes,
                shouldUpgrade: { channel, head in
                    upgradeAttempted.value = true
                    let promise = channel.eventLoop.makePromise(of: HTTPHeaders?.self)
                    promise.completeWithTask {
                        let request = try HTTPRequest(head, secure: false, splitCookie: false)
                        guard let connection = await upgrade(request, channel, logger) else { return nil }
                        accepted.withLockedValue { $0 = connection }
                        return HTTPHeaders()
                    }
                    return promise.futureResult
                },
                upgradePipelineHandler: { channel, _ in
                    channel.eventLoop.makeCompletedFuture {
                        guard let connection = accepted.withLockedValue({ $0 }) else { throw ChannelError.inappropriateOperationForState }
                        try channel.pipeline.syncOperations.addHandler(
                            DeviceSocketHandler(connection: connection, maxMessageBytes: maxMessageBytes, pingInterval: pingInterval))
                        return .webSocket
                    }
                }
            )
            let notUpgraded = NIOTypedHTTPServerUpgradeConfiguration(
                upgraders: [upgrader],
                notUpgradingCompletionHandler: { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(HTTP1ToHTTPServerCodec(secure: false))
                        try channel.pipeline.syncOperations.addHandlers(http1.additionalChannelHandlers())
                        try channel.pipeline.syncOperations.addHandler(
                            HTTPConnectionStateHandler(idleTimeout: http1.idleTimeout.map { .init($0) }, logger: logger))
                        let asyncChannel = try NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>(
                            wrappingChannelSynchronously: channel, configuration: .init(isOutboundHalfClosureEnabled: true))
                        return upgradeAttempted.value ? .failedUpgrade(asyncChannel) : .notUpgraded(asyncChannel)
                    }
                }
            )
            var configuration = NIOUpgradableHTTPServerPipelineConfiguration<UpgradeResult>(upgradeConfiguration: notUpgraded)
            configuration.enablePipelining = false  // HTTP is pipelined by NIOAsyncChannel
            configuration.enableErrorHandling = false  // handled by Hummingbird
            configuration.enableResponseHeaderValidation = false  // Swift HTTP Types validate them already
            configuration.decoderConfiguration.maxHeaderFieldSize = http1.httpDecoder.maxHeaderFieldSize
            configuration.decoderConfiguration.maxHeaderListSize = http1.httpDecoder.maxHeaderListSize
            configuration.decoderConfiguration.maxHeaderFieldCount = http1.httpDecoder.maxHeaderFieldCount
            let result = try channel.pipeline.syncOperations.configureUpgradableHTTPServerPipeline(configuration: configuration)
            return Value(upgradeResult: result, channel: channel)
        }
    }

    func handle(value: Value, logger: Logger) async {
        do {
            switch try await value.upgradeResult.get() {
            case .webSocket:
                return  // the socket's handler and its connection carry on without this task
            case .notUpgraded(let http1):
                await handleHTTP(asyncChannel: http1, logger: logger)
            case .failedUpgrade(let http1):
                await writeRefusal(on: http1, logger: logger)
            }
        } catch let error as ChannelError where error == .inputClosed {
            logger.trace("the connection closed before its upgrade was decided")
        } catch {
            // Debug: a client that sends garbage must not fill the error log.
            logger.debug("a connection failed before its first request was answered", metadata: ["error": "\(error)"])
            try? await value.channel.close()
        }
    }

    /// Answers a refused upgrade with what the WebSocket router's `ErrorMiddleware` decided (an empty 400 when nothing
    /// was), so that a client can tell "log in again" (401) from a bug; then closes.
    private func writeRefusal(on asyncChannel: NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>, logger: Logger) async {
        let answer = refused.take(asyncChannel.channel)
        var fields: HTTPFields = [.connection: "close", .contentLength: String(answer?.body.count ?? 0)]
        if answer != nil { fields[.contentType] = "application/json; charset=utf-8" }
        do {
            try await asyncChannel.executeThenClose { _, outbound in
                try await outbound.write(.head(HTTPResponse(status: .init(code: answer?.status ?? 400), headerFields: fields)))
                if let answer { try await outbound.write(.body(ByteBuffer(bytes: answer.body))) }
                try await outbound.write(.end(nil))
            }
        } catch {
            logger.trace("a refused upgrade's answer could not be written", metadata: ["error": "\(error)"])
        }
    }

    /// NIO upgrades only a connection's first request: a later one asking to upgrade is told to come again, on a new
    /// connection (a redirect to itself, then the connection closes), as Hummingbird does.
    private static func redirectingLateUpgrades(_ responder: @escaping HTTPChannelHandler.Responder) -> HTTPChannelHandler.Responder {
        struct RedirectedUpgrade: Error {}
        return { request, writer, channel in
            guard request.headers[.upgrade]?.lowercased() == "websocket" else {
                return try await responder(request, writer, channel)
            }
            let location = request.uri.query.map { "\(request.uri.path)?\($0)" } ?? request.uri.path
            try await writer.writeResponse(
                HTTPResponse(status: .temporaryRedirect, headerFields: [.connection: "close", .location: location]))
            throw RedirectedUpgrade()
        }
    }
}
