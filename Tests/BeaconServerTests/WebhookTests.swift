import AsyncHTTPClient
import BeaconCore
import BeaconTesting
import Crypto
import Foundation
import Hummingbird
import Logging
import NIOCore
import ServiceLifecycle
import Synchronization
import Testing

@testable import BeaconServer

private let phone = String(repeating: "ab", count: 32)
private let tablet = String(repeating: "ef", count: 32)
private let secret = "s3cret-for-the-webhook"

/// A real HTTP receiver for the push-result webhook: records every POST and answers 503 to the first `failFirst`.
final class WebhookReceiver: Sendable {
    struct Received: Sendable {
        var timestamp: String?
        var signature: String?
        var body: Data
        var status: Int

        var json: JSONValue { (try? JSONDecoder().decode(JSONValue.self, from: body)) ?? .null }
        var events: [JSONValue] { json["events"]?.arrayValue ?? [] }
    }

    let requests: Collector<Received>
    let url: String

    private init(requests: Collector<Received>, url: String) {
        self.requests = requests
        self.url = url
    }

    /// The events of every POST the receiver took (2xx), by id.
    static func accepted(_ requests: [Received]) -> [Int: JSONValue] {
        var events: [Int: JSONValue] = [:]
        for request in requests where request.status == 200 {
            for event in request.events { if let id = event["id"]?.intValue { events[id] = event } }
        }
        return events
    }

    static func run<T: Sendable>(failFirst: Int = 0, _ body: @Sendable (WebhookReceiver) async throws -> T) async throws -> T {
        let (stream, sink) = AsyncStream.makeStream(of: Received.self)
        let (ports, portSink) = AsyncStream.makeStream(of: Int.self)
        let received = Collector(stream)
        let statuses = Mutex(failFirst)
        let router = Router()
        router.post("/hook") { request, _ -> Response in
            var request = request
            let bytes = try await request.collectBody(upTo: 1 << 20)
            let status = statuses.withLock { left -> Int in
                guard left > 0 else { return 200 }
                left -= 1
                return 503
            }
            sink.yield(
                Received(
                    timestamp: request.headers.first { $0.name.canonicalName == "x-beacon-timestamp" }?.value,
                    signature: request.headers.first { $0.name.canonicalName == "x-beacon-signature" }?.value,
                    body: Data(buffer: bytes), status: status))
            return Response(status: .init(code: status))
        }
        let application = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { portSink.yield($0.localAddress?.port ?? 0) }, logger: Logger(label: "webhook-receiver"))
        let services = ServiceGroup(configuration: .init(services: [application], logger: Logger(label: "webhook-receiver")))
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await services.run() }
            defer { group.cancelAll() }
            var iterator = ports.makeAsyncIterator()
            guard let port = await iterator.next() else { throw TestFailure("receiver did not start") }
            let receiver = WebhookReceiver(requests: received, url: "http://127.0.0.1:\(port)/hook")
            let result = try await body(receiver)
            await services.triggerGracefulShutdown()
            try await group.waitForAll()
            return result
        }
    }
}

/// The push-result webhook (issue 10): configured over REST, fed by every final push outcome, signed, retried.
@Suite struct WebhookTests {
    private static func expectedSignature(timestamp: String, body: Data) -> String {
        var mac = HMAC<SHA256>(key: SymmetricKey(data: Array(secret.utf8)))
        mac.update(data: Array("\(timestamp).".utf8))
        mac.update(data: body)
        return "sha256=" + mac.finalize().map { String(format: "%02x", $0) }.joined()
    }

    /// The webhook's state (`GET …/push/webhook`) once `settled` holds (at most 10 s): Beacon records a delivery just
    /// after the receiver's answer reaches it, so the receiver knows first.
    private static func webhookState(_ beacon: TestBeacon, until settled: (JSONValue?) -> Bool) async throws -> JSONValue? {
        var state: JSONValue?
        try await waitUntil("the webhook's state settled; last read: \(state ?? "nothing")", timeout: .seconds(10)) {
            state = try await beacon.rest("GET", "/push/webhook").json["data"]
            return settled(state)
        }
        return state
    }

