import BeaconCore
import BeaconPush
import Foundation
import Hummingbird

/// Listing templates, and previewing one: the console's template editor.
extension TemplateRoutes {
    /// `GET /notification/template`: every template of the app, by name.
    @Sendable func list(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let app = try context.requireApp()
        let views = try await store.templates(app: app.id).sorted { $0.name < $1.name }.map(view)
        return api.respond(request, app: app, action: "get", entities: views, count: views.count)
    }

    struct PreviewRequest: Decodable {
        var titlePattern: String
        var contentPattern: String
        var titleArgs: [String]?
        var contentArgs: [String]?
        /// The sample message: its sender's nickname and text (for `{$fromNickname}`, `{$msg}`).
        var fromNickname: String?
        var text: String?
        enum CodingKeys: String, CodingKey {
            case titlePattern = "title_pattern", contentPattern = "content_pattern", titleArgs = "title_args", contentArgs = "content_args"
            case fromNickname = "from_nickname", text
        }
    }

    struct PreviewAnswer: Codable, Sendable {
        var title: String?
        var content: String?
        /// The whole APNs payload a receiver would get (badge 1).
        var payload: JSONValue
        var bytes: Int
        var limit: Int
        /// A text was shortened (with "…") to fit `limit`: the texts as rendered make a bigger payload.
        var shortened: Bool
    }

    /// `POST /notification/template_preview`: renders patterns with sample arguments through `PayloadBuilder`, the code
    /// every push goes through, as a message naming the template in `em_push_template` would be. (Not under
    /// `notification/template/`: `preview` is a valid template name there.)
    @Sendable func preview(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let app = try context.requireApp()
        let body = try await api.body(PreviewRequest.self, from: request)
        try PushTemplate.validate(pattern: body.titlePattern, field: "title_pattern")
        try PushTemplate.validate(pattern: body.contentPattern, field: "content_pattern")
        for args in [body.titleArgs ?? [], body.contentArgs ?? []] {
            guard args.count <= 100, args.allSatisfy({ $0.utf8.count <= 1024 }) else {
                throw BeaconError.illegal("title_args and content_args take at most 100 arguments of 1 KB each")
            }
        }
        let name = "preview"
        let message = Message(
            id: 1, from: "sender", to: "receiver", chatType: .chat, type: .txt,
            body: .object(["msg": .string(String((body.text ?? "Hello!").prefix(1000)))]),
            ext: [
                "em_push_template": .object([
                    "name": .string(name), "title_args": .array((body.titleArgs ?? []).map(JSONValue.string)),
                    "content_args": .array((body.contentArgs ?? []).map(JSONValue.string)),
                ])
            ],
            timestamp: api.clock())
        let (built, shortened) = try PayloadBuilder.buildReportingFit(
            PayloadInput(
                message: message, receiver: "receiver", badge: 1, senderNickname: body.fromNickname.map { String($0.prefix(100)) },
                style: .messageSummary,
                templates: [name: PushTemplate(name: name, titlePattern: body.titlePattern, contentPattern: body.contentPattern)]))
        let json = built.json
        let payload = try JSONDecoder().decode(JSONValue.self, from: Data(json.utf8))
        let alert = payload["aps"]?["alert"]
        return api.respond(
            request, app: app, action: "post",
            data: PreviewAnswer(
                title: alert?["title"]?.stringValue, content: alert?["body"]?.stringValue ?? alert?.stringValue, payload: payload,
                bytes: json.utf8.count, limit: built.limit, shortened: shortened))
    }
}
