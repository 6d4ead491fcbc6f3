import BeaconAPNs
import BeaconCore
import BeaconStorage
import Crypto
import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import ServiceLifecycle

/// Points where tests hold or fail a running server, to drive races deterministically rather than by sleeping.
public struct BeaconHooks: Sendable {
    /// Called while a message's pushes are decided: after presence was read, before the decision is recorded.
    public var afterPresence: (@Sendable (_ messageID: UInt64) async throws -> Void)?
    /// Called once a device counts as online, before its connection goes on; throwing fails the connection.
    public var afterDeviceRegistered: (@Sendable (_ username: String, _ deviceID: String) async throws -> Void)?
    /// Called before a node removes a device's presence row when its connection ends, and before each retry of that
    /// removal (several nodes only); throwing fails the removal as a database error would.
    public var beforePresenceRemoval: (@Sendable (_ username: String, _ deviceID: String) async throws -> Void)?
    /// Called after each heartbeat of a cluster node was recorded (several nodes only): a test holds a node's next
    /// heartbeats there.
    public var afterHeartbeat: (@Sendable () async -> Void)?
    /// Called before a cluster node starts listening for notifications, and before each time it listens again after its
    /// connection failed (several nodes only): a test holds a node deaf there.
    public var beforeListening: (@Sendable () async -> Void)?
    /// Asked as each notification arrives on a cluster node's listening connection (not when listening begins): true drops
    /// it, as a connection gone silent without closing would (several nodes only).
    public var dropsNotification: (@Sendable () -> Bool)?
    /// Called before a cluster node takes what arrived on its channel to act on it, with the node's epoch and a look at
    /// what waits (several nodes only): a test holds a node there until what it needs has arrived.
    public var beforeActing: (@Sendable (_ node: Int64, _ waiting: @escaping @Sendable () -> [NodeSignal]) async -> Void)?
    /// Recipients a message's route decides and records at a time (`PushRouter.partSize`); tests make it small.
    public var routePartSize = 1000
    /// How often a device's WebSocket is pinged (one that has not answered a ping by the next is cut off); tests make it
    /// short.
    public var webSocketPingInterval: Duration = .seconds(30)
    /// How long the sessions' audit waits after each round (`SessionAudit`); tests make it long, to leave each session to
    /// its own checks.
    public var sessionAuditInterval: Duration = .milliseconds(400)

    public init() {}
}

/// A Beacon server: the REST API and WebSocket gateway on one port, plus its background services.
public struct BeaconServer: Sendable {
    public let store: any BeaconStore
    public let configuration: BeaconConfiguration
    /// Who is online, on any node.
    public var presence: any PresenceRegistry { switchboard }
    /// This node in its cluster, when the store is shared by several (PostgreSQL).
    public var clusterNode: ClusterNode? { switchboard.link?.node }
    /// Whether this node is, by its last heartbeat, the only one in its cluster (it then reads presence from memory).
    public var isAloneInCluster: Bool { switchboard.link?.isAlone ?? false }
    /// Letters this node posted to others' mailboxes and notifications it sent them (wake-ups and notices), so far (nil
    /// alone on SQLite): for benchmarks and tests.
    public var clusterTraffic: (letters: Int, notifications: Int)? {
        switchboard.link.map { ($0.lettersPosted, $0.notifications.notificationsSent) }
    }
    let switchboard: Switchboard
    let cursors: CursorBook
    /// Checks the tokens of this node's busy device sessions together.
    let sessionAudit: SessionAudit
    let messages: MessageService
    let reads: ReadService
    let recalls: RecallService
    /// This server's metrics (`GET /metrics`).
    public let metrics: BeaconMetrics
    let pushConfigs: PushConfigs?
    let pushWorker: PushWorker?
    let pushRouter: PushRouter?
    let webhookSender: WebhookSender?
    let api: API
    let logins = LoginThrottle()
    let logger: Logger
    /// Where tests hold or fail this server (none in production).
    let hooks: BeaconHooks

