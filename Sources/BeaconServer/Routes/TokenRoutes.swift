import BeaconCore
import BeaconProtocol
import BeaconStorage
import BeaconTencent
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
        case "usersig":
            // Tencent's login: a UserSig the app's backend made (the secret key never leaves it and Beacon keeps no password).
            // The token lasts no longer than the UserSig does. An account that logs in for the first time is imported, as at
            // Tencent.
            guard let username = body.username, let sig = body.usersig, (try? Validation.validateUsername(username)) != nil else {
                throw BeaconError(.invalidGrant, "username or usersig is wrong")
            }
            // Checked against the app as stored now, not the cached copy: a rotated key, or one set from the command line a
            // moment ago, holds at once on every node.
            guard let current = try await api.currentApp(app) else {
                throw BeaconError(.appNotFound, "application \(app.key) does not exist")
            }
            // The administrator is the backend, never a user (its UserSig opens the /v4 door, not a user's login).
            guard username != current.tencent?.adminIdentifier else { throw BeaconError(.invalidGrant, "username or usersig is wrong") }
            let userSig: UserSig
            do {
                userSig = try api.verifyUserSig(sig, identifier: username, app: current)
            } catch let failure as UserSig.Failure {
                throw BeaconError(.invalidGrant, "the usersig does not hold: \(TencentFailure(failure).info)")
            } catch let error as BeaconError where error.code == .appNotFound {
                throw BeaconError(.invalidGrant, "the app has no Tencent identity: no usersig holds")
            }
            let user = try await importedUser(username, app: current)
            let remaining = Int(max(1, (userSig.time + userSig.expire) - now / 1000))
            claims.exp = now + Int64(min(lifetime, remaining)) * 1000
            claims.user = username
            claims.uid = user.uuid
            return API.json(
                TokenResponse(accessToken: api.tokens.issue(claims), expiresIn: min(lifetime, remaining), user: UserEntity(user)))
        default:
            throw BeaconError.illegal("grant_type must be client_credentials, password or usersig")
        }
    }

    /// The user `username`, imported (no password) when there is none yet.
    private func importedUser(_ username: String, app: AppRecord) async throws -> UserRecord {
        if let user = try await store.user(username, app: app.id) { return user }
        do {
            _ = try await store.createUsers(
                [NewUser(username: username, passwordHash: Credentials.noPassword)], app: app.id, now: api.clock())
        } catch let error as BeaconError where error.code == .duplicate {
            // Imported meanwhile by another login.
        }
        guard let user = try await store.user(username, app: app.id) else {
            throw BeaconError(.userNotFound, "user \(username) does not exist")
        }
        return user
    }
}
