import BeaconAPNs
import Crypto
import Foundation
import NIOSSL
import Synchronization
import X509

/// A notification the simulator accepted, as `GET /deliveries` lists it.
public struct SimulatedDelivery: Sendable, Encodable, Hashable {
    public var deviceToken: String
    public var topic: String
    public var pushType: String
    public var priority: Int
    public var expiration: Int64?
    public var collapseID: String?
    public var apnsID: String
    /// The request body as it arrived.
    public var body: [UInt8]
    /// Milliseconds since 1970.
    public var receivedAt: Int64

    /// The payload as JSON (a string if it was not JSON). Parsed when asked for: taking a push parses nothing, so the
    /// simulator's share of a benchmark's CPU is what answering costs.
    public var payload: JSONPayload {
        (try? JSONDecoder().decode(JSONPayload.self, from: Data(body))) ?? .string(String(decoding: body, as: UTF8.self))
    }

    enum CodingKeys: String, CodingKey {
        case deviceToken = "device_token", topic, pushType = "push_type", priority, expiration, collapseID = "collapse_id",
            apnsID = "apns_id", payload, receivedAt = "received_at"
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(deviceToken, forKey: .deviceToken)
        try container.encode(topic, forKey: .topic)
        try container.encode(pushType, forKey: .pushType)
        try container.encode(priority, forKey: .priority)
        try container.encodeIfPresent(expiration, forKey: .expiration)
        try container.encodeIfPresent(collapseID, forKey: .collapseID)
        try container.encode(apnsID, forKey: .apnsID)
        try container.encode(payload, forKey: .payload)
        try container.encode(receivedAt, forKey: .receivedAt)
    }
}

/// Any JSON value, kept as parsed.
public indirect enum JSONPayload: Sendable, Hashable, Codable {
    case null, bool(Bool), number(Double), string(String), array([JSONPayload]), object([String: JSONPayload])

    public init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() {
            self = .null
        } else if let v = try? c.decode(Bool.self) {
            self = .bool(v)
        } else if let v = try? c.decode(Double.self) {
            self = .number(v)
        } else if let v = try? c.decode(String.self) {
            self = .string(v)
        } else if let v = try? c.decode([JSONPayload].self) {
            self = .array(v)
        } else {
            self = .object(try c.decode([String: JSONPayload].self))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        switch self {
        case .null: try c.encodeNil()
        case .bool(let v): try c.encode(v)
        case .number(let v):
            if v.rounded() == v, abs(v) < 9e15 { try c.encode(Int64(v)) } else { try c.encode(v) }
        case .string(let v): try c.encode(v)
        case .array(let v): try c.encode(v)
        case .object(let v): try c.encode(v)
        }
    }
}

/// Faults to inject, set with `PUT /faults` (the whole set is replaced; `{}` clears them).
public struct SimulatorFaults: Sendable, Codable, Hashable {
    /// These device tokens get 429 `TooManyRequests`.
    public var tooManyRequestsTokens: [String]?
    /// Any device token sent more than this many notifications within one second gets 429 `TooManyRequests`.
    public var maxPerTokenPerSecond: Int?
    /// The next `failCount` requests (all, when absent) get this status and reason (500 `InternalServerError`,
    /// 503 `ServiceUnavailable` or `Shutdown`).
    public var failStatus: Int?
    public var failReason: String?
    public var failCount: Int?
    /// After this many more requests on a connection, send GOAWAY with `{"reason": goAwayReason}` and close it.
    public var goAwayAfter: Int?
    public var goAwayReason: String?
    /// After this many requests on a connection, send GOAWAY (NO_ERROR, last stream = that request) and close the
    /// connection once its requests are answered, as APNs does when it restarts gracefully.
    public var drainAfter: Int?
    /// Every connection open when these faults are set stops reading anything, PINGs included, as when its network
    /// path dies; connections opened later work.
    public var stall: Bool?
    /// After this many more requests on a connection, reset it (close the TCP connection without answering).
    public var resetAfter: Int?
    /// Delay every answer by this many milliseconds.
    public var delayMilliseconds: Int?
    /// Accept requests but never answer them.
    public var neverAnswer: Bool?