    /// A server on `store`. `hooks` are for tests only: points where they hold or fail the server to drive races.
    public init(
        store: any BeaconStore, configuration: BeaconConfiguration, logger: Logger, hooks: BeaconHooks = BeaconHooks()
    ) async throws {
        self.store = store
        self.configuration = configuration
        self.logger = logger
        self.hooks = hooks
        // Token-signing key: derived from the secret key, so it is never stored and every node with the key agrees.
        // Without a secret key (push off), tokens are signed with a key that lives as long as the process.
        let tokenKey = configuration.secretBox?.derivedKey(for: "token signing") ?? SymmetricKey(size: .bits256)
        if let box = configuration.secretBox { try await PushConfigs.checkOpens(store: store, box: box) }
        let registry = ConnectionRegistry()
        var idSlot = configuration.node
        var link: ClusterLink?
        if let shared = store as? any ClusterStore {
            let name = configuration.nodeName ?? "\(ProcessInfo.processInfo.hostName)-\(ProcessInfo.processInfo.processIdentifier)"
            let node = try await shared.joinCluster(name: name)
            idSlot = node.slot
            link = ClusterLink(
                store: shared, node: node, local: registry, clock: configuration.clock, logger: logger,
                beforePresenceRemoval: hooks.beforePresenceRemoval, afterHeartbeat: hooks.afterHeartbeat,
                beforeListening: hooks.beforeListening, dropsNotification: hooks.dropsNotification,
                beforeActing: hooks.beforeActing)
            // One beat before serving: a node that finds itself alone opens registrations at once (`Solitude`).
            let sent = ContinuousClock.now
            guard let others = try await shared.heartbeat(node) else { throw ClusterService.DeclaredDead() }
            link?.noteHeartbeat(sentAt: sent, others: others)
        }
        let switchboard = Switchboard(local: registry, link: link)
        self.switchboard = switchboard
        let metrics = BeaconMetrics()
        self.metrics = metrics
        cursors = CursorBook(store: store, clock: configuration.clock)
        sessionAudit = SessionAudit(store: store, clock: configuration.clock, interval: hooks.sessionAuditInterval, logger: logger)
        if let box = configuration.secretBox {
            let configs = PushConfigs(store: store, box: box, routing: configuration.apnsRouting)
            pushConfigs = configs
            pushWorker = PushWorker(
                store: store, configs: configs, clock: configuration.clock, logger: logger, maxAge: configuration.pushMaxAge,
                cluster: link, metrics: metrics, onRecorded: configuration.onPushAttempts)
        } else {
            pushConfigs = nil
            pushWorker = nil
        }
        let pushRouter = pushWorker.map { worker in
            PushRouter(
                store: store, presence: switchboard, clock: configuration.clock, logger: logger,
                afterPresence: hooks.afterPresence, metrics: metrics, partSize: hooks.routePartSize, jobsStored: { worker.jobsStored() })
        }
        self.pushRouter = pushRouter
        webhookSender = configuration.secretBox.map { box in
            WebhookSender(
                store: store, box: box, clock: configuration.clock, metrics: metrics, privateTargets: configuration.webhookPrivateTargets,
                logger: logger)
        }
        messages = MessageService(
            store: store, switchboard: switchboard, router: pushRouter, node: idSlot, clock: configuration.clock, metrics: metrics,
            limits: configuration.sendLimits, logger: logger)
        var withdrawalsStored: (@Sendable () -> Void)?
        if let worker = pushWorker { withdrawalsStored = { worker.jobsStored() } }
        reads = ReadService(
            store: store, switchboard: switchboard, clock: configuration.clock, jobsStored: withdrawalsStored, logger: logger)
        recalls = RecallService(store: store, switchboard: switchboard, messages: messages, jobsStored: withdrawalsStored, logger: logger)
        var api = API(store: store, tokens: TokenIssuer(key: tokenKey), clock: configuration.clock, logger: logger)
        api.proxies = configuration.trustedProxies
        api.box = configuration.secretBox
        self.api = api
    }

    /// Removes this node's presence rows whose connections have ended and decides again the pushes of the devices that
    /// thereby went offline, as the node does by itself every 30 s (several nodes only; tests call it to not wait).
    public func reconcilePresence() async throws {
        guard let link = switchboard.link else { return }
        try await ClusterService(link: link, router: pushRouter, logger: logger).reconcilePresence()
    }

