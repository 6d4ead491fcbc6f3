import APNsSimulator
import BeaconAPNs
import BeaconClient
import BeaconCore
import BeaconStorage
import BeaconTesting
import Crypto
import Foundation
import NIOSSL
import SwiftASN1
import Synchronization
import Testing
import X509

@testable import BeaconServer

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

private let phone = String(repeating: "ab", count: 32)
private let tablet = String(repeating: "cd", count: 32)

extension Collector where Element == PushAttemptOutcome {
    /// Waits until `count` attempts have been recorded in all.
    func attempts(_ count: Int) async throws -> [PushAttemptOutcome] {
        try await wait { $0.count >= count }
    }
}

@Suite struct PushConfigurationTests {
    @Test func p8UploadsAreValidatedAndNeverShowTheirSecret() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.uploadP8()
            let listed = try await beacon.rest("GET", "/push/certificates")
            let entity = try #require(listed.json["entities"]?[0])
            #expect(entity["name"] == "ios-dev")
            #expect(entity["kind"] == "p8")
            #expect(entity["environment"] == "development")
            #expect(entity["bundle_id"] == "com.example.chat")
            #expect(entity["file"] == nil)
            #expect(!"\(listed.json)".contains("PRIVATE KEY"))

            let notAKey = try await beacon.rest(
                "POST", "/push/certificates",
                [
                    "name": "bad", "kind": "p8", "file": "not a key", "key_id": "K", "team_id": "T", "environment": "production",
                    "bundle_id": "b",
                ])
            #expect(notAKey.json["error"] == "invalid_p8_key")
            let rsa = "-----BEGIN PRIVATE KEY-----\nMIIBVAIBADANBgkqhkiG9w0BAQEFAASCAT4wggE6AgEAAkEA\n-----END PRIVATE KEY-----"
            #expect(
                try await beacon.rest(
                    "POST", "/push/certificates",
                    [
                        "name": "rsa", "kind": "p8", "file": .string(rsa), "key_id": "K", "team_id": "T", "environment": "production",
                        "bundle_id": "b",
                    ]
                ).json["error"] == "invalid_p8_key")
            #expect(
                try await beacon.rest(
                    "POST", "/push/certificates",
                    ["name": "nokey", "kind": "p8", "file": "x", "environment": "production", "bundle_id": "b"]
                ).json["error"] == "illegal_argument")
            #expect(
                try await beacon.rest(
                    "POST", "/push/certificates", ["name": "env", "kind": "p8", "file": "x", "environment": "staging", "bundle_id": "b"]
                ).json["error"] == "json_parse")
            // The bundle id becomes the apns-topic header: what HTTP/2 cannot carry, or no bundle id has, is refused here.
            for bundleID in ["com.example\nchat", "com example", "com.example/chat", String(repeating: "a", count: 156)] {
                let answer = try await beacon.rest(
                    "POST", "/push/certificates",
                    [
                        "name": "topic", "kind": "p8", "file": .string(P256.Signing.PrivateKey().pemRepresentation), "key_id": "K",
                        "team_id": "T",
                        "environment": "production", "bundle_id": .string(bundleID),
                    ])
                #expect(answer.json["error"] == "illegal_argument", "\(bundleID)")
            }
            let user = try await beacon.userToken(
                try await {
                    try await beacon.createUsers("alice")
                    return "alice"
                }())
            #expect(try await beacon.rest("GET", "/push/certificates", token: user).status == 403)

            #expect(try await beacon.rest("DELETE", "/push/certificates/ios-dev").status == 200)
            #expect(try await beacon.rest("DELETE", "/push/certificates/ios-dev").status == 404)
        }
    }

    @Test func p12UploadsCheckPasswordFileAndExpiry() async throws {
        try await TestBeacon.run { beacon in
            let valid = try await makeP12(password: "s3cret", notValidAfter: Date() + 86400)
            func upload(_ file: String, password: String) async throws -> (Int, JSONValue) {
                try await beacon.rest(
                    "POST", "/push/certificates",
                    [
                        "name": "ios-prod", "kind": "p12", "file": .string(file), "password": .string(password),
                        "environment": "production",
                        "bundle_id": "com.example.chat",
                    ])
            }
            let good = try await upload(valid.base64EncodedString(), password: "s3cret")
            #expect(good.0 == 200)
            #expect(good.1["entities"]?[0]?["expires"]?.stringValue != nil)
            #expect(try await upload(valid.base64EncodedString(), password: "wrong").1["error"] == "invalid_p12_password")
            #expect(try await upload(Data("garbage".utf8).base64EncodedString(), password: "x").1["error"] == "invalid_p12_file")
            // The same upload as a multipart form, as `curl -F file=@push.p12 …` sends it.
            let boundary = "----beacon-test"
            var form = Data()
            for (field, value) in [
                ("name", "ios-form"), ("kind", "p12"), ("password", "s3cret"), ("environment", "production"),
                ("bundle_id", "com.example.chat"),
            ] {
                form += Data("--\(boundary)\r\nContent-Disposition: form-data; name=\"\(field)\"\r\n\r\n\(value)\r\n".utf8)
            }
            form += Data(
                "--\(boundary)\r\nContent-Disposition: form-data; name=\"file\"; filename=\"push.p12\"\r\nContent-Type: application/x-pkcs12\r\n\r\n"
                    .utf8)
            form += valid + Data("\r\n--\(boundary)--\r\n".utf8)
            var request = URLRequest(url: URL(string: beacon.baseURL.absoluteString + "/acme/chat/push/certificates")!)
            request.httpMethod = "POST"
            request.setValue("multipart/form-data; boundary=\(boundary)", forHTTPHeaderField: "Content-Type")
            request.setValue("Bearer \(beacon.appToken)", forHTTPHeaderField: "Authorization")
            request.httpBody = form
            let (_, response) = try await URLSession.shared.dataIgnoringCancellation(for: request)
            #expect((response as? HTTPURLResponse)?.statusCode == 200)
            #expect(try await beacon.rest("GET", "/push/certificates").json["count"]?.intValue == 2)

            let expired = try await makeP12(password: "s3cret", notValidAfter: Date() - 86400)
            #expect(try await upload(expired.base64EncodedString(), password: "s3cret").1["error"] == "certificate_expired")
        }
    }
}

