import BeaconCore
import BeaconStorage
import Hummingbird

/// A user's devices: those connected now, on every node (Easemob's `GET …/users/{username}/resources`), every device
/// seen with when (`GET …/users/{username}/devices`), and closing one device's connection
/// (`DELETE …/users/{username}/disconnect/{device_id}`, Easemob's forced logout of one device).
struct PresenceRoutes: AppRouteCollection {
    let api: API
    let switchboard: Switchboard

    func register(on routes: AppRoutes) {
        routes.add(.delete, "users/:username/disconnect/:device_id", .caller, disconnectDevice)
        routes.add(.get, "users/:username/resources", .caller, resources)
        routes.add(.get, "users/:username/devices", .caller, devices)
    }

    struct Resource: Codable, Sendable {
        /// The device id the client connected with (Easemob's resource).
        var res: String
    }

    /// A device of the user: connected now, or seen before.
    struct DeviceView: Codable, Sendable {
        var deviceID: String
        var online: Bool
        /// When the device last connected, acknowledged messages or disconnected (ms); nil for a device connected for
        /// the first time a moment ago (written within 100 ms).
        var lastSeen: Int64?

        enum CodingKeys: String, CodingKey {
            case online
            case deviceID = "device_id", lastSeen = "last_seen"
        }
    }

    @Sendable func resources(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let (app, user) = try await api.pathUser(context)
        let entities = try await online(user, app: app).sorted().map { Resource(res: $0) }
        return api.respond(request, app: app, action: "get", entities: entities, count: entities.count)
    }

    @Sendable func devices(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let (app, user) = try await api.pathUser(context)
        let online = try await online(user, app: app)
        var devices: [String: DeviceView] = [:]
        for seen in try await api.store.devices(of: user.username, app: app.id) {
            devices[seen.deviceID] = DeviceView(deviceID: seen.deviceID, online: online.contains(seen.deviceID), lastSeen: seen.lastSeen)
        }
        for deviceID in online where devices[deviceID] == nil {
            devices[deviceID] = DeviceView(deviceID: deviceID, online: true, lastSeen: nil)
        }
        let entities = devices.values.sorted { $0.deviceID.utf8.lexicographicallyPrecedes($1.deviceID.utf8) }
        return api.respond(request, app: app, action: "get", entities: entities, count: entities.count)
    }

    /// Closes the device's connection, wherever it is (`closing` `kicked`); its tokens stay valid, so a client that
    /// insists may connect again (`…/disconnect` without a device logs the user out everywhere instead).
    /// `data.result`: whether the device was connected.
    @Sendable func disconnectDevice(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let (app, user) = try await api.pathUser(context)
        let deviceID = try context.parameters.require("device_id")
        let wasOnline = try await online(user, app: app).contains(deviceID)
        await switchboard.disconnect(DeviceKey(app: app.id, username: user.username, deviceID: deviceID), reason: DeviceSession.kicked)
        return api.respond(request, app: app, action: "delete", data: ["result": .bool(wasOnline)] as JSONValue)
    }

    private func online(_ user: UserRecord, app: AppRecord) async throws -> Set<String> {
        Set(try await switchboard.onlineDevices(of: [user.username], app: app.id)[user.username] ?? [])
    }
}
