import BeaconCore
import BeaconProtocol
import Foundation

/// Where the SDK keeps what must outlive a launch of this installation: its device id, its push tokens, and the time zone
/// it last told the server for each user.
public protocol InstallationStorage: Sendable {
    func string(forKey key: String) -> String?
    /// Stores `value` under `key`; nil removes it.
    func set(_ value: String?, forKey key: String)
}

/// `UserDefaults` (`.standard`, or the suite named): the default storage, kept across launches.
public struct UserDefaultsStorage: InstallationStorage {
    public let suiteName: String?

    public init(suiteName: String? = nil) {
        self.suiteName = suiteName
    }

    /// Looked up on each use: `UserDefaults` is thread-safe, but not `Sendable` everywhere this builds.
    private var defaults: UserDefaults { suiteName.flatMap(UserDefaults.init(suiteName:)) ?? .standard }

    public func string(forKey key: String) -> String? { defaults.string(forKey: key) }

    public func set(_ value: String?, forKey key: String) {
        if let value { defaults.set(value, forKey: key) } else { defaults.removeObject(forKey: key) }
    }
}

/// Storage that lasts as long as the object: for tests, and for several clients in one process that must not share
/// an installation.
public final class MemoryStorage: InstallationStorage, Sendable {
    private let values = Locked<[String: String]>([:])

    public init() {}

    public func string(forKey key: String) -> String? { values.withLock { $0[key] } }

    public func set(_ value: String?, forKey key: String) { values.withLock { $0[key] = value } }
}

struct InstallationKeys {
    let appKey: String

    var deviceID: String { "beacon.deviceID.\(appKey)" }
    var apnsToken: String { "beacon.apnsToken.\(appKey)" }
    var voipToken: String { "beacon.voipToken.\(appKey)" }
}

extension BeaconClient {
    /// Keeps this installation's APNs token (from `application(_:didRegisterForRemoteNotificationsWithDeviceToken:)`,
    /// which may come before any login) and binds it to the logged-in user, if there is one, through the push configuration
    /// named `options.apnsCertName`. Every later login binds it again, so a user switch moves it to the new user (a token
    /// belongs to one user at a time).
    public func registerForRemoteNotifications(deviceToken: Data) async throws {
        guard options.apnsCertName != nil else { throw BeaconClientError.badResponse("BeaconOptions.apnsCertName is not set") }
        options.storage.set(deviceToken.lowercaseHex, forKey: installation.apnsToken)
        if let username = loggedInUser { try await bindPushTokens(to: username) }
    }

    /// Keeps this installation's PushKit (VoIP) token and binds it with the APNs token, so that calls go to it. It is bound
    /// once there is an APNs token too (`registerForRemoteNotifications(deviceToken:)`).
    public func registerVoIPPushToken(_ voipToken: Data) async throws {
        guard options.apnsCertName != nil else { throw BeaconClientError.badResponse("BeaconOptions.apnsCertName is not set") }
        options.storage.set(voipToken.lowercaseHex, forKey: installation.voipToken)
        if let username = loggedInUser { try await bindPushTokens(to: username) }
    }

    /// Stops pushes to this device for the logged-in user without logging out (Tencent's `setAPNS(nil)`), then forgets
    /// the tokens, so that later logins bind none until they are registered again. Throws `notLoggedIn` without a user
    /// (the server may hold the token for the last one: log in first).
    public func unbindDeviceToken() async throws {
        guard let username = loggedInUser else { throw BeaconClientError.notLoggedIn }
        let _: JSONValue = try await request(
            "PUT", "users/\(username)/push/binding", body: PushBindingRequest(deviceID: options.deviceID, deviceToken: "", notifierName: "")
        )
        options.storage.set(nil, forKey: installation.apnsToken)
        options.storage.set(nil, forKey: installation.voipToken)
    }

    /// What a login tells the server about this installation once connected: its push tokens, and the options' time zone
    /// when the server holds another for the user. A failure does not fail the login: it is reported as the event
    /// `installationNotAnnounced`, and the next login tries again.
    func announceInstallation(to username: String, serverTimeZone: String?) async {
        let session = self.session
        do {
            try await bindPushTokens(to: username)
            // A logout or another login meanwhile: what follows is theirs.
            guard session == self.session, options.timeZone != serverTimeZone else { return }
            let _: JSONValue = try await request("PUT", "users/\(username)", body: UpdateUserRequest(timezone: options.timeZone))
        } catch {
            logger.warning("telling the server this installation's push tokens or time zone failed", metadata: ["error": "\(error)"])
            if session == self.session { announce(.installationNotAnnounced(reason: "\(error)")) }
        }
    }

    /// Binds the kept tokens to `username` (nothing without a push configuration name or an APNs token).
    private func bindPushTokens(to username: String) async throws {
        guard let notifier = options.apnsCertName, let deviceToken = options.storage.string(forKey: installation.apnsToken) else { return }
        let binding = PushBindingRequest(
            deviceID: options.deviceID, deviceToken: deviceToken, notifierName: notifier,
            voipToken: options.storage.string(forKey: installation.voipToken))
        let _: JSONValue = try await request("PUT", "users/\(username)/push/binding", body: binding)
    }

    /// The user, while logged in (a token held).
    private var loggedInUser: String? { token == nil ? nil : username }

    var installation: InstallationKeys { InstallationKeys(appKey: options.appKey) }
}
