import BeaconCore
import Foundation

/// How the app treats users with several devices (`/push/policy` `multi_device`).
public enum MultiDevicePolicy: String, Sendable, Codable, Hashable {
    /// Push only when no device of the user is online, then to every bound device (the default).
    case allOffline = "all_offline"
    /// Push each bound device that is offline.
    case anyOffline = "any_offline"
}

/// Why a device was not pushed. Stable codes: they appear in delivery records.
public enum SkipReason: String, Sendable, Codable, Hashable, CaseIterable {
    case onlineOnly = "online_only"
    case command
    case silent
    case online
    case noBinding = "no_binding"
    case filtered
    case doNotDisturb = "dnd"
    case modeNone = "mode_none"
    case notMentioned = "not_mentioned"
}

/// One bound device of a recipient.
public struct BoundDevice: Sendable, Hashable {
    public var deviceID: String
    public var notifier: String
    public var online: Bool

    public init(deviceID: String, notifier: String, online: Bool) {
        self.deviceID = deviceID
        self.notifier = notifier
        self.online = online
    }
}

/// Everything the decision looks at for one recipient.
public struct PushContext: Sendable {
    public var message: Message
    public var recipient: String
    /// Bound devices of the recipient.
    public var devices: [BoundDevice]
    /// Whether any device of the recipient (bound or not) is online.
    public var anyDeviceOnline: Bool
    public var policy: MultiDevicePolicy
    public var appSettings: AppPushSettings
    public var conversationSettings: ConversationPushSettings
    public var timeZone: TimeZone
    /// Milliseconds since 1970.
    public var now: Int64

    public init(
        message: Message, recipient: String, devices: [BoundDevice], anyDeviceOnline: Bool, policy: MultiDevicePolicy,
        appSettings: AppPushSettings, conversationSettings: ConversationPushSettings, timeZone: TimeZone, now: Int64
    ) {
        self.message = message
        self.recipient = recipient
        self.devices = devices
        self.anyDeviceOnline = anyDeviceOnline
        self.policy = policy
        self.appSettings = appSettings
        self.conversationSettings = conversationSettings
        self.timeZone = timeZone
        self.now = now
    }
}

/// SPEC §3: should each bound device of a recipient be pushed? Pure; the order of checks is the spec's.
public enum PushDecision {
    /// Whether `message` may push anyone at all (SPEC §3, step 1): not an online-only message, not a command. The one
    /// rule for it: a sender stores no pending route for a message that may not (`MessageService`), the router decides
    /// nothing for it, and `decide` gives its reason.
    public static func mayPush(_ message: Message) -> Bool {
        !message.onlineOnly && message.type != .cmd
    }

    /// The outcome for every bound device (or one `no_binding` outcome when there is none), in device order.
    public static func decide(_ context: PushContext) -> [(device: BoundDevice?, skip: SkipReason?)] {
        let message = context.message
        // 1. Never pushed at all (`mayPush`), for its reason.
        if !mayPush(message) { return outcome(context, message.onlineOnly ? .onlineOnly : .command) }
        // 2. Silent beats everything below.
        if message.ext["em_ignore_notification"]?.boolValue == true { return outcome(context, .silent) }
        guard !context.devices.isEmpty else { return [(nil, .noBinding)] }
        // 3. Which devices; the filter narrows them.
        let filter = message.ext["em_push_filter"]?.objectValue ?? [:]
        // The rest depends only on the recipient, not the device.
        let forced = message.ext["em_force_notification"]?.boolValue == true
        let userSkip: SkipReason? = forced ? nil : doNotDisturbOrMode(context)
        return context.devices.map { device in
            switch context.policy {
            case .allOffline where context.anyDeviceOnline: return (device, .online)
            case .anyOffline where device.online: return (device, .online)
            default: break
            }
            if !passes(filter, device) { return (device, .filtered) }
            return (device, userSkip)
        }
    }

    private static func outcome(_ context: PushContext, _ reason: SkipReason) -> [(device: BoundDevice?, skip: SkipReason?)] {
        context.devices.isEmpty ? [(nil, reason)] : context.devices.map { ($0, reason) }
    }

    /// 5. Do-not-disturb (daily window, app duration, conversation duration), then 6. the push mode.
    static func doNotDisturbOrMode(_ context: PushContext) -> SkipReason? {
        let now = context.now
        if let quiet = context.appSettings.quietHours,
            quiet.contains(Date(timeIntervalSince1970: Double(now) / 1000), in: context.timeZone)
        {
            return .doNotDisturb
        }
        if let until = context.appSettings.silentUntil, until > now { return .doNotDisturb }
        if let until = context.conversationSettings.silentUntil, until > now { return .doNotDisturb }
        let conversationMode = context.conversationSettings.remindType.flatMap { $0 == .default ? nil : $0 }
        switch conversationMode ?? context.appSettings.remindType ?? .all {
        case .all, .default: return nil
        case .none: return .modeNone
        case .mentionsOnly: return mentions(context.message, context.recipient) ? nil : .notMentioned
        }
    }

    /// `em_at_list` in `ext` or in `ext.em_apns_ext`: `"all"` in any case, or a list naming the user.
    public static func mentions(_ message: Message, _ username: String) -> Bool {
        for list in [message.ext["em_at_list"], message.ext["em_apns_ext"]?["em_at_list"]] {
            switch list {
            case .string(let text)?: if text.lowercased() == "all" { return true }
            case .array(let names)?:
                if names.contains(where: { $0.stringValue == username || $0.stringValue?.lowercased() == "all" }) { return true }
            default: continue
            }
        }
        return false
    }

    /// `em_push_filter`: accept/ignore lists of device ids and notifier names.
    private static func passes(_ filter: [String: JSONValue], _ device: BoundDevice) -> Bool {
        func list(_ key: String) -> [String]? { filter[key]?.arrayValue?.compactMap(\.stringValue) }
        if let accept = list("accept_device_id"), !accept.contains(device.deviceID) { return false }
        if let ignore = list("ignore_device_id"), ignore.contains(device.deviceID) { return false }
        if let accept = list("accept_notifier_name"), !accept.contains(device.notifier) { return false }
        if let ignore = list("ignore_notifier_name"), ignore.contains(device.notifier) { return false }
        return true
    }
}
