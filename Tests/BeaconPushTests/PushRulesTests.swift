import BeaconCore
import BeaconPush
import Foundation
import Testing

@Suite struct QuietHoursTests {
    private func at(_ hour: Int, _ minute: Int, in zone: String, on day: String = "2026-06-15") -> Date {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: zone)!
        let parts = day.split(separator: "-").map { Int($0)! }
        return calendar.date(from: DateComponents(year: parts[0], month: parts[1], day: parts[2], hour: hour, minute: minute))!
    }

    @Test func parsesBothSpellings() throws {
        #expect(try DailyQuietHours.parse("8:30-10:0") == DailyQuietHours(start: 510, end: 600))
        #expect(try DailyQuietHours.parse("08:30-10:00") == DailyQuietHours(start: 510, end: 600))
        #expect(try DailyQuietHours.parse("0:0-0:0") == nil)
        #expect(try DailyQuietHours.parse("00:00-00:00") == nil)
        #expect(try DailyQuietHours.parse("22:0-7:0")?.description == "22:0-7:0")
    }

    @Test(arguments: [
        "25:00-1:00", "8-10", "a:b-c:d", "8:60-9:00", "8:00", "8:00-9:00-10:00", "", "-1:00-2:00", "8:000-9:00", " 8:00-9:00",
    ])
    func rejectsMalformedIntervals(_ text: String) {
        #expect(throws: BeaconError.self) { try DailyQuietHours.parse(text) }
    }

    @Test func sameDayWindow() throws {
        let window = try #require(try DailyQuietHours.parse("8:30-10:00"))
        #expect(!window.contains(at(8, 29, in: "UTC"), in: .gmt))
        #expect(window.contains(at(8, 30, in: "UTC"), in: .gmt))
        #expect(window.contains(at(9, 59, in: "UTC"), in: .gmt))
        #expect(!window.contains(at(10, 0, in: "UTC"), in: .gmt))
    }

    @Test func windowAcrossMidnight() throws {
        let window = try #require(try DailyQuietHours.parse("22:00-7:00"))
        let tokyo = TimeZone(identifier: "Asia/Tokyo")!
        #expect(window.contains(at(23, 0, in: "Asia/Tokyo"), in: tokyo))
        #expect(window.contains(at(0, 0, in: "Asia/Tokyo"), in: tokyo))
        #expect(window.contains(at(6, 59, in: "Asia/Tokyo"), in: tokyo))
        #expect(!window.contains(at(7, 0, in: "Asia/Tokyo"), in: tokyo))
        #expect(!window.contains(at(21, 59, in: "Asia/Tokyo"), in: tokyo))
    }

    @Test func equalStartAndEndIsAllDay() throws {
        let window = try #require(try DailyQuietHours.parse("9:00-9:00"))
        for hour in 0..<24 { #expect(window.contains(at(hour, 17, in: "UTC"), in: .gmt)) }
    }

    @Test func theUsersTimeZoneDecides() throws {
        let window = try #require(try DailyQuietHours.parse("22:00-7:00"))
        // 23:00 in Tokyo is 14:00 UTC and 10:00 in New York (summer).
        let instant = at(23, 0, in: "Asia/Tokyo")
        #expect(window.contains(instant, in: TimeZone(identifier: "Asia/Tokyo")!))
        #expect(!window.contains(instant, in: .gmt))
        #expect(!window.contains(instant, in: TimeZone(identifier: "America/New_York")!))
        // ... and 02:00 the next day in Auckland (NZST, UTC+12 in June): inside again.
        #expect(window.contains(instant, in: TimeZone(identifier: "Pacific/Auckland")!))
    }

    @Test func daylightSavingChangesAreFollowed() throws {
        let window = try #require(try DailyQuietHours.parse("1:30-2:30"))
        let newYork = TimeZone(identifier: "America/New_York")!
        // 2026-03-08: clocks jump from 02:00 to 03:00 in New York. 06:45 UTC is 01:45 EST (in the window);
        // 07:15 UTC is 03:15 EDT (outside).
        let utc = TimeZone.gmt
        #expect(window.contains(at(6, 45, in: "UTC", on: "2026-03-08"), in: newYork))
        #expect(!window.contains(at(7, 15, in: "UTC", on: "2026-03-08"), in: newYork))
        // The same UTC time a week earlier, in winter time, is 01:15 EST... and 07:15 UTC is 02:15 EST: inside.
        #expect(window.contains(at(7, 15, in: "UTC", on: "2026-03-01"), in: newYork))
        #expect(!window.contains(at(7, 15, in: "UTC", on: "2026-03-01"), in: utc))
    }

    @Test func durationsBecomeExpiries() throws {
        #expect(try SilentDuration.expiry(milliseconds: 86_400_000, now: 1_000) == 86_401_000)
        #expect(try SilentDuration.expiry(milliseconds: 0, now: 1_000) == nil)
        #expect(try SilentDuration.expiry(milliseconds: 604_800_000, now: 0) == 604_800_000)
        #expect(throws: BeaconError.self) { try SilentDuration.expiry(milliseconds: 604_800_001, now: 0) }
        #expect(throws: BeaconError.self) { try SilentDuration.expiry(milliseconds: -1, now: 0) }
    }
}

