import BeaconAPNs
import Crypto
import Foundation
import NIOHPACK
import Testing

@testable import APNsSimulator

/// Apple's header checks, one by one, including those a well-behaved client never triggers.
@Suite struct ValidatorTests {
    let key = APNsSigningKey(teamID: teamID, keyID: keyID, privateKey: P256.Signing.PrivateKey())
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    func validator() throws -> (RequestValidator, SimulatorState) {
        let state = try SimulatorState(pki: try SimulatorPKI.generate())
        try state.registerKey(teamID: teamID, keyID: keyID, publicKeyPEM: key.privateKey.publicKey.pemRepresentation)
        return (RequestValidator(state: state, environment: .development, now: now), state)
    }

    func headers(_ changes: [(String, String?)] = [], token: String? = nil) throws -> HPACKHeaders {
        var fields: [(String, String)] = [
            (":method", "POST"), (":path", "/3/device/\(deviceToken)"), ("apns-topic", bundleID), ("apns-push-type", "alert"),
            ("authorization", "bearer " + (try token ?? key.token(issuedAt: Int64(now.timeIntervalSince1970)))),
        ]
        for (name, value) in changes {
            if let value {
                if let index = fields.firstIndex(where: { $0.0 == name }) { fields[index].1 = value } else { fields.append((name, value)) }
            } else {
                fields.removeAll { $0.0 == name }
            }
        }
        return HPACKHeaders(fields)
    }

    let body = Array(#"{"aps":{"alert":"x"}}"#.utf8)

    func reason(_ headers: HPACKHeaders, body: [UInt8]? = nil) throws -> APNsReason? {
        let (validator, _) = try validator()
        if case .rejected(let reason, _, _) = validator.validate(headers: headers, body: body ?? self.body, connection: ConnectionAuth()).0
        {
            return reason
        }
        return nil
    }

    @Test func aWellFormedRequestIsAccepted() throws {
        let (validator, _) = try validator()
        let (answer, delivery) = validator.validate(
            headers: try headers([("apns-id", "9b9e7f6e-0d6b-4f4e-8a57-2f3f4bb7c001")]), body: body, connection: ConnectionAuth())
        guard case .accepted(let apnsID) = answer else {
            Issue.record("rejected: \(answer)")
            return
        }
        #expect(apnsID == "9b9e7f6e-0d6b-4f4e-8a57-2f3f4bb7c001")
        #expect(delivery?.deviceToken == deviceToken)
        #expect(delivery?.priority == 10)
    }

    @Test func headerChecks() throws {
        #expect(try reason(headers([(":method", "GET")])) == .methodNotAllowed)
        #expect(try reason(headers([(":path", "/2/device/abc")])) == .badPath)
        #expect(try reason(headers([(":path", "/3/device/")])) == .missingDeviceToken)
        #expect(try reason(headers([(":path", "/3/device/zz")])) == .badDeviceToken)
        #expect(try reason(headers([(":path", "/3/device/" + String(repeating: "a1", count: 80))])) == nil)  // any length
        #expect(try reason(headers([("apns-topic", nil)])) == .missingTopic)
        #expect(try reason(headers([("apns-push-type", "fax")])) == .invalidPushType)
        #expect(try reason(headers([("apns-id", "not-a-uuid")])) == .badMessageId)
        #expect(try reason(headers([("apns-expiration", "soon")])) == .badExpirationDate)
        #expect(try reason(headers([("apns-priority", "11")])) == .badPriority)
        #expect(try reason(headers([("apns-collapse-id", String(repeating: "x", count: 65))])) == .badCollapseId)
        #expect(try reason(headers([("apns-collapse-id", String(repeating: "x", count: 64))])) == nil)
        var duplicated = try headers()
        duplicated.add(name: "apns-topic", value: bundleID)
        #expect(try reason(duplicated) == .duplicateHeaders)
        #expect(try reason(headers(), body: []) == .payloadEmpty)
        #expect(try reason(headers(), body: Array(repeating: 32, count: 4097)) == .payloadTooLarge)
        #expect(try reason(headers(), body: Array(repeating: 32, count: 4096)) == nil)
    }

    @Test func providerTokenChecks() throws {
        #expect(try reason(headers([("authorization", nil)])) == .missingProviderToken)
        #expect(try reason(headers([("authorization", "bearer abc.def.ghi")])) == .invalidProviderToken)
        let old = try key.token(issuedAt: Int64(now.timeIntervalSince1970) - 3601)
        #expect(try reason(headers(token: old)) == .expiredProviderToken)
        let otherTeam = APNsSigningKey(teamID: "OTHERTEAM0", keyID: keyID, privateKey: key.privateKey)
        #expect(try reason(headers(token: try otherTeam.token(issuedAt: Int64(now.timeIntervalSince1970)))) == .invalidProviderToken)
    }

    @Test func everyDocumentedReasonHasItsStatus() {
        #expect(APNsReason.allKnown.count == 32)
        #expect(APNsReason("Unregistered") == .unregistered)
        #expect(APNsReason.unregistered.status == 410)
        #expect(APNsReason.payloadTooLarge.status == 413)
        #expect(APNsReason.tooManyProviderTokenUpdates.status == 429)
        #expect(APNsReason.invalidProviderToken.status == 403)
        #expect(APNsReason("SomethingNew").isKnown == false)
        #expect(APNsReason("SomethingNew").description == "SomethingNew")
    }
}

@Suite struct RandomUUIDTests {
    @Test func randomUUIDsAreVersion4AndDistinct() {
        let ids = (0..<10_000).map { _ in UUID.random() }
        #expect(Set(ids).count == ids.count)
        for id in ids {
            let text = id.uuidString.lowercased()
            let characters = Array(text)
            #expect(characters[14] == "4", "\(text)")  // version
            #expect("89ab".contains(characters[19]), "\(text)")  // variant
            #expect(UUID(uuidString: text) == id)
        }
    }
}
