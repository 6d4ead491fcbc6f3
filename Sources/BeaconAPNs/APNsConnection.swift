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

    /// Sends one notification on its own stream, once its turn for a stream slot comes (within `waitTimeout`, and by
    /// `writeBy` when given). Answers or throws `APNsFailure` within `timeout` of the stream opening; an
    /// `ExpiredProviderToken` answer replaces the token that failed (unless another request already did) and retries once.
    /// A request is written only before `writeBy` (checked on the event loop, just before its HEADERS): past it the send
    /// ends with `APNsFailure.deadlinePassed`.
    func send(
        _ notification: APNsNotification, timeout: Duration, waitTimeout: Duration, writeBy: ContinuousClock.Instant?,
        stillWanted: (@Sendable () async -> Bool)?
    ) async throws -> APNsAccepted {
        do {
            try await state.waitForTurn(timeout: waitTimeout, until: writeBy)
        } catch APNsFailure.timeout where APNsClient.deadlinePassed(writeBy) {
            throw APNsFailure.deadlinePassed
        }
        defer { if state.releaseStream() { close(reason: "drained after GOAWAY or replacement") } }
        if let stillWanted, !(await stillWanted()) { throw APNsFailure.withdrawn }
        let token = try signingKey.map { try providerToken($0, replacing: nil) }
        do {
            return try await send(notification, token: token, timeout: timeout, writeBy: writeBy)
        } catch let failure as APNsFailure {
            guard case .rejected(403, .expiredProviderToken, _, _) = failure, let signingKey else { throw failure }
            return try await send(notification, token: try providerToken(signingKey, replacing: token), timeout: timeout, writeBy: writeBy)
        }
    }

    private func send(
        _ notification: APNsNotification, token: String?, timeout: Duration, writeBy: ContinuousClock.Instant?
    ) async throws -> APNsAccepted {
        // What is the same for every request of the connection (or for the provider token's 50 minutes) is indexed: a
        // one-byte reference from then on (from HPACK's static table or, once inserted, its dynamic one). What changes
        // per request (the device's path, apns-id, expiry, collapse id) is sent literally without indexing: inserted, it
        // would only churn the dynamic table, which the encoder searches for every header it encodes.
        var headers: HPACKHeaders = [":method": "POST", ":scheme": "https", ":authority": authority]
        headers.add(name: ":path", value: "/3/device/\(notification.deviceToken)", indexing: .nonIndexable)  // pseudo-headers first
        headers.add(name: "apns-topic", value: notification.topic)
        headers.add(name: "apns-push-type", value: notification.pushType.rawValue)
        headers.add(name: "apns-id", value: notification.apnsID.uuidString.lowercased(), indexing: .nonIndexable)
        if let priority = notification.priority { headers.add(name: "apns-priority", value: String(priority)) }
        if let expiration = notification.expiration {
            headers.add(name: "apns-expiration", value: String(expiration), indexing: .nonIndexable)
        }
        if let collapseID = notification.collapseID { headers.add(name: "apns-collapse-id", value: collapseID, indexing: .nonIndexable) }
        if let token { headers.add(name: "authorization", value: "bearer " + token, indexing: .indexable) }
        // One hop to the event loop, where the request is written on a new stream.
        let response = channel.eventLoop.makePromise(of: StreamResponse.self)
        // The event loop's clock for the last moment the request may be written (NIO's deadlines are not ContinuousClock's).
        let writeByOnLoop = writeBy.map { NIODeadline.now() + .nanoseconds(ContinuousClock.now.duration(to: $0).nanoseconds) }
        let request = StreamsHandler.Request(
            headers: headers, body: ByteBuffer(bytes: notification.payload), timeout: timeout, writeBy: writeByOnLoop, response: response)
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
        throw APNsFailure.rejected(
            status: answer.status, reason: error.map { APNsReason($0.reason) }, apnsID: apnsID, timestamp: error?.timestamp)
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
