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
        commandName: "app", abstract: "Manage apps (tenants).", subcommands: [Create.self, RotateSecret.self])

    /// What `app create` and `app rotate-secret` take: the app, the output form, the data options.
    struct Target: ParsableArguments {
        @Argument(help: "The app as ORG/APP.")
        var app: String

        @Flag(help: "Print {\"org\",\"app\",\"client_id\",\"client_secret\"} as JSON.")
        var json = false

        @OptionGroup var data: DataOptions

        /// Runs `change` on the app in the configured store and prints the credentials it returns, as JSON or as text
        /// under `headline` (the secret is shown this once).
        func provision(
            headline: (AppKey) -> String, change: @escaping @Sendable (AppKey, any BeaconStore) async throws -> AppCredentials
        ) async throws {
            let config = try await data.reader(flags: [:])
            let key: AppKey
            do {
                key = try AppKey(parsing: app)
            } catch {
                throw ValidationError(error.message)
            }
            let credentials = try await withConfiguredStore(config, logger: try makeLogger(config, fallbackLevel: .warning)) {
                store, _ in try await change(key, store)
            }
            if json {
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.sortedKeys]
                print(String(decoding: try encoder.encode(credentials), as: UTF8.self))
            } else {
                print("\(headline(key))\nclient_id:     \(credentials.clientID)\nclient_secret: \(credentials.clientSecret)  (shown once)")
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
                change: { key, store in try await AppProvisioning.create(key, in: store) })
        }
    }

    struct RotateSecret: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "rotate-secret",
            abstract: "Give an app a new client secret and print it (shown only once); what the old one opened ends.",
            discussion: """
                The client id stays. App tokens issued until now are refused (a running node may accept them for up to 5 \
                seconds more), every console session of the app ends, and the old secret obtains nothing more. Runs beside \
                running servers, on SQLite and PostgreSQL alike.
                """)

        @OptionGroup var target: Target

        func run() async throws {
            try await target.provision(
                headline: { "Rotated the client secret of \($0); its app tokens and console sessions have ended" },
                change: { key, store in try await AppProvisioning.rotateSecret(key, in: store) })
        }
    }
}
