import BeaconCore
import BeaconStorage
import Foundation
import Testing

/// A route's payloads split into contents stored once (`PushContents`): each job's payload comes back byte for byte.
@Suite struct PushContentsTests {
    /// `head`, then `username` as `t`, the way `MessagePayloads` renders a receiver's payload; the badge goes at the end
    /// of `aps` when `badged`.
    static func job(_ username: String, head: String = #"{"aps":{"alert":"hi"},"t":"#, badged: Bool = true, skip: String? = nil)
        -> NewPushJob
    {
        var payload = head
        JSONWriter.writeString(username, to: &payload)
        payload += "}"
        return NewPushJob(
            username: username, deviceID: "d", notifier: "ios", deviceToken: "aa", topic: "t", pushType: .alert, priority: .immediate,
            expiration: 0, collapseID: nil, apnsID: UUID(), payload: skip == nil ? payload : "",
            badgeOffset: badged ? head.utf8.count - #"},"t":"#.utf8.count : nil,
            skipReason: skip)
    }

    /// Each job's payload as the store gives it back: rebuilt from its content, or stored whole.
    static func rebuilt(_ jobs: [NewPushJob], badge: Int) -> [String] {
        let shared = PushContents(jobs)
        return zip(jobs, shared.references).map { job, reference in
            guard let reference else { return job.payload(withBadge: badge) }
            let content = shared.contents[reference]
            return PushContents.payload(head: content.head, badgeOffset: content.badgeOffset, badge: badge, username: job.username)
        }
    }

    @Test func receiversOfOneRenderingShareOneContentAndGetTheirPayloadsBack() {
        let names = ["bob", "carol", #"da"ve"#, "e\u{1}n", "zoë", "\u{65}\u{301}", "\u{e9}"]
        let jobs = names.map { Self.job($0) } + [Self.job("bob")]
        let shared = PushContents(jobs)
        #expect(shared.contents.map(\.head) == [#"{"aps":{"alert":"hi"},"t":"#])
        #expect(shared.contents.map(\.badgeOffset) == [20])
        #expect(shared.references == [Int?](repeating: 0, count: jobs.count))
        #expect(Self.rebuilt(jobs, badge: 7) == jobs.map { $0.payload(withBadge: 7) })
        #expect(Self.rebuilt(jobs, badge: 7)[0] == #"{"aps":{"alert":"hi","badge":7},"t":"bob"}"#)
    }

    @Test func aPayloadNobodySharesOrThatIsNotOfTheSharedFormIsStoredWhole() {
        let jobs = [
            Self.job("bob"),  // its rendering is nobody else's
            Self.job("carol", head: #"{"aps":{"alert":"hé"},"t":"#), Self.job("dave", head: #"{"aps":{"alert":"hé"},"t":"#),
            Self.job("erin", skip: "dnd"), Self.job("fred", skip: "dnd"),  // skipped: no payload
            Self.job("gus", badged: false), Self.job("hal", badged: false),  // another content: no badge
        ]
        var other = Self.job("ivy")
        other.payload = #"{"aps":{"alert":"hi"},"t":"someone else"}"#  // does not end with its receiver
        var outside = Self.job("jo")
        outside.badgeOffset = 40  // the badge would not go into the head
        var twin = outside
        twin.apnsID = UUID()
        let all = jobs + [other, other, outside, twin]
        let shared = PushContents(all)
        #expect(shared.references == [nil, 0, 0, nil, nil, 1, 1, nil, nil, nil, nil])
        #expect(shared.contents.map(\.badgeOffset) == [21, nil])  // after "hé", two bytes for é
        #expect(Self.rebuilt(all, badge: 3) == all.map { $0.payload(withBadge: 3) })
    }

    @Test func headsThatAreCanonicallyEquivalentButNotTheSameBytesStayApart() {
        let composed = #"{"aps":{"alert":"\#u{e9}"},"t":"#
        let decomposed = #"{"aps":{"alert":"\#u{65}\#u{301}"},"t":"#
        let jobs = [
            Self.job("a", head: composed), Self.job("b", head: decomposed), Self.job("c", head: composed), Self.job("d", head: decomposed),
        ]
        let shared = PushContents(jobs)
        #expect(shared.contents.count == 2)
        #expect(Self.rebuilt(jobs, badge: 1).map { Array($0.utf8) } == jobs.map { Array($0.payload(withBadge: 1).utf8) })
    }
}
