import BeaconCore
import BeaconStorage
import Hummingbird
import NIOCore

/// What operators and their tools call: `/health`, `/ready`, `/metrics` (Prometheus) and `/openapi.json`. No
/// authentication: they tell nothing about any app.
struct OperationalRoutes {
    let store: any BeaconStore
    let pushWorker: PushWorker?
    let cluster: ClusterLink?
    let metrics: BeaconMetrics
    let clock: @Sendable () -> Int64

    func register(on router: Router<BeaconRequestContext>, table: RouteTable) {
        table.add(.get, "/health", on: router) { _, _ in
            Response(status: .ok, headers: [.contentType: "text/plain; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(string: "ok")))
        }
        table.add(.get, "/ready", on: router) { [store, pushWorker, cluster] _, _ in
            await Self.readiness(store: store, pushWorker: pushWorker, cluster: cluster)
        }
        table.add(.get, "/metrics", on: router) { [store, metrics, clock] _, _ in
            Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(string: await metrics.render(store: store, now: clock()))))
        }
        table.add(.get, "/openapi.json", on: router) { _, _ in
            Response(
                status: .ok, headers: [.contentType: "application/json"],
                body: .init(byteBuffer: ByteBuffer(bytes: PackageResources.openapi_json)))
        }
    }

    /// `GET /ready`: 200 when the store answers within `storeReadTimeout` with no migration of this version pending,
    /// the push worker's loop runs and is not stuck (when push is on), and, on several nodes, this node's heartbeats
    /// keep it safely alive; else 503. The body names each check.
    static func readiness(store: any BeaconStore, pushWorker: PushWorker?, cluster: ClusterLink?) async -> Response {
        var checks: [String: String] = [:]
        var ready = true
        do {
            let pending = try await withTimeout(BeaconMetrics.storeReadTimeout) { try await store.pendingMigrations() }
            checks["store"] = "ok"
            // Another node of a newer version may have migrated further; this one misses nothing it needs.
            checks["migrations"] = pending.isEmpty ? "done" : "pending: \(pending.joined(separator: ", "))"
            ready = pending.isEmpty
        } catch {
            checks["store"] = error is TimedOut ? "timeout" : "unreachable"
            checks["migrations"] = "unknown"
            ready = false
        }
        if let pushWorker {
            let health = pushWorker.health
            checks["push_worker"] = health.rawValue
            ready = ready && health == .running
        } else {
            checks["push_worker"] = "off"
        }
        if let cluster {
            // Joined beside other nodes, devices register only after a fence (`Solitude`): not ready for them yet.
            checks["cluster"] = !cluster.isSafelyAlive ? "heartbeat_late" : cluster.registrationsOpen ? "alive" : "joining"
            ready = ready && cluster.isSafelyAlive && cluster.registrationsOpen
        }
        checks["status"] = ready ? "ready" : "not_ready"
        return API.json(checks, status: ready ? .ok : .serviceUnavailable)
    }
}
