import APNsSimulator
import BeaconCore
import BeaconTesting
import Foundation
import Testing

@Suite struct TemplateTests {
    static let token = String(repeating: "7e", count: 32)

    @Test func templatesLanguagesAndNicknamesShapeThePush() async throws {
        try await withPushBeacon { beacon, simulator in
            try await beacon.createUsers("alice", "bob")
            try await beacon.uploadP8()
            _ = try await beacon.bind("bob", token: Self.token)

            // CRUD and validation.
            #expect(
                try await beacon.rest("POST", "/notification/template", ["name": "bad-name", "title_pattern": "t", "content_pattern": "c"])
                    .json["error"] == "illegal_argument")
            let created = try await beacon.rest(
                "POST", "/notification/template",
                ["name": "greeting", "title_pattern": "{0} says", "content_pattern": "{$fromNickname}: {1}"])
            #expect(created.json["data"]?["name"] == "greeting")
            #expect(
                try await beacon.rest("POST", "/notification/template", ["name": "greeting", "title_pattern": "t", "content_pattern": "c"])
                    .json["error"] == "duplicate_unique_property_exists")
            #expect(try await beacon.rest("GET", "/notification/template/nope").status == 404)
            _ = try await beacon.rest(
                "POST", "/notification/template", ["name": "quiet", "title_pattern": "Chat", "content_pattern": "{$msg}"])
            _ = try await beacon.rest("PUT", "/notification/template/quiet", ["title_pattern": "Beacon", "content_pattern": "{$msg}"])
            #expect(try await beacon.rest("GET", "/notification/template/quiet").json["data"]?["title_pattern"] == "Beacon")

            // The receiver's choice, their language, and nicknames set in a batch.
            #expect(try await beacon.rest("PUT", "/users/bob/notification/template", ["templateName": "nope"]).status == 404)
            _ = try await beacon.rest("PUT", "/users/bob/notification/template", ["templateName": "quiet"])
            #expect(try await beacon.rest("GET", "/users/bob/notification/template").json["data"]?["templateName"] == "quiet")
            _ = try await beacon.rest("PUT", "/users/bob/notification/language", ["translationLanguage": "ja"])
            #expect(try await beacon.rest("GET", "/users/bob/notification/language").json["data"]?["translationLanguage"] == "ja")
            #expect(
                try await beacon.rest(
                    "PUT", "/push/nickname", .array((0...50).map { ["username": .string("u\($0)"), "push_nickname": "x"] })
                )
                .json["error"] == "illegal_argument")
            _ = try await beacon.rest("PUT", "/push/nickname", [["username": "alice", "push_nickname": "Alice"]])

            func send(_ ext: [String: JSONValue]) async throws {
                _ = try await beacon.rest(
                    "POST", "/messages/users",
                    [
                        "from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "hello", "translations": ["ja": "こんにちは"]],
                        "ext": .object(ext),
                    ])
            }
            try await send([:])
            try await send(["em_push_template": ["name": "greeting", "title_args": ["Alice"], "content_args": ["", "hi there"]]])
            _ = try await beacon.pushOutcomes.attempts(2)
            let alerts = simulator.deliveries(deviceToken: Self.token).map { delivery -> String in
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.sortedKeys]
                guard case .object(let root) = delivery.payload, let aps = root["aps"], case .object(let fields) = aps,
                    let alert = fields["alert"]
                else {
                    return ""
                }
                return String(decoding: (try? encoder.encode(alert)) ?? Data(), as: UTF8.self)
            }
            // The receiver's template with the translation; then the sender's template, which wins.
            #expect(alerts == [#"{"body":"こんにちは","title":"Beacon"}"#, #"{"body":"Alice: hi there","title":"Alice says"}"#])
            #expect(try await beacon.rest("DELETE", "/notification/template/greeting").status == 200)
        }
    }
}
