import BeaconCore
import BeaconStorage
import BeaconTesting
import Foundation
import Testing

@testable import BeaconServer

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Revoking one app's credentials: `POST /{org}/{app}/credentials/rotate` (the console's button), `beacon app
/// rotate-secret` beside a running server, and the lifetime of app tokens.
@Suite struct AppCredentialsTests {
    private typealias Answer = CookielessHTTP.Answer

    private static func send(
        _ baseURL: URL, _ method: String, _ path: String, body: String? = nil, headers: [String: String] = [:]
    ) async throws -> Answer {
        try await CookielessHTTP.send(baseURL, method, path, body: body, headers: headers)
    }

    /// Signs in to the console of acme/chat; the cookie pair (`beacon_console=…`) and the CSRF token.
    private static func signIn(_ baseURL: URL, clientID: String, secret: String) async throws -> (cookie: String, csrf: String) {
        let answer = try await send(
            baseURL, "POST", "/console/session",
            body: #"{"org":"acme","app":"chat","client_id":"\#(clientID)","client_secret":"\#(secret)"}"#,
            headers: ["Content-Type": "application/json"])
        #expect(answer.status == 200)
        let cookie = try #require(answer.headers["set-cookie"]?.split(separator: ";").first.map(String.init))
        return (cookie, try #require(answer.json["csrf_token"]?.stringValue))
    }

    private static func grant(clientID: String, secret: String, ttl: Int? = nil) -> JSONValue {
        var body: [String: JSONValue] = [
            "grant_type": "client_credentials", "client_id": .string(clientID), "client_secret": .string(secret),
        ]
        if let ttl { body["ttl"] = .number(Double(ttl)) }
        return .object(body)
    }

    /// Rotated from the console in the same millisecond as an app token was issued with the old secret (the test clock
    /// stands still): the old secret obtains nothing, that token and every other app token of the old secret open nothing,
    /// the console session ends (its cookie cleared), the new secret works at once, and users' tokens stay.
    @Test func rotatingTheSecretEndsEverythingTheOldOneOpened() async throws {
        try await TestBeacon.run(clock: TestClock()) { beacon in
            let old = try #require(beacon.credentials)
            try await beacon.createUsers("alice")
            let userToken = try await beacon.userToken("alice")
            let issued = try await beacon.rest(
                "POST", "/token", Self.grant(clientID: old.clientID, secret: old.clientSecret), anonymous: true)
            let oldToken = try #require(issued.json["access_token"]?.stringValue)
            #expect(try await beacon.rest("GET", "/users/alice", token: oldToken).status == 200)
            let (cookie, csrf) = try await Self.signIn(beacon.baseURL, clientID: old.clientID, secret: old.clientSecret)
            let session = ["Cookie": cookie, "X-CSRF-Token": csrf]

            // Not for a user token, nor for a console session without its CSRF token.
            let asUser = try await beacon.rest("POST", "/credentials/rotate", token: userToken)
            #expect(asUser.status == 403 && asUser.json["error"] == "forbidden_op")
            #expect(try await Self.send(beacon.baseURL, "POST", "/acme/chat/credentials/rotate", headers: ["Cookie": cookie]).status == 403)

            // Nor without the current secret: a leaked token or session alone cannot make itself a secret.
            let blind = try await Self.send(beacon.baseURL, "POST", "/acme/chat/credentials/rotate", headers: session)
            #expect(blind.status == 400 && blind.json["error"] == "invalid_grant")
            let wrong = try await Self.send(
                beacon.baseURL, "POST", "/acme/chat/credentials/rotate", body: #"{"client_secret":"guess"}"#,
                headers: session.merging(["Content-Type": "application/json"]) { $1 })
            #expect(wrong.status == 400 && wrong.json["error"] == "invalid_grant")
            #expect(try await beacon.rest("GET", "/users/alice", token: oldToken).status == 200)  // nothing rotated

            let rotated = try await Self.send(
                beacon.baseURL, "POST", "/acme/chat/credentials/rotate", body: #"{"client_secret":"\#(old.clientSecret)"}"#,
                headers: session.merging(["Content-Type": "application/json"]) { $1 })
            #expect(rotated.status == 200)
            #expect(rotated.headers["cache-control"] == "no-store")
            #expect(rotated.headers["set-cookie"]?.lowercased().contains("max-age=0") == true)
            let new = try #require(rotated.json["data"]?["client_secret"]?.stringValue)
            #expect(new != old.clientSecret)
            #expect(rotated.json["data"]?["client_id"]?.stringValue == old.clientID)

            // The console session is gone.
            #expect(try await Self.send(beacon.baseURL, "GET", "/console/session", headers: ["Cookie": cookie]).status == 401)
            let withSession = try await Self.send(beacon.baseURL, "GET", "/acme/chat/users/alice", headers: session)
            #expect(withSession.status == 401 && withSession.json["error"] == "auth_bad_access_token")
            // The old secret obtains nothing, here or at the console.
            let refused = try await beacon.rest(
                "POST", "/token", Self.grant(clientID: old.clientID, secret: old.clientSecret), anonymous: true)
            #expect(refused.status == 400 && refused.json["error"] == "invalid_grant")
            let console = try await Self.send(
                beacon.baseURL, "POST", "/console/session",
                body: #"{"org":"acme","app":"chat","client_id":"\#(old.clientID)","client_secret":"\#(old.clientSecret)"}"#,
                headers: ["Content-Type": "application/json"])
            #expect(console.status == 400 && console.json["error"] == "invalid_grant")
            // App tokens of the old secret open nothing, though issued in the very millisecond of the rotation.
            for token in [oldToken, beacon.appToken] {
                let answer = try await beacon.rest("GET", "/users/alice", token: token)
                #expect(answer.status == 401 && answer.json["error"] == "auth_bad_access_token")
            }
            // The new secret works at once; users' tokens are theirs and stay.
            let fresh = try await beacon.rest("POST", "/token", Self.grant(clientID: old.clientID, secret: new), anonymous: true)
            let newToken = try #require(fresh.json["access_token"]?.stringValue)
            #expect(try await beacon.rest("GET", "/users/alice", token: newToken).status == 200)
            #expect(try await beacon.rest("GET", "/users/alice", token: userToken).status == 200)
            _ = try await Self.signIn(beacon.baseURL, clientID: old.clientID, secret: new)

            // With an app token: that token ends with the secret it was issued for.
            let byToken = try await beacon.rest("POST", "/credentials/rotate", ["client_secret": .string(new)], token: newToken)
            #expect(byToken.status == 200 && byToken.json["data"]?["client_secret"]?.stringValue != new)
            #expect(try await beacon.rest("GET", "/users/alice", token: newToken).status == 401)
        }
    }

    /// A rotation this node did not make (the CLI beside it, or another node) reaches it within `AppCache.lifetime`: until
    /// then its cached copy of the app still takes an old app token (no store read per request), not after. A grant always
    /// reads the app afresh: a secret rotated elsewhere obtains nothing at once.
    @Test func aRotationElsewhereReachesThisNodeWithinTheCacheLifetime() async throws {
        let clock = TestClock()
        try await TestBeacon.run(clock: clock) { beacon in
            let old = try #require(beacon.credentials)
            let key = AppKey(org: "acme", name: "chat")
            #expect(try await beacon.rest("GET", "/users").status == 200)  // this node has the app cached now
            let new = try await AppProvisioning.rotateSecret(key, in: beacon.store, now: clock.now)

            clock.advance(seconds: AppCache.lifetime / 1000 - 1)
            #expect(try await beacon.rest("GET", "/users").status == 200)
            clock.advance(seconds: 1)
            let expired = try await beacon.rest("GET", "/users")
            #expect(expired.status == 401 && expired.json["error"] == "auth_bad_access_token")
            let refused = try await beacon.rest(
                "POST", "/token", Self.grant(clientID: old.clientID, secret: old.clientSecret), anonymous: true)
            #expect(refused.status == 400 && refused.json["error"] == "invalid_grant")
            let fresh = try await beacon.rest(
                "POST", "/token", Self.grant(clientID: old.clientID, secret: new.clientSecret), anonymous: true)
            let token = try #require(fresh.json["access_token"]?.stringValue)
            #expect(try await beacon.rest("GET", "/users", token: token).status == 200)

            // Rotated elsewhere again while this node's copy is fresh: the grant does not trust that copy.
            let newest = try await AppProvisioning.rotateSecret(key, in: beacon.store, now: clock.now)
            let stale = try await beacon.rest(
                "POST", "/token", Self.grant(clientID: old.clientID, secret: new.clientSecret), anonymous: true)
            #expect(stale.status == 400 && stale.json["error"] == "invalid_grant")
            let newestGrant = try await beacon.rest(
                "POST", "/token", Self.grant(clientID: old.clientID, secret: newest.clientSecret), anonymous: true)
            let newestToken = try #require(newestGrant.json["access_token"]?.stringValue)
            #expect(try await beacon.rest("GET", "/users", token: newestToken).status == 200)
            #expect(try await beacon.rest("GET", "/users", token: token).status == 401)

            await #expect(throws: BeaconError.self) {
                _ = try await AppProvisioning.rotateSecret(AppKey(org: "acme", name: "none"), in: beacon.store)
            }
        }
    }

