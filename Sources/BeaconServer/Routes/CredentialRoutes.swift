import BeaconCore
import BeaconStorage
import Hummingbird

/// The app's own credentials: `POST /{org}/{app}/credentials/rotate`, the console's "Rotate client secret" (Beacon's
/// own, not an Easemob endpoint; `beacon app rotate-secret` does the same from the command line).
struct CredentialRoutes: AppRouteCollection {
    let api: API

    func register(on routes: AppRoutes) {
        routes.add(.get, "credentials", .app, identity)
        routes.add(.post, "credentials/rotate", .app, rotate)
    }

    /// What `GET credentials` answers: the app's identifiers, no secret.
    struct Identity: Codable, Sendable {
        var clientID: String
        var sdkAppID: Int64?
        var tencentAdmin: String?

        enum CodingKeys: String, CodingKey {
            case clientID = "client_id", sdkAppID = "sdkappid", tencentAdmin = "tencent_admin"
        }
    }

    /// The client id and the Tencent SDKAppID and administrator (the console's "Client credentials" card).
    @Sendable func identity(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let app = try context.requireApp()
        guard let current = try await api.currentApp(app) else { throw BeaconError(.appNotFound, "application \(app.key) does not exist") }
        return api.respond(
            request, app: current, action: "get",
            data: Identity(clientID: current.clientID, sdkAppID: current.tencent?.sdkAppID, tencentAdmin: current.tencent?.adminIdentifier))
    }

    /// The body: the secret being replaced, which the caller must know — an app token or a console session alone (either
    /// may have leaked, and both end) cannot turn itself into a secret that never expires.
    struct Body: Decodable {
        var clientSecret: String?
        /// True: the Tencent secret key stays (a backend moved from Tencent goes on making its UserSigs with it).
        var keepTencentKey: Bool?

        enum CodingKeys: String, CodingKey {
            case clientSecret = "client_secret", keepTencentKey = "keep_tencent_key"
        }
    }

    /// Gives the app a new client secret (its client id stays) and answers it once: the store keeps only its hash. What
    /// the old secret opened ends: app tokens issued until now are refused, every console session of the app ends (the
    /// caller's too: its cookie is cleared), and the old secret obtains nothing more. Needs an app caller that also gives
    /// the current secret (`invalid_grant` otherwise).
    @Sendable func rotate(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let app = try context.requireApp()
        let body = try await api.bodyIfPresent(Body.self, from: request)
        guard let secret = body?.clientSecret, secret.utf8.count <= 1024, let current = try await api.currentApp(app),
            Credentials.hashSecret(secret) == current.clientSecretHash
        else { throw BeaconError(.invalidGrant, "client_secret is wrong: give the current client secret to rotate it") }
        let signedIn = try Console.sessionID(in: request) != nil
        let credentials = try await api.rotateClientSecret(of: app, keepingTencentKey: body?.keepTencentKey == true)
        api.logger.notice("client secret rotated", metadata: ["app": "\(app.key)"])
        var response = api.respond(request, app: app, action: "post", data: credentials)
        response.headers[.cacheControl] = "no-store"
        if signedIn { response.setCookie(Console.cookie("", secure: api.origin(of: request, context: context).isHTTPS, maxAge: 0)) }
        return response
    }
}
