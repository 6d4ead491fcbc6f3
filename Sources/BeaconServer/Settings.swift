import Configuration

/// One setting: where it may be given (flag, `BEACON_*` environment variable, configuration-file key), its default and
/// what it does. `beacon` reads settings through these (`ConfigReader.value(_:)`, `BeaconConfiguration(reader:)`), its
/// flags' help is made from them, and `beacon config-reference` prints them as the README's configuration table, which a
/// test compares with the README: the reference cannot drift from the code.
public struct Setting<Value: Sendable>: DocumentedSetting {
    /// The configuration-file key (also the configuration reader's key); nil for a flag with no other source.
    public let key: String?
    /// The flag, with its value's placeholder (`--port N`).
    public let flag: String?
    /// The environment variable.
    public let environment: String?
    /// Used when no source gives a value.
    public let defaultValue: Value
    /// The default as the reference shows it.
    public let defaultText: String
    /// What the setting does.
    public let meaning: String
    /// Kept out of the configuration reader's logs.
    public var isSecret = false
}

/// A setting as the reference lists it, whatever its type.
public protocol DocumentedSetting: Sendable {
    var key: String? { get }
    var flag: String? { get }
    var environment: String? { get }
    var defaultText: String { get }
    var meaning: String { get }
}

/// Every setting, in the reference's order.
public enum Settings {
    public static let host = Setting<String>(
        key: "host", flag: "--host ADDRESS", environment: "BEACON_HOST", defaultValue: "127.0.0.1", defaultText: "`127.0.0.1`",
        meaning: "Address to listen on (`0.0.0.0` or `::` for every interface).")
    public static let port = Setting<Int>(
        key: "port", flag: "--port N", environment: "BEACON_PORT", defaultValue: 8080, defaultText: "`8080`",
        meaning: "Port to listen on; 0 picks a free port.")
    public static let dataDir = Setting<String>(
        key: "dataDir", flag: "--data-dir DIR", environment: "BEACON_DATA_DIR", defaultValue: "./data", defaultText: "`./data`",
        meaning: "Directory (created 0700) of the embedded SQLite database and of the generated secret key.")
    public static let database = Setting<String?>(
        key: "database", flag: "--database URL", environment: "BEACON_DATABASE_URL", defaultValue: nil,
        defaultText: "embedded SQLite in the data directory",
        meaning: """
            `sqlite:PATH` (or absent): embedded SQLite (`DATA_DIR/beacon.sqlite` when PATH is empty). \
            `postgres://user:password@host:5432/db`: PostgreSQL, which then needs `BEACON_SECRET_KEY`; several nodes may share \
            it (docs/scaling.md). Options: `sslmode=disable|prefer|require` (default `disable`; `require` verifies the \
            server's certificate against the system's CAs), `pool_size=16` (at least 3), `schema=name` (created if missing).
            """,
        isSecret: true)
    public static let durability = Setting<String>(
        key: "durability", flag: "--durability full|normal", environment: "BEACON_DURABILITY", defaultValue: "full",
        defaultText: "`full`",
        meaning: """
            SQLite only. `full`: every acknowledged message is on disk (`synchronous=FULL`) and survives a power loss; \
            `normal` is faster and survives a crash of Beacon, but a power loss may undo the last commits.
            """)
    public static let nodeID = Setting<String?>(
        key: "nodeId", flag: "--node-id NAME", environment: "BEACON_NODE_ID", defaultValue: nil,
        defaultText: "host name and process id",
        meaning: "This node's name in a cluster sharing one PostgreSQL (logs, the `cluster_nodes` table).")
    public static let trustedProxies = Setting<String?>(
        key: "trustedProxies", flag: "--trusted-proxy ADDRESSES", environment: "BEACON_TRUSTED_PROXIES", defaultValue: nil,
        defaultText: "none",
        meaning: """
            Comma-separated IP addresses or CIDR ranges (`127.0.0.1`, `10.0.0.0/8`, `::1`) of the reverse proxies in front. \
            From these peers only, the client's address is the rightmost `X-Forwarded-For` entry that is not itself a trusted \
            proxy (failed logins are limited per client address) and `X-Forwarded-Proto: https` makes the console cookie \
            `Secure`; from any other peer, the peer is the client and both headers are ignored. An invalid entry stops `serve`.
            """)
    public static let secretKey = Setting<String?>(
        key: "secretKey", flag: nil, environment: "BEACON_SECRET_KEY", defaultValue: nil,
        defaultText: "generated in `DATA_DIR/secret.key` (0600), with a warning",
        meaning: """
            32 random bytes, base64 (`openssl rand -base64 32`): seals push credentials, webhook secrets and apps' Tencent \
            secret keys and, derived from it, the token-signing key (never stored). Changing it logs every user out; a key \
            that cannot open a stored secret stops `serve` at start, naming it.
            """,
        isSecret: true)
    public static let logLevel = Setting<String?>(
        key: "logLevel", flag: nil, environment: "BEACON_LOG_LEVEL", defaultValue: nil, defaultText: "`info`",
        meaning: """
            `trace`, `debug`, `info`, `notice`, `warning`, `error` or `critical`. At `info`, one line per REST request \
            (method, route, path without the query, status, duration, request id — also answered as `X-Request-Id`); \
            never tokens, passwords, keys or message bodies.
            """)
    public static let logFormat = Setting<String>(
        key: "logFormat", flag: nil, environment: "BEACON_LOG_FORMAT", defaultValue: "text", defaultText: "`text`",
        meaning: """
            `json`: one JSON object per line (`time`, `level`, `label`, `message`, `source`, then the metadata as fields) \
            for log shippers.
            """)
    public static let apnsSimulator = Setting<Bool>(
        key: "apnsSimulator", flag: "--apns-simulator", environment: "BEACON_APNS_SIMULATOR", defaultValue: false,
        defaultText: "off", meaning: "Start the APNs simulator in-process and send every push to it (docs/apns-simulator.md).")
    public static let apnsEndpoint = Setting<String?>(
        key: "apnsEndpoint", flag: "--apns-endpoint URL", environment: "BEACON_APNS_ENDPOINT", defaultValue: nil,
        defaultText: "Apple's", meaning: "Send both APNs environments to this endpoint instead of Apple's.")
    public static let apnsCA = Setting<String?>(
        key: "apnsCa", flag: "--apns-ca FILE", environment: "BEACON_APNS_CA", defaultValue: nil, defaultText: "none",
        meaning: "The CA (PEM) to trust for `--apns-endpoint`, which needs it.")
    public static let webhookPrivateTargets = Setting<Bool>(
        key: "webhookPrivateTargets", flag: "--webhook-private-targets", environment: "BEACON_WEBHOOK_PRIVATE_TARGETS",
        defaultValue: false, defaultText: "off (refused)",
        meaning: """
            Let push-result webhooks POST to loopback, link-local (cloud metadata included), private, CGNAT, multicast and \
            other internal addresses (IPv4, IPv6 and IPv4-mapped forms), for receivers on your own network. Off, such a URL \
            is refused at `PUT /push/webhook`, and every delivery resolves the host, checks each address and connects only \
            to a checked one (`last_error` `refused_address`).
            """)
    public static let sendRatePerUser = Setting<Int>(
        key: "sendRatePerUser", flag: nil, environment: "BEACON_SEND_RATE_PER_USER", defaultValue: 2_000, defaultText: "`2000`",
        meaning: """
            Deliveries a second one user may make (user tokens and devices; one per recipient's inbox, so a message to a \
            group of 200 counts 200), with bursts of five times as many; past it a send gets `429 too_many_requests` and \
            nothing is stored (a retry of a stored send is still answered). Counted per node. `0`: no limit.
            """)
    public static let sendRatePerApp = Setting<Int>(
        key: "sendRatePerApp", flag: nil, environment: "BEACON_SEND_RATE_PER_APP", defaultValue: 20_000, defaultText: "`20000`",
        meaning: """
            Deliveries a second one app may make in all (every send, app tokens too; one per recipient's inbox, so a group \
            message counts its members), with bursts of five times as many, so that one tenant cannot hold the server's \
            writer for the others (a send larger than a whole burst goes when the bucket is full). Counted per node. `0`: \
            no limit.
            """)
    public static let userGroupMaxUsers = Setting<Int>(
        key: "userGroupMaxUsers", flag: nil, environment: "BEACON_USER_GROUP_MAX_USERS", defaultValue: 200, defaultText: "`200`",
        meaning: """
            The most members a group created with a user token may have (its `maxusers`; Easemob's default). A user token \
            creates a group of one; only the app adds members. Groups the app creates may have up to 100,000.
            """)
    public static let demo = Setting<Bool>(
        key: nil, flag: "--demo", environment: nil, defaultValue: false, defaultText: "off",
        meaning: "`--apns-simulator` plus a seeded demo app; prints the curl that pushes to an offline user.")
    public static let configFile = Setting<String?>(
        key: nil, flag: "--config FILE", environment: "BEACON_CONFIG", defaultValue: nil, defaultText: "none",
        meaning: "A JSON file of settings by their file key (e.g. `{\"port\": 9000}`).")

