import BeaconCore
import BeaconStorage
import Foundation
import Hummingbird

/// `PUT`, `GET`, `DELETE /{org}/{app}/push/webhook`: the app's push-result webhook (app token only).
struct WebhookRoutes: AppRouteCollection {
    let api: API
    /// Seals the webhook secret; nil when push is off (no secret key).
    let box: SecretBox?
    /// Receivers on loopback, link-local, private and other internal addresses allowed (`--webhook-private-targets`).
    let privateTargets: Bool

    var store: any BeaconStore { api.store }

    func register(on routes: AppRoutes) {
        routes.add(.put, "push/webhook", .app, put)
        routes.add(.get, "push/webhook", .app, get)
        routes.add(.delete, "push/webhook", .app, delete)
    }

    struct Body: Decodable {
        var url: String
        var secret: String
        var enabled: Bool?
    }

    /// What the API shows of a webhook: never the secret.
    struct View: Codable, Sendable {
        var url: String
        var enabled: Bool
        var pendingEvents: Int
        var consecutiveFailures: Int
        var nextAttemptAt: Int64
        var lastError: String?
        var droppedEvents: Int64

        enum CodingKeys: String, CodingKey {
            case url, enabled
            case pendingEvents = "pending_events", consecutiveFailures = "consecutive_failures", nextAttemptAt = "next_attempt_at"
            case lastError = "last_error", droppedEvents = "dropped_events"
        }

        init(_ state: WebhookState) {
            url = state.config.url
            enabled = state.config.enabled
            pendingEvents = state.pendingEvents
            consecutiveFailures = state.consecutiveFailures
            nextAttemptAt = state.nextAttemptAt
            // A category (`WebhookFailure`), also for a value stored before categories.
            lastError = state.lastError.map(WebhookFailure.shown)
            droppedEvents = state.droppedEvents
        }
    }

    static let maxURLBytes = 2048
    static let secretBytes = 16...256

    @Sendable func put(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let app = try context.requireApp()
        guard let box else { throw BeaconError.illegal("push is not enabled on this server (no secret key configured)") }
        let body = try await api.body(Body.self, from: request)
        guard body.url.utf8.count <= Self.maxURLBytes, let url = URL(string: body.url),
            ["http", "https"].contains(url.scheme?.lowercased()),
            let host = url.host, !host.isEmpty
        else { throw BeaconError.illegal("url must be an http or https URL of at most \(Self.maxURLBytes) bytes") }
        guard Self.secretBytes.contains(body.secret.utf8.count) else {
            throw BeaconError.illegal("secret must be \(Self.secretBytes.lowerBound) to \(Self.secretBytes.upperBound) bytes")
        }
        // Resolved here too (a name that does not resolve now is accepted: every delivery resolves and checks again).
        if !privateTargets, await WebhookTarget.isRefusedWhenSet(body.url) { throw Self.refusedTarget }
        let config = WebhookConfig(url: body.url, sealedSecret: try box.seal(Array(body.secret.utf8)), enabled: body.enabled ?? true)
        try await store.setWebhook(config, app: app.id, now: api.clock())
        return api.respond(request, app: app, action: "put", data: View(try await current(app)))
    }

    @Sendable func get(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let app = try context.requireApp()
        return api.respond(request, app: app, action: "get", data: View(try await current(app)))
    }

    @Sendable func delete(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let app = try context.requireApp()
        guard let previous = try await store.setWebhook(nil, app: app.id, now: api.clock()) else { throw Self.notFound }
        return api.respond(request, app: app, action: "delete", data: View(previous))
    }

    private func current(_ app: AppRecord) async throws -> WebhookState {
        guard let state = try await store.webhook(app: app.id) else { throw Self.notFound }
        return state
    }

    private static let notFound = BeaconError(.webhookNotFound, "this app has no push-result webhook")

    /// The stable message of a URL this server will not POST to (`WebhookTarget`).
    static let refusedTarget = BeaconError.illegal(
        "url must not lead to a loopback, link-local, private or other internal address (this server refuses them unless its operator sets --webhook-private-targets)"
    )
}
