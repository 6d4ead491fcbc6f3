import BeaconCore
import BeaconStorage
import Crypto
import Foundation
import HTTPTypes
import Hummingbird

/// The web console at `/console/`: static pages (part of the binary) that call the same REST API as any client, and
/// the sessions they call it with.
///
/// Signing in with the app's client credentials (what `POST /{org}/{app}/token` takes) opens a session: a random id in an
/// `HttpOnly`, `SameSite=Strict` cookie (`Secure` behind a trusted TLS proxy), of which the store keeps only a digest. The REST
/// API takes that cookie as it takes an app token (`ConsoleSessionScheme`), with no other rights; every request made with it must
/// also carry the session's CSRF token in `X-CSRF-Token`. Sessions end after `lifetime`, at sign-out, when the app's client secret is rotated
/// (`CredentialRoutes`, `beacon app rotate-secret`) or at `beacon rotate-key`.
struct Console {
    let api: API

    static let cookieName = "beacon_console"
    // From literal valid tokens: the initializers cannot fail, and no input reaches them.
    static let csrfHeader = HTTPField.Name("X-CSRF-Token")!
    private static let fetchSite = HTTPField.Name("Sec-Fetch-Site")!
    private static let referrerPolicy = HTTPField.Name("Referrer-Policy")!
    /// Eight hours (ms): a working day, then sign in again.
    static let lifetime: Int64 = 8 * 3600 * 1000

    /// The console's pages, and its session endpoints.
    func register(on router: Router<BeaconRequestContext>, table: RouteTable) {
        // Hummingbird matches `/console` and `/console/` alike; the page names its script and style sheet absolutely.
        table.add(.get, "/console", on: router) { _, _ in Self.asset(PackageResources.index_html, type: "text/html; charset=utf-8") }
        table.add(.get, "/console/console.js", on: router) { _, _ in
            Self.asset(PackageResources.console_js, type: "text/javascript; charset=utf-8")
        }
        table.add(.get, "/console/console.css", on: router) { _, _ in
            Self.asset(PackageResources.console_css, type: "text/css; charset=utf-8")
        }
        table.add(.post, "/console/session", on: router, signIn)
        table.add(.get, "/console/session", on: router, currentSession)
        table.add(.delete, "/console/session", on: router, signOut)
    }

