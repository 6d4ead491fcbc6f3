import BeaconCore
import BeaconTesting
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import Testing

@testable import BeaconServer

/// How the REST API answers an error code (the server's part of `BeaconError`): Easemob's statuses and exception names.
@Suite struct ErrorAnswerTests {
    /// Every code's status and exception name, as Easemob answers them (and docs/errors.md lists them).
    @Test func everyCodeIsAnsweredWithEasemobsStatusAndException() {
        let answers: [BeaconError.Code: (Int, String)] = [
            .illegalArgument: (400, "IllegalArgumentException"), .jsonParse: (400, "JsonParseException"),
            .invalidGrant: (400, "InvalidGrantException"), .invalidP12Password: (400, "InvalidPushCertificateException"),
            .invalidP12File: (400, "InvalidPushCertificateException"), .invalidP8Key: (400, "InvalidPushCertificateException"),
            .certificateExpired: (400, "InvalidPushCertificateException"), .notifierNotFound: (400, "NotifierNotFoundException"),
            .invalidTemplate: (400, "InvalidTemplateException"), .tooManyRequests: (429, "TooManyRequestsException"),
            .requestTooLarge: (413, "RequestEntityTooLargeException"), .unauthorized: (401, "UnauthorizedException"),
            .badAccessToken: (401, "UnauthorizedException"), .forbidden: (403, "ForbiddenOperationException"),
            .resourceNotFound: (404, "ResourceNotFoundException"), .appNotFound: (404, "OrganizationApplicationNotFoundException"),
            .userNotFound: (404, "UserNotFoundException"), .groupNotFound: (404, "GroupNotFoundException"),
            .messageNotFound: (404, "MessageNotFoundException"), .webhookNotFound: (404, "WebhookNotFoundException"),
            .duplicate: (400, "DuplicateUniquePropertyExistsException"), .methodNotAllowed: (405, "MethodNotAllowedException"),
            .internalError: (500, "InternalServerErrorException"),
        ]
        #expect(Set(answers.keys) == Set(BeaconError.Code.allCases))
        for (code, (status, exception)) in answers {
            #expect(code.httpStatus == status, "\(code)")
            #expect(code.exception == exception, "\(code)")
        }
    }

    /// A refusal of Hummingbird's own (here an unsupported media type) keeps its status, answered as `illegal_argument`.
    @Test func aRefusalOfTheHTTPLayerKeepsItsStatus() async throws {
        let router = Router(context: BeaconRequestContext.self)
        router.add(middleware: ErrorMiddleware(clock: { 0 }, logger: Logger(label: "test"), routes: RouteTable()))
        router.get("refused") { _, _ -> String in throw HTTPError(.unsupportedMediaType, message: "not JSON") }
        try await Application(router: router).test(.router) { client in
            let answer = try await client.execute(uri: "/refused", method: .get)
            #expect(answer.status == .unsupportedMediaType)
            let body = try JSONDecoder().decode(JSONValue.self, from: Data(answer.body.readableBytesView))
            #expect(body["error"] == "illegal_argument" && body["exception"] == "IllegalArgumentException", "\(body)")
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
