import BeaconAPNs
import Crypto
import Foundation
import NIOHPACK
import NIOHTTP2
import Synchronization

/// What the simulator knows about one TLS connection.
final class ConnectionAuth: Sendable {
    struct State {
        /// Topics allowed by the client certificate (nil: no certificate: token auth).
        var certificateTopics: Set<String>?
        var certificateEnvironment: APNsEnvironment?
        var lastToken: String?
        var lastTokenAt: Date?
        /// The `iat` of `lastToken`, which was fully verified.
        var lastTokenIssuedAt: Double?
        var teamID: String?
        var authenticated = false
        var requests = 0
        /// Requests read and not yet answered.
        var unanswered = 0
        /// GOAWAY sent (with this last stream id): close once `unanswered` is 0; later streams are refused.
        var draining = false
        var lastStreamID: HTTP2StreamID?
        /// The highest stream whose request was taken.
        var highestStreamID: HTTP2StreamID?
    }
    let state = Mutex(State())
}

/// The answer to one request.
enum SimulatorAnswer {
    case accepted(apnsID: String)
    case rejected(APNsReason, apnsID: String?, timestamp: Int64? = nil)
}

/// Apple's checks, in the order APNs appears to apply them.
struct RequestValidator {
    let state: SimulatorState
    let environment: APNsEnvironment
    let now: Date

    func validate(headers: HPACKHeaders, body: [UInt8], connection: ConnectionAuth) -> (SimulatorAnswer, SimulatedDelivery?) {
        let apnsIDHeader = headers.first(name: "apns-id")
        func reject(_ reason: APNsReason, timestamp: Int64? = nil) -> (SimulatorAnswer, SimulatedDelivery?) {
            (.rejected(reason, apnsID: apnsIDHeader, timestamp: timestamp), nil)
        }
        guard headers.first(name: ":method") == "POST" else { return reject(.methodNotAllowed) }
        let path = headers.first(name: ":path") ?? ""
        guard path.hasPrefix("/3/device/") || path == "/3/device" else { return reject(.badPath) }
        let token = String(path.dropFirst("/3/device/".count))
        guard !token.isEmpty else { return reject(.missingDeviceToken) }
        guard APNsDeviceToken.isWellFormed(token) else { return reject(.badDeviceToken) }
        for name in ["apns-id", "apns-topic", "apns-push-type", "apns-priority", "apns-expiration", "apns-collapse-id", "authorization"]
        where headers[name].count > 1 {
            return reject(.duplicateHeaders)
        }

        // Authentication: a client certificate, else a provider token.
        let certificateTopics = connection.state.withLock { $0.certificateTopics }
        if certificateTopics == nil {
            if let failure = checkProviderToken(headers.first(name: "authorization"), connection: connection) { return reject(failure) }
        } else if let certificateEnvironment = connection.state.withLock({ $0.certificateEnvironment }),
            certificateEnvironment != environment
        {
            return reject(.badCertificateEnvironment)
        }

        let pushTypeName = headers.first(name: "apns-push-type") ?? "alert"
        guard let pushType = APNsPushType(rawValue: pushTypeName) else { return reject(.invalidPushType) }
        var topic = headers.first(name: "apns-topic")
        if topic == nil, let topics = certificateTopics, topics.count == 1 { topic = topics.first.map { $0 + pushType.topicSuffix } }
        guard let topic, !topic.isEmpty else { return reject(.missingTopic) }
        guard topic.hasSuffix(pushType.topicSuffix) else { return reject(.topicDisallowed) }
        if let topics = certificateTopics, !topics.contains(String(topic.dropLast(pushType.topicSuffix.count))) {
            return reject(.topicDisallowed)
        }

        if let apnsIDHeader, UUID(uuidString: apnsIDHeader) == nil { return reject(.badMessageId) }
        var priority = 10
        if let text = headers.first(name: "apns-priority") {
            guard let value = Int(text), [1, 5, 10].contains(value) else { return reject(.badPriority) }
            priority = value
        }
        if pushType == .background, priority == 10 { return reject(.badPriority) }
        var expiration: Int64?
        if let text = headers.first(name: "apns-expiration") {
            guard let value = Int64(text), value >= 0 else { return reject(.badExpirationDate) }
            expiration = value
        }
        let collapseID = headers.first(name: "apns-collapse-id")
        if let collapseID, collapseID.utf8.count > 64 { return reject(.badCollapseId) }
        guard !body.isEmpty else { return reject(.payloadEmpty) }
        guard body.count <= pushType.maxPayloadBytes else { return reject(.payloadTooLarge) }
        if pushType == .background, !Self.isBackgroundPayload(body) { return reject(.invalidPushType) }

        // The device token's own state.
        let lookup = state.data.withLock { data in
            (data.unregistered[token.lowercased()], data.tokenTopics[token.lowercased()])
        }
        if let registered = lookup.1 {
            if let tokenEnvironment = registered.environment, tokenEnvironment != environment { return reject(.badDeviceToken) }
            if registered.topic != String(topic.dropLast(pushType.topicSuffix.count)) { return reject(.deviceTokenNotForTopic) }
            // A VoIP token takes VoIP pushes only, an alert token never one.
            if registered.voip != (pushType == .voip) { return reject(.deviceTokenNotForTopic) }
        }
        if let timestamp = lookup.0 { return reject(.unregistered, timestamp: timestamp) }

        let apnsID = apnsIDHeader ?? UUID().uuidString.lowercased()
        let delivery = SimulatedDelivery(
            deviceToken: token, topic: topic, pushType: pushType.rawValue, priority: priority, expiration: expiration,
            collapseID: collapseID,
            apnsID: apnsID, body: body, receivedAt: Int64(now.timeIntervalSince1970 * 1000))
        return (.accepted(apnsID: apnsID), delivery)
    }

