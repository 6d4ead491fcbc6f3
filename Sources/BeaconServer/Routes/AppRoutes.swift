import Hummingbird

/// The REST API's routes under `/{org}/{app}`, registered by who may call them. Each route collection (one file per
/// resource in this folder) registers its routes here; every route is recorded in the route table, for 405 answers and
/// `beacon routes`.
///
/// Every request under `/{org}/{app}` has its app found first (`AppResolver`); then, unless the route is open to anyone,
/// its caller is authenticated (`SchemeAuthenticator` tries `API.identitySchemes`; `RequireCaller` refuses a request none
/// of them identified) and, for `.app` routes, must act as the app (`RequireAppCaller`). Handlers read what was
/// found from their context (`context.app`, `context.caller`, `context.requireSelfOrApp(_:)`, `API.pathUser(_:)`).
struct AppRoutes {
    /// Who may call a route.
    enum Access {
        /// Anyone: the app is found, nobody is authenticated (`POST /token`).
        case anyone
        /// Any authenticated caller: the app, or a user (the handler decides what a user may do there).
        case caller
        /// The app only: an app token or a console session.
        case app
    }

    private let table: RouteTable
    private let open: RouterGroup<BeaconRequestContext>
    private let authenticated: RouterGroup<BeaconRequestContext>
    private let appOnly: RouterGroup<BeaconRequestContext>

    static let prefix = "/:org/:app/"

    init(on router: Router<BeaconRequestContext>, table: RouteTable, api: API) {
        self.table = table
        open = router.group("/:org/:app").add(middleware: AppResolver(api: api))
        authenticated = open.group()
            .add(middleware: SchemeAuthenticator(schemes: api.identitySchemes))
            .add(middleware: RequireCaller())
        appOnly = authenticated.group().add(middleware: RequireAppCaller())
    }

    /// Registers `handler` for `method` on `path` (relative to `/{org}/{app}/`) for callers of `access`.
    func add(
        _ method: HTTPRequest.Method, _ path: String, _ access: Access,
        _ handler: @escaping @Sendable (Request, BeaconRequestContext) async throws -> Response
    ) {
        let group =
            switch access {
            case .anyone: open
            case .caller: authenticated
            case .app: appOnly
            }
        table.add(method, Self.prefix + path, on: group, relativePath: path, handler)
        table.setAccess(access, method, Self.prefix + path)
    }
}

/// A resource's REST routes, registered under `/{org}/{app}`.
protocol AppRouteCollection {
    func register(on routes: AppRoutes)
}

extension RouteTable {
    /// Registers `handler` for `method` on `relativePath` of `router` and records it as `path` (the route's whole path):
    /// the one way Beacon adds a route.
    func add(
        _ method: HTTPRequest.Method, _ path: String, on router: some RouterMethods<BeaconRequestContext>, relativePath: String? = nil,
        _ handler: @escaping @Sendable (Request, BeaconRequestContext) async throws -> Response
    ) {
        router.on(RouterPath(relativePath ?? path), method: method, use: handler)
        add(method, path)
    }
}
