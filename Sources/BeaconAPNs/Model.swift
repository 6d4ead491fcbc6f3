import Foundation

/// Apple's two push environments.
public enum APNsEnvironment: String, Sendable, Codable, Hashable, CaseIterable {
    case development
    case production

    /// Apple's host for this environment.
    public var host: String {
        switch self {
        case .development: "api.sandbox.push.apple.com"
        case .production: "api.push.apple.com"
        }
    }
}

/// `apns-push-type` values and the topic suffix each requires.
public enum APNsPushType: String, Sendable, Codable, Hashable, CaseIterable {
    case alert, background, voip, location, complication, fileprovider, mdm, liveactivity, pushtotalk, widgets, controls

    /// Appended to the bundle id to form `apns-topic`.
    public var topicSuffix: String {
        switch self {
        case .alert, .background, .mdm: ""
        case .voip: ".voip"
        case .location: ".location-query"
        case .complication: ".complication"
        case .fileprovider: ".pushkit.fileprovider"
        case .liveactivity: ".push-type.liveactivity"
        case .pushtotalk: ".voip-ptt"
        case .widgets: ".push-type.widgets"
        case .controls: ".push-type.controls"
        }
    }

    /// The largest payload APNs accepts for this push type, in bytes.
    public var maxPayloadBytes: Int { self == .voip ? 5120 : 4096 }
}

/// Device tokens: the hex form of the token bytes, any length (Apple: do not assume 64 characters).
public enum APNsDeviceToken {
    public static func isWellFormed<S: StringProtocol>(_ token: S) -> Bool {
        !token.isEmpty
            && token.utf8.allSatisfy { byte in
                (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte)
                    || (UInt8(ascii: "A")...UInt8(ascii: "F")).contains(byte)
            }
    }
}

/// One notification for one device.
public struct APNsNotification: Sendable, Hashable {
    /// Hex device token (any length: Apple says not to assume 64).
    public var deviceToken: String
    /// `apns-topic`: the bundle id plus the push type's suffix.
    public var topic: String
    public var pushType: APNsPushType
    /// 10 (immediate), 5 (power-aware) or 1; nil leaves it to APNs (10).
    public var priority: Int?
    /// `apns-expiration`, epoch seconds (0 = deliver once, never store); nil leaves it to APNs.
    public var expiration: Int64?
    /// `apns-collapse-id`, at most 64 bytes.
    public var collapseID: String?
    /// `apns-id`; recorded with the delivery.
    public var apnsID: UUID
    /// The JSON payload.
    public var payload: [UInt8]

    public init(
        deviceToken: String, topic: String, pushType: APNsPushType = .alert, priority: Int? = nil, expiration: Int64? = nil,
        collapseID: String? = nil, apnsID: UUID = .random(), payload: [UInt8]
    ) {
        self.deviceToken = deviceToken
        self.topic = topic
        self.pushType = pushType
        self.priority = priority
        self.expiration = expiration
        self.collapseID = collapseID
        self.apnsID = apnsID
        self.payload = payload
    }

    /// The first field HTTP/2 cannot carry in its header (RFC 9113 § 8.2.1): the device token goes in `:path`, which
    /// takes no spaces or control characters; the topic and collapse id take no NUL, CR or LF. NIOHTTP2 would refuse
    /// such a request only after taking a stream slot it then keeps, and enough of them end the connection.
    public var unwritableField: String? {
        if deviceToken.utf8.contains(where: { $0 <= 0x20 || $0 == 0x7F }) { return "the device token" }
        func forbidden(_ value: String) -> Bool { value.utf8.contains { $0 == 0 || $0 == 0x0A || $0 == 0x0D } }
        if forbidden(topic) { return "the topic" }
        if let collapseID, forbidden(collapseID) { return "the collapse id" }
        return nil
    }
}

/// APNs accepted the notification.
public struct APNsAccepted: Sendable, Hashable {
    public var apnsID: String
    /// `apns-unique-id`, development only: the id in Apple's delivery log.
    public var uniqueID: String?
}

/// A `reason` string from APNs: every documented one has a constant; unknown ones are kept verbatim.
public struct APNsReason: Sendable, Hashable, CustomStringConvertible {
    /// Apple's spelling, e.g. `BadDeviceToken`.
    public let rawValue: String

    public init(_ rawValue: String) {
        self.rawValue = rawValue
    }

    public var description: String { rawValue }

    /// Whether Apple documents this reason.
    public var isKnown: Bool { Self.allKnown.contains(self) }

