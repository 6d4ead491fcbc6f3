import BeaconAPNs
import BeaconCore
import BeaconProtocol
import BeaconStorage
import Foundation
import Hummingbird

/// Push configurations (Easemob's `push/certificates`): an APNs `.p12` certificate or `.p8` key per notifier name,
/// uploaded as JSON or as a multipart form, sealed at rest.
struct PushCertificateRoutes: AppRouteCollection {
    let api: API
    let pushConfigs: PushConfigs?
    let onPushConfiguration: (@Sendable (PushTrust) throws -> Void)?

    var store: any BeaconStore { api.store }

    func register(on routes: AppRoutes) {
        routes.add(.post, "push/certificates", .app, uploadPushConfig)
        routes.add(.get, "push/certificates", .app, listPushConfigs)
        routes.add(.delete, "push/certificates/:name", .app, deletePushConfig)
    }

    private func requirePush() throws -> PushConfigs {
        guard let pushConfigs else { throw BeaconError.illegal("push is not enabled on this server (no secret key configured)") }
        return pushConfigs
    }

    @Sendable func uploadPushConfig(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let app = try context.requireApp()
        let configs = try requirePush()
        let upload: PushConfigUpload
        if let contentType = request.headers[.contentType], contentType.lowercased().hasPrefix("multipart/form-data") {
            upload = try await multipartUpload(request, contentType: contentType)
        } else {
            upload = try await api.body(PushConfigUpload.self, from: request)
        }
        let record = try configs.validate(upload, app: app.id, now: api.clock())
        try await store.savePushConfig(record)
        try onPushConfiguration?(try configs.trust(for: record))
        return api.respond(request, app: app, action: "post", entities: [PushConfigView(record)])
    }

    /// The same fields as the JSON form, with `file` as a file part (raw `.p12` or `.p8` bytes).
    private func multipartUpload(_ request: Request, contentType: String) async throws -> PushConfigUpload {
        let buffer = try await api.collectBody(of: request)
        guard let form = MultipartForm(contentType: contentType, body: Array(buffer.readableBytesView)) else {
            throw BeaconError(.jsonParse, "malformed multipart/form-data body")
        }
        guard let name = form.text("name"), let kindText = form.text("kind"), let kind = PushConfigRecord.Kind(rawValue: kindText),
            let environmentText = form.text("environment"), let environment = APNsEnvironment(rawValue: environmentText),
            let bundleID = form.text("bundle_id"), let file = form.bytes("file")
        else { throw BeaconError.illegal("the form needs name, kind (p8|p12), environment, bundle_id and a file part") }
        return PushConfigUpload(
            name: name, kind: kind, file: kind == .p12 ? Data(file).base64EncodedString() : String(decoding: file, as: UTF8.self),
            password: form.text("password"), keyID: form.text("key_id"), teamID: form.text("team_id"), environment: environment,
            bundleID: bundleID, voip: form.text("voip").map { $0 == "true" || $0 == "1" })
    }

    @Sendable func listPushConfigs(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let app = try context.requireApp()
        let views = try await store.pushConfigs(app: app.id).map(PushConfigView.init)
        return api.respond(request, app: app, action: "get", entities: views, count: views.count)
    }

    @Sendable func deletePushConfig(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let app = try context.requireApp()
        let name = try context.parameters.require("name")
        guard let record = try await store.pushConfig(name, app: app.id), try await store.deletePushConfig(name, app: app.id) else {
            throw BeaconError(.resourceNotFound, "no push configuration named \(name)")
        }
        return api.respond(request, app: app, action: "delete", entities: [PushConfigView(record)])
    }
}
