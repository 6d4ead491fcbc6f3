import BeaconStorage
import Foundation
import Hummingbird
import Metrics
import Prometheus

/// Beacon's metrics, in Prometheus' text format at `GET /metrics` (docs/operations.md lists them).
///
/// Recorded through swift-metrics with a factory of this server's own (no global `MetricsSystem.bootstrap`: a process
/// may run several servers, as the tests do). Labels hold only bounded values: message types, chat types, reasons,
/// statuses and route patterns — never usernames, tokens or ids.
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

    public init() {
        registry = PrometheusCollectorRegistry()
        var factory = PrometheusMetricsFactory(registry: registry)
        let seconds: [Duration] = [.milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100),
            .milliseconds(250), .milliseconds(500), .seconds(1), .milliseconds(2500), .seconds(5), .seconds(10)]
        factory.defaultDurationHistogramBuckets = seconds
        factory.valueHistogramBuckets["beacon_sync_catchup_messages"] = [0, 1, 10, 100, 1000, 10_000, 100_000]
        self.factory = factory
        connectedDevices = Meter(label: "beacon_websocket_connected_devices", factory: factory)
        connects = Metrics.Counter(label: "beacon_websocket_connects_total", factory: factory)
        disconnects = Metrics.Counter(label: "beacon_websocket_disconnects_total", factory: factory)
        syncCatchUp = Recorder(label: "beacon_sync_catchup_messages", aggregate: true, factory: factory)
        apnsLatency = Metrics.Timer(label: "beacon_apns_request_duration_seconds", factory: factory)
        pushRetries = Metrics.Counter(label: "beacon_push_retries_total", factory: factory)
        bindingsRemoved = Metrics.Counter(label: "beacon_push_bindings_removed_total", factory: factory)
        queueDepth = registry.makeGauge(name: "beacon_push_queue_depth", help: "Pending push jobs (due or not).")
        oldestDueAge = registry.makeGauge(
            name: "beacon_push_oldest_due_age_seconds", help: "How long the oldest due push job has waited (0: none due).")
    }

    /// Stored messages, by message type and chat type.
    func messagesStored(_ messages: [(type: String, chatType: String)]) {
        for (key, count) in Dictionary(grouping: messages, by: { "\($0.type) \($0.chatType)" }).mapValues(\.count) {
            let parts = key.split(separator: " ")
            Metrics.Counter(label: "beacon_messages_stored_total", dimensions: [("type", String(parts[0])), ("chat_type", String(parts[1]))], factory: factory)
                .increment(by: count)
        }
    }

    /// One message's push decisions: `push`, or `skipped` with its reason.
    func pushDecisions(_ jobs: [NewPushJob]) {
        for (reason, count) in Dictionary(grouping: jobs, by: { $0.skipReason ?? "" }).mapValues(\.count) {
            Metrics.Counter(
                label: "beacon_push_decisions_total", dimensions: [("outcome", reason.isEmpty ? "push" : "skipped"), ("reason", reason)],
                factory: factory
            ).increment(by: count)
        }
    }

    /// An APNs answer: its HTTP status (`none` when no answer came) and reason.
    func apnsRequest(status: Int?, reason: String?) {
        Metrics.Counter(
            label: "beacon_apns_requests_total", dimensions: [("status", status.map(String.init) ?? "none"), ("reason", Self.bounded(reason))],
            factory: factory
        ).increment()
    }

    /// An HTTP request: its route pattern, method and status.
    func request(route: String, method: String, status: Int, duration: Duration) {
        Metrics.Counter(label: "beacon_http_requests_total", dimensions: [("route", route), ("method", method), ("status", String(status))], factory: factory)
            .increment()
        Metrics.Timer(label: "beacon_http_request_duration_seconds", dimensions: [("route", route), ("method", method)], factory: factory)
            .record(duration: duration)
    }

    /// The text exposition, with the push queue read from the store now.
    func render(store: any BeaconStore, now: Int64) async throws -> String {
        let queue = try await store.pushQueueStats(now: now)
        queueDepth.set(Double(queue.pending))
        oldestDueAge.set(Double(queue.oldestDue.map { max(0, now - $0) } ?? 0) / 1000)
        var output: [UInt8] = []
        registry.emit(into: &output)
        return String(decoding: output, as: UTF8.self)
    }

    /// APNs reasons are Apple's short names; anything else (an error description) is collapsed so labels stay few.
    private static func bounded(_ reason: String?) -> String {
        guard let reason else { return "" }
        return reason.count <= 40 && reason.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "_" }) ? reason : "other"
    }
}

/// Counts and times every HTTP request by its route pattern (bounded), method and final status. Hummingbird's
/// `MetricsMiddleware` records to the global `MetricsSystem` only; Beacon's metrics belong to each server.
struct RequestMetricsMiddleware: RouterMiddleware {
    typealias Context = BeaconRequestContext
    let metrics: BeaconMetrics

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let start = ContinuousClock.now
        let response = try await next(request, context)
        metrics.request(
            route: context.endpointPath ?? "unmatched", method: request.method.rawValue, status: response.status.code,
            duration: start.duration(to: .now))
        return response
    }
}
