import BeaconCore
import BeaconProtocol
import BeaconStorage
import Hummingbird

/// `POST /token`: app tokens for client credentials, user tokens for a username and password (Easemob's grants).
struct TokenRoutes: AppRouteCollection {
    let api: API
    let tokenLifetimeSeconds: Int
    let passwordHashRounds: Int
    let logins: LoginThrottle

    var store: any BeaconStore { api.store }

    func register(on routes: AppRoutes) {
        routes.add(.post, "token", .anyone, token)
    }

    @Sendable func token(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let app = try context.app
        let body = try await api.body(TokenRequest.self, from: request)
        let now = api.clock()
        let lifetime = min(max(body.ttl ?? tokenLifetimeSeconds, 1), TokenClaims.maxUserTokenLifetime)
        var claims = TokenClaims(app: app.id, user: nil, uid: nil, iat: now, exp: now + Int64(lifetime) * 1000)
        switch body.grantType {
        case "client_credentials":
            // The secret is checked against the app as stored now, not the cached copy: a rotated secret obtains nothing, on
            // any node. (The client id never changes: a wrong one costs no store read.)
            guard body.clientID == app.clientID, let secret = body.clientSecret, let current = try await api.currentApp(app),
                Credentials.hashSecret(secret) == current.clientSecretHash
            else { throw BeaconError(.invalidGrant, "client_id or client_secret is wrong") }
            let appLifetime = min(lifetime, TokenClaims.maxAppTokenLifetime)
            // Never before the rotation that made this secret the current one (a node whose clock is behind the CLI's).
            let issuedAt = max(now, current.tokensValidAfter)
            let appClaims = TokenClaims(
                app: app.id, user: nil, uid: nil, iat: issuedAt, exp: now + Int64(appLifetime) * 1000,
                sec: TokenClaims.secretTag(of: current))
            return API.json(
                TokenResponse(
                    accessToken: api.tokens.issue(appClaims), expiresIn: appLifetime, application: "\(app.key.org)#\(app.key.name)"))
        case "password":
            guard let username = body.username, let password = body.password, password.utf8.count <= 1024 else {
                throw BeaconError(.invalidGrant, "username or password is wrong")
            }
            // A username no user can have is refused here (invalid_grant), before anything is counted or hashed. The address
            // is the client's: a trusted proxy's `X-Forwarded-For`, else the peer's.
            let attempt = try logins.begin(
                app: app.id, username: username, address: api.origin(of: request, context: context).address, now: now)
            var succeeded = false
            defer { logins.end(attempt, now: now, succeeded: succeeded) }
            let user = try await store.user(username, app: app.id)
            guard try await Credentials.verifyPasswordOffLoop(password, hash: user?.passwordHash, rounds: passwordHashRounds), let user
            else {
                throw BeaconError(.invalidGrant, "username or password is wrong")
            }
            succeeded = true
            claims.user = username
            claims.uid = user.uuid
            return API.json(TokenResponse(accessToken: api.tokens.issue(claims), expiresIn: lifetime, user: UserEntity(user)))
        default:
            throw BeaconError.illegal("grant_type must be client_credentials or password")
        }
    }
}
