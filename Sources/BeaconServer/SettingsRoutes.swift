import BeaconCore
import BeaconPush
import BeaconStorage
import Foundation
import Hummingbird

/// Receiver push settings (Easemob's `notification/{chattype}/{key}`) and the app's push policy.
struct SettingsRoutes {
    let api: API
    let ownUser: @Sendable (Request, any RequestContext) async throws -> (AppRecord, UserRecord)

    var store: any BeaconStore { api.store }

    /// The body of `PUT …/notification/{chattype}/{key}`; absent fields are left as they are.
    struct SettingsRequest: Decodable {
        var type: String?
        var ignoreInterval: String?
        var ignoreDuration: Int64?
    }

    /// What `GET` answers (and `PUT` echoes): `ignoreDuration` is the absolute expiry in ms, as Easemob answers.
    struct SettingsView: Codable, Sendable {
        var type: String?
        var ignoreInterval: String?
        var ignoreDuration: Int64?
        var chattype: String?
        var key: String?
    }

    struct QueryRequest: Decodable {
        struct Conversation: Decodable {
            var chattype: String
            var key: String
        }
        var conversations: [Conversation]
    }

    struct PolicyRequest: Decodable {
        var multiDevice: String?
        var timezone: String?
        var displayStrings: [String: String]?
        var badgeCountsMuted: Bool?
        enum CodingKeys: String, CodingKey {
            case multiDevice = "multi_device", timezone, displayStrings = "display_strings", badgeCountsMuted = "badge_counts_muted"
        }
    }

    struct PolicyView: Codable, Sendable {
        var multiDevice: String
        var timezone: String
        var displayStrings: [String: String]
        var badgeCountsMuted: Bool
        enum CodingKeys: String, CodingKey {
            case multiDevice = "multi_device", timezone, displayStrings = "display_strings", badgeCountsMuted = "badge_counts_muted"
        }

        init(_ policy: PushPolicyRecord) {
            multiDevice = policy.multiDevice
            timezone = policy.timezone
            displayStrings = policy.displayStrings
            badgeCountsMuted = policy.badgeCountsMuted
        }
    }

    static let maxQueried = 20

    /// The stored scope of `chattype`/`key` for `username`: "" for the app level (`user/{username}` itself).
    func scope(chattype: String, key: String, username: String, app: AppRecord) async throws -> String {
        switch chattype {
        case "user": return key == username ? "" : "chat:\(key)"
        case "chatgroup":
            guard try await store.group(key, app: app.id) != nil else { throw BeaconError(.groupNotFound, "group \(key) does not exist") }
            return "groupchat:\(key)"
        default: throw BeaconError.illegal("chattype must be user or chatgroup, got '\(chattype)'")
        }
    }

    func view(_ record: PushSettingsRecord?, now: Int64) -> SettingsView {
        SettingsView(
            type: record?.remindType, ignoreInterval: record?.quietHours,
            ignoreDuration: record?.silentUntil.flatMap { $0 > now ? $0 : nil })
    }

    @Sendable func put(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let (app, user) = try await ownUser(request, context)
        let scope = try await scope(
            chattype: try context.parameters.require("chattype"), key: try context.parameters.require("key"), username: user.username, app: app)
        let body = try await api.body(SettingsRequest.self, from: request)
        let now = api.clock()
        var record = try await store.pushSettings(of: user.username, scopes: [scope], app: app.id)[scope]
            ?? PushSettingsRecord(username: user.username, scope: scope)
        if let type = body.type {
            guard let remind = RemindType(rawValue: type) else { throw BeaconError.illegal("type must be DEFAULT, ALL, AT or NONE, got '\(type)'") }
            if remind == .default {
                guard !scope.isEmpty else { throw BeaconError.illegal("DEFAULT is for conversations; the app level is ALL, AT or NONE") }
                record.remindType = nil
            } else {
                record.remindType = remind.rawValue
            }
        }
        if let interval = body.ignoreInterval {
            guard scope.isEmpty else { throw BeaconError.illegal("ignoreInterval is set at the app level only (chattype user, key = the user)") }
            record.quietHours = interval.isEmpty ? nil : try DailyQuietHours.parse(interval)?.description
        }
        if let duration = body.ignoreDuration {
            record.silentUntil = try SilentDuration.expiry(milliseconds: duration, now: now)
        }
        try await store.savePushSettings(record, app: app.id)
        return api.respond(request, app: app, action: "put", data: view(record, now: now))
    }

