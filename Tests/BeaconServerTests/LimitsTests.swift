import BeaconCore
import BeaconTesting
import Foundation
import Testing

@testable import BeaconServer

/// Abuse has limits: sends are rate-limited per user and per app, and users cannot put others in groups (issue 22, item 7).
@Suite struct LimitsTests {
    @Test func aTokenBucketAdmitsItsBurstThenItsRate() {
        let buckets = TokenBuckets(rate: SendRate(perSecond: 10, burst: 20))
        #expect(buckets.take(20, key: "a", now: 0))
        #expect(!buckets.take(1, key: "a", now: 0))
        #expect(buckets.take(1, key: "b", now: 0))  // keys are apart
        #expect(!buckets.take(1, key: "a", now: 99))  // 0.99 tokens refilled
        #expect(buckets.take(1, key: "a", now: 100))
        #expect(!buckets.take(10, key: "a", now: 1000))  // 9 tokens
        #expect(buckets.take(20, key: "a", now: 1_000_000))  // refilled to the burst, not beyond
        #expect(!buckets.take(1, key: "a", now: 1_000_000))
        // A refused take takes nothing; a clock going back refills nothing.
        #expect(!buckets.take(5, key: "a", now: 500))
        #expect(buckets.take(5, key: "a", now: 1_000_500))
        // A cost beyond the burst goes when the bucket is full, and empties it (else it could never go).
        #expect(buckets.take(50, key: "c", now: 0))
        #expect(!buckets.take(1, key: "c", now: 0))
        #expect(!buckets.take(50, key: "c", now: 1_000))
        #expect(buckets.take(50, key: "c", now: 2_000))
    }

    @Test func extremeRatesAndTimesCannotOverflow() {
        let buckets = TokenBuckets(rate: SendRate(perSecond: .max, burst: .max))
        #expect(buckets.take(.max, key: "a", now: .min))
        #expect(buckets.take(1, key: "a", now: .max))
        let none = TokenBuckets(rate: SendRate(perSecond: 0, burst: 0))
        #expect(none.take(1, key: "a", now: 0))  // a burst of at least one
        #expect(!none.take(1, key: "a", now: .max))
    }

    @Test func fullBucketsAreForgottenButBusyOnesAreKept() {
        let buckets = TokenBuckets(rate: SendRate(perSecond: 1, burst: 2))
        #expect(buckets.take(2, key: "busy", now: 0))
        for index in 0..<20_000 { _ = buckets.take(0, key: "idle-\(index)", now: 0) }
        // Full buckets were dropped as the table grew (it stays near its pruning size, not at 20,001)...
        #expect(buckets.count <= 10_001)
        // ...and the busy sender's empty bucket survived every pruning.
        #expect(!buckets.take(1, key: "busy", now: 10))
    }

