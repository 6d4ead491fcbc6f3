import BeaconCore
import BeaconStorage
import Foundation
import Hummingbird

/// `GET /{org}/{app}/stats`: what the console's overview shows — users, devices online now, messages and push outcomes
/// in the last hour and day, and push certificates that expire within 30 days.
struct ActivityRoutes: AppRouteCollection {
    let api: API
    let switchboard: Switchboard

    func register(on routes: AppRoutes) {
        routes.add(.get, "stats", .app, stats)
    }

    struct Window: Codable, Sendable {
        /// Where the window starts (ms since 1970): `GET /push/deliveries?since=` lists its records.
        var since: Int64
        var messages: Int
        var pushes: [Outcome]
    }

    struct Outcome: Codable, Sendable {
        var status: String
        /// The skip or failure reason; empty when none.
        var reason: String
        var count: Int
    }

    struct ExpiringCertificate: Codable, Sendable {
        var name: String
        /// ms since 1970.
        var expiresAt: Int64
        enum CodingKeys: String, CodingKey {
            case name, expiresAt = "expires_at"
        }
    }

    struct Stats: Codable, Sendable {
        var users: Int
        var devicesOnline: Int
        var lastHour: Window
        var lastDay: Window
        var expiringCertificates: [ExpiringCertificate]
        enum CodingKeys: String, CodingKey {
            case users, devicesOnline = "devices_online", lastHour = "last_hour", lastDay = "last_day"
            case expiringCertificates = "expiring_certificates"
        }
    }

    static let hour: Int64 = 3600 * 1000
    static let expiryWarning: Int64 = 30 * 24 * hour

    @Sendable func stats(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let app = try context.requireApp()
        let now = api.clock()
        func window(_ activity: AppActivity, since: Int64) -> Window {
            Window(
                since: since, messages: activity.messages,
                pushes: activity.pushes.map { Outcome(status: $0.status, reason: $0.reason, count: $0.count) })
        }
        let (dayStart, hourStart) = (now - 24 * Self.hour, now - Self.hour)
        let day = try await api.store.activity(app: app.id, since: dayStart)
        let hour = try await api.store.activity(app: app.id, since: hourStart)
        let expiring = try await api.store.pushConfigs(app: app.id).compactMap { config -> ExpiringCertificate? in
            guard let expiresAt = config.expiresAt, expiresAt < now + Self.expiryWarning else { return nil }
            return ExpiringCertificate(name: config.name, expiresAt: expiresAt)
        }
        let stats = Stats(
            users: day.users, devicesOnline: try await switchboard.connectedDeviceCount(app: app.id),
            lastHour: window(hour, since: hourStart),
            lastDay: window(day, since: dayStart), expiringCertificates: expiring)
        return api.respond(request, app: app, action: "get", data: stats)
    }
}
