import BeaconCore
import BeaconProtocol
import Foundation

/// How a `BeaconClient` reaches its server and identifies its device.
public struct BeaconOptions: Sendable {
    /// The app key, `org#app` (Easemob's form) or `org/app`.
    public var appKey: String
    /// The server's base URL, e.g. `http://127.0.0.1:8080`.
    public var serverURL: URL
    /// The push configuration ("certificate") name this app build uses, for device-token binding.
    public var apnsCertName: String?
    /// The user's time zone (IANA name); do-not-disturb windows are evaluated in it. Sent at login when the server holds
    /// another for the user.
    public var timeZone: String
    /// Where the installation's device id, push tokens and last sent time zone are kept (`UserDefaults` by default).
    public var storage: any InstallationStorage
    /// A stable id for this installation. Messages are tracked per device: a new id downloads the stored history again.
    /// By default, one made on first use and kept in `storage` (per app key) so it survives relaunches.
    public var deviceID: String
    /// How long `login` waits for the first connection before giving up.
    public var loginTimeout: Duration
    /// The longest wait before the first reconnect attempt; it doubles at each failed attempt up to `maxReconnectDelay`,
    /// and each wait is drawn at random in its upper half (clients dropped together do not come back together).
    public var reconnectDelay: Duration
    public var maxReconnectDelay: Duration
    /// After this long without a frame from the server, the client pings it…
    public var heartbeatInterval: Duration
    /// …and without any frame this long after the ping, drops the connection (half-open) and reconnects.
    public var heartbeatTimeout: Duration
    /// How long after `applicationDidEnterBackground` the connection stays open; once it is closed, the server pushes.
    public var backgroundGrace: Duration
    /// REST and WebSocket: the system's networking unless a test scripts its own.
    public var transport: any BeaconTransport

    public init(
        appKey: String, serverURL: URL, apnsCertName: String? = nil, timeZone: String = TimeZone.current.identifier,
        deviceID: String? = nil, storage: any InstallationStorage = UserDefaultsStorage(), loginTimeout: Duration = .seconds(15),
        reconnectDelay: Duration = .milliseconds(200), maxReconnectDelay: Duration = .seconds(10),
        heartbeatInterval: Duration = .seconds(30), heartbeatTimeout: Duration = .seconds(10), backgroundGrace: Duration = .seconds(2),
        transport: any BeaconTransport = SystemTransport()
    ) {
        self.appKey = appKey
        self.serverURL = serverURL
        self.apnsCertName = apnsCertName
        self.timeZone = timeZone
        self.storage = storage
        self.deviceID = deviceID ?? Self.installationID(appKey: appKey, storage: storage)
        self.loginTimeout = loginTimeout
        self.reconnectDelay = reconnectDelay
        self.maxReconnectDelay = maxReconnectDelay
        self.heartbeatInterval = heartbeatInterval
        self.heartbeatTimeout = heartbeatTimeout
        self.backgroundGrace = backgroundGrace
        self.transport = transport
    }

    /// `org/app`, the path prefix of every REST call.
    var appPath: String { appKey.replacingOccurrences(of: "#", with: "/") }

    /// The app's WebSocket URL for this device (`ws`, or `wss` after an `https` server URL); nil when `serverURL` cannot
    /// make one.
    func webSocketURL(readsSince: Int64) -> URL? {
        guard
            var url = URLComponents(
                url: serverURL.appendingPathComponent(appPath).appendingPathComponent("ws"), resolvingAgainstBaseURL: false)
        else { return nil }
        url.scheme = url.scheme == "https" ? "wss" : "ws"
        url.queryItems = [URLQueryItem(name: "device_id", value: deviceID), URLQueryItem(name: "reads_since", value: String(readsSince))]
        return url.url
    }

    /// This installation's device id for `appKey`: made once, then read back from `storage`.
    public static func installationID(appKey: String, storage: any InstallationStorage = UserDefaultsStorage()) -> String {
        let key = InstallationKeys(appKey: appKey).deviceID
        if let stored = storage.string(forKey: key), !stored.isEmpty { return stored }
        let made = UUID().uuidString.lowercased()
        storage.set(made, forKey: key)
        return made
    }
}

/// Errors the SDK reports.
public enum BeaconClientError: Error, Sendable, Equatable {
    /// The server refused the request with a stable error `code` (see the server's docs/errors.md).
    case server(status: Int, code: String, description: String)
    /// Not logged in.
    case notLoggedIn
    /// `BeaconOptions.serverURL` makes no WebSocket URL.
    case invalidServerURL
    /// No connection could be made within `BeaconOptions.loginTimeout`.
    case timedOut
    /// The connection dropped before the server answered; the send may or may not have been stored.
    case disconnected
    /// The server logged this user out (kicked, or the account was deleted); log in again.
    case kicked
    case badResponse(String)
}

/// Where the connection stands (`BeaconClient.states`).
public enum ConnectionState: Sendable, Hashable {
    /// No user: nothing to connect.
    case loggedOut
    /// Opening a connection.
    case connecting
    /// Connected: messages arrive live, and the server does not push to this device.
    case connected
    /// Between attempts, after a failed or dropped connection (a network change cuts the wait short).
    case waitingToReconnect
    /// The app is in the background and the connection closed: the server pushes until the app comes back.
    case suspended
}

/// What happens to the connection, for UI and tests.
public enum ConnectionEvent: Sendable, Equatable {
    case connected
    /// Everything stored for this device up to `seq` has been received.
    case synced(seq: Int64)
    case disconnected
    /// Another connection of the same device replaced this one.
    case replaced
    /// The server logged this user out, or no longer accepts its token; the client stops reconnecting.
    case kicked
    /// A login could not tell the server this installation's push tokens or time zone (`reason` says why): pushes may
    /// still go to the user who had the token before. The login itself holds; the next one tries again.
    case installationNotAnnounced(reason: String)
    /// The server sent a frame this SDK cannot read (`reason` says why): the connection is closed at once, so that
    /// nothing after it is acknowledged, and opened again after the reconnect delay — the message stays on the server.
    case unreadableFrame(reason: String)
}
