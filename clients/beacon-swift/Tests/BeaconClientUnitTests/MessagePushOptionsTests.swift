import Testing

@testable import BeaconClient

@Suite struct MessagePushOptionsTests {
    @Test func typedOptionsJoinTheAppsOwnApnsKeysKeyByKey() {
        let draft = OutgoingChatMessage(
            to: "bob", content: .text("x"), ext: ["em_apns_ext": ["extern": ["k": 1], "em_push_title": "own"], "app": true],
            push: MessagePushOptions(title: "typed", force: true))
        #expect(
            draft.sentExt == [
                "em_apns_ext": ["extern": ["k": 1], "em_push_title": "typed"], "app": true, "em_force_notification": true,
            ])
    }

    @Test func eachOptionIsItsEasemobKey() {
        #expect(MessagePushOptions().ext.isEmpty)
        let options = MessagePushOptions(
            subtitle: "s", sound: "a.caf", category: "c", collapseKey: "k", badge: 3, imageURL: "https://x/y.png", mutableContent: true,
            silent: true, template: .init(name: "t", titleArguments: ["a"]), titleLocKey: "T", titleLocArguments: ["1"], locKey: "B",
            locArguments: ["2"])
        #expect(
            options.ext == [
                "em_apns_ext": [
                    "em_alert_subTitle": "s", "em_push_sound": "a.caf", "em_push_category": "c", "em_push_collapse_key": "k",
                    "em_push_badge": 3, "em_push_image": "https://x/y.png", "em_push_mutable_content": true,
                    "em_push_title_loc_key": "T", "em_push_title_loc_args": ["1"], "em_push_body_loc_key": "B",
                    "em_push_body_loc_args": ["2"],
                ],
                "em_push_template": ["name": "t", "title_args": ["a"], "content_args": []], "em_ignore_notification": true,
            ])
    }
}
