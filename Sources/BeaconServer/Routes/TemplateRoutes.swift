import BeaconCore
import BeaconPush
import BeaconStorage
import Foundation
import Hummingbird

/// Push templates, the receiver's template and language, and batch push nicknames.
struct TemplateRoutes: AppRouteCollection {
    let api: API

    var store: any BeaconStore { api.store }

    func register(on routes: AppRoutes) {
        routes.add(.post, "notification/template", .app, create)
        routes.add(.get, "notification/template", .app, list)
        routes.add(.post, "notification/template_preview", .app, preview)
        routes.add(.get, "notification/template/:name", .app, get)
        routes.add(.put, "notification/template/:name", .app, update)
        routes.add(.delete, "notification/template/:name", .app, delete)
        routes.add(.put, "users/:username/notification/template", .caller, choose)
        routes.add(.get, "users/:username/notification/template", .caller, chosen)
        routes.add(.put, "users/:username/notification/language", .caller, setLanguage)
        routes.add(.get, "users/:username/notification/language", .caller, getLanguage)
        routes.add(.put, "push/nickname", .app, nicknames)
    }

    struct TemplateBody: Codable, Sendable {
        var name: String?
        var titlePattern: String
        var contentPattern: String
        var createAt: Int64?
        var updateAt: Int64?
        enum CodingKeys: String, CodingKey {
            case name, titlePattern = "title_pattern", contentPattern = "content_pattern", createAt, updateAt
        }

        /// `invalid_template` for a pattern over 1 KB or with a placeholder other than `{0}`…`{99}` and the built-ins.
        func validatePatterns() throws(BeaconError) {
            try PushTemplate.validate(pattern: titlePattern, field: "title_pattern")
            try PushTemplate.validate(pattern: contentPattern, field: "content_pattern")
        }
    }

    static func validName(_ name: String) -> Bool {
        (1...64).contains(name.utf8.count) && name.utf8.allSatisfy(\.isASCIIAlphanumeric)
    }

    func view(_ record: PushTemplateRecord) -> TemplateBody {
        TemplateBody(
            name: record.name, titlePattern: record.titlePattern, contentPattern: record.contentPattern, createAt: record.createdAt,
            updateAt: record.updatedAt)
    }

    @Sendable func create(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let app = try context.requireApp()
        let body = try await api.body(TemplateBody.self, from: request)
        guard let name = body.name, Self.validName(name) else { throw BeaconError.illegal("template name must be 1-64 of [A-Za-z0-9]") }
        try body.validatePatterns()
        let now = api.clock()
        let record = PushTemplateRecord(
            name: name, titlePattern: body.titlePattern, contentPattern: body.contentPattern, createdAt: now, updatedAt: now)
        _ = try await store.saveTemplate(record, app: app.id, replace: false)
        return api.respond(request, app: app, action: "post", data: view(record))
    }

    private func template(_ context: BeaconRequestContext, app: AppRecord) async throws -> PushTemplateRecord {
        let name = try context.parameters.require("name")
        guard let found = try await store.templates(app: app.id).first(where: { $0.name == name }) else {
            throw BeaconError(.resourceNotFound, "\(name) template is not exist")
        }
        return found
    }

    @Sendable func get(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let app = try context.requireApp()
        return api.respond(request, app: app, action: "get", data: view(try await template(context, app: app)))
    }

    @Sendable func update(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let app = try context.requireApp()
        var record = try await template(context, app: app)
        let body = try await api.body(TemplateBody.self, from: request)
        try body.validatePatterns()
        record.titlePattern = body.titlePattern
        record.contentPattern = body.contentPattern
        record.updatedAt = api.clock()
        _ = try await store.saveTemplate(record, app: app.id, replace: true)
        return api.respond(request, app: app, action: "put", data: view(record))
    }

    @Sendable func delete(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let app = try context.requireApp()
        let record = try await template(context, app: app)
        _ = try await store.deleteTemplate(record.name, app: app.id)
        return api.respond(request, app: app, action: "delete", data: view(record))
    }

    struct ChoiceBody: Codable, Sendable {
        var templateName: String?
    }

    /// The receiver's template: an unknown name is refused; empty clears.
    @Sendable func choose(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let (app, user) = try await api.pathUser(context)
        let body = try await api.body(ChoiceBody.self, from: request)
        let name = body.templateName ?? ""
        if !name.isEmpty, try await !store.templates(app: app.id).contains(where: { $0.name == name }) {
            throw BeaconError(.resourceNotFound, "\(name) template is not exist")
        }
        try await store.setPushPreferences(of: user.username, app: app.id, language: .none, template: .some(name.isEmpty ? nil : name))
        return api.respond(request, app: app, action: "put", data: ChoiceBody(templateName: name.isEmpty ? nil : name))
    }

    @Sendable func chosen(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let (app, user) = try await api.pathUser(context)
        let profile = try await store.pushSettings(of: [user.username], scopes: [""], app: app.id).profiles[user.username]
        return api.respond(request, app: app, action: "get", data: ChoiceBody(templateName: profile?.template))
    }

    struct LanguageBody: Codable, Sendable {
        var translationLanguage: String?
    }

    @Sendable func setLanguage(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let (app, user) = try await api.pathUser(context)
        let body = try await api.body(LanguageBody.self, from: request)
        let language = body.translationLanguage ?? ""
        guard language.utf8.count <= 32, language.allSatisfy({ $0.isLetter || $0 == "-" || $0 == "_" }) else {
            throw BeaconError.illegal("translationLanguage must be a language code such as en, ja or zh-Hans")
        }
        try await store.setPushPreferences(
            of: user.username, app: app.id, language: .some(language.isEmpty ? nil : language), template: .none)
        return api.respond(request, app: app, action: "put", data: LanguageBody(translationLanguage: language))
    }

    @Sendable func getLanguage(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let (app, user) = try await api.pathUser(context)
        let profile = try await store.pushSettings(of: [user.username], scopes: [""], app: app.id).profiles[user.username]
        return api.respond(request, app: app, action: "get", data: LanguageBody(translationLanguage: profile?.language ?? ""))
    }

    struct NicknameEntry: Codable, Sendable {
        var username: String
        var pushNickname: String
        enum CodingKeys: String, CodingKey { case username, pushNickname = "push_nickname" }
    }

    /// `PUT /push/nickname`: up to 50 `{username, push_nickname}` at once, all or none.
    @Sendable func nicknames(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let app = try context.requireApp()
        let entries = try await api.body([NicknameEntry].self, from: request)
        guard !entries.isEmpty else { throw BeaconError.illegal("put user push nicknames illegal empty request body") }
        guard entries.count <= 50 else { throw BeaconError.illegal("put user push nicknames exceeds the limit (50)") }
        for entry in entries {
            guard entry.pushNickname.count <= Validation.maxNicknameLength else {
                throw BeaconError.illegal("\(entry.username) push nickname length exceeds the limit")
            }
        }
        let existing = try await store.existingUsers(entries.map(\.username), app: app.id)
        if let missing = entries.first(where: { !existing.contains($0.username) }) {
            throw BeaconError(.userNotFound, "user \(missing.username) does not exist")
        }
        for entry in entries {
            _ = try await store.updateUser(
                entry.username, app: app.id, changes: UserChanges(nickname: entry.pushNickname), now: api.clock())
        }
        return api.respond(request, app: app, action: "put", data: entries)
    }
}