    /// Sends future pushes to `routing`.
    public func setAPNsRouting(_ routing: APNsRouting) async {
        await pushConfigs?.setRouting(routing)
    }

    /// Hands every stored push configuration to `configuration.onPushConfiguration`.
    public func announceStoredPushConfigurations() async throws {
        guard let hook = configuration.onPushConfiguration, let pushConfigs else { return }
        for app in try await store.allApps() {
            for config in try await store.pushConfigs(app: app.id) {
                try hook(try pushConfigs.trust(for: config))
            }
        }
    }

    /// Issues an app token, as `POST /token` with client credentials would.
    public func issueToken(app: AppRecord, lifetimeSeconds: Int? = nil) -> String {
        let now = configuration.clock()
        let lifetime = Int64(max(1, min(lifetimeSeconds ?? configuration.tokenLifetimeSeconds, TokenClaims.maxAppTokenLifetime))) * 1000
        let issuedAt = max(now, app.tokensValidAfter)
        return api.tokens.issue(
            TokenClaims(app: app.id, user: nil, uid: nil, iat: issuedAt, exp: now + lifetime, sec: TokenClaims.secretTag(of: app)))
    }

    /// Beacon as one service: the HTTP application and, on graceful shutdown (SIGTERM), a `closing` `shutdown` frame to
    /// every device before the server stops (at most `shutdownNoticeTimeout` waiting for them to go).
    /// The `http://` URL of `host` and `port` (an IPv6 address in brackets). `reachableHere` puts this machine's loopback
    /// for an address that listens everywhere (`0.0.0.0`, `::`), for a URL to open in a browser or curl here.
    public static func url(host: String, port: Int, reachableHere: Bool = false) -> String {
        switch host {
        case "0.0.0.0" where reachableHere: "http://127.0.0.1:\(port)"
        case "::" where reachableHere: "http://[::1]:\(port)"
        case let address where address.contains(":"): "http://[\(address)]:\(port)"
        default: "http://\(host):\(port)"
        }
    }

    /// The server's services, for the caller's `ServiceGroup` in this order (services stop in reverse). `onRunning` receives
    /// the bound port (useful with port 0).
    public func makeServices(onRunning: @escaping @Sendable (Int) async -> Void = { _ in }) -> [any Service] {
        // Hummingbird stops its server before the application's own services, closing WebSockets without a word; the
        // notice must go first, so it runs beside the application and is shut down before it.
        [makeApplication(onRunning: onRunning), ShutdownNotice(registry: switchboard.local, timeout: .seconds(5))]
    }

    /// Every route this server answers, as `METHOD /path` with `:parameter` segments (`beacon routes`): the REST router's
    /// and the WebSocket upgrade. The OpenAPI contract test compares them with `openapi.json`.
    public func routeDescriptions() -> [String] {
        let routes = RouteTable()
        _ = buildRouter(routes: routes)
        return (routes.all + [(.get, "/:org/:app/ws")]).map { "\($0.method.rawValue) \($0.path)" }
    }

    /// The REST API as an application that neither listens nor runs services: for Hummingbird's in-process test client
    /// (`buildApplication().test(.router)`), beside this server's running services.
    public func buildApplication() -> some ApplicationProtocol {
        Application(router: buildRouter())
    }

