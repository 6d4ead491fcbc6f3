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
        enum CodingKeys: String, CodingKey { case multiDevice = "multi_device", timezone }
    }

    struct PolicyView: Codable, Sendable {
        var multiDevice: String
        var timezone: String
        enum CodingKeys: String, CodingKey { case multiDevice = "multi_device", timezone }
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
        try await store.savePushPolicy(policy, app: app.id)
        return api.respond(request, app: app, action: "put", data: PolicyView(multiDevice: policy.multiDevice, timezone: policy.timezone))
    }

    @Sendable func getPolicy(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let app = try await api.app(context)
        _ = try await api.caller(request, app: app)
        let policy = try await store.pushPolicy(app: app.id)
        return api.respond(request, app: app, action: "get", data: PolicyView(multiDevice: policy.multiDevice, timezone: policy.timezone))
    }
}
