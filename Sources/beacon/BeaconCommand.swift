import ArgumentParser
import BeaconCore
import BeaconServer
import BeaconStorage
import Configuration
import Foundation
import Hummingbird
import Logging

@main
struct BeaconCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "beacon",
        abstract: "A self-hosted chat server with offline push to iOS.",
        subcommands: [Serve.self, AppCommand.self])
}

/// Options every subcommand that touches the data directory shares.
struct DataOptions: ParsableArguments {
    @Option(help: "Directory of the embedded SQLite database (env BEACON_DATA_DIR; default ./data).")
    var dataDir: String?

    @Option(help: "JSON configuration file (env BEACON_CONFIG). Keys: host, port, dataDir, logLevel.")
    var config: String?

    /// Flags first, then `BEACON_*` environment variables, then the configuration file.
    func reader(flags: [String: ConfigValue]) async throws -> ConfigReader {
        var values = flags
        if let dataDir { values["dataDir"] = ConfigValue(.string(dataDir), isSecret: false) }
        var providers: [any ConfigProvider] = [
            InMemoryProvider(name: "flags", values: Dictionary(uniqueKeysWithValues: values.map { (AbsoluteConfigKey(ConfigKey($0.key)), $0.value) })),
            EnvironmentVariablesProvider().prefixKeys(with: "beacon"),
        ]
        if let file = config ?? ProcessInfo.processInfo.environment["BEACON_CONFIG"] {
            let location = InMemoryProvider(values: ["filePath": ConfigValue(.string(file), isSecret: false)])
            providers.append(try await FileProvider<JSONSnapshot>(config: ConfigReader(provider: location)))
        }
        return ConfigReader(providers: providers)
    }
}

func makeLogger(level: String?) -> Logger {
    LoggingSystem.bootstrap(StreamLogHandler.standardOutput)
    var logger = Logger(label: "beacon")
    logger.logLevel = level.flatMap(Logger.Level.init(rawValue:)) ?? .info
    return logger
}

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Run the Beacon server.")

    @Option(help: "Address to listen on (env BEACON_HOST; default 127.0.0.1).")
    var host: String?

    @Option(help: "Port to listen on (env BEACON_PORT; default 8080; 0 picks a free port).")
    var port: Int?

    @OptionGroup var data: DataOptions

    func run() async throws {
        var flags: [String: ConfigValue] = [:]
        if let host { flags["host"] = ConfigValue(.string(host), isSecret: false) }
        if let port { flags["port"] = ConfigValue(.int(port), isSecret: false) }
        let config = try await data.reader(flags: flags)
        let logger = makeLogger(level: config.string(forKey: "logLevel"))
        let dataDir = config.string(forKey: "dataDir", default: "./data")
        let store = try SQLiteStore(directory: dataDir)
        let server = try await BeaconServer(
            store: store,
            configuration: BeaconConfiguration(
                host: config.string(forKey: "host", default: "127.0.0.1"), port: config.int(forKey: "port", default: 8080)),
            logger: logger)
        logger.info("data directory \(dataDir)")
        try await server.makeApplication().runService()
    }
}

struct AppCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "app", abstract: "Manage apps (tenants).", subcommands: [Create.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create an app and print its client credentials (the secret is shown only once).")

        @Argument(help: "The app as ORG/APP.")
        var app: String

        @Flag(help: "Print {\"org\",\"app\",\"client_id\",\"client_secret\"} as JSON.")
        var json = false

        @OptionGroup var data: DataOptions

        func run() async throws {
            let config = try await data.reader(flags: [:])
            let key: AppKey
            do {
                key = try AppKey(parsing: app)
            } catch {
                throw ValidationError(error.message)
            }
            let store = try SQLiteStore(directory: config.string(forKey: "dataDir", default: "./data"))
            let credentials = try await AppProvisioning.create(key, in: store)
            if json {
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.sortedKeys]
                print(String(decoding: try encoder.encode(credentials), as: UTF8.self))
            } else {
                print("Created app \(key)\nclient_id:     \(credentials.clientID)\nclient_secret: \(credentials.clientSecret)  (shown once)")
            }
        }
    }
}