    /// App tokens live 7 days at most, whatever `ttl` asks; user tokens keep their 60 days.
    @Test func appTokensLiveSevenDaysAtMost() async throws {
        let clock = TestClock()
        try await TestBeacon.run(clock: clock) { beacon in
            let credentials = try #require(beacon.credentials)
            try await beacon.createUsers("alice")
            let app = try await beacon.rest(
                "POST", "/token", Self.grant(clientID: credentials.clientID, secret: credentials.clientSecret, ttl: 60 * 24 * 3600),
                anonymous: true)
            #expect(app.json["expires_in"]?.intValue == 7 * 24 * 3600)
            let short = try await beacon.rest(
                "POST", "/token", Self.grant(clientID: credentials.clientID, secret: credentials.clientSecret, ttl: 60), anonymous: true)
            #expect(short.json["expires_in"]?.intValue == 60)
            let user = try await beacon.rest(
                "POST", "/token",
                ["grant_type": "password", "username": "alice", "password": "pw", "ttl": .number(Double(90 * 24 * 3600))], anonymous: true)
            #expect(user.json["expires_in"]?.intValue == 60 * 24 * 3600)
            let appToken = try #require(app.json["access_token"]?.stringValue)
            let userToken = try #require(user.json["access_token"]?.stringValue)

            clock.advance(seconds: 7 * 24 * 3600 - 1)
            #expect(try await beacon.rest("GET", "/users/alice", token: appToken).status == 200)
            clock.advance(seconds: 1)
            #expect(try await beacon.rest("GET", "/users/alice", token: appToken).status == 401)
            #expect(try await beacon.rest("GET", "/users/alice", token: userToken).status == 200)
        }
    }

