import BeaconCore
import BeaconProtocol
import Foundation
import HTTPTypes
import HummingbirdWSClient
import Logging
import Synchronization

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
    /// Delay before the first reconnect attempt; doubles up to `maxReconnectDelay`.
    public var reconnectDelay: Duration
    public var maxReconnectDelay: Duration

    public init(
        appKey: String, serverURL: URL, apnsCertName: String? = nil, timeZone: String = TimeZone.current.identifier,
        deviceID: String? = nil, storage: any InstallationStorage = UserDefaultsStorage(), loginTimeout: Duration = .seconds(15),
        reconnectDelay: Duration = .milliseconds(100), maxReconnectDelay: Duration = .seconds(10)
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
    }

    /// `org/app`, the path prefix of every REST call.
    var appPath: String { appKey.replacingOccurrences(of: "#", with: "/") }

    /// The app's WebSocket URL for this device (`ws`, or `wss` after an `https` server URL); nil when `serverURL` cannot
    /// make one.
    func webSocketURL(readsSince: Int64) -> String? {
        guard
            var url = URLComponents(
                url: serverURL.appendingPathComponent(appPath).appendingPathComponent("ws"), resolvingAgainstBaseURL: false)
        else { return nil }
        url.scheme = url.scheme == "https" ? "wss" : "ws"
        url.queryItems = [URLQueryItem(name: "device_id", value: deviceID), URLQueryItem(name: "reads_since", value: String(readsSince))]
        return url.string
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