    /// The REST router: operational endpoints, the OpenAPI document and the API, each recorded in `routes` (for 405s).
    func buildRouter(routes: RouteTable = RouteTable()) -> Router<BeaconRequestContext> {
        let router = Router(context: BeaconRequestContext.self)
        router.add(middleware: RequestLogMiddleware(logger: logger))
        router.add(middleware: RequestMetricsMiddleware(metrics: metrics))
        router.add(middleware: ErrorMiddleware(clock: configuration.clock, logger: logger, routes: routes))
        OperationalRoutes(store: store, pushWorker: pushWorker, cluster: switchboard.link, metrics: metrics, clock: configuration.clock)
            .register(on: router, table: routes)
        Console(api: api).register(on: router, table: routes)
        let app = AppRoutes(on: router, table: routes, api: api)
        let collections: [any AppRouteCollection] = [
            TokenRoutes(
                api: api, tokenLifetimeSeconds: configuration.tokenLifetimeSeconds, passwordHashRounds: configuration.passwordHashRounds,
                logins: logins),
            UserRoutes(api: api, switchboard: switchboard, cursors: cursors, passwordHashRounds: configuration.passwordHashRounds),
            PresenceRoutes(api: api, switchboard: switchboard),
            GroupRoutes(api: api, messages: messages, userGroupMaxUsers: configuration.userGroupMaxUsers),
            MessageRoutes(api: api, messages: messages, recalls: recalls),
            PushCertificateRoutes(api: api, pushConfigs: pushConfigs, onPushConfiguration: configuration.onPushConfiguration),
            BindingRoutes(api: api),
            DeliveryRoutes(api: api),
            TestPushRoutes(api: api, messages: messages, pushEnabled: pushConfigs != nil),
            ActivityRoutes(api: api, switchboard: switchboard),
            SettingsRoutes(api: api),
            TemplateRoutes(api: api),
            ReadRoutes(api: api, reads: reads),
            WebhookRoutes(api: api, box: pushConfigs?.box, privateTargets: configuration.webhookPrivateTargets),
            CredentialRoutes(api: api),
        ]
        for collection in collections { collection.register(on: app) }
        TencentDoor(commands: TencentCommands(api: api, messages: messages, recalls: recalls, switchboard: switchboard)).register(
            on: router, table: routes)
        return router
    }

    private func makeApplication(onRunning: @escaping @Sendable (Int) async -> Void) -> some ApplicationProtocol {
        let routes = RouteTable()
        let refusedUpgrades = RefusedUpgrades()
        let router = buildRouter(routes: routes)

        let webSocketRouter = Router(context: BeaconRequestContext.self)
        // Upgrades are requests too: logged and counted like the REST ones (refused ones with their status).
        webSocketRouter.add(middleware: RequestLogMiddleware(logger: logger))
        webSocketRouter.add(middleware: RequestMetricsMiddleware(metrics: metrics))
        webSocketRouter.add(
            middleware: ErrorMiddleware(clock: configuration.clock, logger: logger, routes: RouteTable(), refusedUpgrades: refusedUpgrades))
        // An upgrade the route answers 200 is accepted: the route leaves the device's connection in the context.
        webSocketRouter.get("/:org/:app/ws") { request, context -> Response in
            let (app, credential, deviceID) = try await authenticateDevice(request, context)
            // Read markers changed after this version are sent after `welcome` (the SDK remembers the last one it saw).
            let readsSince = request.uri.queryParameters.get("reads_since").flatMap { Int64($0) } ?? 0
            let session = DeviceSession(
                app: app, credential: credential, deviceID: deviceID, readsSince: readsSince, messages: messages, reads: reads,
                switchboard: switchboard, cursors: cursors,
                outboxLimit: configuration.outboxLimit, afterRegistered: hooks.afterDeviceRegistered,
                reauthenticate: { _ = try await authenticateDevice(request, context) }, audit: sessionAudit, logger: context.logger)
            context.acceptedUpgrade?.connection = DeviceConnection(session: session)
            return Response(status: .ok)
        }
        let upgrades = webSocketRouter.buildResponder()

        let logger = self.logger
        return Application(
            router: router,
            server: HTTPServerBuilder { responder in
                GatewayChannel(
                    responder: responder, maxMessageBytes: DeviceSession.maxFrameBytes, pingInterval: hooks.webSocketPingInterval,
                    refused: refusedUpgrades
                ) {
                    head, channel, logger in
                    var logger = logger
                    logger[metadataKey: "hb.request.id"] = .stringConvertible(RequestID())
                    var context = BeaconRequestContext(source: .init(channel: channel, logger: logger))
                    let accepted = AcceptedUpgrade()
                    context.acceptedUpgrade = accepted
                    let response = try? await upgrades.respond(to: Request(head: head, body: .init(buffer: ByteBuffer())), context: context)
                    // Taken out: the connection's session holds the context, which holds `accepted` (no cycle left behind).
                    let connection = accepted.connection
                    accepted.connection = nil
                    return response?.status == .ok ? connection : nil
                }
            },
            configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "beacon"),
            // Services stop in reverse order: the cluster's last, so that the node leaves once it pushes and serves no more.
            services: (switchboard.link.map { [ClusterService(link: $0, router: pushRouter, logger: logger)] } ?? []) + [
                RetentionService(store: store, interval: configuration.retentionInterval, clock: configuration.clock, logger: logger),
                CursorFlushService(book: cursors, interval: .milliseconds(100), logger: logger), sessionAudit,
            ] + (pushWorker.map { [$0] } ?? []) + (pushRouter.map { [$0] } ?? []) + (webhookSender.map { [$0] } ?? []),
            onServerRunning: { channel in
                let port = channel.localAddress?.port ?? 0
                logger.notice("Beacon listening on \(BeaconServer.url(host: configuration.host, port: port))")
                await onRunning(port)
            },
            logger: logger
        )
    }

    /// The app, the user's token and the device of a WebSocket upgrade: a user token and a `device_id` query parameter.
    private func authenticateDevice(_ request: Request, _ context: BeaconRequestContext) async throws -> (
        AppRecord, SessionCredential, String
    ) {
        let app = try await api.app(named: AppKey(org: try context.parameters.require("org"), name: try context.parameters.require("app")))
        let identity = try await api.identify(request, app: app)
        guard let deviceID = request.uri.queryParameters.get("device_id"), (1...128).contains(deviceID.utf8.count) else {
            throw BeaconError.illegal("device_id (1-128 bytes) is required")
        }
        // The origin of Beacon's own notices: a device of that name would never get them.
        guard deviceID != Delivery.noticeOrigin else { throw BeaconError.illegal("device_id '\(deviceID)' is reserved") }
        guard let user = identity.user, let token = identity.token else {
            throw BeaconError(.badAccessToken, "a device connects with a user token, not an app token")
        }
        return (
            app,
            SessionCredential(app: app.id, username: user.username, uuid: user.uuid, issuedAt: token.iat, expiresAt: token.exp),
            deviceID
        )
    }
}

