import BeaconAPNs
import BeaconCore
import BeaconStorage
import Foundation
import Hummingbird

/// `POST /{org}/{app}/push/test`: a push to a user's bound devices (or to the one device bound with a token) that belongs
/// to no message, sent through the real path
/// (push queue, worker, APNs, delivery record, webhook) under an id of its own, so that the answer can be looked up in
/// `GET /push/deliveries?message_id=` like any other. A test push ignores the receiver's push settings (do not disturb,
/// push nothing); its webhook event and metrics count it as a push whose message id names no message.
struct TestPushRoutes: AppRouteCollection {
    let api: API
    let messages: MessageService
    let pushEnabled: Bool

    func register(on routes: AppRoutes) {
        routes.add(.post, "push/test", .app, send)
    }

    struct TestPushRequest: Decodable {
        /// Whose devices (or give `deviceToken`).
        var username: String?
        /// The device bound with this APNs token, whoever holds it now (or give `username`).
        var deviceToken: String?
        /// One of the user's devices; all of them when absent.
        var deviceID: String?
        var title: String?
        var content: String?
        enum CodingKeys: String, CodingKey {
            case username, deviceToken = "device_token", deviceID = "device_id", title, content
        }
    }

    struct TestPushAnswer: Codable, Sendable {
        /// Look the outcome up with `GET /push/deliveries?message_id=`.
        var messageID: String
        /// The user whose devices were pushed (the token's holder when a token was given).
        var username: String
        /// Pushes queued (devices whose push configuration exists).
        var queued: Int
        /// Devices skipped, with why (`notifier_not_found`: their push configuration was deleted).
        var skipped: Int
        enum CodingKeys: String, CodingKey {
            case messageID = "message_id", username, queued, skipped
        }
    }

    static let maxTextBytes = 1000

    @Sendable func send(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let app = try context.requireApp()
        guard pushEnabled, let router = messages.router else {
            throw BeaconError.illegal("push is not enabled on this server (no secret key configured)")
        }
        let body = try await api.body(TestPushRequest.self, from: request)
        // In bytes, so that both together stay within APNs' 4 KB whatever the script.
        for text in [body.title, body.content].compactMap({ $0 }) where text.utf8.count > Self.maxTextBytes {
            throw BeaconError.illegal("title and content are at most \(Self.maxTextBytes) bytes (UTF-8)")
        }
        let (username, bindings) = try await recipient(of: body, app: app)
        let payload = JSONWriter.string(
            .object([
                "aps": .object([
                    "alert": .object([
                        "title": .string(body.title ?? "Beacon test push"), "body": .string(body.content ?? "If you see this, push works."),
                    ]),
                    "sound": .string("default"),
                ]),
                "beacon": .object(["test": .bool(true)]),
            ]))
        let (id, now) = messages.nextID()
        var jobs: [NewPushJob] = []
        for binding in bindings {
            let config = try await api.store.pushConfig(binding.notifier, app: app.id)
            jobs.append(
                NewPushJob(
                    username: username, deviceID: binding.deviceID, notifier: binding.notifier, deviceToken: binding.deviceToken,
                    topic: config?.bundleID ?? "", pushType: .alert, priority: .immediate,
                    expiration: now / 1000 + PushRouter.expirationSeconds, collapseID: nil, apnsID: .random(),
                    payload: config == nil ? "" : payload, skipReason: config == nil ? BeaconError.Code.notifierNotFound.rawValue : nil))
        }
        _ = try await api.store.recordRoute(PushRoute(messageID: id, replacing: .nothing, jobs: jobs, now: now), app: app.id)
        let queued = jobs.filter { $0.skipReason == nil }.count
        if queued > 0 { router.jobsStored() }
        return api.respond(
            request, app: app, action: "post",
            data: TestPushAnswer(messageID: String(id), username: username, queued: queued, skipped: jobs.count - queued))
    }

    /// Whose bound devices the test push goes to: the named user's, or the device bound with the token. The worker checks
    /// each binding again before sending, so a token that moves meanwhile is skipped (`binding_changed`), never pushed to
    /// its next owner.
    private func recipient(of body: TestPushRequest, app: AppRecord) async throws -> (String, [PushBinding]) {
        switch (body.username, body.deviceToken) {
        case (let username?, nil):
            guard try await api.store.user(username, app: app.id) != nil else {
                throw BeaconError(.userNotFound, "user \(username) does not exist")
            }
            let bindings = try await api.store.bindings(of: username, app: app.id).filter {
                body.deviceID == nil || $0.deviceID == body.deviceID
            }
            guard !bindings.isEmpty else {
                throw BeaconError(.resourceNotFound, "\(username) has no bound device\(body.deviceID.map { " \($0)" } ?? "") to push to")
            }
            return (username, bindings)
        case (nil, let token?):
            // As bindings store it: the hex form, lower case.
            guard token.utf8.count <= 256, APNsDeviceToken.isWellFormed(token) else {
                throw BeaconError.illegal("device_token must be the hex form of an APNs device token")
            }
            let bindings = try await api.store.bindings(holding: token.lowercased(), app: app.id).filter {
                body.deviceID == nil || $0.deviceID == body.deviceID
            }
            guard let owner = bindings.first?.username else {
                throw BeaconError(.resourceNotFound, "no device is bound with this device token")
            }
            return (owner, bindings)
        default:
            throw BeaconError.illegal("give either username or device_token")
        }
    }
}
