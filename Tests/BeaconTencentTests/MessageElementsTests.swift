import BeaconCore
import Foundation
import Testing

@testable import BeaconTencent

/// Tencent's `MsgBody` elements as Beacon messages, and `OfflinePushInfo` as Easemob's `ext` keys.
@Suite struct MessageElementsTests {
    func element(_ kind: String, _ content: [String: JSONValue]) -> JSONValue {
        ["MsgType": .string(kind), "MsgContent": .object(content)]
    }

    @Test func textsAreJoinedIntoATextMessage() throws {
        let body: JSONValue = .array([element("TIMTextElem", ["Text": "hello "]), element("TIMTextElem", ["Text": "world"])])
        let message = try MessageElements(body)
        #expect(message.type == .txt)
        #expect(message.body["msg"] == "hello world")
        #expect(message.body["MsgBody"] == body)
        try Validation.validateContent(type: message.type, body: .object(message.body), ext: [:])
        // A lone text is not kept twice.
        #expect(try MessageElements([element("TIMTextElem", ["Text": "hi"])]).body == ["msg": "hi"])
    }

    @Test func eachKindBecomesTheTypeItsPushDisplays() throws {
        let cases: [(JSONValue, MessageType, String, JSONValue)] = [
            (
                element(
                    "TIMImageElem", ["ImageInfoArray": [["Type": 2, "URL": "https://x/large"], ["Type": 1, "URL": "https://x/original"]]]),
                .img, "url", "https://x/original"
            ),
            (element("TIMSoundElem", ["Url": "https://x/a.m4a", "Second": 3]), .audio, "url", "https://x/a.m4a"),
            (
                element("TIMVideoFileElem", ["VideoUrl": "https://x/v.mp4", "ThumbUrl": "https://x/t.jpg"]), .video, "thumb",
                "https://x/t.jpg"
            ),
            (element("TIMFileElem", ["Url": "https://x/f", "FileName": "f.pdf"]), .file, "filename", "f.pdf"),
            (element("TIMLocationElem", ["Desc": "Home", "Latitude": 22.5, "Longitude": 114]), .loc, "addr", "Home"),
            (element("TIMFaceElem", ["Index": 1, "Data": "smile"]), .custom, "customEvent", "TIMFaceElem"),
            (element("TIMCustomElem", ["Data": "order", "Desc": "New order"]), .custom, "customEvent", "order"),
        ]
        for (elementValue, type, key, value) in cases {
            // A text before another kind: the other kind decides.
            let message = try MessageElements(.array([element("TIMTextElem", ["Text": "see"]), elementValue]))
            #expect(message.type == type)
            #expect(message.body[key] == value)
            try Validation.validateContent(type: message.type, body: .object(message.body), ext: [:])
        }
    }

    @Test func aCustomElementIsPushedOnlyWithSomethingToShow() throws {
        let silent = try MessageElements(.array([element("TIMCustomElem", ["Data": "x"])]))
        #expect(silent.ext(with: nil)["em_ignore_notification"] == true)
        // OfflinePushInfo's Desc makes it pushable, with that text.
        let described = silent.ext(with: OfflinePushInfo(desc: "You have an order"))
        #expect(described["em_ignore_notification"] == nil)
        #expect(described["em_apns_ext"]?["em_push_content"] == "You have an order")
        // The element's own Desc, Ext and Sound are pushed; OfflinePushInfo's win over them.
        let own = try MessageElements(.array([element("TIMCustomElem", ["Data": "x", "Desc": "d", "Ext": "e", "Sound": "s.caf"])]))
        let ext = own.ext(with: OfflinePushInfo(ext: "mine"))
        #expect(ext["em_apns_ext"]?["em_push_content"] == "d")
        #expect(ext["em_apns_ext"]?["tencent_ext"] == "mine")
        #expect(ext["em_apns_ext"]?["em_push_sound"] == "s.caf")
    }

    @Test(arguments: [
        JSONValue.null, [], .array(Array(repeating: ["MsgType": "TIMTextElem", "MsgContent": ["Text": "x"]] as JSONValue, count: 21)),
        [["MsgType": "TIMUnknownElem", "MsgContent": [:]]], [["MsgType": "TIMTextElem"]],
        [["MsgType": "TIMTextElem", "MsgContent": ["Text": 1]]],
        [["MsgType": "TIMLocationElem", "MsgContent": ["Latitude": "north"]]],
        [["MsgType": "TIMCustomElem", "MsgContent": [:]], ["MsgType": "TIMCustomElem", "MsgContent": [:]]],
    ])
    func refusesWhatIsNotAMsgBody(_ body: JSONValue) {
        #expect(throws: BeaconError.self) { try MessageElements(body) }
    }

    @Test func offlinePushInfoReadsTencentsSpellingAndSnakeCase() throws {
        let tencent =
            #"{"PushFlag":1,"Title":"T","Desc":"D","Ext":"E","ApnsInfo":{"Sound":"s","BadgeMode":1,"SubTitle":"sub","MutableContent":1}}"#
        let snake =
            #"{"push_flag":1,"title":"T","desc":"D","ext":"E","apns_info":{"sound":"s","badge_mode":1,"sub_title":"sub","mutable_content":1}}"#
        let decoded = try [tencent, snake].map { try JSONDecoder().decode(OfflinePushInfo.self, from: Data($0.utf8)) }
        #expect(decoded[0] == decoded[1])
        let ext = decoded[0].merged(into: ["em_apns_ext": ["em_push_title": "mine"]])
        #expect(ext["em_ignore_notification"] == true)
        #expect(ext["em_apns_ext"]?["em_push_title"] == "mine")
        #expect(ext["em_apns_ext"]?["em_push_content"] == "D")
        #expect(ext["em_apns_ext"]?["em_alert_subTitle"] == "sub")
        #expect(ext["em_apns_ext"]?["em_push_badge_unchanged"] == true)
        #expect(ext["em_apns_ext"]?["em_push_mutable_content"] == true)
    }
}
