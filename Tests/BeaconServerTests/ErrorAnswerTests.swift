import BeaconCore
import BeaconTesting
import Testing

@testable import BeaconServer

/// How the REST API answers an error code (the server's part of `BeaconError`): Easemob's statuses and exception names.
@Suite struct ErrorAnswerTests {
    @Test func everyCodeIsAnsweredWithEasemobsStatus() {
        #expect(BeaconError.Code.requestTooLarge.httpStatus == 413)
        #expect(BeaconError.Code.tooManyRequests.httpStatus == 429)
        #expect(BeaconError.Code.badAccessToken.httpStatus == 401)
        #expect(BeaconError.Code.forbidden.httpStatus == 403)
        #expect(BeaconError.Code.userNotFound.httpStatus == 404)
        #expect(BeaconError.Code.duplicate.httpStatus == 400)
        #expect(BeaconError.Code.internalError.httpStatus == 500)
        for code in BeaconError.Code.allCases {
            #expect((400..<500).contains(code.httpStatus) || code == .internalError, "\(code)")
            #expect(code.exception.hasSuffix("Exception"), "\(code)")
        }
    }

    @Test func aMessageTooLargeIsAnswered413WithItsCodeAndException() async throws {
        try await TestBeacon.run(restInProcess: true) { beacon in
            try await beacon.createUsers("alice", "bob")
            let text = String(repeating: "x", count: 6000)
            let (status, answer) = try await beacon.rest(
                "POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": .string(text)]])
            #expect(status == 413)
            #expect(answer["error"] == "request_entity_too_large")
            #expect(answer["exception"] == "RequestEntityTooLargeException")
        }
    }
}
