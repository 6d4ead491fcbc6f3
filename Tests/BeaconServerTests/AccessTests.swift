import BeaconCore
import BeaconTesting
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing

@testable import BeaconServer

/// Every route under `/{org}/{app}` against the access it was registered with, through the router in process (no socket):
/// no route is registered without a rule, and the rule holds for callers without a token, with a user token (on the app's
/// routes, and on another user's `users/:username/…`) and with the app token. (What a user may do on `.caller` routes
/// outside `users/:username/…` — groups, messages, deliveries — is each handler's, tested with the resource.)
@Suite struct AccessTests {
    /// The path of `route` with its parameters filled in: the app `acme/chat`, `username` for `:username`, `x` elsewhere.
    static func concrete(_ path: String, username: String) -> String {
        path.split(separator: "/").map { segment in
            switch segment {
            case ":org": "acme"
            case ":app": "chat"
            case ":username": username
            case let parameter where parameter.hasPrefix(":"): "x"
            default: String(segment)
            }
        }.reduce("") { $0 + "/" + $1 }
    }

    @Test func everyRouteRefusesCallersWithoutTheAccessItStates() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.createUsers("alice", "bob")
            let alice = try await beacon.userToken("alice")
            let table = RouteTable()
            let app = Application(router: beacon.server.buildRouter(routes: table))
            let appRoutes = table.all.filter { $0.path.hasPrefix(AppRoutes.prefix) }
            // Every route under /{org}/{app} was registered with a rule (through `AppRoutes`).
            let unruled = appRoutes.filter { table.access($0.method, $0.path) == nil }.map { "\($0.method) \($0.path)" }
            #expect(unruled.isEmpty, "registered without an access rule: \(unruled)")
            let routes = appRoutes.compactMap { route in table.access(route.method, route.path).map { (route.method, route.path, $0) } }
            #expect(routes.count == appRoutes.count && routes.count > 50)
            #expect(routes.filter { $0.2 == .anyone }.map(\.1) == ["/:org/:app/token"])
            try await app.test(.router) { client in
                for (method, path, access) in routes {
                    let uri = Self.concrete(path, username: "bob")
                    let anonymous = try await client.execute(uri: uri, method: method)
                    if access == .anyone {
                        #expect(anonymous.status != .unauthorized, "\(method) \(path)")
                    } else {
                        #expect(anonymous.status == .unauthorized, "\(method) \(path) without a token: \(anonymous.status)")
                    }
                    let asAlice = try await client.execute(uri: uri, method: method, headers: [.authorization: "Bearer \(alice)"])
                    if access == .app {
                        #expect(asAlice.status == .forbidden, "\(method) \(path) with a user token: \(asAlice.status)")
                    } else if path.hasPrefix("/:org/:app/users/:username") {
                        // Alice acting on bob.
                        #expect(asAlice.status == .forbidden, "\(method) \(path) as another user: \(asAlice.status)")
                    }
                    let asApp = try await client.execute(uri: uri, method: method, headers: [.authorization: "Bearer \(beacon.appToken)"])
                    #expect(![.unauthorized, .forbidden].contains(asApp.status), "\(method) \(path) with the app token: \(asApp.status)")
                }
            }
        }
    }
}
