import BeaconAPNs
import BeaconCore
import BeaconSQLite
import BeaconStorage
import BeaconTesting
import Crypto
import Foundation
import Logging
import Testing

@testable import BeaconServer

@Suite struct PushConfigsTests {
    /// Concurrent first pushes with one configuration share one client. Before, each built its own and the table kept
    /// the last, shutting the others down while their notifications were in flight.
    @Test func concurrentFirstUsesBuildOneClient() async throws {
        let directory = StoreKind.temporaryDirectory("beacon-configs")
        defer { try? FileManager.default.removeItem(at: directory) }
        let configs = PushConfigs(
            store: try SQLiteStore(directory: directory.path), box: SecretBox(key: SymmetricKey(size: .bits256)),
            routing: .custom(host: "127.0.0.1", port: 9, trustRoots: []))
        let upload = PushConfigUpload(
            name: "chat", kind: .p8, file: P256.Signing.PrivateKey().pemRepresentation, password: nil, keyID: "KEY1234567",
            teamID: "TEAM123456", environment: .development, bundleID: "com.example.chat", voip: false)
        let record = try configs.validate(upload, app: 1, now: 1_000)
        let clients = try await withThrowingTaskGroup(of: ObjectIdentifier.self) { group in
            for _ in 0..<32 { group.addTask { ObjectIdentifier(try configs.client(for: record)) } }
            return try await group.reduce(into: Set<ObjectIdentifier>()) { $0.insert($1) }
        }
        #expect(clients.count == 1)
        // A replaced configuration (a new upload under the same name) gets a new client.
        var replaced = record
        replaced.createdAt += 1
        let fresh = try configs.client(for: replaced)
        #expect(!clients.contains(ObjectIdentifier(fresh)))
        await configs.shutdown()
    }