@Suite struct PushDeliveryTests {
    @Test func anOfflineRecipientIsPushedTheSimpleBanner() async throws {
        try await withPushBeacon { beacon, simulator in
            try await beacon.createUsers("alice", "bob", "carol")
            try await beacon.uploadP8()
            _ = try await beacon.bind("bob", token: phone)
            let sent = try await beacon.rest(
                "POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "hi"]])
            let id = try #require(sent.json["data"]?["bob"]?.stringValue)
            #expect(try await beacon.pushOutcomes.attempts(1).map(\.status) == [.sent])
            let delivery = try #require(simulator.deliveries(deviceToken: phone).first)
            #expect(delivery.topic == "com.example.chat")
            #expect(delivery.pushType == "alert")
            #expect(delivery.priority == 10)
            #expect(delivery.expiration! > Int64(Date().timeIntervalSince1970) + 86000)
            #expect(
                delivery.payload
                    == .object([
                        "aps": .object([
                            "alert": .object(["body": .string("You have a new message")]), "badge": .number(1), "sound": .string("default"),
                            "thread-id": .string("alice"),
                        ]),
                        "f": .string("alice"), "t": .string("bob"), "m": .string(id),
                    ]))
            // The badge is bob's unread count.
            _ = try await beacon.rest("POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "again"]])
            _ = try await beacon.pushOutcomes.attempts(2)
            #expect(simulator.deliveries(deviceToken: phone).last?.payload.badge == 2)

            let records = try await beacon.deliveries(of: "bob")
            #expect(records.count == 2)
            #expect(records.last?["message_id"]?.stringValue == id)
            #expect(records.last?["status"] == "sent")
            #expect(records.last?["apns_id"]?.stringValue == delivery.apnsID)
            #expect(records.last?["device_id"] == "iphone")
            #expect(records.last?["notifier_name"] == "ios-dev")
            #expect(records.last?["attempts"]?.intValue == 1)
            #expect(try await beacon.rest("GET", "/push/deliveries?message_id=\(id)").json["count"]?.intValue == 1)

            // Online: no push; coming online reads nothing, so the badge counts on (four unread).
            let device = try await beacon.connect("bob")
            try await device.events.synced()
            _ = try await beacon.rest("POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "live"]])
            _ = try await device.messages.wait { $0.contains { $0.content == .text("live") } }
            await device.client.logout()
            _ = try await beacon.rest("POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "gone"]])
            _ = try await beacon.pushOutcomes.attempts(3)
            #expect(simulator.deliveries(deviceToken: phone).count == 3)
            #expect(simulator.deliveries(deviceToken: phone).last?.payload.badge == 4)
        }
    }

    @Test func theSDKBindsItsDeviceTokenAndUnbindsOnLogout() async throws {
        try await withPushBeacon { beacon, simulator in
            try await beacon.createUsers("alice", "bob")
            try await beacon.uploadP8(name: "ios-dev")
            let client = BeaconClient(
                options: BeaconOptions(
                    appKey: beacon.appKey, serverURL: beacon.baseURL, apnsCertName: "ios-dev", deviceID: "bobs-iphone",
                    storage: MemoryStorage()))
            try await client.login(username: "bob", password: "pw")
            try await client.registerForRemoteNotifications(deviceToken: Data(repeating: 0xab, count: 32))
            let bindings = try await beacon.rest("GET", "/users/bob/push/binding").json["entities"]
            #expect(bindings?[0]?["device_id"] == "bobs-iphone")
            #expect(bindings?[0]?["device_token"]?.stringValue == phone)
            // Logged out without unbinding: pushes keep coming.
            await client.logout()
            _ = try await beacon.rest("POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "x"]])
            #expect(try await beacon.pushOutcomes.attempts(1)[0].status == .sent)
            try await client.login(username: "bob", password: "pw")
            try await client.logout(unbindDeviceToken: true)
            #expect(try await beacon.rest("GET", "/users/bob/push/binding").json["count"]?.intValue == 0)
            #expect(simulator.deliveries().count == 1)
        }
    }

    /// The token's whole life on the SDK side: registered before any login, bound at every login (so a user switch moves
    /// it), the VoIP token with it, unbound without a logout; and the options' time zone, sent at login, is where
    /// do-not-disturb runs.
    @Test func theSDKKeepsTheDeviceTokenAcrossLoginsAndSendsTheTimeZone() async throws {
        // 08:00 UTC, 16:00 in Shanghai.
        let clock = TestClock(milliseconds: 1_800_000_000_000)
        try await withPushBeacon(clock: clock) { beacon, simulator in
            try await beacon.createUsers("alice", "bob", "carol")
            try await beacon.uploadP8(name: "ios-dev")
            let client = BeaconClient(
                options: BeaconOptions(
                    appKey: beacon.appKey, serverURL: beacon.baseURL, apnsCertName: "ios-dev", timeZone: "Asia/Shanghai",
                    deviceID: "iphone", storage: MemoryStorage()))
            func binding(_ user: String) async throws -> JSONValue? {
                try await beacon.rest("GET", "/users/\(user)/push/binding").json["entities"]?[0]
            }
            // At launch, before login: kept, and bound by the login.
            try await client.registerForRemoteNotifications(deviceToken: Data(repeating: 0xab, count: 32))
            try await client.login(username: "bob", password: "pw")
            #expect(try await binding("bob")?["device_token"]?.stringValue == phone)
            #expect(try await beacon.rest("GET", "/users/bob").json["entities"]?[0]?["timezone"] == "Asia/Shanghai")
            try await client.registerVoIPPushToken(Data(repeating: 0xcd, count: 32))
            #expect(try await binding("bob")?["voip_token"]?.stringValue == String(repeating: "cd", count: 32))
            // Another user on the same phone: the token moves to them.
            await client.logout()
            try await client.login(username: "alice", password: "pw")
            #expect(try await binding("alice")?["device_token"]?.stringValue == phone)
            #expect(try await binding("bob") == nil)
            // Unbound without logging out, and forgotten: the next login binds nothing. Logged out, there is no one to
            // unbind for.
            try await client.unbindDeviceToken()
            #expect(try await binding("alice") == nil)
            await client.logout()
            await #expect(throws: BeaconClientError.notLoggedIn) { try await client.unbindDeviceToken() }
            // The server's time zone changed elsewhere: the next login sets the options' again.
            #expect(try await beacon.rest("PUT", "/users/bob", ["timezone": "Europe/Paris"]).status == 200)
            try await client.login(username: "bob", password: "pw")
            #expect(try await binding("bob") == nil)
            #expect(try await beacon.rest("GET", "/users/bob").json["entities"]?[0]?["timezone"] == "Asia/Shanghai")
            // bob's do-not-disturb, 15:00-17:00, runs in Shanghai time: a message at 16:00 there is not pushed.
            try await client.registerForRemoteNotifications(deviceToken: Data(repeating: 0xab, count: 32))
            await client.logout()
            #expect(try await beacon.rest("PUT", "/users/bob/notification/user/bob", ["ignoreInterval": "15:00-17:00"]).status == 200)
            _ = try await beacon.rest("POST", "/messages/users", ["from": "carol", "to": ["bob"], "type": "txt", "body": ["msg": "quiet"]])
            let records = try await beacon.deliveries(of: "bob") { $0.contains { $0["reason"] == "dnd" } }
            #expect(records.first?["status"] == "skipped")
            #expect(simulator.deliveries().isEmpty)

            // A token the server cannot bind (no such push configuration): the login holds, and the app is told.
            let misconfigured = TestDevice(
                client: BeaconClient(
                    options: BeaconOptions(
                        appKey: beacon.appKey, serverURL: beacon.baseURL, apnsCertName: "no-such-config", deviceID: "ipad",
                        storage: MemoryStorage())))
            try await misconfigured.client.registerForRemoteNotifications(deviceToken: Data(repeating: 0xef, count: 32))
            try await misconfigured.client.login(username: "carol", password: "pw")
            let events = try await misconfigured.events.wait {
                $0.contains { if case .installationNotAnnounced = $0 { true } else { false } }
            }
            #expect(events.contains(.connected))
            await misconfigured.client.logout()
        }
    }

    @Test func certificateConfigurationsPushOverTLSClientAuthentication() async throws {
        try await withPushBeacon { beacon, simulator in
            try await beacon.createUsers("alice", "bob")
            let p12 = try await makeP12(password: "s3cret", notValidAfter: Date() + 86400)
            let upload = try await beacon.rest(
                "POST", "/push/certificates",
                [
                    "name": "ios-cert", "kind": "p12", "file": .string(p12.base64EncodedString()), "password": "s3cret",
                    "environment": "development", "bundle_id": "com.example.chat",
                ])
            #expect(upload.status == 200)
            _ = try await beacon.bind("bob", token: phone, notifier: "ios-cert")
            _ = try await beacon.rest("POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "x"]])
            #expect(try await beacon.pushOutcomes.attempts(1).map(\.status) == [.sent])
            #expect(simulator.deliveries(deviceToken: phone).first?.topic == "com.example.chat")
        }
    }

    @Test func groupsAddTheGroupIDAndCommandsAndSilentMessagesPushNobody() async throws {
        try await withPushBeacon { beacon, simulator in
            try await beacon.createUsers("alice", "bob", "carol")
            try await beacon.uploadP8()
            _ = try await beacon.bind("bob", token: phone)
            _ = try await beacon.bind("carol", token: tablet)
            let group = try await beacon.createGroup(owner: "alice", members: ["bob", "carol"])
            _ = try await beacon.rest(
                "POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "cmd", "body": ["action": "typing"]])
            _ = try await beacon.rest(
                "POST", "/messages/users",
                ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "s"], "ext": ["em_ignore_notification": true]])
            _ = try await beacon.rest(
                "POST", "/messages/chatgroups", ["from": "alice", "to": .array([.string(group)]), "type": "txt", "body": ["msg": "all"]])
            _ = try await beacon.pushOutcomes.attempts(2)
            #expect(simulator.deliveries().count == 2)
            #expect(simulator.deliveries().allSatisfy { $0.payload.g == group })
            #expect(simulator.deliveries(deviceToken: phone).count == 1)
        }
    }

    @Test func unregisteredTokensLoseTheirBindingUnlessReboundLater() async throws {
        try await withPushBeacon { beacon, simulator in
            try await beacon.createUsers("alice", "bob", "carol")
            try await beacon.uploadP8()
            _ = try await beacon.bind("bob", token: phone)
            _ = try await beacon.bind("carol", token: tablet)
            // bob's token went stale after he bound it: his binding goes.
            simulator.markUnregistered(deviceToken: phone, timestamp: Int64(Date().timeIntervalSince1970 * 1000) + 60_000)
            // carol re-registered after the token went stale: her binding is newer than APNs' timestamp and stays.
            simulator.markUnregistered(deviceToken: tablet, timestamp: 1_000)
            _ = try await beacon.rest(
                "POST", "/messages/users", ["from": "alice", "to": ["bob", "carol"], "type": "txt", "body": ["msg": "x"]])
            let outcomes = try await beacon.pushOutcomes.attempts(2)
            #expect(outcomes.map(\.status) == [.failed, .failed])
            #expect(outcomes.map(\.httpStatus) == [410, 410])
            #expect(try await beacon.rest("GET", "/users/bob/push/binding").json["count"]?.intValue == 0)
            #expect(try await beacon.rest("GET", "/users/carol/push/binding").json["count"]?.intValue == 1)
            #expect(try await beacon.deliveries(of: "bob").first?["reason"] == "Unregistered")
        }
    }

    @Test func badTokensAndWrongTopicsLoseTheirBinding() async throws {
        try await withPushBeacon { beacon, simulator in
            try await beacon.createUsers("alice", "bob", "carol")
            try await beacon.uploadP8()
            _ = try await beacon.bind("bob", token: phone)
            _ = try await beacon.bind("carol", token: tablet)
            simulator.registerDeviceToken(phone, topic: "com.example.other")
            simulator.registerDeviceToken(tablet, topic: "com.example.chat", environment: .production)
            _ = try await beacon.rest(
                "POST", "/messages/users", ["from": "alice", "to": ["bob", "carol"], "type": "txt", "body": ["msg": "x"]])
            _ = try await beacon.pushOutcomes.attempts(2)
            #expect(try await beacon.rest("GET", "/users/bob/push/binding").json["count"]?.intValue == 0)
            #expect(try await beacon.rest("GET", "/users/carol/push/binding").json["count"]?.intValue == 0)
            let reasons = Set(
                try await beacon.deliveries(of: "bob").compactMap { $0["reason"]?.stringValue }
                    + (try await beacon.deliveries(of: "carol")).compactMap { $0["reason"]?.stringValue })
            #expect(reasons == ["DeviceTokenNotForTopic", "BadDeviceToken"])
        }
    }

    @Test func transientFailuresAreRetriedWithBackoff() async throws {
        try await withPushBeacon { beacon, simulator in
            try await beacon.createUsers("alice", "bob")
            try await beacon.uploadP8()
            _ = try await beacon.bind("bob", token: phone)
            var faults = SimulatorFaults()
            faults.failStatus = 503
            faults.failReason = "ServiceUnavailable"
            faults.failCount = 1
            simulator.setFaults(faults)
            _ = try await beacon.rest("POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "x"]])
            let outcomes = try await beacon.pushOutcomes.attempts(2)
            #expect(outcomes[0].status == .pending)
            #expect(outcomes[0].httpStatus == 503)
            #expect(outcomes[1].status == .sent)
            let record = try #require(try await beacon.deliveries(of: "bob").first)
            #expect(record["attempts"]?.intValue == 2)
            #expect(record["history"]?.arrayValue?.map { $0["outcome"] } == ["pending", "sent"])
            #expect(simulator.deliveries().count == 1)
        }
    }

    @Test func aRestartResumesUnfinishedPushesAndNeverResendsAcceptedOnes() async throws {
        let directory = StoreKind.temporaryDirectory("beacon-restart")
        defer { try? FileManager.default.removeItem(at: directory) }
        // First life: APNs is unreachable (a closed port), so the job stays pending.
        let unreachable = APNsRouting.custom(host: "127.0.0.1", port: 1, trustRoots: [])
        try await TestBeacon.run(apnsRouting: unreachable, directory: directory) { beacon in
            try await beacon.createUsers("alice", "bob")
            try await beacon.uploadP8()
            _ = try await beacon.bind("bob", token: phone)
            _ = try await beacon.rest(
                "POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "accepted"]])
            #expect(try await beacon.pushOutcomes.attempts(1)[0].status == .pending)
        }
        // Second life, with APNs back: the job is sent once.
        try await withSimulator { simulator in
            try await TestBeacon.run(push: simulator, directory: directory) { beacon in
                let outcomes = try await beacon.pushOutcomes.wait { $0.contains { $0.status == .sent } }
                #expect(outcomes.filter { $0.status == .sent }.count == 1)
                #expect(simulator.deliveries(deviceToken: phone).count == 1)
            }
        }
        // Third life: nothing left to send.
        try await withSimulator { simulator in
            try await TestBeacon.run(push: simulator, directory: directory) { beacon in
                _ = try await beacon.rest(
                    "POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "new"]])
                let outcomes = try await beacon.pushOutcomes.attempts(1)
                #expect(outcomes.count == 1)
                #expect(simulator.deliveries(deviceToken: phone).count == 1)
                #expect(try await beacon.deliveries(of: "bob").filter { $0["status"] == "sent" }.count == 2)
            }
        }
    }
}

extension JSONPayload {
    var badge: Int? {
        if case .object(let root) = self, case .object(let aps)? = root["aps"], case .number(let badge)? = aps["badge"] {
            return Int(badge)
        }
        return nil
    }
    var g: String? {
        if case .object(let root) = self, case .string(let group)? = root["g"] { return group }
        return nil
    }
}

/// A `.p12` (made with the openssl command line) holding a fresh certificate and key.
func makeP12(password: String, notValidAfter: Date) async throws -> Data {
    let key = P256.Signing.PrivateKey()
    let name = try DistinguishedName { CommonName("Apple Push Services: com.example.chat") }
    let certificate = try Certificate(
        version: .v3, serialNumber: .init(), publicKey: .init(key.publicKey), notValidBefore: notValidAfter - 2 * 86400,
        notValidAfter: notValidAfter, issuer: name, subject: name, signatureAlgorithm: .ecdsaWithSHA256,
        extensions: try Certificate.Extensions { Critical(BasicConstraints.notCertificateAuthority) }, issuerPrivateKey: .init(key))
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("p12-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    try key.pemRepresentation.write(to: directory.appendingPathComponent("key.pem"), atomically: true, encoding: .utf8)
    try certificate.serializeAsPEM().pemString.write(to: directory.appendingPathComponent("cert.pem"), atomically: true, encoding: .utf8)
    let openssl = try await runToExit(
        URL(fileURLWithPath: "/usr/bin/openssl"),
        ["pkcs12", "-export", "-inkey", "key.pem", "-in", "cert.pem", "-passout", "pass:\(password)", "-out", "out.p12"], in: directory)
    guard openssl.status == 0 else { throw TestFailure("openssl pkcs12 -export failed") }
    return try Data(contentsOf: directory.appendingPathComponent("out.p12"))
}

/// A group's route is decided and recorded in parts (issue 26): each member is pushed once, and a route that stopped
/// after some parts resumes after the last one recorded.
@Suite struct RouteInPartsTests {
    /// Creates alice and `members`, each member's phone bound to a token of its own, and sends a message from alice to
    /// a group of them.
    private static func sendToGroup(_ beacon: TestBeacon, members: [String]) async throws {
        try await beacon.createUsers(["alice"] + members)
        try await beacon.uploadP8()
        for (index, member) in members.enumerated() {
            _ = try await beacon.bind(member, token: String(repeating: String(format: "%02x", index + 1), count: 32))
        }
        let group = try await beacon.createGroup(owner: "alice", members: members)
        let (status, answer) = try await beacon.rest(
            "POST", "/messages/chatgroups", ["from": "alice", "to": .array([.string(group)]), "type": "txt", "body": ["msg": "all"]])
        #expect(status == 200, "\(answer)")
    }

    @Test func aGroupRouteThatStopsMidwayResumesWithEachMemberPushedOnce() async throws {
        let decisions = Mutex(0)
        struct Interrupted: Error {}
        var hooks = BeaconHooks()
        hooks.routePartSize = 2
        // The second part fails once, as a crash there would leave it.
        hooks.afterPresence = { _ in
            if decisions.withLock({
                $0 += 1
                return $0 == 2
            }) {
                throw Interrupted()
            }
        }
        let clock = TestClock()
        let members = (1...7).map { "m\($0)" }
        try await withPushBeacon(clock: clock, hooks: hooks) { beacon, simulator in
            try await Self.sendToGroup(beacon, members: members)
            // The first part: two members.
            _ = try await beacon.pushOutcomes.attempts(2)
            try await waitUntil("the rest failed", timeout: .seconds(10), interval: .milliseconds(20)) {
                decisions.withLock { $0 >= 2 }
            }
            #expect(try await beacon.store.pendingRoutes(before: .max, limit: 10).map(\.routedThrough) == ["m2"])
            // The sweep takes the route where it stopped (run here: its timer is slow when the machine is busy).
            clock.advance(seconds: 10)
            try await #require(beacon.server.pushRouter).sweep()
            _ = try await beacon.pushOutcomes.attempts(members.count)
            try await waitUntil("the route is finished", timeout: .seconds(10), interval: .milliseconds(20)) {
                try await beacon.store.pendingRoutes(before: .max, limit: 10).isEmpty
            }
            let tokens = simulator.deliveries().map(\.deviceToken)
            #expect(tokens.count == members.count && Set(tokens).count == members.count)
            let app = try #require(try await beacon.store.app(beacon.app))
            let jobs = try await beacon.store.pushJobs(app: app.id, username: nil, messageID: nil, limit: 100)
            #expect(jobs.map(\.job.username).sorted() == members)
        }
    }

    @Test func aGroupSendIsAnsweredBeforeItsRouteIsRecordedByTheRouter() async throws {
        let parts = Gate()
        var hooks = BeaconHooks()
        hooks.routePartSize = 3
        // Every part of the route waits at the gate.
        hooks.afterPresence = { _ in await parts.pass() }
        let members = (1...8).map { "m\($0)" }
        // The clock stands still: no sweep takes the route, only the router's own task.
        try await withPushBeacon(clock: TestClock(), hooks: hooks) { beacon, simulator in
            // Whatever fails, nothing stays held at the gate (a send that waited for its route would: it fails, not hangs).
            defer { parts.open() }
            try await Self.sendToGroup(beacon, members: members)
            // Answered while the router's own task holds the route's first part.
            try await parts.waitForArrivals(1)
            let app = try #require(try await beacon.store.app(beacon.app))
            #expect(try await beacon.store.pushJobs(app: app.id, username: nil, messageID: nil, limit: 100).isEmpty)
            #expect(try await beacon.store.pendingRoutes(before: .max, limit: 10).map(\.routedThrough) == [nil])
            // Let go: the router's task records the route.
            parts.open()
            _ = try await beacon.pushOutcomes.attempts(members.count)
            try await waitUntil("the route is finished", timeout: .seconds(10), interval: .milliseconds(20)) {
                try await beacon.store.pendingRoutes(before: .max, limit: 10).isEmpty
            }
            let jobs = try await beacon.store.pushJobs(app: app.id, username: nil, messageID: nil, limit: 100)
            #expect(jobs.map(\.job.username).sorted() == members)
            #expect(Set(simulator.deliveries().map(\.deviceToken)).count == members.count)
        }
    }

    @Test func aGroupOfOnePartIsRecordedBeforeItsSendIsAnswered() async throws {
        var hooks = BeaconHooks()
        hooks.routePartSize = 3
        let members = ["m1", "m2", "m3"]
        try await withPushBeacon(clock: TestClock(), hooks: hooks) { beacon, _ in
            try await beacon.createUsers(["alice"] + members)
            try await beacon.uploadP8()
            let group = try await beacon.createGroup(owner: "alice", members: members)
            let (status, answer) = try await beacon.rest(
                "POST", "/messages/chatgroups", ["from": "alice", "to": .array([.string(group)]), "type": "txt", "body": ["msg": "few"]])
            #expect(status == 200, "\(answer)")
            let app = try #require(try await beacon.store.app(beacon.app))
            let jobs = try await beacon.store.pushJobs(app: app.id, username: nil, messageID: nil, limit: 10)
            #expect(jobs.map(\.job.username).sorted() == members)
            #expect(jobs.allSatisfy { $0.status == .skipped && $0.lastReason == "no_binding" })
            #expect(try await beacon.store.pendingRoutes(before: .max, limit: 10).isEmpty)
        }
    }
}
