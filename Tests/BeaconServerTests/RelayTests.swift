import BeaconCore
import BeaconStorage
import Foundation
import Testing

@testable import BeaconServer

/// How a node hands stored messages to another (in a notification when it fits), queues its notifications, and acts on
/// what arrives, in order. The cluster tests run the same against PostgreSQL.
struct RelayTests {
    private static func entry(_ username: String, seq: Int64, text: String) -> InboxEntry {
        InboxEntry(
            username: username, seq: seq,
            message: Message(
                id: UInt64(seq), from: "alice", to: username, chatType: .chat, type: .txt, body: ["msg": .string(text)], timestamp: 1),
            originDevice: nil)
    }

    private static func notice(_ letter: Letter?) throws -> ClusterNotice {
        try JSONDecoder().decode(ClusterNotice.self, from: Data(try #require(letter).body.utf8))
    }

    @Test func entriesThatFitAreHandedOverInTheNotification() throws {
        let entries = [Self.entry("bob", seq: 7, text: "hi"), Self.entry("carol", seq: 3, text: "hi")]
        let letter = ClusterLink.notification(handing: entries, to: 9, app: 1)
        #expect(letter?.node == 9)
        guard case .deliver(let app, let handed) = try Self.notice(letter) else {
            Issue.record("not handed over: \(String(describing: letter))")
            return
        }
        #expect(app == 1)
        #expect(handed.map(\.entry) == entries)
    }

    @Test func entriesTooLargeForANotificationAreNamedForTheStore() throws {
        let entries =
            [Self.entry("bob", seq: 7, text: String(repeating: "x", count: 5000)), Self.entry("bob", seq: 8, text: "y")]
            + [Self.entry("carol", seq: 1, text: String(repeating: "z", count: 3000))]
        let letter = ClusterLink.notification(handing: entries, to: 9, app: 1)
        #expect(try #require(letter).fitsInANotification)
        guard case .fetch(let app, let users) = try Self.notice(letter) else {
            Issue.record("not named: \(String(describing: letter))")
            return
        }
        #expect(app == 1)
        #expect(users == ["bob", "carol"])
    }

    /// So many users that even their names do not fit: the caller posts a letter instead.
    @Test func namesTooLargeForANotificationAreLeftToALetter() {
        let entries = (0..<400).map { Self.entry("user-with-a-rather-long-name-\($0)", seq: 1, text: "hi") }
        #expect(ClusterLink.notification(handing: entries, to: 9, app: 1) == nil)
    }

    @Test func theQueueKeepsOrderSendsAWaitingWakeUpOnceAndBatches() async {
        let queue = PendingNotifications()
        queue.add([.wakeup(1), Letter(node: 1, body: "a"), .wakeup(1), .wakeup(2), Letter(node: 1, body: "a")])
        #expect(
            await queue.take(waitingUpTo: .seconds(5)) == [.wakeup(1), Letter(node: 1, body: "a"), .wakeup(2), Letter(node: 1, body: "a")])
        // Sent: a wake-up queued now goes again.
        queue.add([.wakeup(1)])
        #expect(await queue.take(waitingUpTo: .seconds(5)) == [.wakeup(1)])
        let many = (0..<(PendingNotifications.batchLimit + 5)).map { Letter(node: 3, body: "\($0)") }
        queue.add(many)
        #expect(await queue.take(waitingUpTo: .seconds(5)) == Array(many.prefix(PendingNotifications.batchLimit)))
        #expect(await queue.take(waitingUpTo: .seconds(5)) == Array(many.suffix(5)))
    }

    /// A failed round trip's notifications go again ahead of what was queued since, a wake-up waiting for the same node
    /// moving ahead with them.
    @Test func aFailedBatchGoesAgainFirst() async {
        let queue = PendingNotifications()
        queue.add([Letter(node: 1, body: "later"), .wakeup(2)])
        queue.addFirst([.wakeup(2), Letter(node: 1, body: "failed"), .wakeup(2)])
        #expect(!queue.isEmpty)
        #expect(
            await queue.take(waitingUpTo: .seconds(5)) == [.wakeup(2), Letter(node: 1, body: "failed"), Letter(node: 1, body: "later")])
        #expect(queue.isEmpty)
        queue.add([.wakeup(2)])  // sent: queued again
        #expect(await queue.take(waitingUpTo: .seconds(5)) == [.wakeup(2)])
    }

    /// Steps not taken go back as the signals they came from, ahead of what arrived since.
    @Test func stepsPutBackComeFirst() async {
        let arrivals = Arrivals()
        arrivals.add(.notice("later"))
        arrivals.putBack([Arrivals.Step.readMailbox, .receive("a"), .resync][...])
        #expect(arrivals.waiting == [.wakeup, .notice("a"), .listening, .notice("later")])
        #expect(await arrivals.take(waitingUpTo: .seconds(5)) == [.wakeup, .notice("a"), .listening, .notice("later")])
    }

    @Test func aNoticeIsActedOnOnlyAfterTheMailboxItsWakeUpsAnnounced() {
        typealias Step = Arrivals.Step
        #expect(Arrivals.steps(for: [], mailboxDue: false) == [])
        #expect(Arrivals.steps(for: [], mailboxDue: true) == [Step.readMailbox])
        #expect(Arrivals.steps(for: [.notice("a"), .notice("b")], mailboxDue: false) == [Step.receive("a"), .receive("b")])
        #expect(
            Arrivals.steps(for: [.notice("a"), .wakeup, .wakeup, .notice("b"), .wakeup], mailboxDue: false)
                == [Step.receive("a"), .readMailbox, .receive("b"), .readMailbox])
        // Polling reads before anything that arrived.
        #expect(Arrivals.steps(for: [.notice("a")], mailboxDue: true) == [Step.readMailbox, .receive("a")])
        // Listening again: the mailbox first (closes), then every device reads the store.
        #expect(Arrivals.steps(for: [.listening], mailboxDue: false) == [Step.readMailbox, .resync])
        #expect(
            Arrivals.steps(for: [.notice("a"), .listening, .notice("b")], mailboxDue: false)
                == [Step.receive("a"), .readMailbox, .receive("b"), .resync])
    }
}
