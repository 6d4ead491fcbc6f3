import BeaconCore
import BeaconStorage
import Hummingbird
import HummingbirdAuth

/// Who is calling a REST endpoint.
enum Caller: Sendable, Equatable {
    /// An app token, or a console session: may act on anything in its app.
    case app
    /// A user token: may act only on that user's own resources.
    case user(String)
}

/// What `SchemeAuthenticator` found: the caller of an app's route and its rights there.
struct RequestIdentity: Sendable {
    let app: AppRecord
    let caller: Caller
    /// For a user token, the user it was issued to (the account that holds the name now).
    let user: UserRecord?
    /// For a bearer token, what it says.
    var token: TokenClaims? = nil
}

extension BeaconRequestContext {
    /// The app the path names (`AppResolver` finds it before any route under `/{org}/{app}` runs).
    var app: AppRecord {
        get throws {
            guard let pathApp else { throw BeaconError(.internalError, "route registered without AppResolver") }
            return pathApp
        }
    }

    /// The authenticated caller (`RequireCaller` lets no request without one reach a handler).
    var caller: Caller {
        get throws {
            guard let identity else { throw BeaconError(.unauthorized, "missing bearer token") }
            return identity.caller
        }
    }

    /// The app, for a caller that acts as the app (an app token or a console session); `forbidden` for a user token.
    func requireApp() throws -> AppRecord {
        guard try caller == .app else { throw BeaconError(.forbidden, "this operation needs an app token") }
        return try app
    }

    /// The app, for the app or for the user `username` acting on themself.
    func requireSelfOrApp(_ username: String) throws -> AppRecord {
        if case .user(let name) = try caller, name != username {
            throw BeaconError(.forbidden, "a user token may only act on its own user")
        }
        return try app
    }
}

/// Finds the app that `/{org}/{app}` names, once per request (`organization_application_not_found` when there is none).
struct AppResolver: RouterMiddleware {
    typealias Context = BeaconRequestContext
    let api: API

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var context = context
        context.pathApp = try await api.app(
            named: AppKey(org: try context.parameters.require("org"), name: try context.parameters.require("app")))
        return try await next(request, context)
    }
}

/// One way a caller proves who it is. The REST routes (`AppRoutes`, through `SchemeAuthenticator`) and the WebSocket
/// upgrade (`API.identify`) try the same schemes, `API.identitySchemes`, in order: a new scheme is one more entry there.
protocol IdentityScheme: Sendable {
    /// The caller's identity in `app`; nil when the request does not use this scheme; throws when it does, and fails.
    func identity(of request: Request, app: AppRecord) async throws -> RequestIdentity?
}

/// A bearer token: the `Authorization` header, or the `access_token` query parameter (browsers' WebSockets cannot set
/// headers). A token that does not hold is refused.
struct BearerTokenScheme: IdentityScheme {
    let api: API

    func identity(of request: Request, app: AppRecord) async throws -> RequestIdentity? {
        guard let token = Self.token(in: request) else { return nil }
        return try await api.identity(ofToken: token, app: app)
    }

    static func token(in request: Request) -> String? {
        let header = request.headers[.authorization].flatMap { value -> String? in
            let parts = value.split(separator: " ", maxSplits: 1)
            return parts.count == 2 && parts[0].lowercased() == "bearer" ? String(parts[1]) : nil
        }
        return header ?? request.uri.queryParameters.get("access_token")
    }
}

/// The web console's session cookie (`Console`), with its CSRF token, as an app caller. Only without a bearer token.
struct ConsoleSessionScheme: IdentityScheme {
    let api: API

    func identity(of request: Request, app: AppRecord) async throws -> RequestIdentity? {
        guard BearerTokenScheme.token(in: request) == nil else { return nil }
        return try await api.consoleIdentity(request, app: app)
    }
}

/// The REST routes' authenticator: the first of `schemes` that identifies the caller sets the context's `identity`.
struct SchemeAuthenticator: AuthenticatorMiddleware {
    typealias Context = BeaconRequestContext
    let schemes: [any IdentityScheme]