    @Sendable func get(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let (app, user) = try await ownUser(request, context)
        let scope = try await scope(
            chattype: try context.parameters.require("chattype"), key: try context.parameters.require("key"), username: user.username, app: app)
        let record = try await store.pushSettings(of: user.username, scopes: [scope], app: app.id)[scope]
        return api.respond(request, app: app, action: "get", data: view(record, now: api.clock()))
    }

    /// Up to 20 conversations at once; those that inherit everything (or whose only setting expired) are left out.
    @Sendable func query(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let (app, user) = try await ownUser(request, context)
        let body = try await api.body(QueryRequest.self, from: request)
        guard (1...Self.maxQueried).contains(body.conversations.count) else {
            throw BeaconError.illegal("query 1-\(Self.maxQueried) conversations at a time, got \(body.conversations.count)")
        }
        var scopes: [(String, QueryRequest.Conversation)] = []
        for conversation in body.conversations {
            let scope = try await scope(chattype: conversation.chattype, key: conversation.key, username: user.username, app: app)
            guard !scope.isEmpty else { throw BeaconError.illegal("query conversations, not the app level") }
            scopes.append((scope, conversation))
        }
        let records = try await store.pushSettings(of: user.username, scopes: scopes.map(\.0), app: app.id)
        let now = api.clock()
        let answer = scopes.compactMap { scope, conversation -> SettingsView? in
            var shown = view(records[scope], now: now)
            guard shown.type != nil || shown.ignoreDuration != nil else { return nil }
            shown.chattype = conversation.chattype
            shown.key = conversation.key
            return shown
        }
        return api.respond(request, app: app, action: "post", data: answer, count: answer.count)
    }

    @Sendable func putPolicy(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let app = try await api.app(context)
        try await api.caller(request, app: app).requireApp()
        let body = try await api.body(PolicyRequest.self, from: request)
        var policy = try await store.pushPolicy(app: app.id)
        if let multiDevice = body.multiDevice {
            guard MultiDevicePolicy(rawValue: multiDevice) != nil else {
                throw BeaconError.illegal("multi_device must be all_offline or any_offline")
            }
            policy.multiDevice = multiDevice
        }
        if let timezone = body.timezone {
            try Validation.validateTimeZone(timezone)
            policy.timezone = timezone
        }
        if let strings = body.displayStrings {
            if let unknown = strings.keys.sorted().first(where: { !DisplayStrings.keys.contains($0) }) {
                throw BeaconError.illegal("unknown display string '\(unknown)'; known: \(DisplayStrings.keys.sorted().joined(separator: ", "))")
            }
            guard strings.values.allSatisfy({ $0.count <= 200 }) else { throw BeaconError.illegal("display strings are at most 200 characters") }
            // Merged into the stored ones; an empty string removes that override (back to the default).
            for (key, value) in strings { policy.displayStrings[key] = value.isEmpty ? nil : value }
        }
        if let badgeCountsMuted = body.badgeCountsMuted { policy.badgeCountsMuted = badgeCountsMuted }
        try await store.savePushPolicy(policy, app: app.id)
        return api.respond(request, app: app, action: "put", data: PolicyView(policy))
    }

    @Sendable func getPolicy(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let app = try await api.app(context)
        try await api.caller(request, app: app).requireApp()
        let policy = try await store.pushPolicy(app: app.id)
        return api.respond(request, app: app, action: "get", data: PolicyView(policy))
    }
}

/// Push templates, the receiver's template and language, and batch push nicknames.
struct TemplateRoutes {
    let api: API
    let ownUser: @Sendable (Request, any RequestContext) async throws -> (AppRecord, UserRecord)

    var store: any BeaconStore { api.store }

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

    @Sendable func create(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let app = try await api.app(context)
        try await api.caller(request, app: app).requireApp()
        let body = try await api.body(TemplateBody.self, from: request)
        guard let name = body.name, Self.validName(name) else { throw BeaconError.illegal("template name must be 1-64 of [A-Za-z0-9]") }
        try body.validatePatterns()
        let now = api.clock()
        let record = PushTemplateRecord(name: name, titlePattern: body.titlePattern, contentPattern: body.contentPattern, createdAt: now, updatedAt: now)
        _ = try await store.saveTemplate(record, app: app.id, replace: false)
        return api.respond(request, app: app, action: "post", data: view(record))
    }

