import APNsSimulator
import ArgumentParser
import BeaconAPNs
import BeaconCore
import BeaconPostgres
import BeaconSQLite
import BeaconServer
import BeaconStorage
import Configuration
import Foundation
import Hummingbird
import Logging
import NIOSSL
import ServiceLifecycle

struct RotateKey: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rotate-key",
        abstract: "Seal every stored push credential, webhook secret and Tencent secret key with a new secret key (every node stopped).",
        discussion: """
            The current key is the configured one (BEACON_SECRET_KEY, else DATA_DIR/secret.key). The new one is read from \
            --new-key-file, which is created (0600) with a fresh random key when it does not exist — before anything is \
            sealed with it, so that an interrupted run can be run again with the same file. With DATA_DIR/secret.key, that \
            file is replaced by the new key at the end (same owner); otherwise set BEACON_SECRET_KEY to the new key on every \
            node. Tokens are signed with a key derived from the secret key, and console sessions are ended: everyone signs in again.
            """)

    @Option(help: "The new key (base64): read if the file exists, else generated into it (0600). Keep it.")
    var newKeyFile: String

    @Flag(help: "PostgreSQL: confirms that every node is stopped (a running node could not open what is sealed again).")
    var allNodesStopped = false

    @OptionGroup var data: DataOptions

    func run() async throws {
        let config = try await data.reader(flags: [:])
        let logger = try makeLogger(config, fallbackLevel: .warning)
        let dataDir = config.value(Settings.dataDir)
        let database = try ConfiguredDatabase(config.value(Settings.database))
        let keyInFile = config.value(Settings.secretKey) == nil
        let current: SecretBox
        if let text = config.value(Settings.secretKey) {
            current = try SecretBox(base64: text)
        } else if case .postgres = database {
            throw ValidationError("with PostgreSQL the current key is BEACON_SECRET_KEY")
        } else if let existing = try SecretBox.existing(inDataDirectory: dataDir) {
            current = existing
        } else {
            throw ValidationError("no current key: set BEACON_SECRET_KEY, or --data-dir to the directory holding secret.key")
        }
        var serverLock: ServeLock?
        switch database {
        case .sqlite(let path):
            // Held until the end: no server starts on the database meanwhile.
            serverLock = try ServeLock(database: path ?? SQLiteStore.databasePath(inDirectory: dataDir), mode: .maintenance)
        case .postgres:
            guard allNodesStopped else {
                throw ValidationError(
                    "stop every node first, then confirm it with --all-nodes-stopped (a running node could not open what is sealed again)")
            }
        }
        defer { withExtendedLifetime(serverLock) {} }
        let new: SecretBox
        if FileManager.default.fileExists(atPath: newKeyFile) {
            new = try SecretBox.read(keyFile: newKeyFile)
        } else {
            new = try SecretBox.create(keyFile: newKeyFile)
            print("generated a new key in \(newKeyFile): keep it, it is the new secret key")
        }
        let (count, sessions) = try await withConfiguredStore(config, logger: logger) { store, _ -> (Int, Int) in
            let count = try await current.resealStoredSecrets(in: store, with: new, now: Int64(Date().timeIntervalSince1970 * 1000))
            // Tokens end with the old key (they are signed with a key derived from it); console sessions are stored, so
            // they are ended here: everyone signs in again.
            return (count, try await store.deleteAllConsoleSessions())
        }
        print("sealed \(count) stored secret(s) with the new key")
        print("ended \(sessions) console session(s)")
        guard keyInFile else {
            print("now set BEACON_SECRET_KEY to the key in \(newKeyFile) on every node and start them")
            return
        }
        let path = SecretBox.keyFile(inDataDirectory: dataDir)
        try SecretBox.writeKeyFile(path, text: try String(contentsOfFile: newKeyFile, encoding: .utf8), exclusive: false)
        print("\(path) now holds the new key")
    }
}
