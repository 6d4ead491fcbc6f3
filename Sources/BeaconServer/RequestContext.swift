import BeaconCore
import BeaconProtocol
import BeaconStorage
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdAuth
import Logging
import NIOCore
import NIOHTTPTypes
import Synchronization

/// The context of every Beacon request, HTTP or WebSocket upgrade: Hummingbird's, the channel (for the peer's address,
/// used to rate-limit logins, and to answer refused upgrades), and, under `/{org}/{app}`, the app and who calls
/// (`Authentication.swift`).
struct BeaconRequestContext: AuthRequestContext, RemoteAddressRequestContext {
    var coreContext: CoreRequestContextStorage
    let channel: any Channel
    /// Set for a WebSocket upgrade (`GatewayChannel`): where the upgrade's route leaves the connection it accepts.
    var acceptedUpgrade: AcceptedUpgrade?
    /// The app the path names, set by `AppResolver` (read it as `app`).
    var pathApp: AppRecord?
    /// The caller, set by `SchemeAuthenticator` (read it as `caller`, `requireApp()`, `requireSelfOrApp(_:)`).
    var identity: RequestIdentity?

    var remoteAddress: SocketAddress? { channel.remoteAddress }

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        channel = source.channel
    }
}

/// The device connection an upgrade request's route accepted (`GatewayChannel` runs it).
final class AcceptedUpgrade: Sendable {
    private let accepted = Mutex<DeviceConnection?>(nil)

    var connection: DeviceConnection? {
        get { accepted.withLock { $0 } }
        set { accepted.withLock { $0 = newValue } }
    }
}

/// Renders every failure as Easemob's error body with a stable code: 404 for unknown paths, 405 (with `Allow`) for a
/// known path under another method. On the WebSocket router it also hands the answer to `RefusedUpgrades`.
struct ErrorMiddleware: RouterMiddleware {
    typealias Context = BeaconRequestContext

    let clock: @Sendable () -> Int64
    let logger: Logger
    let routes: RouteTable
    /// Set on the WebSocket router: a refused upgrade is answered with this body instead of an empty 400.
    var refusedUpgrades: RefusedUpgrades?

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch {
            var headers: HTTPFields = [.contentType: "application/json; charset=utf-8"]
            let failure: BeaconError
            var status: Int?
            switch error {
            case let error as HTTPError where error.status == .notFound || error.status == .methodNotAllowed:
                let allowed = routes.methods(allowedOn: request.uri.path)
                if allowed.isEmpty {
                    failure = BeaconError(.resourceNotFound, "url is invalid: \(request.method) \(request.uri.path)")
                } else {
                    failure = BeaconError(.methodNotAllowed, "\(request.method) is not allowed on \(request.uri.path)")
                    headers[.allow] = allowed.map(\.rawValue).sorted().joined(separator: ", ")
                }
            case let error as HTTPError where error.status.code < 500:
                // Hummingbird's own refusal (a body too large, a malformed request) keeps its status.
                failure = BeaconError(.illegalArgument, error.body ?? "bad request")
                status = Int(error.status.code)
            default:
                failure = BeaconError(wrapping: error, logger: logger)
            }
            let body = ErrorBody(
                error: failure.code.rawValue, errorDescription: failure.message, exception: failure.code.exception, timestamp: clock())
            let bytes = API.encode(body)
            let answered = status ?? failure.code.httpStatus
            refusedUpgrades?.refuse(context.channel, status: answered, body: bytes)
            return Response(status: .init(code: answered), headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
        }
    }
}

/// The REST routes as registered, so that a known path asked with another method answers 405 rather than 404.
final class RouteTable: Sendable {
    private let routes = Mutex<[(method: HTTPRequest.Method, segments: [Substring])]>([])
    private let access = Mutex<[String: AppRoutes.Access]>([:])

    /// Records `path` (with `:parameter` segments) under `method`.
    func add(_ method: HTTPRequest.Method, _ path: String) {
        routes.withLock { $0.append((method, path.split(separator: "/"))) }
    }

    /// Records who may call `method` on `path` (a route under `/{org}/{app}`).
    func setAccess(_ access: AppRoutes.Access, _ method: HTTPRequest.Method, _ path: String) {
        self.access.withLock { $0["\(method.rawValue) \(path)"] = access }
    }

    /// Who may call `method` on `path`, for a route under `/{org}/{app}`; nil for the others.
    func access(_ method: HTTPRequest.Method, _ path: String) -> AppRoutes.Access? {
        access.withLock { $0["\(method.rawValue) \(path)"] }
    }

    /// Every route recorded, in order.
    var all: [(method: HTTPRequest.Method, path: String)] {
        routes.withLock { $0.map { ($0.method, "/" + $0.segments.joined(separator: "/")) } }
    }

    /// The methods registered for a path matching `path`.
    func methods(allowedOn path: String) -> Set<HTTPRequest.Method> {
        let segments = path.split(separator: "/")
        return routes.withLock { routes in
            Set(
                routes.filter { route in
                    route.segments.count == segments.count
                        && zip(route.segments, segments).allSatisfy { pattern, segment in pattern.hasPrefix(":") || pattern == segment }
                }.map(\.method))
        }
    }
}

/// The answers of refused WebSocket upgrades, so that the SDK can tell "log in again" (401) from a bug: NIO's upgrader
/// only learns that an upgrade is refused, so the WebSocket router's `ErrorMiddleware` leaves its answer here, keyed by
/// the connection, and `GatewayChannel` writes it.
final class RefusedUpgrades: Sendable {
    private struct Answer {
        var status: Int
        var body: [UInt8]
        var at: ContinuousClock.Instant
    }
    private let answers = Mutex<[ObjectIdentifier: Answer]>([:])

    func refuse(_ channel: any Channel, status: Int, body: [UInt8]) {
        answers.withLock { answers in
            // An answer that was never written (the connection went away first) is forgotten after a while.
            if answers.count > 1000 { answers = answers.filter { $0.value.at.duration(to: .now) < .seconds(30) } }
            answers[ObjectIdentifier(channel)] = Answer(status: status, body: body, at: .now)
        }
    }

    func take(_ channel: any Channel) -> (status: Int, body: [UInt8])? {
        answers.withLock { $0.removeValue(forKey: ObjectIdentifier(channel)) }.map { ($0.status, $0.body) }
    }
}
