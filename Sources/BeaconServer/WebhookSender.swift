import AsyncHTTPClient
import BeaconCore
import BeaconStorage
import Crypto
import Foundation
import Logging
import NIOCore
import ServiceLifecycle

/// Delivers the push-result webhook outbox: claims the oldest events of an app whose receiver is due, POSTs them as one
/// signed JSON batch, and removes them once the receiver answers 2xx; otherwise the app's deliveries back off (1 s
/// doubling to 5 min, ±20 %) and the same events go again. The outbox is filled by the store in the transactions that
/// decide pushes, so this never slows the push path, and a crash or a receiver outage loses nothing (up to
/// `WebhookOutbox.maxEventsPerApp` per app). Delivery is at least once: a receiver deduplicates by event `id`.
///
/// Unless `privateTargets`, every delivery first resolves the URL's host and checks each address (`WebhookTarget`), then
/// connects to a checked address only; `last_error` records a coarse `WebhookFailure` category, never a status or an
/// error's text (issue 22).
final class WebhookSender: Service, Sendable {
    let store: any BeaconStore
    let box: SecretBox
    let clock: @Sendable () -> Int64
    let metrics: BeaconMetrics
    /// Receivers on loopback, link-local, private and other internal addresses allowed (`--webhook-private-targets`).
    let privateTargets: Bool
    let logger: Logger

    /// Events per POST, at most.
    static let batchSize = 500
    /// Deliveries in flight at once, each to another app: one slow receiver holds one of them, never the others.
    static let concurrentApps = 8
    /// How long a claim on an app's events lasts (a node that dies mid-delivery hands them on after this).
    static let lease: Int64 = 60_000
    /// A receiver that has not answered in this long has failed the delivery.
    static let requestTimeout: TimeAmount = .seconds(10)
    /// A delivery not over after this long has failed, however the receiver trickles.
    static let deliveryDeadline: Duration = .seconds(15)
    /// How often the outbox is looked at when nothing was due.
    static let pollInterval: Duration = .seconds(1)

    init(
        store: any BeaconStore, box: SecretBox, clock: @escaping @Sendable () -> Int64, metrics: BeaconMetrics, privateTargets: Bool,
        logger: Logger
    ) {
        self.store = store
        self.box = box
        self.clock = clock
        self.metrics = metrics
        self.privateTargets = privateTargets
        self.logger = logger
    }

    func run() async throws {
        await cancelWhenGracefulShutdown { await self.deliverContinuously() }
    }

    /// Keeps up to `concurrentApps` deliveries going: as soon as one ends, the next due app's batch is claimed (the same
    /// app's next batch included), so a receiver that takes its events promptly gets the next ones at once, and a slow
    /// one holds one slot only. With nothing due, the outbox is looked at again every `pollInterval`.
    func deliverContinuously() async {
        // A child answers true when it was a delivery, false when it was the poll timer.
        await withTaskGroup(of: Bool.self) { group in
            var deliveries = 0
            var timerRunning = false
            while !Task.isCancelled {
                while deliveries < Self.concurrentApps, !Task.isCancelled, let batch = await claim() {
                    group.addTask {
                        await self.deliver(batch)
                        return true
                    }
                    deliveries += 1
                }
                if !timerRunning {
                    group.addTask {
                        try? await Task.sleep(for: Self.pollInterval)
                        return false
                    }
                    timerRunning = true
                }
                guard let wasDelivery = await group.next() else { break }
                if wasDelivery { deliveries -= 1 } else { timerRunning = false }
            }
            group.cancelAll()
        }
    }

    /// The oldest events of the next app whose receiver is due, claimed; nil when none is (or the store failed).
    private func claim() async -> WebhookBatch? {
        do {
            return try await store.claimWebhookBatch(now: clock(), lease: Self.lease, limit: Self.batchSize)
        } catch {
            logger.error("claiming webhook events failed", metadata: ["error": "\(error)"])
            return nil
        }
    }

    private func deliver(_ batch: WebhookBatch) async {
        // The category is what the app sees (`last_error`); the detail is for the log only.
        let failure: (category: WebhookFailure, detail: String)?
        let start = ContinuousClock.now
        do {
            // One deadline for the whole exchange (resolution included): AsyncHTTPClient's covers the answer's head, not a
            // body dribbled out.
            try await withTimeout(Self.deliveryDeadline) { try await self.post(batch) }
            failure = nil
        } catch is TimedOut {
            failure = (.timeout, "no answer within \(Self.deliveryDeadline)")
        } catch {
            failure = (WebhookFailure.category(of: error), "\(error)")
        }
        guard failure == nil || !Task.isCancelled else {
            // Cut short by a shutdown: not the receiver's failure. The claim lapses and the same events go again.
            logger.debug("webhook delivery cancelled", metadata: ["app": "\(batch.app)", "events": "\(batch.events.count)"])
            return
        }
        metrics.webhookDelivery(delivered: failure == nil, events: batch.events.count, duration: start.duration(to: .now))
        let now = clock()
        let retryAt = now + Self.backoff(failures: batch.consecutiveFailures)
        if let failure {
            logger.warning(
                "webhook delivery failed",
                metadata: [
                    "app": "\(batch.app)", "events": "\(batch.events.count)", "error": "\(failure.category.rawValue)",
                    "detail": "\(failure.detail)",
                ])
        }
        do {
            try await store.finishWebhookBatch(batch, error: failure?.category.rawValue, retryAt: retryAt, now: now)
        } catch {
            // The claim lapses and the same events go again.
            logger.error("recording a webhook delivery failed", metadata: ["app": "\(batch.app)", "error": "\(error)"])
        }
    }