/// On graceful shutdown, tells every device to go (they reconnect elsewhere or later and sync), and waits (bounded) for
/// their connections to end; then closes those still open (device sockets outlive the server's connection tasks).
struct ShutdownNotice: Service {
    let registry: ConnectionRegistry
    let timeout: Duration

    func run() async throws {
        try? await gracefulShutdown()
        guard !Task.isCancelled else {
            registry.closeEverySocket()  // the application failed: nothing to announce
            return
        }
        registry.disconnectEveryone(reason: "shutdown")
        // Until each session has finished its cleanup too (the cursors it flushes and the pushes it re-decides) and its
        // connection has closed. Then the connections still open (a device that did not go when told, a close handshake
        // not over) are closed, and their sessions given as long again.
        await waitForEveryone(upTo: timeout, socketsClosed: true)
        registry.closeEverySocket()
        await waitForEveryone(upTo: timeout, socketsClosed: false)
    }

    private func waitForEveryone(upTo timeout: Duration, socketsClosed: Bool) async {
        let deadline = ContinuousClock.now + timeout
        while !registry.isIdle || (socketsClosed && registry.hasOpenSockets), ContinuousClock.now < deadline, !Task.isCancelled {
            try? await Task.sleep(for: .milliseconds(10))
        }
    }
}

extension Task where Success == Never, Failure == Never {
    /// Whether a service's loop goes on: neither shutting down gracefully nor cancelled (a cancelled task's sleeps
    /// return at once, so a loop that only watched for graceful shutdown would spin).
    static var serviceShouldContinue: Bool { !Task.isShuttingDownGracefully && !Task.isCancelled }
}

/// Enforces each app's offline limits (count per conversation, age) at a fixed interval.
struct RetentionService: Service {
    let store: any BeaconStore
    let interval: Duration
    let clock: @Sendable () -> Int64
    let logger: Logger

    func run() async throws {
        while Task.serviceShouldContinue {
            do {
                for app in try await store.allApps() {
                    let removed = try await store.enforceRetention(app, now: clock())
                    if removed > 0 {
                        logger.info("retention removed stored messages", metadata: ["app": "\(app.key)", "count": "\(removed)"])
                    }
                }
            } catch {
                logger.error("retention failed", metadata: ["error": "\(error)"])
            }
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: interval) }
        }
    }
}
