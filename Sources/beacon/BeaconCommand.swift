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

@main
struct BeaconCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "beacon",
        abstract: "A self-hosted chat server with offline push to iOS.",
        subcommands: [
            Serve.self, AppCommand.self, Migrate.self, Backup.self, RotateKey.self, APNsSim.self, RoutesCommand.self,
            ConfigReferenceCommand.self,
        ])
}

/// Options every subcommand that touches the data directory shares.
struct DataOptions: ParsableArguments {
    @Option(help: Settings.dataDir.help)
    var dataDir: String?

    @Option(help: Settings.database.help)
    var database: String?

    @Option(help: ArgumentHelp("\(Settings.configFile.help.abstract) Keys: \(Settings.fileKeys)."))
    var config: String?

    /// Flags first, then `BEACON_*` environment variables, then the configuration file.
    func reader(flags: [String: ConfigValue]) async throws -> ConfigReader {
        var values = flags
        if let dataDir { values[Settings.dataDir.key ?? ""] = ConfigValue(.string(dataDir), isSecret: false) }
        if let database { values[Settings.database.key ?? ""] = ConfigValue(.string(database), isSecret: true) }
        var providers: [any ConfigProvider] = [
            InMemoryProvider(
                name: "flags", values: Dictionary(uniqueKeysWithValues: values.map { (AbsoluteConfigKey(ConfigKey($0.key)), $0.value) })),
            // Each setting's documented variable (`BEACON_DATA_DIR`, `BEACON_DATABASE_URL`).
            EnvironmentVariablesProvider().prefixKeys(with: "beacon").mapKeys(Settings.environmentKey),
        ]
        if let file = config ?? Settings.configFile.environment.flatMap({ ProcessInfo.processInfo.environment[$0] }) {
            let location = InMemoryProvider(values: ["filePath": ConfigValue(.string(file), isSecret: false)])
            providers.append(try await FileProvider<JSONSnapshot>(config: ConfigReader(provider: location)))
        }
        return ConfigReader(providers: providers)
    }
}

/// The process's logger: `logLevel` (trace … critical; default `info`, or `fallbackLevel`) and `logFormat` (`text`, the
/// default, or `json`: one JSON object per line). On standard output, or on standard error for a command whose standard
/// output is its result (`--json`, the credentials shown once), so that a script reads the result alone.
func makeLogger(_ config: ConfigReader, fallbackLevel: Logger.Level = .info, toStandardError: Bool = false) throws -> Logger {
    let levelText = config.value(Settings.logLevel)
    guard let level = levelText.map({ Logger.Level(rawValue: $0) }) ?? fallbackLevel else {
        throw ValidationError("logLevel must be one of \(Logger.Level.allCases.map(\.rawValue).joined(separator: ", "))")
    }
    switch config.value(Settings.logFormat) {
    case "text": LoggingSystem.bootstrap(toStandardError ? StreamLogHandler.standardError : StreamLogHandler.standardOutput)
    case "json":
        let write = toStandardError ? JSONLogHandler.standardError : JSONLogHandler.standardOutput
        LoggingSystem.bootstrap { JSONLogHandler(label: $0, write: write) }
    case let other: throw ValidationError("logFormat must be text or json, not \(other)")
    }
    var logger = Logger(label: "beacon")
    logger.logLevel = level
    return logger
}

extension ServiceGroupConfiguration {
    /// A process's services: SIGTERM and SIGINT shut them down gracefully, for at most 15 s (a connection that never
    /// closes, say a client reconnecting during shutdown, must not keep the process alive); then what remains is
    /// cancelled. (No cancellation limit: the library would trap when it runs out, and every wait that can outlive a
    /// cancellation, an APNs request or reconnect, has its own bound.)
    static func process(services: [any Service], logger: Logger) -> ServiceGroupConfiguration {
        var configuration = ServiceGroupConfiguration(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        configuration.maximumGracefulShutdownDuration = .seconds(15)
        return configuration
    }
}
