import BeaconCore
import BeaconStorage
import BeaconTesting
import Testing

/// `routingInputs` gives every area a message's routing reads, as the one-by-one reads give them, on every engine
/// (PostgreSQL answers it in one statement of its own).
@Suite struct RoutingInputsConformanceTests {
    @Test(arguments: StoreKind.available)
    func everyAreaIsReadForTheReceiversAndScopesAsked(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            try await store.savePushConfig(
                PushConfigRecord(
                    appID: app.id, name: "calls", kind: .p8, environment: "production", bundleID: "com.y", voip: true, keyID: "K",
                    teamID: "T", sealedSecret: [4], expiresAt: nil, createdAt: now))
            let policy = PushPolicyRecord(
                multiDevice: "any_offline", timezone: "Asia/Shanghai", displayStrings: ["image": "[图片]", "new_message": "“新”"],
                badgeCountsMuted: true, recallLimitSeconds: 300)
            try await store.savePushPolicy(policy, app: app.id)
            let templates = [
                PushTemplateRecord(name: "b", titlePattern: "{0} says", contentPattern: "\"{1}\"\n", createdAt: now, updatedAt: now + 1),
                PushTemplateRecord(name: "a", titlePattern: "", contentPattern: "{0}", createdAt: now, updatedAt: now),
            ]
            for template in templates { _ = try await store.saveTemplate(template, app: app.id, replace: false) }
            _ = try await store.createUsers(
                [NewUser(username: "alice", passwordHash: "h", nickname: "Al 🐢"), NewUser(username: "bob", passwordHash: "h")],
                app: app.id, now: now)
            _ = try await store.createUsers([NewUser(username: "carol", passwordHash: "h")], app: app.id, now: now)
            _ = try await store.updateUser(
                "bob", app: app.id, changes: UserChanges(nickname: "B", timezone: "Europe/Paris", displayStyle: 1), now: now)
            try await store.setPushPreferences(of: "bob", app: app.id, language: "zh", template: "b")
            let settings = [
                PushSettingsRecord(username: "bob", scope: "", remindType: "AT", quietHours: "22:00-07:00", silentUntil: Int64.max - 7),
                PushSettingsRecord(username: "bob", scope: "chat:alice", remindType: "NONE"),
                PushSettingsRecord(username: "carol", scope: "", silentUntil: 5),
            ]
            for record in settings { try await store.savePushSettings(record, app: app.id) }
            // Outside what is asked: another scope, another receiver.
            try await store.savePushSettings(PushSettingsRecord(username: "carol", scope: "chat:zed", remindType: "NONE"), app: app.id)
            try await store.savePushSettings(PushSettingsRecord(username: "alice", scope: "", remindType: "NONE"), app: app.id)
            let bindings = [
                PushBinding(username: "bob", deviceID: "d2", notifier: "ios", deviceToken: "b2", boundAt: now + 2),
                PushBinding(username: "bob", deviceID: "d1", notifier: "calls", deviceToken: "b1", voipToken: "v1", boundAt: now),
                PushBinding(username: "bob", deviceID: "d1", notifier: "ios", deviceToken: "b1", boundAt: now + 1),
                PushBinding(username: "carol", deviceID: "c", notifier: "ios", deviceToken: "c1", boundAt: now),
                PushBinding(username: "alice", deviceID: "a", notifier: "ios", deviceToken: "a1", boundAt: now),
            ]
            for binding in bindings { try await store.bind(binding, app: app.id) }

            let inputs = try await store.routingInputs(
                sender: "alice", recipients: ["bob", "carol", "dave"], scopes: ["", "chat:alice"], app: app.id)
            #expect(
                inputs.notifiers == [
                    Notifier(name: "calls", bundleID: "com.y", voip: true), Notifier(name: "ios", bundleID: "com.x", voip: false),
                ])
            #expect(inputs.policy == policy)
            #expect(inputs.templates == templates.sorted { $0.name < $1.name })
            #expect(Set(inputs.settings) == Set(settings))
            #expect(
                inputs.profiles == [
                    "bob": PushProfile(timeZone: "Europe/Paris", displayStyle: 1, language: "zh", template: "b", nickname: "B"),
                    "carol": PushProfile(),
                ])
            #expect(inputs.senderNickname == "Al 🐢")
            #expect(
                inputs.bindings == [
                    "bob": [bindings[1], bindings[2], bindings[0]],
                    "carol": [bindings[3]],
                ])
        }
    }

    /// Control characters, quotes and backslashes come back as stored; duplicated receivers are read once; an empty list
    /// of receivers and an app that does not exist give the defaults; the one statement agrees with the one-by-one reads.
    @Test(arguments: StoreKind.available)
    func oddTextAndOddRequestsAreReadAsTheOneByOneReadsReadThem(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            let odd = "tab\t ctl\u{1} quote\" back\\slash \u{2028} 🐢"
            _ = try await store.createUsers([NewUser(username: "alice", passwordHash: "h", nickname: odd)], app: app.id, now: now)
            _ = try await store.createUsers([NewUser(username: "bob", passwordHash: "h")], app: app.id, now: now)
            _ = try await store.saveTemplate(
                PushTemplateRecord(name: odd, titlePattern: odd, contentPattern: "\\{0}", createdAt: now, updatedAt: now), app: app.id,
                replace: false)
            try await store.savePushPolicy(PushPolicyRecord(displayStrings: ["image": odd]), app: app.id)
            try await store.bind(PushBinding(username: "bob", deviceID: odd, notifier: "ios", deviceToken: "t", boundAt: now), app: app.id)

            let inputs = try await store.routingInputs(sender: "alice", recipients: ["bob", "bob"], scopes: ["", ""], app: app.id)
            #expect(inputs.senderNickname == odd)
            #expect(inputs.templates.map(\.name) == [odd])
            #expect(inputs.templates.first?.titlePattern == odd)
            #expect(inputs.policy.displayStrings == ["image": odd])
            #expect(inputs.bindings["bob"]?.map(\.deviceID) == [odd])
            // The same as the one-by-one reads.
            let (settings, profiles) = try await store.pushSettings(of: ["bob"], scopes: [""], app: app.id)
            #expect(
                inputs
                    == RoutingInputs(
                        notifiers: try await store.pushConfigs(app: app.id).map(Notifier.init),
                        policy: try await store.pushPolicy(app: app.id),
                        templates: try await store.templates(app: app.id), settings: settings, profiles: profiles,
                        senderNickname: try await store.user("alice", app: app.id)?.nickname,
                        bindings: try await store.bindings(of: ["bob"], app: app.id)))

            let nobody = try await store.routingInputs(sender: "alice", recipients: [], scopes: [""], app: app.id)
            #expect(nobody.bindings.isEmpty && nobody.profiles.isEmpty && nobody.settings.isEmpty)
            #expect(nobody.notifiers.map(\.name) == ["ios"])
            let noApp = try await store.routingInputs(sender: "alice", recipients: ["bob"], scopes: [""], app: app.id + 1000)
            #expect(
                noApp
                    == RoutingInputs(
                        notifiers: [], policy: PushPolicyRecord(), templates: [], settings: [], profiles: [:], senderNickname: nil,
                        bindings: [:]))
        }
    }

    /// An append asked for a message's routing inputs gives what `routingInputs` gives once the message is stored, when
    /// that message got a pending route; nothing otherwise.
    /// `required`: the receiver must exist (an app's send), which PostgreSQL appends in a transaction rather than one
    /// statement.
    @Test(arguments: StoreKind.available, [false, true])
    func anAppendReadsTheRoutingInputsOfTheMessageItRoutes(kind: StoreKind, required: Bool) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store)
            _ = try await store.createUsers(
                [NewUser(username: "alice", passwordHash: "h", nickname: "Al"), NewUser(username: "bob", passwordHash: "h")], app: app.id,
                now: now)
            try await store.savePushSettings(PushSettingsRecord(username: "bob", scope: "chat:alice", remindType: "NONE"), app: app.id)
            try await store.bind(
                PushBinding(username: "bob", deviceID: "d1", notifier: "ios", deviceToken: "b1", boundAt: now), app: app.id)
            func new(_ id: UInt64, routes: Bool) -> NewMessage {
                NewMessage(
                    message: text(id, from: "alice", to: "bob"), deliveries: [Delivery(username: "bob", required: required)],
                    routesPushes: routes)
            }
            func request(_ id: UInt64) -> RoutingInputsRequest {
                RoutingInputsRequest(messageID: id, sender: "alice", recipients: ["bob", "dave"], scopes: ["", "chat:alice"])
            }
            let expected = try await store.routingInputs(
                sender: "alice", recipients: ["bob", "dave"], scopes: ["", "chat:alice"], app: app.id)
            #expect(expected.bindings["bob"]?.count == 1 && expected.settings.count == 1 && expected.senderNickname == "Al")

            // The second of two routed messages: its inputs.
            guard
                case .stored(_, let routed, let inputs) = try await store.append(
                    [new(1, routes: true), new(2, routes: true)], app: app.id, receipt: nil, readingInputs: request(2))
            else { return #expect(Bool(false), "expected stored") }
            #expect(routed == [1, 2])
            #expect(inputs == expected)
            // A message that routes no pushes, or one not in the append: none.
            for (id, requested, routes) in [(3, 3, false), (4, 99, true)] as [(UInt64, UInt64, Bool)] {
                guard
                    case .stored(_, let routed, let none) = try await store.append(
                        [new(id, routes: routes)], app: app.id, receipt: nil, readingInputs: request(requested))
                else { return #expect(Bool(false), "expected stored") }
                #expect(routed == (routes ? [id] : []) && none == nil)
            }
            // A repeated send stores and reads nothing.
            let receipt = SendReceipt(scope: "rest:alice", reference: "r", now: now)
            guard
                case .stored(_, _, let first) = try await store.append(
                    [new(5, routes: true)], app: app.id, receipt: receipt, readingInputs: request(5))
            else { return #expect(Bool(false), "expected stored") }
            #expect(first == expected)
            #expect(
                try await store.append([new(6, routes: true)], app: app.id, receipt: receipt, readingInputs: request(6))
                    == .repeated(["bob": 5]))
            // An app without push configurations gets no pending route, and no inputs.
            let quiet = try await store.createApp(
                AppKey(org: "acme", name: "quiet"), clientID: "quiet", clientSecretHash: "hash", limits: .default, now: now)
            try await makeUsers(store, quiet, ["alice", "bob"])
            #expect(
                try await store.append([new(7, routes: true)], app: quiet.id, receipt: nil, readingInputs: request(7))
                    == .stored(try await store.inbox(of: "bob", app: quiet.id, after: 0, limit: 1), routed: [], inputs: nil))
        }
    }

    @Test(arguments: StoreKind.available)
    func anAppWithNothingSetGivesTheDefaults(kind: StoreKind) async throws {
        try await kind.withStore { store in
            let app = try await makeApp(store, pushConfig: false)
            let inputs = try await store.routingInputs(sender: "admin", recipients: ["nobody"], scopes: [""], app: app.id)
            #expect(
                inputs
                    == RoutingInputs(
                        notifiers: [], policy: PushPolicyRecord(), templates: [], settings: [], profiles: [:], senderNickname: nil,
                        bindings: [:]))
        }
    }
}