    /// App tokens of versions before the secret's tag are judged by their issue time alone; tagged ones by their secret.
    @Test func anAppTokenIsCurrentForTheSecretAndRotationItWasIssuedUnder() {
        let app = AppRecord(
            id: 1, key: AppKey(org: "acme", name: "chat"), clientID: "id", clientSecretHash: String(repeating: "ab", count: 32),
            limits: .default,
            createdAt: 0, tokensValidAfter: 1_000)
        let untagged = TokenClaims(app: 1, user: nil, uid: nil, iat: 1_000, exp: 9_000)
        #expect(untagged.isCurrent(for: app))
        #expect(!TokenClaims(app: 1, user: nil, uid: nil, iat: 999, exp: 9_000).isCurrent(for: app))
        #expect(TokenClaims(app: 1, user: nil, uid: nil, iat: 1_000, exp: 9_000, sec: TokenClaims.secretTag(of: app)).isCurrent(for: app))
        #expect(!TokenClaims(app: 1, user: nil, uid: nil, iat: 5_000, exp: 9_000, sec: "0123456789abcdef").isCurrent(for: app))
        // Issued for longer than an app token may live (an earlier version's 60 days): refused.
        let week = Int64(TokenClaims.maxAppTokenLifetime) * 1000
        #expect(TokenClaims(app: 1, user: nil, uid: nil, iat: 1_000, exp: 1_000 + week).isCurrent(for: app))
        #expect(!TokenClaims(app: 1, user: nil, uid: nil, iat: 1_000, exp: 1_001 + week).isCurrent(for: app))
        #expect(!TokenClaims(app: 1, user: nil, uid: nil, iat: .min, exp: .max).isCurrent(for: app))
    }

