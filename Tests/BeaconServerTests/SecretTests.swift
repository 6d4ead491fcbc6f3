import APNsSimulator
import BeaconClient
import BeaconCore
import BeaconProtocol
import BeaconServer
import BeaconTesting
import Crypto
import Foundation
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

@Suite struct SecretTests {
    @Test func theDataDirectoryIsPrivateAndHoldsNoSigningKey() async throws {
        let directory = StoreKind.temporaryDirectory("beacon-secret")
        let token = try await TestBeacon.run(directory: directory) { beacon in
            try await beacon.createUsers("bob")
            return try await beacon.userToken("bob")
        }
        let attributes = { (path: String) in
            (try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? NSNumber)?.intValue
        }
        let directoryMode = try attributes(directory.path)
        let databaseMode = try attributes(directory.appendingPathComponent("beacon.sqlite").path)
        #expect(directoryMode == 0o700)
        #expect(databaseMode == 0o600)
        let database = try Data(contentsOf: directory.appendingPathComponent("beacon.sqlite"))
        #expect(database.range(of: Data("token_signing_key".utf8)) == nil)
        // The key is derived from the secret key: a restarted server still accepts the token.
        let status = try await TestBeacon.run(directory: directory) { beacon in
            try await beacon.rest("GET", "/users/bob", token: token).status
        }
        #expect(status == 200)
    }
}
