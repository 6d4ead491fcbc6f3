import BeaconAPNs
import BeaconStorage
import Foundation
import Hummingbird
import Metrics
import Prometheus
import Synchronization

/// Beacon's metrics, in Prometheus' text format at `GET /metrics` (docs/operations.md lists them).
///
/// Recorded through swift-metrics with a factory of this server's own (no global `MetricsSystem.bootstrap`: a process
/// may run several servers, as the tests do). Labels hold only bounded values: message types, chat types, reasons,
/// statuses and route patterns — never usernames, tokens or ids. Labelled instruments are made once per label set and
/// kept (the registry's lookup takes a global lock and validates names each time).
public final class BeaconMetrics: Sendable {
    public let registry: PrometheusCollectorRegistry
    let factory: PrometheusMetricsFactory

    let connectedDevices: Metrics.Meter
    let connects: Metrics.Counter
    let disconnects: Metrics.Counter
    let syncCatchUp: Metrics.Recorder
    let apnsLatency: Metrics.Timer
    let pushRetries: Metrics.Counter
    let bindingsRemoved: Metrics.Counter
    private let queueDepth: Prometheus.Gauge
    private let oldestDueAge: Prometheus.Gauge
    private let storeUp: Prometheus.Gauge
    private let webhookOutbox: Prometheus.Gauge
    private let webhookOldestAge: Prometheus.Gauge
    private let webhookDropped: Prometheus.Gauge
    private let webhookEventsDelivered: Metrics.Counter
    private let webhookLatency: Metrics.Timer
    private let instruments = Mutex(LabelledInstruments())

    /// A metric name with its label values, in order.
    private struct LabelSet: Hashable {
        var name: String
        var values: [String]
    }

    /// Labelled instruments made so far, by name and label values.
    private struct LabelledInstruments {
        var counters: [LabelSet: Metrics.Counter] = [:]
        var timers: [LabelSet: Metrics.Timer] = [:]
    }

    /// How long `/metrics` waits for the store's queue figures before answering without them.
    static let storeReadTimeout: Duration = .seconds(2)

    public init() {
        registry = PrometheusCollectorRegistry()
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.valueHistogramBuckets["beacon_sync_catchup_messages"] = [0, 1, 10, 100, 1000, 10_000, 100_000]
        self.factory = factory
        connectedDevices = Metrics.Meter(label: "beacon_websocket_connected_devices", factory: factory)
        connects = Metrics.Counter(label: "beacon_websocket_connects_total", factory: factory)
        disconnects = Metrics.Counter(label: "beacon_websocket_disconnects_total", factory: factory)
        syncCatchUp = Metrics.Recorder(label: "beacon_sync_catchup_messages", aggregate: true, factory: factory)
        apnsLatency = Metrics.Timer(label: "beacon_apns_request_duration_seconds", factory: factory)
        pushRetries = Metrics.Counter(label: "beacon_push_retries_total", factory: factory)
        bindingsRemoved = Metrics.Counter(label: "beacon_push_bindings_removed_total", factory: factory)
        queueDepth = registry.makeGauge(
            descriptor: MetricNameDescriptor(
                metricName: "beacon_push_queue_depth", unitName: "",
                helpText: "Pending push jobs in the store (due or not, in flight included)."))
        oldestDueAge = registry.makeGauge(
            descriptor: MetricNameDescriptor(
                metricName: "beacon_push_oldest_due_age_seconds", unitName: "",
                helpText: "How long the oldest due push job has waited, 0 when none is due."))
        storeUp = registry.makeGauge(
            descriptor: MetricNameDescriptor(
                metricName: "beacon_store_up", unitName: "", helpText: "1 when the store answered the scrape's reads within 2 s, else 0."))
        webhookOutbox = registry.makeGauge(
            descriptor: MetricNameDescriptor(
                metricName: "beacon_webhook_outbox_events", unitName: "", helpText: "Webhook events waiting (all apps)."))
        webhookOldestAge = registry.makeGauge(
            descriptor: MetricNameDescriptor(
                metricName: "beacon_webhook_oldest_event_age_seconds", unitName: "",
                helpText: "Age of the oldest waiting webhook event, 0 when none waits."))
        // Kept by the store (per webhook, since it was first set) and copied at scrape time: a gauge, as the registry
        // has no counter that can be set; it falls when a webhook is deleted or disabled.
        webhookDropped = registry.makeGauge(
            descriptor: MetricNameDescriptor(
                metricName: "beacon_webhook_events_dropped", unitName: "",
                helpText: "Webhook events dropped unsent at the outbox's bound, summed over the enabled webhooks."))
        webhookEventsDelivered = Metrics.Counter(label: "beacon_webhook_events_delivered_total", factory: factory)
        webhookLatency = Metrics.Timer(label: "beacon_webhook_delivery_duration_seconds", factory: factory)
    }

    private func counter(_ name: String, _ labels: [(String, String)]) -> Metrics.Counter {
        cached(\.counters, name, labels) { Metrics.Counter(label: name, dimensions: labels, factory: factory) }
    }

    private func timer(_ name: String, _ labels: [(String, String)]) -> Metrics.Timer {
        cached(\.timers, name, labels) { Metrics.Timer(label: name, dimensions: labels, factory: factory) }
    }

