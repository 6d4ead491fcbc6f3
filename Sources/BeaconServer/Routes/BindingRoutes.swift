import BeaconAPNs
import BeaconCore
import BeaconProtocol
import BeaconStorage
import Hummingbird

/// A user's device tokens (Easemob's `users/{username}/push/binding`).
struct BindingRoutes: AppRouteCollection {
    let api: API

    var store: any BeaconStore { api.store }

    func register(on routes: AppRoutes) {
        routes.add(.put, "users/:username/push/binding", .caller, bind)
        routes.add(.get, "users/:username/push/binding", .caller, listBindings)
    }

    struct BindingView: Codable, Sendable {
        var deviceID: String
        var deviceToken: String
        var voipToken: String?
        var notifierName: String
        enum CodingKeys: String, CodingKey {
            case deviceID = "device_id", deviceToken = "device_token", voipToken = "voip_token", notifierName = "notifier_name"
        }
        init(_ binding: PushBinding) {
            deviceID = binding.deviceID
            deviceToken = binding.deviceToken
            voipToken = binding.voipToken
            notifierName = binding.notifier
        }
    }

    /// Easemob's binding semantics: an empty token unbinds the device and notifier; an empty notifier unbinds
    /// the whole device; an unknown notifier is refused. Answers with the device's remaining bindings.
    @Sendable func bind(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let (app, user) = try await api.pathUser(context)
        let body = try await api.body(PushBindingRequest.self, from: request)
        guard (1...128).contains(body.deviceID.utf8.count) else { throw BeaconError.illegal("device_id must be 1-128 bytes") }
        if body.notifierName.isEmpty {
            try await store.unbind(username: user.username, deviceID: body.deviceID, notifier: nil, app: app.id)
        } else {
            guard try await store.pushConfig(body.notifierName, app: app.id) != nil else {
                throw BeaconError(.notifierNotFound, "no push configuration named \(body.notifierName)")
            }
            if body.deviceToken.isEmpty {
                try await store.unbind(username: user.username, deviceID: body.deviceID, notifier: body.notifierName, app: app.id)
            } else {
                for token in [body.deviceToken] + (body.voipToken.map { [$0] } ?? []) {
                    guard token.utf8.count <= 256, APNsDeviceToken.isWellFormed(token) else {
                        throw BeaconError.illegal("device_token and voip_token must be the hex form of an APNs device token")
                    }
                }
                let voipToken = body.voipToken?.lowercased()
                guard voipToken != body.deviceToken.lowercased() else {
                    throw BeaconError.illegal("voip_token is PushKit's token, which differs from the alert device_token")
                }
                let bound = try await store.bind(
                    PushBinding(
                        username: user.username, deviceID: body.deviceID, notifier: body.notifierName,
                        deviceToken: body.deviceToken.lowercased(), voipToken: voipToken, boundAt: api.clock()),
                    app: app.id, holder: user.uuid)
                guard bound else { throw BeaconError(.userNotFound, "user \(user.username) does not exist") }
            }
        }
        let remaining = try await store.bindings(of: user.username, app: app.id).filter { $0.deviceID == body.deviceID }
        return api.respond(request, app: app, action: "put", entities: remaining.map(BindingView.init))
    }

    @Sendable func listBindings(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let (app, user) = try await api.pathUser(context)
        let bindings = try await store.bindings(of: user.username, app: app.id)
        return api.respond(request, app: app, action: "get", entities: bindings.map(BindingView.init), count: bindings.count)
    }
}