    @Test func everyPushOutcomeReachesTheReceiverSignedAfterAnOutage() async throws {
        // The receiver listens on 127.0.0.1: a target a server refuses unless told otherwise (issue 22).
        try await TestBeacon.$webhookPrivateTargets.withValue(true) {
            try await WebhookReceiver.run(failFirst: 2) { receiver in
                try await withPushBeacon { beacon, simulator in
                    try await beacon.createUsers("alice", "bob", "carol")
                    try await beacon.uploadP8()
                    _ = try await beacon.bind("bob", token: phone)
                    _ = try await beacon.bind("carol", device: "ipad", token: tablet)
                    simulator.markUnregistered(deviceToken: tablet, timestamp: Int64(Date().timeIntervalSince1970 * 1000) + 60_000)

                    // Configuration: validated, app token only, the secret never shown.
                    #expect(try await beacon.rest("GET", "/push/webhook").json["error"] == "webhook_not_found")
                    #expect(try await beacon.rest("DELETE", "/push/webhook").status == 404)
                    #expect(
                        try await beacon.rest("PUT", "/push/webhook", ["url": "ftp://127.0.0.1/x", "secret": .string(secret)]).json["error"]
                            == "illegal_argument")
                    #expect(
                        try await beacon.rest("PUT", "/push/webhook", ["url": .string(receiver.url), "secret": "short"]).json["error"]
                            == "illegal_argument")
                    #expect(try await beacon.rest("PUT", "/push/webhook", ["url": .string(receiver.url)]).json["error"] == "json_parse")
                    let bob = try await beacon.userToken("bob")
                    #expect(
                        try await beacon.rest(
                            "PUT", "/push/webhook", ["url": .string(receiver.url), "secret": .string(secret)], token: bob
                        ).status == 403)
                    let set = try await beacon.rest("PUT", "/push/webhook", ["url": .string(receiver.url), "secret": .string(secret)])
                    #expect(set.status == 200)
                    #expect(set.json["data"]?["url"]?.stringValue == receiver.url)
                    #expect(set.json["data"]?["enabled"] == true)
                    #expect(set.json["data"]?["pending_events"]?.intValue == 0)
                    #expect(!String(describing: set.json).contains(secret))

                    // Pushed to bob, refused for carol (her binding goes), a silent message skipped.
                    let sent = try await beacon.rest(
                        "POST", "/messages/users", ["from": "alice", "to": ["bob", "carol"], "type": "txt", "body": ["msg": "x"]])
                    let ids = try #require(sent.json["data"])
                    _ = try await beacon.pushOutcomes.attempts(2)
                    let silent = try await beacon.rest(
                        "POST", "/messages/users",
                        ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "y"], "ext": ["em_ignore_notification": true]])
                    let silentID = try #require(silent.json["data"]?["bob"]?.stringValue)

                    // The receiver is down for two deliveries: the webhook backs off and keeps the events.
                    try await receiver.requests.wait { $0.count >= 1 }
                    let failing = try await Self.webhookState(beacon) { $0?["last_error"] != nil }
                    #expect((failing?["consecutive_failures"]?.intValue ?? 0) >= 1)
                    // A category, never the status itself (issue 22).
                    #expect(failing?["last_error"] == "http_5xx")

                    // Then it takes them, each outcome once (by id), the same ids as the refused attempts carried.
                    let expected = 4
                    try await receiver.requests.wait(timeout: .seconds(30)) { WebhookReceiver.accepted($0).count >= expected }
                    let accepted = WebhookReceiver.accepted(receiver.requests.items)
                    #expect(accepted.count == expected)
                    let refusedIDs = Set(
                        receiver.requests.items.filter { $0.status != 200 }.flatMap(\.events).compactMap { $0["id"]?.intValue })
                    #expect(refusedIDs.isSubset(of: Set(accepted.keys)))
                    let events = accepted.keys.sorted().compactMap { accepted[$0] }
                    let bobSent = try #require(events.first { $0["username"] == "bob" && $0["outcome"] == "sent" })
                    #expect(bobSent["type"] == "push")
                    #expect(bobSent["message_id"] == ids["bob"])
                    #expect(bobSent["device_id"] == "iphone")
                    #expect(bobSent["notifier"] == "ios-dev")
                    #expect(bobSent["push_type"] == "alert")
                    #expect(bobSent["apns_status"]?.intValue == 200)
                    #expect(bobSent["apns_id"]?.stringValue?.count == 36)
                    #expect(bobSent["attempts"]?.intValue == 1)
                    let carolFailed = try #require(events.first { $0["username"] == "carol" && $0["type"] == "push" })
                    #expect(carolFailed["outcome"] == "failed")
                    #expect(carolFailed["reason"] == "Unregistered")
                    #expect(carolFailed["apns_status"]?.intValue == 410)
                    let removed = try #require(events.first { $0["type"] == "binding_removed" })
                    #expect(removed["username"] == "carol" && removed["device_id"] == "ipad" && removed["reason"] == "token")
                    let skipped = try #require(events.first { $0["outcome"] == "skipped" })
                    #expect(skipped["message_id"]?.stringValue == silentID)
                    #expect(skipped["reason"] == "silent")
                    #expect(skipped["apns_id"] == nil)

                    // Every POST is signed over its timestamp and exact body.
                    let now = Int64(Date().timeIntervalSince1970)
                    for request in receiver.requests.items {
                        let timestamp = try #require(request.timestamp)
                        #expect(abs((Int64(timestamp) ?? 0) - now) < 120)
                        #expect(request.signature == Self.expectedSignature(timestamp: timestamp, body: request.body))
                        #expect(request.json["org"] == "acme" && request.json["app"] == "chat")
                    }
                    // Delivered: nothing waits, failures reset, and the metrics tell the story.
                    let state = try await Self.webhookState(beacon) { $0?["pending_events"]?.intValue == 0 }
                    #expect(state?["pending_events"]?.intValue == 0)
                    #expect(state?["consecutive_failures"]?.intValue == 0)
                    #expect(state?["last_error"] == nil)
                    let metrics = try await REST.call(beacon.baseURL, "GET", "/metrics").1.stringValue ?? ""
                    #expect(metrics.contains(#"beacon_webhook_deliveries_total{result="failed"} 2"#))
                    #expect(metrics.contains(#"beacon_webhook_events_delivered_total 4"#))
                    #expect(metrics.contains("beacon_webhook_outbox_events 0"))

                    // Removed: nothing more is recorded or sent.
                    let deleted = try await beacon.rest("DELETE", "/push/webhook")
                    #expect(deleted.json["data"]?["url"]?.stringValue == receiver.url)
                    _ = try await beacon.rest(
                        "POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "z"]])
                    _ = try await beacon.pushOutcomes.attempts(3)
                    // Set again: an event recorded while there was no webhook would be waiting now.
                    _ = try await beacon.rest("PUT", "/push/webhook", ["url": .string(receiver.url), "secret": .string(secret)])
                    #expect(try await beacon.rest("GET", "/push/webhook").json["data"]?["pending_events"]?.intValue == 0)
                }
            }
        }
    }

    /// Issue 22: by default a webhook cannot reach this machine or its networks. Refused when set (a literal address, an
    /// IPv4-mapped one, a name that resolves to loopback), and refused again at delivery for a webhook stored while a
    /// server allowed it: no connection reaches the receiver, and `last_error` says only `refused_address`.
    @Test func aLoopbackTargetIsRefusedWhenSetAndAtDelivery() async throws {
        try await WebhookReceiver.run { receiver in
            let directory = StoreKind.temporaryDirectory("beacon-test")
            // Set while the server allows private targets (an on-premise receiver, or a server from before the setting).
            try await TestBeacon.$webhookPrivateTargets.withValue(true) {
                try await TestBeacon.run(directory: directory) { beacon in
                    let put = try await beacon.rest("PUT", "/push/webhook", ["url": .string(receiver.url), "secret": .string(secret)])
                    #expect(put.status == 200)
                }
            }
            // The same data under a server with the default.
            try await withSimulator { simulator in
                try await TestBeacon.run(push: simulator, directory: directory) { beacon in
                    let port = try #require(URL(string: receiver.url)?.port)
                    for url in [
                        receiver.url, "http://localhost:\(port)/hook", "http://[::1]:\(port)/hook",
                        "http://[::ffff:127.0.0.1]:\(port)/hook",
                        "http://0.0.0.0:\(port)/hook", "http://169.254.169.254/latest/meta-data/", "https://10.1.2.3/hook",
                        "http://[fd00::1]/hook",
                    ] {
                        let refused = try await beacon.rest("PUT", "/push/webhook", ["url": .string(url), "secret": .string(secret)])
                        #expect(refused.status == 400, "\(url)")
                        #expect(refused.json["error"] == "illegal_argument", "\(url)")
                        #expect(refused.json["error_description"]?.stringValue == WebhookRoutes.refusedTarget.message, "\(url)")
                    }
                    // The stored webhook stays, and its deliveries are refused before any connection.
                    try await beacon.createUsers("alice", "bob")
                    try await beacon.uploadP8()
                    _ = try await beacon.bind("bob", token: phone)
                    _ = try await beacon.rest(
                        "POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "x"]])
                    _ = try await beacon.pushOutcomes.attempts(1)
                    let state = try await Self.webhookState(beacon) { $0?["last_error"] != nil }
                    #expect(state?["url"]?.stringValue == receiver.url)
                    #expect(state?["last_error"] == "refused_address")
                    #expect((state?["consecutive_failures"]?.intValue ?? 0) >= 1)
                    #expect((state?["pending_events"]?.intValue ?? 0) >= 1)
                    #expect(receiver.requests.items.isEmpty)
                    // An address outside the refused ranges is taken (disabled: nothing is sent to it).
                    let taken = try await beacon.rest(
                        "PUT", "/push/webhook", ["url": "http://192.0.2.1:9/hook", "secret": .string(secret), "enabled": false])
                    #expect(taken.status == 200)
                }
            }
        }
    }

    /// The address check itself (issue 22): every refused range at its edges, the ranges' neighbours let through, and
    /// the IPv6 forms that lead to an IPv4 address (mapped, compatible, translated, NAT64, 6to4) judged by that address.
    @Test func theAddressCheckRefusesEveryInternalRangeAndItsIPv6Forms() async throws {
        let refused = [
            // unspecified and "this network", loopback
            "0.0.0.0", "0.255.255.255", "::", "127.0.0.1", "127.255.255.255", "::1",
            // link-local
            "169.254.0.0", "169.254.169.254", "169.254.255.255", "fe80::1", "febf:ffff::1",
            // private, unique local, site-local
            "10.0.0.0", "10.255.255.255", "172.16.0.0", "172.31.255.255", "192.168.0.0", "192.168.255.255", "fc00::",
            "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fec0::1",
            // CGNAT
            "100.64.0.0", "100.127.255.255",
            // multicast, reserved, broadcast
            "224.0.0.1", "239.255.255.255", "240.0.0.1", "255.255.255.255", "ff02::1", "ff0e::1",
            // IPv6 forms of refused IPv4 addresses
            "::ffff:127.0.0.1", "::ffff:0.0.0.0", "::ffff:10.1.2.3", "::ffff:169.254.169.254", "::ffff:172.16.0.1",
            "::ffff:192.168.1.1", "::ffff:100.64.0.1", "::ffff:224.0.0.1", "::ffff:7f00:1", "::127.0.0.1", "::10.0.0.1",
            "::ffff:0:127.0.0.1", "64:ff9b::127.0.0.1", "64:ff9b::a9fe:a9fe", "2002:7f00:1::", "2002:c0a8:101::1",
            // IETF protocol assignments, benchmarking, local-use NAT64, discard-only
            "192.0.0.0", "192.0.0.255", "198.18.0.0", "198.19.255.255", "64:ff9b:1::8.8.8.8", "100::1",
        ]
        for address in refused {
            #expect(WebhookTarget.isRefused(ipAddress: address) == true, "\(address)")
        }
        let allowed = [
            "1.1.1.1", "8.8.8.8", "9.255.255.255", "11.0.0.0", "100.63.255.255", "100.128.0.0", "126.255.255.255", "128.0.0.0",
            "169.253.255.255", "169.255.0.0", "172.15.255.255", "172.32.0.0", "192.167.255.255", "192.169.0.0", "192.0.2.1",
            "223.255.255.255", "2001:4860:4860::8888", "2606:4700:4700::1111", "fbff:ffff::1", "fe00::1", "::ffff:8.8.8.8",
            "::8.8.8.8", "64:ff9b::8.8.8.8", "2002:808:808::1", "192.0.1.0", "198.17.255.255", "198.20.0.0", "100:0:0:1::1",
        ]
        for address in allowed {
            #expect(WebhookTarget.isRefused(ipAddress: address) == false, "\(address)")
        }
        #expect(WebhookTarget.isRefused(ipAddress: "localhost") == nil)
        #expect(WebhookTarget.isRefused(bytes: [127, 0, 1]))

        // The host and port AsyncHTTPClient connects to; an IP literal is checked as written, never resolved.
        #expect(WebhookTarget.endpoint(of: "http://[::1]:8080/hook")?.host == "::1")
        #expect(WebhookTarget.endpoint(of: "https://hooks.example.com/hook")?.port == 443)
        #expect(WebhookTarget.endpoint(of: "ftp://hooks.example.com/hook")?.host == nil)
        #expect(try await WebhookTarget.connectionAddresses(host: "192.0.2.1", port: 80, allowPrivate: false) == [nil])
        #expect(try await WebhookTarget.connectionAddresses(host: "127.0.0.1", port: 80, allowPrivate: true) == [nil])
        await #expect(throws: WebhookFailure.refusedAddress) {
            try await WebhookTarget.connectionAddresses(host: "::ffff:127.0.0.1", port: 80, allowPrivate: false)
        }

        // `last_error`: categories only, also for what an older server stored.
        #expect(
            WebhookFailure(status: 302) == .http3xx && WebhookFailure(status: 404) == .http4xx && WebhookFailure(status: 503) == .http5xx)
        #expect(WebhookFailure(status: 101) == .invalidResponse)
        #expect(WebhookFailure.shown("HTTP 503") == "http_5xx")
        #expect(WebhookFailure.shown("refused_address") == "refused_address")
        #expect(WebhookFailure.shown("no answer within 15.0 seconds") == "timeout")
        #expect(WebhookFailure.shown("connect(descriptor:addr:size:): Connection refused (errno: 111)") == "connect")
        #expect(WebhookFailure.category(of: WebhookAnswer(status: 500)) == .http5xx)
        #expect(WebhookFailure.category(of: TimedOut()) == .timeout)
        // A connect that timed out is a failure to connect: the other address family is tried next.
        #expect(WebhookFailure.category(of: HTTPClientError.connectTimeout) == .connect)
        #expect(WebhookFailure.category(of: ChannelError.connectTimeout(.seconds(5))) == .connect)
        #expect(WebhookFailure.category(of: HTTPClientError.readTimeout) == .timeout)
    }
}