    func authenticate(request: Request, context: Context) async throws -> RequestIdentity? {
        let app = try context.app
        for scheme in schemes {
            if let identity = try await scheme.identity(of: request, app: app) { return identity }
        }
        return nil
    }
}

/// Refuses a request that no authenticator identified (`unauthorized`).
struct RequireCaller: RouterMiddleware {
    typealias Context = BeaconRequestContext

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        _ = try context.caller
        return try await next(request, context)
    }
}

/// Refuses a caller that does not act as the app (`forbidden`): routes only the app's backend or console may call.
struct RequireAppCaller: RouterMiddleware {
    typealias Context = BeaconRequestContext

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        _ = try context.requireApp()
        return try await next(request, context)
    }
}

extension API {
    /// The identity a token gives in `app`: an app token of the app's current client secret, or a user token of the
    /// account that holds the name now.
    func identity(ofToken token: String, app: AppRecord) async throws -> RequestIdentity {
        guard let claims = tokens.verify(token, now: clock()), claims.app == app.id else {
            throw BeaconError(.badAccessToken, "the token is invalid, expired or not for this app")
        }
        guard let username = claims.user else {
            // An app token of a rotated client secret opens nothing. The cached copy of the app may be up to
            // `AppCache.lifetime` old: a token it refuses (issued for a secret rotated on another node, or by the CLI)
            // is checked again against the app as stored.
            if !claims.isCurrent(for: app) {
                guard let current = try await currentApp(app), claims.isCurrent(for: current) else {
                    throw BeaconError(.badAccessToken, "the token was revoked (the app's client secret was rotated); get a new one")
                }
            }
            return RequestIdentity(app: app, caller: .app, user: nil)
        }
        // A deleted user's tokens do not open an account created later under the same name (another uuid).
        guard let user = try await store.user(username, app: app.id), user.acceptsToken(of: claims.uid, issuedAt: claims.iat) else {
            throw BeaconError(.badAccessToken, "the token was revoked; log in again")
        }
        return RequestIdentity(app: app, caller: .user(username), user: user, token: claims)
    }

    /// The console session in the request's cookie, as an app caller of `app`; nil without a cookie. Every request made
    /// with it must carry the session's CSRF token, reads too: some Easemob-compatible GET routes change things
    /// (`GET …/disconnect`), and a read needs no exception.
    func consoleIdentity(_ request: Request, app: AppRecord) async throws -> RequestIdentity? {
        guard let id = try Console.sessionID(in: request) else { return nil }
        guard let session = try await store.consoleSession(digest: Console.digest(of: id), now: clock()), session.app == app.id else {
            throw BeaconError(.badAccessToken, "the console session expired or is not for this app; sign in again")
        }
        try Console.checkCSRF(request, sessionID: id)
        return RequestIdentity(app: app, caller: .app, user: nil)
    }

    /// The ways a caller proves who it is, in the order they are tried (`IdentityScheme`).
    var identitySchemes: [any IdentityScheme] { [BearerTokenScheme(api: self), ConsoleSessionScheme(api: self)] }

    /// What the REST routes' authenticator decides, for a request outside them (the WebSocket upgrade): the first of
    /// `identitySchemes` that identifies the caller, else `unauthorized`.
    func identify(_ request: Request, app: AppRecord) async throws -> RequestIdentity {
        for scheme in identitySchemes {
            if let identity = try await scheme.identity(of: request, app: app) { return identity }
        }
        throw BeaconError(.unauthorized, "missing bearer token")
    }

    /// The `:username` user of the path, which the caller must be (or be the app).
    func pathUser(_ context: BeaconRequestContext) async throws -> (AppRecord, UserRecord) {
        let username = try context.parameters.require("username")
        let app = try context.requireSelfOrApp(username)
        // A user's own record is the one its token was checked against (not a second read, which could find a user
        // created again under the name in between).
        if let authenticated = context.identity?.user { return (app, authenticated) }
        guard let user = try await store.user(username, app: app.id) else {
            throw BeaconError(.userNotFound, "user \(username) does not exist")
        }
        return (app, user)
    }
}