    /// POSTs the batch; returns when the receiver took it (2xx), else throws why not (`WebhookFailure.category(of:)`).
    private func post(_ batch: WebhookBatch) async throws {
        guard let app = try await store.app(id: batch.app), let target = WebhookTarget.endpoint(of: batch.config.url) else {
            throw WebhookFailure.internalError
        }
        // Resolved and checked before every delivery (the connect-time check); `send` connects to these addresses only.
        let addresses = try await WebhookTarget.connectionAddresses(host: target.host, port: target.port, allowPrivate: privateTargets)
        let body = API.encode(WebhookDelivery(org: app.key.org, app: app.key.name, events: batch.events.map(WebhookDelivery.Event.init)))
        let timestamp = clock() / 1000
        var request = HTTPClientRequest(url: batch.config.url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(name: "User-Agent", value: "Beacon")
        request.headers.add(name: "X-Beacon-Timestamp", value: String(timestamp))
        request.headers.add(
            name: "X-Beacon-Signature",
            value: Self.signature(secret: try box.open(batch.config.sealedSecret), timestamp: timestamp, body: body))
        request.body = .bytes(ByteBuffer(bytes: body))
        var failure: any Error = WebhookFailure.dns
        for address in addresses {
            do {
                try await send(request, host: target.host, pinnedTo: address)
                return
            } catch {
                failure = error
                // The next address (of the other family) only when this one could not be connected to.
                guard WebhookFailure.category(of: error) == .connect else { break }
            }
        }
        throw failure
    }

    /// One POST, on a client of its own (ended with it) whose connections go to `address` — a checked address of `host` —
    /// or, when nil, where the URL says (an IP literal already checked, or private targets allowed). Throws unless the
    /// receiver answered 2xx.
    private func send(_ request: HTTPClientRequest, host: String, pinnedTo address: String?) async throws {
        var configuration = HTTPClient.Configuration(
            // Not followed: a redirect would send the signed events somewhere the app did not configure (and unchecked).
            redirectConfiguration: .disallow, timeout: .init(connect: .seconds(5), read: Self.requestTimeout))
        // A connection that fails fails this attempt at once (then the next address, or the backoff), not retried here.
        configuration.connectionPool.retryConnectionEstablishment = false
        // The connect-time check holds: AsyncHTTPClient connects to the checked address and never resolves `host` again
        // (DNS rebinding), while the Host header, the TLS server name and the certificate's check still use `host`.
        if let address { configuration.dnsOverride = [host: address] }
        let client = HTTPClient(
            eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration, backgroundActivityLogger: logger)
        let status: UInt
        do {
            let response = try await client.execute(request, timeout: Self.requestTimeout)
            // The answer's body is not needed; reading a little of it ends the exchange cleanly.
            _ = try? await response.body.collect(upTo: 64 * 1024)
            status = response.status.code
        } catch {
            try? await client.shutdown()
            throw error
        }
        try? await client.shutdown()
        guard (200..<300).contains(status) else { throw WebhookAnswer(status: Int(status)) }
    }

    /// `sha256=` and the lowercase hex HMAC-SHA256, keyed by the secret, of `"<timestamp>.<body>"`.
    static func signature(secret: [UInt8], timestamp: Int64, body: [UInt8]) -> String {
        var mac = HMAC<SHA256>(key: SymmetricKey(data: secret))
        mac.update(data: Array("\(timestamp).".utf8))
        mac.update(data: body)
        return "sha256=" + mac.finalize().lowercaseHex
    }

    /// Milliseconds before the next delivery after `failures` earlier failures (this one not counted): 1 s doubling to
    /// 5 min, ±20 % jitter.
    static func backoff(failures: Int) -> Int64 {
        let base = min(300_000, 1000 << min(max(failures, 0), 9))
        return Int64(Double(base) * Double.random(in: 0.8...1.2))
    }
}

/// The JSON body of one webhook POST (docs/operations.md, "Push-result webhook").
struct WebhookDelivery: Encodable {
    var org: String
    var app: String
    var events: [Event]

    struct Event: Encodable {
        var id: Int64
        var type: String
        var at: Int64
        var username: String
        var deviceID: String
        var notifier: String
        var messageID: String?
        var pushType: String?
        var outcome: String?
        var reason: String?
        var apnsStatus: Int?
        var apnsID: String?
        var attempts: Int?

        enum CodingKeys: String, CodingKey {
            case id, type, at, username, notifier, outcome, reason, attempts
            case deviceID = "device_id", messageID = "message_id", pushType = "push_type", apnsStatus = "apns_status"
            case apnsID = "apns_id"
        }

        init(_ event: WebhookEvent) {
            id = event.id
            type = event.kind.rawValue
            at = event.at
            username = event.username
            deviceID = event.deviceID
            notifier = event.notifier
            messageID = event.messageID.map(String.init)
            pushType = event.pushType
            outcome = event.outcome
            reason = event.reason
            apnsStatus = event.apnsStatus
            // An apns-id names a request APNs saw: skipped pushes never had one.
            apnsID = event.outcome == "skipped" ? nil : event.apnsID
            attempts = event.attempts
        }
    }
}