    /// A background push's `aps` holds `content-available: 1` and no alert, badge or sound (Apple: "leave out alert, badge
    /// and sound"). APNs itself accepts such a push and the device then treats it unpredictably; the simulator refuses it,
    /// so that tests catch the mistake.
    static func isBackgroundPayload(_ body: [UInt8]) -> Bool {
        guard let root = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any], let aps = root["aps"] as? [String: Any]
        else { return false }
        return (aps["content-available"] as? Int) == 1 && aps["alert"] == nil && aps["badge"] == nil && aps["sound"] == nil
    }

    /// Checks `authorization: bearer <JWT>`: format, known key, signature, age, and the 20-minute rule.
    private func checkProviderToken(_ header: String?, connection: ConnectionAuth) -> APNsReason? {
        guard let header, header.lowercased().hasPrefix("bearer "), header.count > 7 else { return .missingProviderToken }
        let jwt = String(header.dropFirst(7))
        // A connection's current token was verified when first seen: only its age needs checking again.
        if let verified = connection.state.withLock({ $0.lastToken == jwt ? $0.lastTokenIssuedAt : nil }) {
            return now.timeIntervalSince1970 - verified > 3600 ? .expiredProviderToken : nil
        }
        let parts = jwt.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerData = Data(base64URLEncoded: parts[0]), let claimsData = Data(base64URLEncoded: parts[1]),
            let signatureData = Data(base64URLEncoded: parts[2]),
            let jwtHeader = try? JSONDecoder().decode([String: String].self, from: headerData),
            jwtHeader["alg"] == "ES256", let keyID = jwtHeader["kid"],
            let claims = try? JSONSerialization.jsonObject(with: claimsData) as? [String: Any],
            let issuer = claims["iss"] as? String, let issuedAt = (claims["iat"] as? NSNumber)?.doubleValue,
            let registered = state.data.withLock({ $0.keys[keyID] }), registered.teamID == issuer,
            let signature = try? P256.Signing.ECDSASignature(rawRepresentation: signatureData),
            registered.key.isValidSignature(signature, for: Data("\(parts[0]).\(parts[1])".utf8))
        else { return .invalidProviderToken }
        if now.timeIntervalSince1970 - issuedAt > 3600 { return .expiredProviderToken }
        return connection.state.withLock { state -> APNsReason? in
            if let team = state.teamID, team != issuer { return .invalidProviderToken }
            if let last = state.lastToken, last != jwt, let since = state.lastTokenAt, now.timeIntervalSince(since) < 20 * 60 {
                return .tooManyProviderTokenUpdates
            }
            if state.lastToken != jwt {
                state.lastToken = jwt
                state.lastTokenAt = now
                state.lastTokenIssuedAt = issuedAt
            }
            state.teamID = issuer
            return nil
        }
    }
}