    @Test func theLimiterCountsTheUserAndTheApp() throws {
        let limiter = SendLimiter(SendLimits(perUser: SendRate(perSecond: 1, burst: 2), perApp: SendRate(perSecond: 1, burst: 3)))
        try limiter.admit(app: 1, user: "alice", deliveries: 2, now: 0)
        #expect(throws: BeaconError(.tooManyRequests, "alice is sending too fast; slow down")) {
            try limiter.admit(app: 1, user: "alice", deliveries: 1, now: 0)
        }
        try limiter.admit(app: 1, user: nil, deliveries: 1, now: 0)  // the app itself: the app's bucket only
        #expect(throws: BeaconError(.tooManyRequests, "this app is sending too fast; slow down")) {
            try limiter.admit(app: 1, user: "bob", deliveries: 1, now: 0)
        }
        try limiter.admit(app: 2, user: "bob", deliveries: 2, now: 0)  // another app
    }

    /// Past the user's rate, a send by that user — REST with a user token, or a device — gets `429 too_many_requests` and
    /// stores nothing; the app's own sends count against the app's rate alone.
    @Test func sendsPastTheUsersRateAreRefusedWithTooManyRequests() async throws {
        let limits = SendLimits(perUser: SendRate(perSecond: 0, burst: 2), perApp: SendRate(perSecond: 0, burst: 5))
        try await TestBeacon.$sendLimits.withValue(limits) {
            try await TestBeacon.run(restInProcess: true) { beacon in
                try await beacon.createUsers("alice", "bob")
                let alice = try await beacon.userToken("alice")
                let message: JSONValue = ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "x"]]
                #expect(try await beacon.rest("POST", "/messages/users", message, token: alice).status == 200)
                let device = try await RawDevice.connect(beacon, "alice", device: "phone")
                device.send(#"{"op":"send","id":"s1","to":"bob","chat_type":"chat","type":"txt","body":{"msg":"y"}}"#)
                device.send(#"{"op":"send","id":"s2","to":"bob","chat_type":"chat","type":"txt","body":{"msg":"z"}}"#)
                let frames = try await device.frames.wait { frames in
                    frames.contains { if case .error("s2", _, _) = $0 { true } else { false } }
                }
                #expect(frames.contains { if case .sent("s1", _, _) = $0 { true } else { false } })
                #expect(frames.contains { if case .error("s2", "too_many_requests", _) = $0 { true } else { false } })
                // A retry of the stored s1 is answered with its message, however fast alice goes.
                device.send(#"{"op":"send","id":"s1","to":"bob","chat_type":"chat","type":"txt","body":{"msg":"y"}}"#)
                let again = try await device.frames.wait { frames in
                    frames.filter { if case .sent("s1", _, _) = $0 { true } else { false } }.count == 2
                }
                let answers = again.compactMap { frame -> String? in if case .sent("s1", let id, _) = frame { id } else { nil } }
                #expect(answers.count == 2 && answers[0] == answers[1])
                try await device.close()
                let refused = try await beacon.rest("POST", "/messages/users", message, token: alice)
                #expect(refused.status == 429 && refused.json["error"] == "too_many_requests", "\(refused.json)")
                // The app's sends for alice count against the app: 2 of its 5 are used.
                for _ in 0..<3 { #expect(try await beacon.rest("POST", "/messages/users", message).status == 200) }
                #expect(try await beacon.rest("POST", "/messages/users", message).status == 429)
                #expect(try await beacon.rest("GET", "/users/bob/offline_msg_count").json["data"]?["bob"] == "5")
            }
        }
    }

    /// An app's send naming a user that does not exist (found out as it is stored) costs one delivery, as before the
    /// store found it: the others it took are given back.
    @Test func aSendToAMissingUserCostsOneDelivery() async throws {
        let limits = SendLimits(perUser: nil, perApp: SendRate(perSecond: 0, burst: 4))
        try await TestBeacon.$sendLimits.withValue(limits) {
            try await TestBeacon.run(restInProcess: true) { beacon in
                try await beacon.createUsers("alice", "bob", "carol")
                let toMissing: JSONValue = ["from": "alice", "to": ["bob", "carol", "ghost"], "type": "txt", "body": ["msg": "x"]]
                let refused = try await beacon.rest("POST", "/messages/users", toMissing)
                #expect(refused.status == 404 && refused.json["error"] == "user_not_found", "\(refused.json)")
                #expect(try await beacon.rest("GET", "/users/bob/offline_msg_count").json["data"]?["bob"] == "0")
                // 1 of the 4 is used: three more sends to one user go through, the fourth does not.
                let one: JSONValue = ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "y"]]
                for _ in 0..<3 { #expect(try await beacon.rest("POST", "/messages/users", one).status == 200) }
                #expect(try await beacon.rest("POST", "/messages/users", one).status == 429)
            }
        }
    }

    /// Both buckets count deliveries (a group message, one per member); a send the app's refuses gives the user's back.
    @Test func deliveriesAreCountedAndARefusalTakesNothing() throws {
        let limiter = SendLimiter(SendLimits(perUser: SendRate(perSecond: 1, burst: 4), perApp: SendRate(perSecond: 1, burst: 5)))
        try limiter.admit(app: 1, user: "alice", deliveries: 3, now: 0)  // one message to a group of three
        #expect(throws: BeaconError(.tooManyRequests, "alice is sending too fast; slow down")) {
            try limiter.admit(app: 1, user: "alice", deliveries: 2, now: 0)  // alice has one left
        }
        #expect(throws: BeaconError(.tooManyRequests, "this app is sending too fast; slow down")) {
            try limiter.admit(app: 1, user: "bob", deliveries: 3, now: 0)  // the app has two left
        }
        // bob's tokens came back: his four go once the app has refilled (two more in two seconds).
        try limiter.admit(app: 1, user: "bob", deliveries: 4, now: 2000)
    }

    /// `user_not_found` is no username oracle for users: a user token's send to a name that does not exist is answered like
    /// any other (and reaches nobody); the app is still told.
    @Test func aUserIsNotToldWhichNamesExist() async throws {
        try await TestBeacon.run(restInProcess: true) { beacon in
            try await beacon.createUsers("alice", "bob")
            let alice = try await beacon.userToken("alice")
            let toGhost = try await beacon.rest(
                "POST", "/messages/users", ["from": "alice", "to": ["ghost"], "type": "txt", "body": ["msg": "x"]], token: alice)
            let toBob = try await beacon.rest(
                "POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "x"]], token: alice)
            #expect(toGhost.status == 200 && toBob.status == 200)
            #expect(toGhost.json["data"]?["ghost"]?.stringValue != nil, "\(toGhost.json)")
            #expect(try await beacon.rest("GET", "/users/bob/offline_msg_count").json["data"]?["bob"] == "1")
            let byApp = try await beacon.rest(
                "POST", "/messages/users", ["from": "alice", "to": ["ghost"], "type": "txt", "body": ["msg": "x"]])
            #expect(byApp.status == 404 && byApp.json["error"] == "user_not_found")
            // The name created later does not find that message.
            try await beacon.createUsers("ghost")
            #expect(try await beacon.rest("GET", "/users/ghost/offline_msg_count").json["data"]?["ghost"] == "0")
        }
    }

    /// A user token cannot create a group with others in it, nor add anyone; its groups stay within the cap; the app can.
    @Test func usersCreateGroupsOfOneWithinTheCapAndOnlyTheAppAddsMembers() async throws {
        try await TestBeacon.run(restInProcess: true) { beacon in
            try await beacon.createUsers("alice", "bob", "carol")
            let alice = try await beacon.userToken("alice")
            let withOthers = try await beacon.rest(
                "POST", "/chatgroups", ["groupname": "g", "owner": "alice", "members": ["bob"]], token: alice)
            #expect(withOthers.status == 403)
            // Not an oracle: a name that does not exist is refused the same way.
            let withGhost = try await beacon.rest(
                "POST", "/chatgroups", ["groupname": "g", "owner": "alice", "members": ["ghost"]], token: alice)
            #expect(withGhost.status == 403 && withGhost.json["error"] == withOthers.json["error"])
            #expect(
                try await beacon.rest("POST", "/chatgroups", ["groupname": "g", "owner": "alice", "maxusers": 201], token: alice).status
                    == 400)
            let created = try await beacon.rest("POST", "/chatgroups", ["groupname": "g", "owner": "alice", "maxusers": 200], token: alice)
            let group = try #require(created.json["data"]?["groupid"]?.stringValue, "\(created.json)")
            #expect(try await beacon.rest("POST", "/chatgroups/\(group)/users/bob", token: alice).status == 403)
            let bob = try await beacon.userToken("bob")
            #expect(try await beacon.rest("POST", "/chatgroups/\(group)/users/bob", token: bob).status == 403)
            #expect(try await beacon.rest("POST", "/chatgroups/\(group)/users/bob").status == 200)  // the app
            #expect(try await beacon.rest("POST", "/chatgroups/\(group)/users/carol").status == 200)
            #expect(try await beacon.rest("DELETE", "/chatgroups/\(group)/users/carol", token: alice).status == 200)  // the owner removes
            #expect(try await beacon.rest("DELETE", "/chatgroups/\(group)/users/bob", token: bob).status == 200)  // bob leaves
            // The app's groups keep their larger bound.
            #expect(
                try await beacon.rest("POST", "/chatgroups", ["groupname": "big", "owner": "alice", "maxusers": 100_000]).status == 200)
        }
    }
}
