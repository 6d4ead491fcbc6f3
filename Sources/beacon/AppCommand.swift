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

struct AppCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "app", abstract: "Manage apps (tenants).", subcommands: [Create.self, RotateSecret.self, Tencent.self])

    /// What `app create` and `app rotate-secret` take: the app, the output form, the data options.
    struct Target: ParsableArguments {
        @Argument(help: "The app as ORG/APP.")
        var app: String

        @Flag(help: "Print {\"org\",\"app\",\"client_id\",\"client_secret\",\"sdkappid\",\"sdk_secret_key\"} as JSON.")
        var json = false

        @OptionGroup var data: DataOptions

        /// Runs `change` on the app in the configured store and prints the credentials it returns, as JSON or as text
        /// under `headline` (the secret is shown this once).
        func provision(
            headline: (AppKey) -> String,
            change: @escaping @Sendable (AppKey, any BeaconStore, SecretBox?) async throws -> AppCredentials,
            needsTencentKey: Bool = true
        ) async throws {
            let config = try await data.reader(flags: [:])
            let key: AppKey
            do {
                key = try AppKey(parsing: app)
            } catch {
                throw ValidationError(error.message)
            }
            let logger = try makeLogger(config, fallbackLevel: .warning, toStandardError: true)
            let credentials = try await withConfiguredStore(config, logger: logger) { store, database in
                // Without the server's secret key (none configured, or no key file yet: `serve` makes it at its first
                // start), the app gets its client credentials and no Tencent identity.
                let box = try await existingSecretBox(config, database: database, store: store)
                if box == nil, needsTencentKey {
                    logger.warning(
                        "no secret key found (BEACON_SECRET_KEY, or DATA_DIR/secret.key once `serve` has run): the Tencent identity was not made; `beacon app tencent` makes it"
                    )
                }
                return try await change(key, store, box)
            }
            if let failure = credentials.tencentFailure {
                logger.warning("the Tencent identity was not changed (\(failure)); `beacon app tencent` gives one")
            }
            if json {
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.sortedKeys]
                print(String(decoding: try encoder.encode(credentials), as: UTF8.self))
            } else {
                print(
                    "\(headline(key))\nclient_id:     \(credentials.clientID)\nclient_secret: \(credentials.clientSecret)  (shown once)")
                if let sdkAppID = credentials.sdkAppID, let secretKey = credentials.sdkSecretKey {
                    print("sdkappid:      \(sdkAppID)  (Tencent Cloud IM)\nsdk_secret_key: \(secretKey)  (shown once)")
                }
            }
        }
    }

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create an app and print its client credentials (the secret is shown only once).")

        @OptionGroup var target: Target

        func run() async throws {
            try await target.provision(
                headline: { "Created app \($0)" },
                change: { key, store, box in try await AppProvisioning.create(key, in: store, box: box) })
        }
    }

    struct RotateSecret: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "rotate-secret",
            abstract: "Give an app a new client secret and print it (shown only once); what the old one opened ends.",
            discussion: """
                The client id stays, and so does the Tencent SDKAppID, whose secret key is rotated too (an app without one \
                gets one), unless --keep-tencent-key. App tokens issued until now are refused (a running node may accept \
                them for up to 5 seconds more), every console session of the app ends, and the old secret obtains nothing \
                more. Runs beside running servers, on SQLite and PostgreSQL alike.
                """)

        @OptionGroup var target: Target

        @Flag(help: "Leave the Tencent secret key as it is (a backend moved from Tencent goes on making its UserSigs with it).")
        var keepTencentKey = false

        func run() async throws {
            let keep = keepTencentKey
            try await target.provision(
                headline: { "Rotated the client secret of \($0); its app tokens and console sessions have ended" },
                change: { key, store, box in try await AppProvisioning.rotateSecret(key, in: store, box: keep ? nil : box) },
                needsTencentKey: !keepTencentKey)
        }
    }

    struct Tencent: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Set an app's Tencent Cloud IM identity: SDKAppID, secret key and admin identifier (docs/tencent.md).",
            discussion: """
                Without --sdkappid and --secret-key, the app gets a new random pair (its SDKAppID kept if it has one). With \
                them, an app moving from Tencent Cloud IM keeps its own: the UserSigs its backend makes go on working. \
                Prints the SDKAppID and the secret key (shown once).
                """)

        @Argument(help: "The app as ORG/APP.")
        var app: String

        @Option(help: "The SDKAppID to use (a positive integer, unique in this database).")
        var sdkappid: Int64?

        @Option(name: .customLong("secret-key"), help: "The secret key to use (Tencent's: 64 hex digits).")
        var secretKey: String?

        @Option(
            help: "The administrator's identifier, the only one that may call the /v4 REST door (default: the app's, else administrator).")
        var admin: String?

        @Flag(help: "Print {\"org\",\"app\",\"sdkappid\",\"sdk_secret_key\",\"admin\"} as JSON.")
        var json = false

        @OptionGroup var data: DataOptions

        func run() async throws {
            let key: AppKey
            do {
                key = try AppKey(parsing: app)
            } catch {
                throw ValidationError(error.message)
            }
            let config = try await data.reader(flags: [:])
            let logger = try makeLogger(config, fallbackLevel: .warning, toStandardError: true)
            let (sdkAppID, secretKey, admin) = (sdkappid, secretKey, admin)
            let made = try await withConfiguredStore(config, logger: logger) { store, database in
                guard let box = try await existingSecretBox(config, database: database, store: store) else {
                    throw ValidationError(
                        "no secret key found: set BEACON_SECRET_KEY as for `serve`, or start `serve` once to make DATA_DIR/secret.key")
                }
                guard let app = try await store.app(key) else { throw BeaconError(.appNotFound, "application \(key) does not exist") }
                return try await TencentIdentities.assign(
                    to: app, in: store, box: box, sdkAppID: sdkAppID ?? app.tencent?.sdkAppID, secretKey: secretKey,
                    admin: admin ?? app.tencent?.adminIdentifier ?? TencentIdentity.defaultAdmin
                ).0
            }
            if json {
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.sortedKeys]
                print(String(decoding: try encoder.encode(TencentJSON(org: key.org, app: key.name, made: made)), as: UTF8.self))
            } else {
                print(
                    "Tencent identity of \(key)\nsdkappid:       \(made.sdkAppID)\nsdk_secret_key: \(made.secretKey)  (shown once)\nadmin:          \(made.adminIdentifier)"
                )
            }
        }
    }

    /// What `app tencent --json` prints.
    struct TencentJSON: Encodable {
        var org: String
        var app: String
        var made: TencentIdentities.Made

        enum CodingKeys: String, CodingKey {
            case org, app, sdkAppID = "sdkappid", secretKey = "sdk_secret_key", admin
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(org, forKey: .org)
            try container.encode(app, forKey: .app)
            try container.encode(made.sdkAppID, forKey: .sdkAppID)
            try container.encode(made.secretKey, forKey: .secretKey)
            try container.encode(made.adminIdentifier, forKey: .admin)
        }
    }
}
