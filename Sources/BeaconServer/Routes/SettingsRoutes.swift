import BeaconCore
import BeaconPush
import BeaconStorage
import Foundation
import Hummingbird

/// Receiver push settings (Easemob's `notification/{chattype}/{key}`) and the app's push policy.
struct SettingsRoutes: AppRouteCollection {
    let api: API

    var store: any BeaconStore { api.store }

    func register(on routes: AppRoutes) {
        routes.add(.put, "users/:username/notification/:chattype/:key", .caller, put)
        routes.add(.get, "users/:username/notification/:chattype/:key", .caller, get)
        routes.add(.post, "users/:username/notification/query", .caller, query)
        routes.add(.put, "push/policy", .app, putPolicy)
        routes.add(.get, "push/policy", .app, getPolicy)
    }

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
        var recallLimitSeconds: Int64?
        enum CodingKeys: String, CodingKey {
            case multiDevice = "multi_device", timezone, displayStrings = "display_strings", badgeCountsMuted = "badge_counts_muted"
            case recallLimitSeconds = "recall_limit_seconds"
        }
    }

    struct PolicyView: Codable, Sendable {
        var multiDevice: String
        var timezone: String
        var displayStrings: [String: String]
        var badgeCountsMuted: Bool
        var recallLimitSeconds: Int64
        enum CodingKeys: String, CodingKey {
            case multiDevice = "multi_device", timezone, displayStrings = "display_strings", badgeCountsMuted = "badge_counts_muted"
            case recallLimitSeconds = "recall_limit_seconds"
        }

        init(_ policy: PushPolicyRecord) {
            multiDevice = policy.multiDevice
            timezone = policy.timezone
            displayStrings = policy.displayStrings
            badgeCountsMuted = policy.badgeCountsMuted
            recallLimitSeconds = policy.recallLimitSeconds
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

    @Sendable func put(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let (app, user) = try await api.pathUser(context)
        let scope = try await scope(
            chattype: try context.parameters.require("chattype"), key: try context.parameters.require("key"), username: user.username,
            app: app)
        let body = try await api.body(SettingsRequest.self, from: request)
        let now = api.clock()
        var record =
            try await store.pushSettings(of: user.username, scopes: [scope], app: app.id)[scope]
            ?? PushSettingsRecord(username: user.username, scope: scope)
        if let type = body.type {
            guard let remind = RemindType(rawValue: type) else {
                throw BeaconError.illegal("type must be DEFAULT, ALL, AT or NONE, got '\(type)'")
            }
            if remind == .default {
                guard !scope.isEmpty else { throw BeaconError.illegal("DEFAULT is for conversations; the app level is ALL, AT or NONE") }
                record.remindType = nil
            } else {
                record.remindType = remind.rawValue
            }
        }
        if let interval = body.ignoreInterval {
            guard scope.isEmpty else {
                throw BeaconError.illegal("ignoreInterval is set at the app level only (chattype user, key = the user)")
            }
            record.quietHours = interval.isEmpty ? nil : try DailyQuietHours.parse(interval)?.description
        }
        if let duration = body.ignoreDuration {
            record.silentUntil = try SilentDuration.expiry(milliseconds: duration, now: now)
        }
        try await store.savePushSettings(record, app: app.id)
        return api.respond(request, app: app, action: "put", data: view(record, now: now))
    }

    @Sendable func get(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let (app, user) = try await api.pathUser(context)
        let scope = try await scope(
            chattype: try context.parameters.require("chattype"), key: try context.parameters.require("key"), username: user.username,
            app: app)
        let record = try await store.pushSettings(of: user.username, scopes: [scope], app: app.id)[scope]
        return api.respond(request, app: app, action: "get", data: view(record, now: api.clock()))
    }

    /// Up to 20 conversations at once; those that inherit everything (or whose only setting expired) are left out.
    @Sendable func query(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let (app, user) = try await api.pathUser(context)
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

    @Sendable func putPolicy(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let app = try context.requireApp()
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
                throw BeaconError.illegal(
                    "unknown display string '\(unknown)'; known: \(DisplayStrings.keys.sorted().joined(separator: ", "))")
            }
            guard strings.values.allSatisfy({ $0.count <= 200 }) else {
                throw BeaconError.illegal("display strings are at most 200 characters")
            }
            // Merged into the stored ones; an empty string removes that override (back to the default).
            for (key, value) in strings { policy.displayStrings[key] = value.isEmpty ? nil : value }
        }
        if let badgeCountsMuted = body.badgeCountsMuted { policy.badgeCountsMuted = badgeCountsMuted }
        if let limit = body.recallLimitSeconds {
            guard (0...PushPolicyRecord.maxRecallLimitSeconds).contains(limit) else {
                throw BeaconError.illegal("recall_limit_seconds must be 0-\(PushPolicyRecord.maxRecallLimitSeconds) (7 days)")
            }
            policy.recallLimitSeconds = limit
        }
        try await store.savePushPolicy(policy, app: app.id)
        return api.respond(request, app: app, action: "put", data: PolicyView(policy))
    }

    @Sendable func getPolicy(_ request: Request, _ context: BeaconRequestContext) async throws -> Response {
        let app = try context.requireApp()
        let policy = try await store.pushPolicy(app: app.id)
        return api.respond(request, app: app, action: "get", data: PolicyView(policy))
    }
}
