import BeaconStorage
import Hummingbird

/// `GET /{org}/{app}/users/{username}/resources`: Easemob's list of a user's devices connected now (on every node).
struct PresenceRoutes {
    let api: API
    let switchboard: Switchboard
    let ownUser: @Sendable (Request, any RequestContext) async throws -> (AppRecord, UserRecord)

    struct Resource: Codable, Sendable {
        /// The device id the client connected with (Easemob's resource).
        var res: String
    }

    @Sendable func resources(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let (app, user) = try await ownUser(request, context)
        let devices = try await switchboard.onlineDevices(of: [user.username], app: app.id)[user.username] ?? []
        let entities = devices.sorted().map { Resource(res: $0) }
        return api.respond(request, app: app, action: "get", entities: entities, count: entities.count)
    }
}