    enum CodingKeys: String, CodingKey {
        case tooManyRequestsTokens = "too_many_requests_tokens", maxPerTokenPerSecond = "max_per_token_per_second"
        case failStatus = "fail_status", failReason = "fail_reason", failCount = "fail_count"
        case goAwayAfter = "goaway_after", goAwayReason = "goaway_reason", resetAfter = "reset_after"
        case delayMilliseconds = "delay_ms", neverAnswer = "never_answer", drainAfter = "drain_after", stall
    }

    public init() {}

    /// The longest `delay_ms` (one hour): longer would overflow the event loop's nanosecond timer.
    public static let maxDelayMilliseconds = 3_600_000

    /// Faults the simulator can play; a control request with anything else is refused (400).
    public func validated() throws -> SimulatorFaults {
        if let delay = delayMilliseconds, !(0...Self.maxDelayMilliseconds).contains(delay) {
            throw SimulatorFaultsError(description: "delay_ms must be between 0 and \(Self.maxDelayMilliseconds)")
        }
        return self
    }
}

/// Faults that cannot be played.
public struct SimulatorFaultsError: Error, CustomStringConvertible {
    public var description: String
}

/// A device token tied to an app, an environment and a kind (PushKit VoIP or not).
struct RegisteredToken: Sendable {
    var topic: String
    var environment: APNsEnvironment?
    var voip: Bool
}

/// A client-certificate CA the simulator trusts, with the topics its certificates may push to.
struct TrustedAuthority: Sendable {
    var certificate: Certificate
    var nioCertificate: NIOSSLCertificate
    var topics: Set<String>
    var environment: APNsEnvironment?
}

/// Everything the control API changes and the APNs side reads.
final class SimulatorState: Sendable {
    struct Data {
        var keys: [String: (teamID: String, key: P256.Signing.PublicKey)] = [:]
        var authorities: [TrustedAuthority] = []
        var unregistered: [String: Int64] = [:]
        var tokenTopics: [String: RegisteredToken] = [:]
        var faults = SimulatorFaults()
        var failuresLeft: Int?
        var deliveries: [SimulatedDelivery] = []
        var recentByToken: [String: [Int64]] = [:]
        /// Requests read on any connection (answered or not).
        var requestsReceived = 0
        /// Counts `stall` faults: a connection opened before the latest one is dead.
        var stallGeneration = 0
    }

    let data = Mutex(Data())
    /// Rebuilt whenever client CAs change, so new connections trust them.
    let tlsContext: Mutex<NIOSSLContext>
    let pki: SimulatorPKI

    init(pki: SimulatorPKI) throws {
        self.pki = pki
        tlsContext = Mutex(try Self.makeContext(pki: pki, authorities: []))
    }

    static func makeContext(pki: SimulatorPKI, authorities: [TrustedAuthority]) throws -> NIOSSLContext {
        var tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: pki.serverChain.map { .certificate($0) }, privateKey: .privateKey(pki.serverKey))
        tls.applicationProtocols = ["h2"]
        tls.certificateVerification = .optionalVerification
        // The server's own CA keeps the trust store non-empty before any client CA is registered.
        tls.trustRoots = .certificates(authorities.map(\.nioCertificate) + [pki.serverChain.last!])
        return try NIOSSLContext(configuration: tls)
    }

    func registerKey(teamID: String, keyID: String, publicKeyPEM: String) throws {
        let key = try P256.Signing.PublicKey(pemRepresentation: publicKeyPEM)
        data.withLock { $0.keys[keyID] = (teamID, key) }
    }

    func registerAuthority(pem: String, topics: [String], environment: APNsEnvironment?) throws {
        let certificate = try Certificate(pemEncoded: pem)
        let authority = TrustedAuthority(
            certificate: certificate, nioCertificate: try NIOSSLCertificate(bytes: Array(pem.utf8), format: .pem), topics: Set(topics),
            environment: environment)
        let all = data.withLock { data in
            data.authorities.append(authority)
            return data.authorities
        }
        let context = try Self.makeContext(pki: pki, authorities: all)
        tlsContext.withLock { $0 = context }
    }

    /// The authority that issued a client certificate.
    func authority(issuing certificate: Certificate) -> TrustedAuthority? {
        data.withLock { data in
            data.authorities.first { $0.certificate.subject == certificate.issuer }
        }
    }
}