@Suite struct PushDecisionTests {
    static let now: Int64 = 1_800_000_000_000  // 2027-01-15 08:00 UTC
    static let phone = BoundDevice(deviceID: "phone", notifier: "ios", online: false)
    static let pad = BoundDevice(deviceID: "pad", notifier: "ios-pad", online: false)

    static func message(_ ext: [String: JSONValue] = [:], type: MessageType = .txt, onlineOnly: Bool = false) -> Message {
        Message(
            id: 1, from: "alice", to: "bob", chatType: .chat, type: type, body: ["msg": "hi"], ext: ext, timestamp: now,
            onlineOnly: onlineOnly)
    }

    static func context(
        _ message: Message, devices: [BoundDevice] = [phone], anyOnline: Bool = false, policy: MultiDevicePolicy = .allOffline,
        app: AppPushSettings = .init(), conversation: ConversationPushSettings = .init()
    ) -> PushContext {
        PushContext(
            message: message, recipient: "bob", devices: devices, anyDeviceOnline: anyOnline, policy: policy, appSettings: app,
            conversationSettings: conversation, timeZone: .gmt, now: now)
    }

    static func reasons(_ context: PushContext) -> [SkipReason?] {
        PushDecision.decide(context).map(\.skip)
    }

    /// Every combination of silent × force × DND (none, daily window, app duration, conversation duration) ×
    /// app mode × conversation mode × mention × online state × policy, against the spec's precedence written
    /// out as a list of rules.
    @Test func everyCombinationFollowsTheSpecsPrecedence() {
        let dndKinds = ["none", "interval", "appDuration", "conversationDuration"]
        let appModes: [RemindType?] = [nil, .all, .mentionsOnly, .none]
        let conversationModes: [RemindType?] = [nil, .default, .all, .mentionsOnly, .none]
        let onlineStates = ["none", "other", "this"]
        var checked = 0
        for silent in [false, true] {
            for forced in [false, true] {
                for dnd in dndKinds {
                    for appMode in appModes {
                        for conversationMode in conversationModes {
                            for mentioned in [false, true] {
                                for online in onlineStates {
                                    for policy in [MultiDevicePolicy.allOffline, .anyOffline] {
                                        var ext: [String: JSONValue] = [:]
                                        if silent { ext["em_ignore_notification"] = true }
                                        if forced { ext["em_force_notification"] = true }
                                        if mentioned { ext["em_at_list"] = ["bob"] }
                                        var app = AppPushSettings(remindType: appMode)
                                        var conversation = ConversationPushSettings(remindType: conversationMode)
                                        switch dnd {
                                        case "interval": app.quietHours = DailyQuietHours(start: 7 * 60, end: 9 * 60)
                                        case "appDuration": app.silentUntil = Self.now + 60_000
                                        case "conversationDuration": conversation.silentUntil = Self.now + 60_000
                                        default: break
                                        }
                                        let device = BoundDevice(deviceID: "phone", notifier: "ios", online: online == "this")
                                        let got = Self.reasons(
                                            Self.context(
                                                Self.message(ext), devices: [device], anyOnline: online != "none", policy: policy, app: app,
                                                conversation: conversation))
                                        // The spec, rule by rule.
                                        let effectiveMode = (conversationMode == .default ? nil : conversationMode) ?? appMode ?? .all
                                        let expected: SkipReason? =
                                            if silent { .silent } else if policy == .allOffline && online != "none" {
                                                .online
                                            } else if policy == .anyOffline && online == "this" { .online } else if forced {
                                                nil
                                            } else if dnd != "none" { .doNotDisturb } else if effectiveMode == .none {
                                                .modeNone
                                            } else if effectiveMode == .mentionsOnly && !mentioned { .notMentioned } else { nil }
                                        #expect(
                                            got == [expected],
                                            "silent \(silent) force \(forced) dnd \(dnd) app \(String(describing: appMode)) conv \(String(describing: conversationMode)) mention \(mentioned) online \(online) \(policy)"
                                        )
                                        checked += 1
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        #expect(checked == 2 * 2 * 4 * 4 * 5 * 2 * 3 * 2)
    }

    @Test func commandsAndOnlineOnlyMessagesAreNeverPushed() {
        #expect(Self.reasons(Self.context(Self.message(type: .cmd))) == [.command])
        #expect(Self.reasons(Self.context(Self.message(onlineOnly: true))) == [.onlineOnly])
        #expect(Self.reasons(Self.context(Self.message(["em_force_notification": true], type: .cmd))) == [.command])
        #expect(Self.reasons(Self.context(Self.message(), devices: [])) == [.noBinding])
    }

    @Test func anyOfflinePushesOnlyTheOfflineDevices() {
        let online = BoundDevice(deviceID: "pad", notifier: "ios", online: true)
        #expect(
            Self.reasons(Self.context(Self.message(), devices: [Self.phone, online], anyOnline: true, policy: .anyOffline)) == [
                nil, .online,
            ])
        #expect(
            Self.reasons(Self.context(Self.message(), devices: [Self.phone, online], anyOnline: true, policy: .allOffline)) == [
                .online, .online,
            ])
    }

    @Test func thePushFilterNarrowsTheDevices() {
        let devices = [Self.phone, Self.pad]
        #expect(
            Self.reasons(Self.context(Self.message(["em_push_filter": ["accept_device_id": ["pad"]]]), devices: devices)) == [
                .filtered, nil,
            ])
        #expect(
            Self.reasons(Self.context(Self.message(["em_push_filter": ["ignore_device_id": ["pad"]]]), devices: devices)) == [
                nil, .filtered,
            ])
        #expect(
            Self.reasons(Self.context(Self.message(["em_push_filter": ["accept_notifier_name": ["ios"]]]), devices: devices)) == [
                nil, .filtered,
            ])
        #expect(
            Self.reasons(Self.context(Self.message(["em_push_filter": ["ignore_notifier_name": ["ios"]]]), devices: devices)) == [
                .filtered, nil,
            ])
    }

    @Test func mentionsAreFoundWhereverTheSeedsPutThem() {
        for ext: [String: JSONValue] in [
            ["em_at_list": "all"], ["em_at_list": "ALL"], ["em_at_list": ["carol", "bob"]], ["em_apns_ext": ["em_at_list": "All"]],
            ["em_apns_ext": ["em_at_list": ["bob"]]],
        ] {
            #expect(PushDecision.mentions(Self.message(ext), "bob"), "\(ext)")
        }
        for ext: [String: JSONValue] in [[:], ["em_at_list": ["carol"]], ["em_at_list": "bob"], ["em_apns_ext": ["em_at_list": ["carol"]]]]
        {
            #expect(!PushDecision.mentions(Self.message(ext), "bob"), "\(ext)")
        }
    }

    @Test func expiredDurationsNoLongerSilence() {
        let app = AppPushSettings(silentUntil: Self.now - 1)
        let conversation = ConversationPushSettings(silentUntil: Self.now)
        #expect(Self.reasons(Self.context(Self.message(), app: app, conversation: conversation)) == [nil])
    }
}
