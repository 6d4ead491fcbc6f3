import BeaconAPNs
import BeaconStorage
import Configuration
import Foundation

/// Settings of one Beacon server process.
public struct BeaconConfiguration: Sendable {
    public var host: String
    public var port: Int
    /// Lifetime of issued tokens when the request names none, seconds (app tokens live 7 days at most, user tokens 60).
    public var tokenLifetimeSeconds: Int
    /// How often the retention service enforces offline limits.
    public var retentionInterval: Duration
    /// Stored messages held in memory per connection before a slow device is switched to reading the store.
    public var outboxLimit: Int
    /// The node part of every message id (0..<1024) when the store serves one node (SQLite); a cluster gives each node
    /// a free slot when it joins.
    public var node: UInt16
    /// This node's name in a cluster (`--node-id`); generated from the host name and process id when nil.
    public var nodeName: String?
    /// PBKDF2-SHA256 rounds for new password hashes.
    public var passwordHashRounds: Int
    /// Where pushes go: Apple, or a custom endpoint such as the simulator.
    public var apnsRouting: APNsRouting
    /// Seals push credentials at rest. Without one, push is off (no configurations can be uploaded).
    public var secretBox: SecretBox?
    /// A push job still failing this long (ms) after its message is given up.
    public var pushMaxAge: Int64
    /// Told about every push configuration (uploaded, or already stored at start): lets an in-process
    /// simulator trust what Beacon will send.
    public var onPushConfiguration: (@Sendable (PushTrust) throws -> Void)?
    /// Told about every batch of push attempts once it is recorded (for monitoring and tests).
    public var onPushAttempts: (@Sendable ([PushAttemptOutcome]) -> Void)?
    /// The reverse proxies whose `X-Forwarded-For` and `X-Forwarded-Proto` Beacon believes (`--trusted-proxy`); from any
    /// other peer the peer is the client and those headers are ignored.
    public var trustedProxies = TrustedProxies.none
    /// How fast users and apps may send (`--send-rate-per-user`, `--send-rate-per-app`).
    public var sendLimits = SendLimits()
    /// The most members a group created with a user token may have (its `maxusers` at most; Easemob's default).
    public var userGroupMaxUsers = 200
    /// Push-result webhooks may lead to loopback, link-local, private and other internal addresses
    /// (`--webhook-private-targets`): for tests and receivers on the operator's own network. Off, such targets are refused
    /// when the webhook is set and before every delivery (`last_error` `refused_address`).
    public var webhookPrivateTargets = false
    /// The clock, milliseconds since 1970. Tests replace it.
    public var clock: @Sendable () -> Int64

    public init(
        host: String = "127.0.0.1", port: Int = 8080, tokenLifetimeSeconds: Int = 7 * 24 * 3600,
        retentionInterval: Duration = .seconds(60), outboxLimit: Int = 1024, node: UInt16 = 0,
        passwordHashRounds: Int = 210_000, apnsRouting: APNsRouting = .apple, secretBox: SecretBox? = nil,
        pushMaxAge: Int64 = 24 * 3600 * 1000,
        clock: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970 * 1000) }
    ) {
        self.host = host
        self.port = port
        self.tokenLifetimeSeconds = tokenLifetimeSeconds
        self.retentionInterval = retentionInterval
        self.outboxLimit = outboxLimit
        self.node = node
        self.passwordHashRounds = passwordHashRounds
        self.apnsRouting = apnsRouting
        self.secretBox = secretBox
        self.pushMaxAge = pushMaxAge
        self.onPushConfiguration = nil
        self.onPushAttempts = nil
        self.clock = clock
    }
}

extension BeaconConfiguration {
    /// The configuration the settings in `config` describe (flags, environment, file: `Settings`), with the defaults above
    /// for the rest. What needs the process's own resources, the secret key and where pushes go (an in-process simulator,
    /// or an endpoint with its CA file), the caller adds.
    public init(reader config: ConfigReader) throws(BeaconConfigurationError) {
        self.init(host: config.value(Settings.host), port: config.value(Settings.port))
        nodeName = config.value(Settings.nodeID)
        webhookPrivateTargets = config.value(Settings.webhookPrivateTargets)
        sendLimits = SendLimits(
            perUser: try Self.rate(Settings.sendRatePerUser, config), perApp: try Self.rate(Settings.sendRatePerApp, config))
        userGroupMaxUsers = config.value(Settings.userGroupMaxUsers)
        guard (2...100_000).contains(userGroupMaxUsers) else {
            throw BeaconConfigurationError("userGroupMaxUsers must be 2-100000, not \(userGroupMaxUsers)")
        }
        trustedProxies = try Self.trustedProxies(config)
    }

    /// `trustedProxies`, parsed; an invalid entry is an error naming it.
    public static func trustedProxies(_ config: ConfigReader) throws(BeaconConfigurationError) -> TrustedProxies {
        do {
            return try TrustedProxies(parsing: config.value(Settings.trustedProxies) ?? "")
        } catch {
            throw BeaconConfigurationError("trustedProxies (--trusted-proxy, BEACON_TRUSTED_PROXIES): \(error.message)")
        }
    }

    private static func rate(_ setting: Setting<Int>, _ config: ConfigReader) throws(BeaconConfigurationError) -> SendRate? {
        let perSecond = config.value(setting)
        guard (0...1_000_000).contains(perSecond) else {
            throw BeaconConfigurationError("\(setting.key ?? "") must be 0 (no limit) to 1000000 messages a second, not \(perSecond)")
        }
        return perSecond == 0 ? nil : SendRate(perSecond: perSecond, burst: perSecond * 5)
    }
}

/// A setting, a key or a stored configuration that cannot be used; `beacon` stops with this message.
public struct BeaconConfigurationError: Error, CustomStringConvertible, Sendable {
    public var description: String
    public init(_ description: String) { self.description = description }
}
