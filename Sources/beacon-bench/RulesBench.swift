import ArgumentParser
import BeaconCore
import BeaconPush
import Foundation

/// The push decision and payload for every recipient of a 10,000-member group: µs per recipient.
struct Rules: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "rules", abstract: "Decision + payload per recipient (pure code).")

    @Option var members = 10_000
    @Option var rounds = 5

    func run() async throws {
        let message = Message(
            id: 912_205_496_344_117_248, from: "alice", to: "g1", chatType: .groupchat, type: .txt,
            body: ["msg": "Dinner at eight? Bring the photos from the trip.", "translations": ["ja": "8時に夕食？旅行の写真を持ってきて。"]],
            ext: ["em_at_list": ["m17", "m4242"], "em_apns_ext": ["em_push_sound": "ping.caf", "extern": ["kind": "chat"]]], timestamp: 0)
        let templates = ["default": PushTemplate(name: "default", titlePattern: "{$dynamicFrom}", contentPattern: "{$msg}")]
        let tokyo = TimeZone(identifier: "Asia/Tokyo")!
        let quiet = try DailyQuietHours.parse("22:00-7:00")
        var best = Double.infinity
        var pushed = 0
        for _ in 0..<rounds {
            pushed = 0
            let start = monotonicNanoseconds()
            // As the router does: one message's payloads share their renderings.
            var payloads = MessagePayloads()
            for index in 0..<members {
                let username = "m\(index)"
                let context = PushContext(
                    message: message, recipient: username,
                    devices: [BoundDevice(deviceID: "phone", notifier: "ios", online: false)], anyDeviceOnline: false, policy: .allOffline,
                    appSettings: AppPushSettings(
                        remindType: index % 3 == 0 ? .mentionsOnly : nil, quietHours: index % 5 == 0 ? quiet : nil),
                    conversationSettings: ConversationPushSettings(), timeZone: tokyo, now: 1_800_000_000_000)
                let decisions = PushDecision.decide(context)
                guard decisions.contains(where: { $0.skip == nil }) else { continue }
                let payload = try payloads.build(
                    PayloadInput(
                        message: message, receiver: username, badge: index % 20, senderNickname: "Alice",
                        style: index % 2 == 0 ? .messageSummary : .simpleBanner,
                        language: index % 4 == 0 ? "ja" : nil, templates: templates))
                pushed += payload.json.isEmpty ? 0 : 1
            }
            best = min(best, Double(monotonicNanoseconds() - start) / 1000 / Double(members))
        }
        print("rules: decision + payload for \(members) group members (\(pushed) pushed), best of \(rounds) rounds")
        print("µs per recipient: \(format(best)) (aim ≤ 2, ratio \(format(best / 2)))")
    }
}
