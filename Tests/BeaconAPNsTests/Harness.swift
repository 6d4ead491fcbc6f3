import APNsSimulator
import BeaconAPNs
import BeaconTesting
import Crypto
import Foundation
import NIOSSL
import ServiceLifecycle
import SwiftASN1
import Synchronization
import X509

let bundleID = "com.example.chat"
let teamID = "TEAM123456"
let keyID = "KEY1234567"
let deviceToken = String(repeating: "ab", count: 32)

/// Runs `body` with a started simulator and a token-auth client trusting it.
func withSimulatorAndClient<T: Sendable>(
    clock: TestClock = TestClock.wall(), environment: APNsEnvironment = .development, maxConcurrentStreams: Int = 1000,
    client clientConfiguration: APNsClient.Configuration? = nil,
    _ body: @Sendable (APNsSimulator, APNsClient, APNsSigningKey) async throws -> T
) async throws -> T {
    let simulator = try APNsSimulator(
        configuration: .init(environment: environment, maxConcurrentStreams: maxConcurrentStreams, clock: { clock.date }))
    let key = APNsSigningKey(teamID: teamID, keyID: keyID, privateKey: P256.Signing.PrivateKey())
    try simulator.registerKey(teamID: teamID, keyID: keyID, publicKeyPEM: key.privateKey.publicKey.pemRepresentation)
    return try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await simulator.run() }
        defer { group.cancelAll() }
        let endpoints = await simulator.endpoints()
        // Generous: tests share two cores with real server processes; the tests about timeouts set their own.
        var configuration = clientConfiguration ?? APNsClient.Configuration(requestTimeout: .seconds(15))
        configuration.clock = { clock.date }
        let client = APNsClient(
            credentials: .token(key), endpoint: simulator.endpoint(endpoints), configuration: configuration)
        do {
            let result = try await body(simulator, client, key)
            await client.shutdown()
            return result
        } catch {
            await client.shutdown()
            throw error
        }
    }
}

extension APNsSimulator {
    func endpoint(_ endpoints: Endpoints) -> APNsEndpoint {
        APNsEndpoint(
            host: "127.0.0.1", port: endpoints.apnsPort, trustRoots: [try! NIOSSLCertificate(bytes: Array(caPEM.utf8), format: .pem)])
    }
}

func alert(
    _ body: String = "hello", token: String = deviceToken, topic: String = bundleID, pushType: APNsPushType = .alert,
    priority: Int? = 10, collapseID: String? = nil, payload: [UInt8]? = nil
) -> APNsNotification {
    APNsNotification(
        deviceToken: token, topic: topic, pushType: pushType, priority: priority, expiration: 0, collapseID: collapseID,
        payload: payload ?? Array(#"{"aps":{"alert":{"body":"\#(body)"}}}"#.utf8))
}

/// APNs' answer to a rejected notification.
struct Rejection: Equatable, CustomStringConvertible {
    var status: Int
    var reason: APNsReason?
    init(_ status: Int, _ reason: APNsReason?) {
        self.status = status
        self.reason = reason
    }
    var description: String { "\(status) \(reason?.description ?? "-")" }
}

/// The rejection of a notification, or nil if `send` succeeded or failed otherwise (as a timeout).
func rejection(_ client: APNsClient, _ notification: APNsNotification) async -> Rejection? {
    do {
        _ = try await client.send(notification)
        return nil
    } catch {
        if case .rejected(let status, let reason, _, _) = error { return Rejection(status, reason) }
        return nil
    }
}

/// A client-certificate CA and a client certificate it issued, as APNs' would be.
struct ClientPKI {
    let caPEM: String
    let chain: [NIOSSLCertificate]
    let key: NIOSSLPrivateKey
    let keyPEM: String
    let certificatePEM: String

    static func make(commonName: String = "Apple Push Services: \(bundleID)") throws -> ClientPKI {
        let caKey = P256.Signing.PrivateKey()
        let caName = try DistinguishedName { CommonName("Test Client CA") }
        let now = Date()
        let ca = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(caKey.publicKey), notValidBefore: now - 3600, notValidAfter: now + 86400,
            issuer: caName, subject: caName, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
            }, issuerPrivateKey: .init(caKey))
        let clientKey = P256.Signing.PrivateKey()
        let client = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(clientKey.publicKey), notValidBefore: now - 3600,
            notValidAfter: now + 86400,
            issuer: caName, subject: try DistinguishedName { CommonName(commonName) }, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                try ExtendedKeyUsage([.clientAuth])
            }, issuerPrivateKey: .init(caKey))
        let clientPEM = try client.serializeAsPEM().pemString
        return ClientPKI(
            caPEM: try ca.serializeAsPEM().pemString,
            chain: [try NIOSSLCertificate(bytes: Array(clientPEM.utf8), format: .pem)],
            key: try NIOSSLPrivateKey(bytes: Array(clientKey.pemRepresentation.utf8), format: .pem),
            keyPEM: clientKey.pemRepresentation, certificatePEM: clientPEM)
    }
}