    /// A page or script, with headers that keep it from being framed or fed foreign scripts.
    private static func asset(_ bytes: [UInt8], type: String) -> Response {
        Response(
            status: .ok,
            headers: [
                .contentType: type, .cacheControl: "no-cache", .xContentTypeOptions: "nosniff", referrerPolicy: "no-referrer",
                .contentSecurityPolicy:
                    "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
            ],
            body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
    }

    struct SignIn: Decodable {
        var org: String
        var app: String
        var clientID: String
        var clientSecret: String
        enum CodingKeys: String, CodingKey {
            case org, app, clientID = "client_id", clientSecret = "client_secret"
        }
    }

    /// What the console's script knows of its session (never the session id, which only the cookie holds).
    struct SessionView: Codable, Sendable {
        var org: String
        var app: String
        var csrfToken: String
        /// ms since 1970.
        var expiresAt: Int64
        enum CodingKeys: String, CodingKey {
            case org, app, csrfToken = "csrf_token", expiresAt = "expires_at"
        }
    }

    @Sendable func signIn(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        // JSON only: a form on another site can post text/plain that parses as JSON, and would sign the browser in to the
        // attacker's app (a request with a JSON type from another site needs CORS, which Beacon never grants).
        guard request.headers[.contentType]?.lowercased().hasPrefix("application/json") == true else {
            throw BeaconError.illegal("sign in with Content-Type: application/json")
        }
        try Self.refuseOtherSites(request)
        let previous = try Self.sessionID(in: request)
        let body = try await api.body(SignIn.self, from: request)
        let key: AppKey
        do {
            key = try AppKey(parsing: "\(body.org)/\(body.app)")
        } catch {
            throw BeaconError(.invalidGrant, "org, app, client_id or client_secret is wrong")
        }
        // One answer for an unknown app and wrong credentials (other routes do answer organization_application_not_found).
        guard let app = try await api.store.app(key), body.clientID == app.clientID,
            Credentials.hashSecret(body.clientSecret) == app.clientSecretHash
        else { throw BeaconError(.invalidGrant, "org, app, client_id or client_secret is wrong") }
        let id = Credentials.randomToken(bytes: 32)  // unguessable, and valid in a cookie
        let now = api.clock()
        let session = ConsoleSession(digest: Self.digest(of: id), app: app.id, createdAt: now, expiresAt: now + Self.lifetime)
        // Only while the secret checked above is still the app's: a rotation in between ends this sign-in too.
        guard try await api.store.createConsoleSession(session, now: now, secretHash: app.clientSecretHash) else {
            throw BeaconError(.invalidGrant, "org, app, client_id or client_secret is wrong")
        }
        // The session this browser had before ends: one browser, one session.
        if let previous { _ = try await api.store.deleteConsoleSession(digest: Self.digest(of: previous)) }
        var response = Self.private(
            SessionView(org: key.org, app: key.name, csrfToken: Self.csrfToken(for: id), expiresAt: session.expiresAt))
        response.setCookie(Self.cookie(id, secure: api.origin(of: request, context: context).isHTTPS, maxAge: Int(Self.lifetime / 1000)))
        return response
    }

    @Sendable func currentSession(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let (id, session) = try await requireSession(request)
        guard let app = try await api.store.app(id: session.app) else { throw BeaconError(.unauthorized, "not signed in") }
        return Self.private(
            SessionView(org: app.key.org, app: app.key.name, csrfToken: Self.csrfToken(for: id), expiresAt: session.expiresAt))
    }

    /// A session's answer: it holds the CSRF token, so no cache keeps it.
    private static func `private`(_ view: SessionView) -> Response {
        var response = API.json(view)
        response.headers[.cacheControl] = "no-store"
        return response
    }

    @Sendable func signOut(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let (id, _) = try await requireSession(request)
        try Self.checkCSRF(request, sessionID: id)
        _ = try await api.store.deleteConsoleSession(digest: Self.digest(of: id))
        var response = Response(status: .noContent)
        response.setCookie(Self.cookie("", secure: api.origin(of: request, context: context).isHTTPS, maxAge: 0))
        return response
    }

    private func requireSession(_ request: Request) async throws -> (id: String, session: ConsoleSession) {
        guard let id = try Self.sessionID(in: request),
            let session = try await api.store.consoleSession(digest: Self.digest(of: id), now: api.clock())
        else { throw BeaconError(.unauthorized, "not signed in, or the session expired") }
        return (id, session)
    }

    // MARK: Session ids and CSRF tokens

    /// The session id in the request's cookie; nil without one. Refused when the request comes from another site (the
    /// browser's `Sec-Fetch-Site`), and when the cookie comes twice: a cookie planted with a longer path (by a sibling
    /// subdomain, or over plain HTTP) would be sent first and pin the browser to another session.
    static func sessionID(in request: Request) throws -> String? {
        let ids = request.headers[values: .cookie].flatMap { $0.split(separator: ";") }.compactMap { pair -> Substring? in
            let trimmed = pair.drop { $0 == " " }
            guard trimmed.hasPrefix(cookieName + "=") else { return nil }
            return trimmed.dropFirst(cookieName.count + 1)
        }
        guard let id = ids.first, !id.isEmpty else { return nil }
        guard ids.count == 1 else {
            throw BeaconError(.unauthorized, "the console cookie came twice (one was planted by another site): clear this site's cookies")
        }
        try refuseOtherSites(request)
        return String(id)
    }

    /// Throws `forbidden_op` when the browser says the request comes from another site (`Sec-Fetch-Site`).
    static func refuseOtherSites(_ request: Request) throws {
        if let site = request.headers[fetchSite]?.lowercased(), site != "same-origin", site != "none" {
            throw BeaconError(.forbidden, "console requests from another site are refused")
        }
    }

    /// What the store keeps of a session id.
    static func digest(of id: String) -> String {
        SHA256.hash(data: Data(id.utf8)).lowercaseHex
    }

    /// The session's CSRF token: derived from its id (nothing more to store), and telling nothing about it.
    static func csrfToken(for id: String) -> String {
        HMAC<SHA256>.authenticationCode(for: Data("beacon console csrf".utf8), using: SymmetricKey(data: Data(id.utf8))).lowercaseHex
    }

    /// Throws `forbidden_op` unless the request carries the session's CSRF token.
    static func checkCSRF(_ request: Request, sessionID: String) throws {
        let expected = Data(csrfToken(for: sessionID).utf8)
        guard let given = request.headers[csrfHeader], Data(given.utf8).count == expected.count,
            zip(Data(given.utf8), expected).reduce(0, { $0 | ($1.0 ^ $1.1) }) == 0
        else { throw BeaconError(.forbidden, "a request with the console session needs the session's X-CSRF-Token header") }
    }

    /// The session cookie (an empty value with `maxAge` 0 removes it). `secure` when the browser came over TLS, as a
    /// trusted TLS proxy in front says with `X-Forwarded-Proto` (`API.origin(of:context:)`; from any other peer the header
    /// is ignored).
    static func cookie(_ value: String, secure: Bool, maxAge: Int) -> Cookie {
        Cookie(name: cookieName, value: value, maxAge: maxAge, path: "/", secure: secure, httpOnly: true, sameSite: .strict)
    }
}