    /// `beacon app rotate-secret` as an operator runs it, beside a running server on the same data directory: the new
    /// secret printed once, the old one refused at once, its app tokens within `AppCache.lifetime`.
    @Test func theRotateSecretCommandWorksBesideARunningServer() async throws {
        try await withTemporaryDirectory { directory in
            let data = directory.appendingPathComponent("data").path
            // Standard output holds the JSON alone: the warning that no secret key exists yet goes to standard error.
            func json(_ output: Data) throws -> JSONValue { try JSONDecoder().decode(JSONValue.self, from: output) }
            let created = try await runToExit(BeaconProcess.executable, ["app", "create", "acme/chat", "--json", "--data-dir", data])
            #expect(created.status == 0)
            let old = try json(created.output)
            let clientID = try #require(old["client_id"]?.stringValue)
            // Before the first `serve` there is no secret key yet (the command makes none): no Tencent identity.
            #expect(old["sdkappid"] == nil && old["sdk_secret_key"] == nil)
            let server = try await BeaconProcess(["serve", "--port", "0", "--data-dir", data])
            defer { Task { await server.stop() } }
            let ready = try await server.line(containing: "Beacon listening on http://")
            let port = try #require(ready.split(separator: ":").last.map { $0.filter(\.isNumber) }.flatMap { Int($0) })
            let baseURL = try #require(URL(string: "http://127.0.0.1:\(port)"))
            func token(_ secret: String) async throws -> (status: Int, token: String?) {
                let (status, answer) = try await REST.call(
                    baseURL, "POST", "/acme/chat/token", body: Self.grant(clientID: clientID, secret: secret), token: nil)
                return (status, answer["access_token"]?.stringValue)
            }
            let oldSecret = try #require(old["client_secret"]?.stringValue)
            let oldToken = try #require(try await token(oldSecret).token)
            #expect(try await REST.call(baseURL, "GET", "/acme/chat/users", body: nil, token: oldToken).0 == 200)

            let rotated = try await runToExit(
                BeaconProcess.executable, ["app", "rotate-secret", "acme/chat", "--json", "--data-dir", data])
            #expect(rotated.status == 0)
            let new = try json(rotated.output)
            #expect(new["client_id"]?.stringValue == clientID && new["org"] == "acme" && new["app"] == "chat")
            let newSecret = try #require(new["client_secret"]?.stringValue)
            #expect(newSecret != old["client_secret"]?.stringValue)
            // With the key `serve` made, the rotation gives the app its Tencent identity; a second one keeps the SDKAppID.
            let sdkAppID = try #require(new["sdkappid"]?.intValue)
            #expect(sdkAppID >= 1_400_000_000 && new["sdk_secret_key"]?.stringValue?.utf8.count == 64)

            #expect(try await token(try #require(old["client_secret"]?.stringValue)).status == 400)
            var status = 200
            try await waitUntil("the old token refused", timeout: .seconds(20), interval: .milliseconds(200)) {
                status = try await REST.call(baseURL, "GET", "/acme/chat/users", token: oldToken).status
                return status != 200
            }
            #expect(status == 401)
            let newToken = try #require(try await token(newSecret).token)
            #expect(try await REST.call(baseURL, "GET", "/acme/chat/users", body: nil, token: newToken).0 == 200)

            // Without --json: the secret on its own line; an app that does not exist fails.
            let text = try await runToExit(BeaconProcess.executable, ["app", "rotate-secret", "acme/chat", "--data-dir", data])
            #expect(text.status == 0 && String(decoding: text.output, as: UTF8.self).contains("client_secret: YXA6"))
            #expect(String(decoding: text.output, as: UTF8.self).contains("sdkappid:      \(sdkAppID)"))
            // --keep-tencent-key: the client secret alone (the Tencent key the backend signs with stays).
            let kept = try await runToExit(
                BeaconProcess.executable, ["app", "rotate-secret", "acme/chat", "--json", "--keep-tencent-key", "--data-dir", data])
            let keptJSON = try json(kept.output)
            #expect(
                kept.status == 0 && keptJSON["client_secret"] != nil && keptJSON["sdkappid"] == nil && keptJSON["sdk_secret_key"] == nil)
            // A command run with another secret key than the server's seals nothing: it cannot open what is stored.
            let otherKey = directory.appendingPathComponent("other.json")
            try Data(#"{"secretKey":"\#(Data(repeating: 9, count: 32).base64EncodedString())"}"#.utf8).write(to: otherKey)
            let wrong = try await runToExit(
                BeaconProcess.executable, ["app", "tencent", "acme/chat", "--config", otherKey.path, "--data-dir", data])
            #expect(wrong.status != 0)
            // (A token of the last secret: the server refuses the earlier ones once it sees the rotations, sooner or later.)
            let lastSecret = try #require(keptJSON["client_secret"]?.stringValue)
            let lastToken = try #require(try await token(lastSecret).token)
            let identity = try await REST.call(baseURL, "GET", "/acme/chat/credentials", token: lastToken)
            #expect(identity.json["data"]?["sdkappid"]?.intValue == sdkAppID, "\(identity)")
            let missing = try await runToExit(BeaconProcess.executable, ["app", "rotate-secret", "acme/none", "--data-dir", data])
            #expect(missing.status != 0)
            await server.stop()
        }
    }
}

