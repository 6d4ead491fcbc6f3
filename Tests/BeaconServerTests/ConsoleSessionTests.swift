import BeaconCore
import BeaconServer
import BeaconTesting
import Foundation
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Console sessions from outside: the cookie's attributes, sign-in refusals that stop another site, expiry, one app per
/// session, planted cookies. (The browser flows are in e2e/console.)
@Suite struct ConsoleSessionTests {
    private typealias Answer = CookielessHTTP.Answer

    private static func send(
        _ beacon: TestBeacon, _ method: String, _ path: String, body: String? = nil, headers: [String: String] = [:]
    ) async throws -> Answer {
        try await CookielessHTTP.send(beacon.baseURL, method, path, body: body, headers: headers)
    }

    private static func signInBody(_ beacon: TestBeacon) throws -> String {
        let credentials = try #require(beacon.credentials)
        return #"{"org":"acme","app":"chat","client_id":"\#(credentials.clientID)","client_secret":"\#(credentials.clientSecret)"}"#
    }

    /// Signs in; the cookie pair (`beacon_console=…`) and the CSRF token.
    private static func signIn(_ beacon: TestBeacon, headers: [String: String] = [:]) async throws -> (
        cookie: String, csrf: String, answer: Answer
    ) {
        let answer = try await send(
            beacon, "POST", "/console/session", body: try signInBody(beacon),
            headers: ["Content-Type": "application/json"].merging(headers) { $1 })
        #expect(answer.status == 200)
        let cookie = try #require(answer.headers["set-cookie"]?.split(separator: ";").first.map(String.init))
        return (cookie, try #require(answer.json["csrf_token"]?.stringValue), answer)
    }

    @Test func signInIsRefusedToOtherSitesAndSetsAPrivateCookie() async throws {
        try await TestBeacon.run { beacon in
            // A form on another site can only post text/plain (parsed as JSON otherwise): refused.
            let plain = try await Self.send(
                beacon, "POST", "/console/session", body: try Self.signInBody(beacon), headers: ["Content-Type": "text/plain"])
            #expect(plain.status == 400 && plain.json["error"] == "illegal_argument")
            let crossSite = try await Self.send(
                beacon, "POST", "/console/session", body: try Self.signInBody(beacon),
                headers: ["Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"])
            #expect(crossSite.status == 403 && crossSite.json["error"] == "forbidden_op")

            let (cookie, csrf, answer) = try await Self.signIn(beacon, headers: ["Sec-Fetch-Site": "same-origin"])
            let attributes = Set(
                (answer.headers["set-cookie"] ?? "").split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces).lowercased() })
            #expect(attributes.isSuperset(of: ["httponly", "samesite=strict", "path=/", "max-age=28800"]))
            #expect(!attributes.contains("secure"))
            #expect(answer.headers["cache-control"] == "no-store")
            // `X-Forwarded-Proto` from a peer that is not a trusted proxy is anyone's word: ignored.
            let claimed = try await Self.signIn(beacon, headers: ["X-Forwarded-Proto": "https"])
            #expect(claimed.answer.headers["set-cookie"]?.lowercased().contains("; secure") == false)

            // The cookie acts as the app, with its CSRF token; not from another site.
            #expect(
                try await Self.send(beacon, "GET", "/acme/chat/push/certificates", headers: ["Cookie": cookie, "X-CSRF-Token": csrf]).status
                    == 200)
            let fromElsewhere = try await Self.send(
                beacon, "GET", "/acme/chat/push/certificates",
                headers: ["Cookie": cookie, "X-CSRF-Token": csrf, "Sec-Fetch-Site": "same-site"])
            #expect(fromElsewhere.status == 403)
            // A second cookie of the same name (planted with a longer path) is refused rather than guessed between.
            let planted = try await Self.send(
                beacon, "GET", "/acme/chat/push/certificates",
                headers: ["Cookie": "\(cookie); beacon_console=planted", "X-CSRF-Token": csrf])
            #expect(planted.status == 401)
        }
    }

    /// Behind a trusted TLS proxy (`--trusted-proxy`) the cookie is `Secure` when the proxy says the browser came over
    /// HTTPS; sign-out's clearing cookie too.
    @Test func behindATrustedTLSProxyTheCookieIsSecure() async throws {
        try await TestBeacon.run(trustedProxies: try TrustedProxies(parsing: "127.0.0.1")) { beacon in
            let overTLS = try await Self.signIn(beacon, headers: ["X-Forwarded-Proto": "https"])
            #expect(overTLS.answer.headers["set-cookie"]?.lowercased().contains("; secure") == true)
            let signedOut = try await Self.send(
                beacon, "DELETE", "/console/session",
                headers: ["Cookie": overTLS.cookie, "X-CSRF-Token": overTLS.csrf, "X-Forwarded-Proto": "https"])
            #expect(signedOut.status == 204)
            #expect(signedOut.headers["set-cookie"]?.lowercased().contains("; secure") == true)
            // The proxy says plain HTTP: not Secure (the browser would not send it back).
            let plain = try await Self.signIn(beacon, headers: ["X-Forwarded-Proto": "http"])
            #expect(plain.answer.headers["set-cookie"]?.lowercased().contains("; secure") == false)
        }
    }

    @Test func aSessionOpensOnlyItsAppAndEndsWithItsLifetimeOrANewSignIn() async throws {
        let clock = TestClock()
        try await TestBeacon.run(clock: clock) { beacon in
            _ = try await AppProvisioning.create(AppKey(org: "acme", name: "other"), in: beacon.store)
            let (cookie, csrf, _) = try await Self.signIn(beacon)
            let headers = ["Cookie": cookie, "X-CSRF-Token": csrf]
            let otherApp = try await Self.send(beacon, "GET", "/acme/other/push/certificates", headers: headers)
            #expect(otherApp.status == 401 && otherApp.json["error"] == "auth_bad_access_token")

            // Signing in again from the same browser ends the session its cookie held.
            let again = try await Self.signIn(beacon, headers: ["Cookie": cookie])
            #expect(try await Self.send(beacon, "GET", "/console/session", headers: headers).status == 401)
            let fresh = ["Cookie": again.cookie, "X-CSRF-Token": again.csrf]
            #expect(try await Self.send(beacon, "GET", "/console/session", headers: fresh).status == 200)

            // Eight hours later the session opens nothing.
            clock.advance(seconds: 8 * 3600 - 1)
            #expect(try await Self.send(beacon, "GET", "/acme/chat/push/certificates", headers: fresh).status == 200)
            clock.advance(seconds: 2)
            #expect(try await Self.send(beacon, "GET", "/console/session", headers: fresh).status == 401)
            let expired = try await Self.send(beacon, "GET", "/acme/chat/push/certificates", headers: fresh)
            #expect(expired.status == 401 && expired.json["error"] == "auth_bad_access_token")
        }
    }
}