    /// The instrument for `name` and `labels`, made by `make` the first time.
    private func cached<Instrument: Sendable>(
        _ table: WritableKeyPath<LabelledInstruments, [LabelSet: Instrument]>, _ name: String, _ labels: [(String, String)],
        make: () -> Instrument
    ) -> Instrument {
        let key = LabelSet(name: name, values: labels.map(\.1))
        return instruments.withLock { made in
            if let instrument = made[keyPath: table][key] { return instrument }
            let instrument = make()
            made[keyPath: table][key] = instrument
            return instrument
        }
    }

    /// Stored messages, by message type and chat type.
    func messagesStored(_ messages: [(type: String, chatType: String)]) {
        for message in messages {
            counter("beacon_messages_stored_total", [("type", message.type), ("chat_type", message.chatType)]).increment()
        }
    }

    /// One message's push decisions: `push`, or `skipped` with its reason; `redecided` when they replace `online` skips of
    /// a device that went offline (the same message and device counted again).
    func pushDecisions(_ jobs: [NewPushJob], redecided: Bool) {
        for (reason, count) in Dictionary(grouping: jobs, by: { $0.skipReason ?? "" }).mapValues(\.count) {
            counter(
                "beacon_push_decisions_total",
                [("outcome", reason.isEmpty ? "push" : "skipped"), ("reason", reason), ("decision", redecided ? "redecided" : "initial")]
            ).increment(by: count)
        }
    }

    /// An APNs answer: its HTTP status (`none` when no answer came) and reason (Apple's, else `other`).
    func apnsRequest(status: Int?, reason: APNsReason?) {
        let reasonLabel = reason.map { $0.isKnown ? $0.rawValue : "other" } ?? ""
        counter("beacon_apns_requests_total", [("status", status.map(String.init) ?? "none"), ("reason", reasonLabel)]).increment()
    }

    /// One webhook POST: taken by the receiver (its events delivered) or not.
    func webhookDelivery(delivered: Bool, events: Int, duration: Duration) {
        counter("beacon_webhook_deliveries_total", [("result", delivered ? "delivered" : "failed")]).increment()
        if delivered { webhookEventsDelivered.increment(by: events) }
        webhookLatency.record(duration: duration)
    }

    /// An HTTP request: its route pattern, method and status.
    func request(route: String, method: String, status: Int, duration: Duration) {
        counter("beacon_http_requests_total", [("route", route), ("method", method), ("status", String(status))]).increment()
        timer("beacon_http_request_duration_seconds", [("route", route), ("method", method), ("status", String(status))])
            .record(duration: duration)
    }

    /// The text exposition. The push queue and the webhook outbox are read from the store now, waiting at most
    /// `storeReadTimeout` for both: a store that fails or hangs sets `beacon_store_up` to 0 (and leaves the queue figures
    /// as they were) instead of failing the scrape.
    func render(store: any BeaconStore, now: Int64) async -> String {
        do {
            let (queue, outbox) = try await withTimeout(Self.storeReadTimeout) {
                (try await store.pushQueueStats(now: now), try await store.webhookOutboxStats())
            }
            queueDepth.set(Double(queue.pending))
            // In floating point: a stored due time far in the past (a damaged row) cannot overflow the subtraction.
            oldestDueAge.set(queue.oldestDue.map { max(0, Double(now) - Double($0)) / 1000 } ?? 0)
            webhookOutbox.set(Double(outbox.pending))
            webhookOldestAge.set(outbox.oldest.map { max(0, Double(now) - Double($0)) / 1000 } ?? 0)
            webhookDropped.set(Double(outbox.dropped))
            storeUp.set(1.0)
        } catch {
            storeUp.set(0.0)
        }
        var output: [UInt8] = []
        registry.emit(into: &output)
        return String(decoding: output, as: UTF8.self) + Self.exposition(of: store.transactionTimings.snapshot())
    }

    /// `beacon_store_transaction_duration_seconds` in the text format: the store keeps the histograms (see
    /// `TransactionTimings`), so they are written here rather than through the registry.
    static func exposition(of timings: [TransactionTimings.Kind: TransactionTimings.Histogram]) -> String {
        let name = "beacon_store_transaction_duration_seconds"
        var text = "# TYPE \(name) histogram\n"
        for kind in TransactionTimings.Kind.allCases {
            guard let histogram = timings[kind] else { continue }
            var cumulative = 0
            for (bound, count) in zip(TransactionTimings.bucketBounds.map { "\($0)" } + ["+Inf"], histogram.bucketCounts) {
                cumulative += count
                text += "\(name)_bucket{kind=\"\(kind.rawValue)\",le=\"\(bound)\"} \(cumulative)\n"
            }
            text += "\(name)_sum{kind=\"\(kind.rawValue)\"} \(histogram.sum)\n"
            text += "\(name)_count{kind=\"\(kind.rawValue)\"} \(histogram.count)\n"
        }
        return text
    }
}

/// Counts and times every HTTP request by its route pattern (bounded; `NotFound` for any unknown path), method and final
/// status. Hummingbird's `MetricsMiddleware` records to the global `MetricsSystem` only; Beacon's metrics belong to each
/// server.
struct RequestMetricsMiddleware: RouterMiddleware {
    typealias Context = BeaconRequestContext
    let metrics: BeaconMetrics

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let start = ContinuousClock.now
        let response = try await next(request, context)
        metrics.request(
            route: context.endpointPath ?? "NotFound", method: request.method.rawValue, status: response.status.code,
            duration: start.duration(to: .now))
        return response
    }
}