    public static let badCollapseId = APNsReason("BadCollapseId")
    public static let badDeviceToken = APNsReason("BadDeviceToken")
    public static let badExpirationDate = APNsReason("BadExpirationDate")
    public static let badMessageId = APNsReason("BadMessageId")
    public static let badPriority = APNsReason("BadPriority")
    public static let badTopic = APNsReason("BadTopic")
    public static let deviceTokenNotForTopic = APNsReason("DeviceTokenNotForTopic")
    public static let duplicateHeaders = APNsReason("DuplicateHeaders")
    public static let idleTimeout = APNsReason("IdleTimeout")
    public static let invalidPushType = APNsReason("InvalidPushType")
    public static let missingDeviceToken = APNsReason("MissingDeviceToken")
    public static let missingTopic = APNsReason("MissingTopic")
    public static let payloadEmpty = APNsReason("PayloadEmpty")
    public static let topicDisallowed = APNsReason("TopicDisallowed")
    public static let badCertificate = APNsReason("BadCertificate")
    public static let badCertificateEnvironment = APNsReason("BadCertificateEnvironment")
    public static let expiredProviderToken = APNsReason("ExpiredProviderToken")
    public static let forbidden = APNsReason("Forbidden")
    public static let invalidProviderToken = APNsReason("InvalidProviderToken")
    public static let missingProviderToken = APNsReason("MissingProviderToken")
    public static let unrelatedKeyIdInToken = APNsReason("UnrelatedKeyIdInToken")
    public static let badEnvironmentKeyIdInToken = APNsReason("BadEnvironmentKeyIdInToken")
    public static let badPath = APNsReason("BadPath")
    public static let methodNotAllowed = APNsReason("MethodNotAllowed")
    public static let expiredToken = APNsReason("ExpiredToken")
    public static let unregistered = APNsReason("Unregistered")
    public static let payloadTooLarge = APNsReason("PayloadTooLarge")
    public static let tooManyProviderTokenUpdates = APNsReason("TooManyProviderTokenUpdates")
    public static let tooManyRequests = APNsReason("TooManyRequests")
    public static let internalServerError = APNsReason("InternalServerError")
    public static let serviceUnavailable = APNsReason("ServiceUnavailable")
    public static let shutdown = APNsReason("Shutdown")

    public static let allKnown: Set<APNsReason> = [
        .badCollapseId, .badDeviceToken, .badExpirationDate, .badMessageId, .badPriority, .badTopic, .deviceTokenNotForTopic,
        .duplicateHeaders, .idleTimeout, .invalidPushType, .missingDeviceToken, .missingTopic, .payloadEmpty, .topicDisallowed,
        .badCertificate, .badCertificateEnvironment, .expiredProviderToken, .forbidden, .invalidProviderToken, .missingProviderToken,
        .unrelatedKeyIdInToken, .badEnvironmentKeyIdInToken, .badPath, .methodNotAllowed, .expiredToken, .unregistered, .payloadTooLarge,
        .tooManyProviderTokenUpdates, .tooManyRequests, .internalServerError, .serviceUnavailable, .shutdown,
    ]

    /// The status APNs answers with for this reason.
    public var status: Int {
        switch self {
        case .badCertificate, .badCertificateEnvironment, .expiredProviderToken, .forbidden, .invalidProviderToken,
            .missingProviderToken, .unrelatedKeyIdInToken, .badEnvironmentKeyIdInToken:
            403
        case .badPath: 404
        case .methodNotAllowed: 405
        case .expiredToken, .unregistered: 410
        case .payloadTooLarge: 413
        case .tooManyProviderTokenUpdates, .tooManyRequests: 429
        case .internalServerError: 500
        case .serviceUnavailable, .shutdown: 503
        default: 400
        }
    }
}

/// Why a notification was not accepted.
public enum APNsFailure: Error, Sendable, Hashable, CustomStringConvertible {
    /// APNs answered with an error status.
    case rejected(status: Int, reason: APNsReason?, apnsID: String?, timestamp: Int64?)
    /// No answer before the deadline.
    case timeout
    /// The connection was lost (reset, GOAWAY, TLS failure) before an answer.
    case connectionLost(String)
    /// Could not connect.
    case connectFailed(String)
    /// The sender's last check, just before the request was written, said it was no longer wanted.
    case withdrawn
    /// The notification cannot be written as it is (a header value HTTP/2 does not allow); never sent, never worth a retry.
    case invalidRequest(String)
    /// The send's deadline came before the request could be written with time left for its answer: never sent.
    case deadlinePassed

    public var description: String {
        switch self {
        case .rejected(let status, let reason, _, let timestamp):
            "APNs \(status) \(reason?.description ?? "")" + (timestamp.map { " (timestamp \($0))" } ?? "")
        case .timeout: "no answer before the deadline"
        case .connectionLost(let why): "connection lost: \(why)"
        case .connectFailed(let why): "could not connect: \(why)"
        case .withdrawn: "withdrawn by the sender before it was sent"
        case .invalidRequest(let why): "cannot be sent: \(why)"
        case .deadlinePassed: "not sent: its deadline came first"
        }
    }

    /// Worth another try later (429, 5xx, timeouts, connection problems).
    public var isTransient: Bool {
        switch self {
        case .rejected(let status, let reason, _, _):
            status == 429 || status >= 500 || reason == .idleTimeout
        case .timeout, .connectionLost, .connectFailed, .deadlinePassed: true
        case .withdrawn, .invalidRequest: false
        }
    }
}