    public static let all: [any DocumentedSetting] = [
        host, port, dataDir, database, durability, nodeID, trustedProxies, secretKey, logLevel, logFormat, apnsSimulator, apnsEndpoint,
        apnsCA,
        webhookPrivateTargets, sendRatePerUser, sendRatePerApp, userGroupMaxUsers, demo, configFile,
    ]

    /// The key under which the environment provider, its keys prefixed with `beacon`, finds a setting: the components of its
    /// documented variable (`database` is `BEACON_DATABASE_URL`, so `database.url`); other keys as they are.
    public static func environmentKey(_ key: AbsoluteConfigKey) -> AbsoluteConfigKey {
        guard key.components.count == 1, let setting = all.first(where: { $0.key == key.components[0] }),
            let variable = setting.environment, variable.hasPrefix("BEACON_")
        else { return key }
        return AbsoluteConfigKey(variable.dropFirst("BEACON_".count).lowercased().split(separator: "_").map(String.init))
    }

    /// The configuration file's keys.
    public static var fileKeys: String { all.compactMap(\.key).joined(separator: ", ") }

    /// The README's configuration table (Markdown).
    public static var reference: String {
        func cell(_ text: String?) -> String { (text ?? "").replacingOccurrences(of: "|", with: "\\|") }
        func code(_ text: String?) -> String { text.map { "`\($0)`" } ?? "" }
        let rows = all.map { setting in
            "| \(cell(code(setting.flag))) | \(code(setting.environment)) | \(code(setting.key)) | \(cell(setting.defaultText)) | \(cell(setting.meaning)) |"
        }
        return (["| flag | environment | file key | default | what |", "|---|---|---|---|---|"] + rows).joined(separator: "\n") + "\n"
    }
}

extension ConfigReader {
    public func value(_ setting: Setting<String>) -> String {
        string(forKey: ConfigKey(setting.key ?? ""), isSecret: setting.isSecret, default: setting.defaultValue)
    }

    public func value(_ setting: Setting<String?>) -> String? {
        string(forKey: ConfigKey(setting.key ?? ""), isSecret: setting.isSecret) ?? setting.defaultValue
    }

    public func value(_ setting: Setting<Int>) -> Int {
        int(forKey: ConfigKey(setting.key ?? ""), isSecret: setting.isSecret, default: setting.defaultValue)
    }

    public func value(_ setting: Setting<Bool>) -> Bool {
        bool(forKey: ConfigKey(setting.key ?? ""), isSecret: setting.isSecret, default: setting.defaultValue)
    }
}