    private func template(_ context: some RequestContext, app: AppRecord) async throws -> PushTemplateRecord {
        let name = try context.parameters.require("name")
        guard let found = try await store.templates(app: app.id).first(where: { $0.name == name }) else {
            throw BeaconError(.resourceNotFound, "\(name) template is not exist")
        }
        return found
    }

    @Sendable func get(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let app = try await api.app(context)
        try await api.caller(request, app: app).requireApp()
        return api.respond(request, app: app, action: "get", data: view(try await template(context, app: app)))
    }

    @Sendable func update(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let app = try await api.app(context)
        try await api.caller(request, app: app).requireApp()
        var record = try await template(context, app: app)
        let body = try await api.body(TemplateBody.self, from: request)
        try body.validatePatterns()
        record.titlePattern = body.titlePattern
        record.contentPattern = body.contentPattern
        record.updatedAt = api.clock()
        _ = try await store.saveTemplate(record, app: app.id, replace: true)
        return api.respond(request, app: app, action: "put", data: view(record))
    }

    @Sendable func delete(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let app = try await api.app(context)
        try await api.caller(request, app: app).requireApp()
        let record = try await template(context, app: app)
        _ = try await store.deleteTemplate(record.name, app: app.id)
        return api.respond(request, app: app, action: "delete", data: view(record))
    }

    struct ChoiceBody: Codable, Sendable {
        var templateName: String?
    }

    /// The receiver's template: an unknown name is refused; empty clears.
    @Sendable func choose(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let (app, user) = try await ownUser(request, context)
        let body = try await api.body(ChoiceBody.self, from: request)
        let name = body.templateName ?? ""
        if !name.isEmpty, try await !store.templates(app: app.id).contains(where: { $0.name == name }) {
            throw BeaconError(.resourceNotFound, "\(name) template is not exist")
        }
        try await store.setPushPreferences(of: user.username, app: app.id, language: .none, template: .some(name.isEmpty ? nil : name))
        return api.respond(request, app: app, action: "put", data: ChoiceBody(templateName: name.isEmpty ? nil : name))
    }

    @Sendable func chosen(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let (app, user) = try await ownUser(request, context)
        let profile = try await store.pushSettings(of: [user.username], scopes: [""], app: app.id).profiles[user.username]
        return api.respond(request, app: app, action: "get", data: ChoiceBody(templateName: profile?.template))
    }

    struct LanguageBody: Codable, Sendable {
        var translationLanguage: String?
    }

    @Sendable func setLanguage(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let (app, user) = try await ownUser(request, context)
        let body = try await api.body(LanguageBody.self, from: request)
        let language = body.translationLanguage ?? ""
        guard language.utf8.count <= 32, language.allSatisfy({ $0.isLetter || $0 == "-" || $0 == "_" }) else {
            throw BeaconError.illegal("translationLanguage must be a language code such as en, ja or zh-Hans")
        }
        try await store.setPushPreferences(of: user.username, app: app.id, language: .some(language.isEmpty ? nil : language), template: .none)
        return api.respond(request, app: app, action: "put", data: LanguageBody(translationLanguage: language))
    }

    @Sendable func getLanguage(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let (app, user) = try await ownUser(request, context)
        let profile = try await store.pushSettings(of: [user.username], scopes: [""], app: app.id).profiles[user.username]
        return api.respond(request, app: app, action: "get", data: LanguageBody(translationLanguage: profile?.language ?? ""))
    }

    struct NicknameEntry: Codable, Sendable {
        var username: String
        var pushNickname: String
        enum CodingKeys: String, CodingKey { case username, pushNickname = "push_nickname" }
    }

    /// `PUT /push/nickname`: up to 50 `{username, push_nickname}` at once, all or none.
    @Sendable func nicknames(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let app = try await api.app(context)
        try await api.caller(request, app: app).requireApp()
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
            _ = try await store.updateUser(entry.username, app: app.id, changes: UserChanges(nickname: entry.pushNickname), now: api.clock())
        }
        return api.respond(request, app: app, action: "put", data: entries)
    }
}
