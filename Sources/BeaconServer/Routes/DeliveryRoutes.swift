import BeaconCore
import BeaconProtocol
import BeaconStorage
import Foundation
import Hummingbird

/// Push delivery records (`push/deliveries`): every push job with its attempts, for the app or for a user's own.
struct DeliveryRoutes: AppRouteCollection {
    let api: API

    var store: any BeaconStore { api.store }

    func register(on routes: AppRoutes) {
        routes.add(.get, "push/deliveries", .caller, deliveries)
    }

    struct DeliveryView: Codable, Sendable {
        var messageID: String
        var username: String
        var deviceID: String
        var notifierName: String
        var deviceToken: String
        var apnsID: String
        /// `alert`, `voip`, or `background` (a withdrawal of what was read elsewhere).
        var pushType: String
        var status: String
        var httpStatus: Int?
        var reason: String?
        var attempts: Int
        var created: Int64
        var updated: Int64
        var history: [PushAttempt]
        /// The APNs payload as sent; absent for a skip.
        var payload: JSONValue?
        enum CodingKeys: String, CodingKey {
            case messageID = "message_id", username, deviceID = "device_id", notifierName = "notifier_name", deviceToken = "device_token"
            case apnsID = "apns_id", pushType = "push_type", status, httpStatus = "http_status", reason, attempts, created, updated, history
            case payload
        }
        init(_ job: PushJob) {
            messageID = String(job.messageID)
            username = job.job.username
            deviceID = job.job.deviceID
            notifierName = job.job.notifier
            deviceToken = job.job.deviceToken
            apnsID = StoredForm.text(of: job.job.apnsID)
            pushType = job.job.pushType.rawValue
            status = job.status.rawValue
            httpStatus = job.lastStatus
            reason = job.lastReason
            attempts = job.attempts
            created = job.createdAt
            updated = job.updatedAt
            history = job.history
            payload = job.job.payload.isEmpty ? nil : try? JSONDecoder().decode(JSONValue.self, from: Data(job.job.payload.utf8))
        }
    }

    /// `GET /push/deliveries?username=&message_id=&status=&reason=&since=&limit=`: push jobs with their attempts, newest
    /// first.
    @Sendable func deliveries(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let app = try context.app
        let caller = try context.caller
        let query = request.uri.queryParameters
        var filter = PushJobFilter(username: query.get("username"), reason: query.get("reason"))
        if case .user(let name) = caller, filter.username != name {
            throw BeaconError(.forbidden, "a user token may only read its own deliveries")
        }
        if let text = query.get("message_id") {
            guard let id = UInt64(text) else { throw BeaconError.illegal("message_id must be a decimal message id") }
            filter.messageID = id
        }
        if let text = query.get("status") {
            guard let status = PushJobStatus(rawValue: text) else {
                throw BeaconError.illegal("status must be one of \(PushJobStatus.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            filter.status = status
        }
        if let text = query.get("since") {
            guard let since = Int64(text), since >= 0 else { throw BeaconError.illegal("since must be a time in ms since 1970") }
            filter.updatedSince = since
        }
        let limit = min(max(query.get("limit").flatMap { Int($0) } ?? 100, 1), 1000)
        let jobs = try await store.pushJobs(app: app.id, matching: filter, limit: limit)
        return api.respond(request, app: app, action: "get", entities: jobs.map(DeliveryView.init), count: jobs.count)
    }
}
