import BeaconAPNs
import Foundation
import Hummingbird

/// The simulator's control API: plain HTTP/1.1 JSON. Documented in docs/apns-simulator.md.
struct ControlAPI: Sendable {
    let simulator: APNsSimulator

    struct KeyRequest: Decodable {
        var teamID: String
        var keyID: String
        var publicKeyPEM: String
        enum CodingKeys: String, CodingKey { case teamID = "team_id", keyID = "key_id", publicKeyPEM = "public_key_pem" }
    }

    struct CertificateRequest: Decodable {
        var caPEM: String
        var topics: [String]
        var environment: APNsEnvironment?
        enum CodingKeys: String, CodingKey { case caPEM = "ca_pem", topics, environment }
    }

    struct UnregisteredRequest: Decodable {
        var deviceToken: String
        var timestamp: Int64?
        enum CodingKeys: String, CodingKey { case deviceToken = "device_token", timestamp }
    }

    struct DeviceTokenRequest: Decodable {
        var deviceToken: String
        var topic: String
        var environment: APNsEnvironment?
        enum CodingKeys: String, CodingKey { case deviceToken = "device_token", topic, environment }
    }

    struct Deliveries: Encodable {
        var deliveries: [SimulatedDelivery]
        var count: Int
    }

    func router() -> Router<BasicRequestContext> {
        let router = Router()
        router.get("/health") { _, _ in "ok" }
        router.get("/ca") { _, _ in simulator.caPEM }
        router.post("/keys") { request, context in
            let body = try await decode(KeyRequest.self, request, context)
            try rethrowAsBadRequest { try simulator.registerKey(teamID: body.teamID, keyID: body.keyID, publicKeyPEM: body.publicKeyPEM) }
            return ok()
        }
        router.post("/certificates") { request, context in
            let body = try await decode(CertificateRequest.self, request, context)
            try rethrowAsBadRequest {
                try simulator.registerCertificateAuthority(pem: body.caPEM, topics: body.topics, environment: body.environment)
            }
            return ok()
        }
        router.post("/unregistered") { request, context in
            let body = try await decode(UnregisteredRequest.self, request, context)
            simulator.markUnregistered(
                deviceToken: body.deviceToken, timestamp: body.timestamp ?? Int64(Date().timeIntervalSince1970 * 1000))
            return ok()
        }
        router.post("/tokens") { request, context in
            let body = try await decode(DeviceTokenRequest.self, request, context)
            simulator.registerDeviceToken(body.deviceToken, topic: body.topic, environment: body.environment)
            return ok()
        }
        router.put("/faults") { request, context in
            let faults = try await decode(SimulatorFaults.self, request, context)
            do {
                simulator.setFaults(try faults.validated())
            } catch {
                throw HTTPError(.badRequest, message: "\(error)")
            }
            return ok()
        }
        router.get("/deliveries") { request, _ in
            let list = simulator.deliveries(deviceToken: request.uri.queryParameters.get("device_token"))
            return json(Deliveries(deliveries: list, count: list.count))
        }
        router.delete("/deliveries") { _, _ in
            simulator.clearDeliveries()
            return ok()
        }
        return router
    }

    private func decode<T: Decodable>(_ type: T.Type, _ request: Request, _ context: BasicRequestContext) async throws -> T {
        do {
            return try await request.decode(as: T.self, context: context)
        } catch {
            throw HTTPError(.badRequest, message: "bad body: \(error)")
        }
    }

    private func rethrowAsBadRequest(_ body: () throws -> Void) throws {
        do { try body() } catch { throw HTTPError(.badRequest, message: "\(error)") }
    }

    private func ok() -> Response { json(["result": "ok"]) }

    private func json(_ value: some Encodable) -> Response {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return Response(
            status: .ok, headers: [.contentType: "application/json"],
            body: .init(byteBuffer: ByteBuffer(bytes: (try? encoder.encode(value)) ?? Data("{}".utf8))))
    }
}