    /// A server whose secret key is not the one the stored configurations were sealed with refuses to start, naming the
    /// configuration, rather than failing every push later.
    @Test func aServerWhoseSecretKeyCannotOpenStoredCredentialsRefusesToStart() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.uploadP8(name: "ios-prod")
            var configuration = BeaconConfiguration(port: 0)
            configuration.secretBox = SecretBox(key: SymmetricKey(size: .bits256))
            let error = await #expect(throws: WrongSecretKey.self) {
                _ = try await BeaconServer(store: beacon.store, configuration: configuration, logger: Logger(label: "test"))
            }
            #expect(error?.sealed == "push configuration 'ios-prod'")
            #expect(error?.description.contains("BEACON_SECRET_KEY") == true)
            // The right key opens them.
            try await PushConfigs.checkOpens(store: beacon.store, box: SecretBox(key: testSecretKey))
        }
    }

    /// The same for a webhook secret: a receiver would reject every signed delivery.
    @Test func aServerWhoseSecretKeyCannotOpenTheWebhookSecretRefusesToStart() async throws {
        try await TestBeacon.run { beacon in
            let put = try await beacon.rest("PUT", "/push/webhook", ["url": "http://192.0.2.1:9/hook", "secret": "0123456789abcdef0123"])
            #expect(put.status == 200)
            var configuration = BeaconConfiguration(port: 0)
            configuration.secretBox = SecretBox(key: SymmetricKey(size: .bits256))
            let error = await #expect(throws: WrongSecretKey.self) {
                _ = try await BeaconServer(store: beacon.store, configuration: configuration, logger: Logger(label: "test"))
            }
            #expect(error?.sealed == "the push-result webhook")
            try await PushConfigs.checkOpens(store: beacon.store, box: SecretBox(key: testSecretKey))
        }
    }

    /// `beacon rotate-key`: every stored secret is sealed with the new key, the plaintext unchanged; running it again
    /// changes nothing; a secret neither key opens stops it, naming it.
    @Test func rotatingTheKeyResealsEveryStoredSecret() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.uploadP8(name: "ios-prod")
            let put = try await beacon.rest("PUT", "/push/webhook", ["url": "http://192.0.2.1:9/hook", "secret": "0123456789abcdef0123"])
            #expect(put.status == 200)
            let app = try #require(try await beacon.store.app(AppKey(org: "acme", name: "chat")))
            let old = SecretBox(key: testSecretKey)
            let new = SecretBox(key: SymmetricKey(size: .bits256))
            let credentials = try old.open(try #require(try await beacon.store.pushConfig("ios-prod", app: app.id)).sealedSecret)

            let tencentKey = try old.open(try #require(app.tencent).sealedKey)
            #expect(try await old.resealStoredSecrets(in: beacon.store, with: new, now: 1) == 3)
            // The app's Tencent secret key too (its SDKAppID and administrator kept).
            let resealed = try #require(try await beacon.store.app(id: app.id)?.tencent)
            #expect(try new.open(resealed.sealedKey) == tencentKey && resealed.sdkAppID == app.tencent?.sdkAppID)
            try await PushConfigs.checkOpens(store: beacon.store, box: new)
            #expect(try new.open(try #require(try await beacon.store.pushConfig("ios-prod", app: app.id)).sealedSecret) == credentials)
            let webhook = try #require(try await beacon.store.webhook(app: app.id))
            #expect(try new.open(webhook.config.sealedSecret) == Array("0123456789abcdef0123".utf8))
            #expect(webhook.config.url == "http://192.0.2.1:9/hook" && webhook.config.enabled)
            // Again (an interrupted rotation run a second time): nothing left to do.
            #expect(try await old.resealStoredSecrets(in: beacon.store, with: new, now: 2) == 0)
            // From a key that opens nothing.
            let error = await #expect(throws: WrongSecretKey.self) {
                try await SecretBox(key: SymmetricKey(size: .bits256)).resealStoredSecrets(
                    in: beacon.store, with: SecretBox(key: SymmetricKey(size: .bits256)), now: 3)
            }
            #expect(error?.sealed == "push configuration 'ios-prod'")
        }
    }

    /// `beacon rotate-key` as an operator runs it on the embedded database: the new key generated into its file first,
    /// every secret sealed with it, `secret.key` replaced; run again, nothing to do; refused while a server runs, and on
    /// PostgreSQL without the current key or the confirmation that every node is stopped.
    @Test func theRotateKeyCommandResealsAndReplacesTheKeyFile() async throws {
        let directory = StoreKind.temporaryDirectory("beacon-rotate")
        defer { try? FileManager.default.removeItem(at: directory) }
        let data = directory.appendingPathComponent("data").path
        let newKeyFile = directory.appendingPathComponent("new.key").path
        let store = try SQLiteStore(directory: data)
        let old = try SecretBox.fromDataDirectory(data, logger: Logger(label: "test"))
        let credentials = try await AppProvisioning.create(AppKey(org: "acme", name: "chat"), in: store)
        let app = try #require(try await store.app(AppKey(org: credentials.org, name: credentials.app)))
        let pem = Array(P256.Signing.PrivateKey().pemRepresentation.utf8)
        try await store.savePushConfig(
            PushConfigRecord(
                appID: app.id, name: "ios", kind: .p8, environment: "production", bundleID: "com.example", voip: false, keyID: "K",
                teamID: "T",
                sealedSecret: try old.seal(pem), expiresAt: nil, createdAt: 1))
        // A console session, which is not signed with the key: rotating the key ends it too.
        let farFuture = Int64(Date().timeIntervalSince1970 * 1000) + 24 * 3600 * 1000
        try await store.createConsoleSession(ConsoleSession(digest: "signed-in", app: app.id, createdAt: 1, expiresAt: farFuture), now: 1)
        func rotate(_ extra: [String] = []) async throws -> (Int32, String) {
            let result = try await runToExit(
                BeaconProcess.executable, ["rotate-key", "--data-dir", data, "--new-key-file", newKeyFile] + extra)
            return (result.status, String(decoding: result.output, as: UTF8.self))
        }

        // Refused beside a running server.
        let server = try await BeaconProcess(["serve", "--port", "0", "--data-dir", data])
        _ = try await server.line(containing: "Beacon listening on")
        #expect(try await rotate().0 != 0)
        #expect(!FileManager.default.fileExists(atPath: newKeyFile))
        server.signal(SIGTERM)
        #expect(await server.exitStatus(within: .seconds(30)) != nil)

        let (status, output) = try await rotate()
        #expect(status == 0, "\(output)")
        #expect(output.contains("sealed 1 stored secret(s)"))
        #expect(output.contains("ended 1 console session(s)"))
        #expect(try await store.consoleSession(digest: "signed-in", now: 2) == nil)
        let new = try SecretBox.read(keyFile: newKeyFile)
        #expect(try new.open(try #require(try await store.pushConfig("ios", app: app.id)).sealedSecret) == pem)
        #expect(
            try String(contentsOfFile: SecretBox.keyFile(inDataDirectory: data), encoding: .utf8)
                == String(contentsOfFile: newKeyFile, encoding: .utf8))
        let mode = try FileManager.default.attributesOfItem(atPath: newKeyFile)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        // Again: the data directory's key is the new one now, and nothing is left to seal.
        let again = try await rotate()
        #expect(again.0 == 0 && again.1.contains("sealed 0 stored secret(s)"), "\(again.1)")

        // PostgreSQL: refused before connecting (nothing listens on port 9).
        let url = "postgres://nobody@127.0.0.1:9/none"
        #expect(try await rotate(["--database", url]).0 != 0)
        let withKey = try await runToExit(
            URL(fileURLWithPath: "/usr/bin/env"),
            [
                "BEACON_SECRET_KEY=\(String(decoding: try Data(contentsOf: URL(fileURLWithPath: newKeyFile)), as: UTF8.self))",
                BeaconProcess.executable.path,
                "rotate-key", "--database", url, "--new-key-file", newKeyFile,
            ])
        #expect(withKey.status != 0)
    }
}
