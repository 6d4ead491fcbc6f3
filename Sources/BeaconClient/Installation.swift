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
public final class MemoryStorage: InstallationStorage, @unchecked Sendable {  // every access holds `lock`
    private let lock = NSLock()
    private var values: [String: String] = [:]

    public init() {}

    public func string(forKey key: String) -> String? {
        lock.lock()
        defer { lock.unlock() }
        return values[key]
    }

    public func set(_ value: String?, forKey key: String) {
        lock.lock()
        defer { lock.unlock() }
        values[key] = value
    }
}

/// The keys of one app's installation in its storage.
struct InstallationKeys {
    let appKey: String

    var deviceID: String { "beacon.deviceID.\(appKey)" }
    var apnsToken: String { "beacon.apnsToken.\(appKey)" }
    var voipToken: String { "beacon.voipToken.\(appKey)" }
    /// Per user (its uuid: a user created again under the name, or on another server, is told again).
    func timeZone(of user: String) -> String { "beacon.timeZone.\(appKey).\(user)" }
}

extension BeaconClient {
    /// Keeps this installation's APNs token (from `application(_:didRegisterForRemoteNotificationsWithDeviceToken:)`,
    /// which may come before any login) and binds it to the logged-in user, if there is one, through the push configuration
    /// named `options.apnsCertName`. Every later login binds it again, so a user switch moves it to the new user (a token
    /// belongs to one user at a time).
    public func registerForRemoteNotifications(deviceToken: Data) async throws {
        guard options.apnsCertName != nil else { throw BeaconClientError.badResponse("BeaconOptions.apnsCertName is not set") }
        options.storage.set(deviceToken.lowercaseHex, forKey: installation.apnsToken)
        try await bindPushTokens()
    }

    /// Keeps this installation's PushKit (VoIP) token and binds it with the APNs token, so that calls go to it. It is bound
    /// once there is an APNs token too (`registerForRemoteNotifications(deviceToken:)`).
    public func registerVoIPPushToken(_ voipToken: Data) async throws {
        options.storage.set(voipToken.lowercaseHex, forKey: installation.voipToken)
        try await bindPushTokens()
    }

    /// Stops pushes to this device for the logged-in user without logging out (Tencent's `setAPNS(nil)`), and forgets the
    /// tokens, so that later logins bind none until they are registered again.
    public func unbindDeviceToken() async throws {
        options.storage.set(nil, forKey: installation.apnsToken)
        options.storage.set(nil, forKey: installation.voipToken)
        guard let username = self.username else { return }
        let _: JSONValue = try await request(
            "PUT", "users/\(username)/push/binding", body: PushBindingRequest(deviceID: options.deviceID, deviceToken: "", notifierName: "")
        )
    }

    /// What a login tells the server about this installation: its push tokens, and the user's time zone when it differs
    /// from the one last sent for that user. A failure is logged and does not fail the login (the next login tries again).
    func announceInstallation(of username: String, uuid: String) async {
        do {
            try await bindPushTokens()
        } catch {
            logger.warning("binding the push token at login failed", metadata: ["error": "\(error)"])
        }
        let key = installation.timeZone(of: uuid)
        guard options.storage.string(forKey: key) != options.timeZone else { return }
        do {
            let _: JSONValue = try await request("PUT", "users/\(username)", body: UpdateUserRequest(timezone: options.timeZone))
            options.storage.set(options.timeZone, forKey: key)
        } catch {
            logger.warning("sending the time zone at login failed", metadata: ["error": "\(error)"])
        }
    }

    /// Binds the kept tokens to the logged-in user (nothing without a user, a push configuration name or an APNs token).
    private func bindPushTokens() async throws {
        guard let username = self.username, let notifier = options.apnsCertName,
            let deviceToken = options.storage.string(forKey: installation.apnsToken)
        else { return }
        let binding = PushBindingRequest(
            deviceID: options.deviceID, deviceToken: deviceToken, notifierName: notifier,
            voipToken: options.storage.string(forKey: installation.voipToken))
        let _: JSONValue = try await request("PUT", "users/\(username)/push/binding", body: binding)
    }

    var installation: InstallationKeys { InstallationKeys(appKey: options.appKey) }
}