/// The same across nodes (PostgreSQL): a rotation on one node, a node that cached the app before it.
@Suite(.enabled(if: ProcessInfo.processInfo.environment["BEACON_TEST_POSTGRES_URL"] != nil, "needs BEACON_TEST_POSTGRES_URL"))
struct AppCredentialsClusterTests {
    /// Node b, which cached the app before the rotation on node a, takes a token of the new secret at once (its copy
    /// refuses it, so it reads the app again), and refuses the old ones from then on; the old secret obtains nothing on b.
    @Test func aRotationOnOneNodeReachesAnotherThatCachedTheApp() async throws {
        try await TestBeacon.runNodes(2) { nodes in
            let (a, b) = (nodes[0], nodes[1])
            let old = try #require(a.credentials)
            #expect(try await b.rest("GET", "/users").status == 200)  // b has the app cached now
            let rotated = try await a.rest("POST", "/credentials/rotate", ["client_secret": .string(old.clientSecret)])
            #expect(rotated.status == 200)
            let secret = try #require(rotated.json["data"]?["client_secret"]?.stringValue)
            #expect(try await a.rest("GET", "/users").status == 401)

            let issued = try await a.rest(
                "POST", "/token",
                ["grant_type": "client_credentials", "client_id": .string(old.clientID), "client_secret": .string(secret)], anonymous: true)
            let token = try #require(issued.json["access_token"]?.stringValue)
            #expect(try await b.rest("GET", "/users", token: token).status == 200)
            let stale = try await b.rest("GET", "/users")
            #expect(stale.status == 401 && stale.json["error"] == "auth_bad_access_token")
            let grant: JSONValue = [
                "grant_type": "client_credentials", "client_id": .string(old.clientID), "client_secret": .string(old.clientSecret),
            ]
            let refused = try await b.rest("POST", "/token", grant, anonymous: true)
            #expect(refused.status == 400 && refused.json["error"] == "invalid_grant")
        }
    }
}
