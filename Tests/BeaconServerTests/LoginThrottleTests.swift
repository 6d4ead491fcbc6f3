import BeaconCore
import BeaconTesting
import Foundation
import Testing

@testable import BeaconServer

private let wrong = BeaconError(.invalidGrant, "username or password is wrong")
private let throttled = BeaconError(.tooManyRequests, "too many failed logins; try again in a few minutes")

private func address(_ text: String) throws -> NetworkAddress {
    try #require(NetworkAddress(text))
}

/// The throttle's entries, users and addresses.
private func counts(_ throttle: LoginThrottle) -> [Int] {
    let counts = throttle.entryCounts
    return [counts.users, counts.addresses]
}

/// Issue 22, item 4: the login throttle keeps bounded state that no flood can reset.
@Suite struct LoginThrottleTests {
    private let t0: Int64 = 1_700_000_000_000
    private let window = LoginThrottle.Limits().window

    /// A failed attempt, begun and ended.
    private func fail(_ throttle: LoginThrottle, _ username: String, from address: NetworkAddress?, at now: Int64) throws {
        throttle.end(try throttle.begin(app: 1, username: username, address: address, now: now), now: now, succeeded: false)
    }

    @Test func aUsernameNoUserCanHaveIsRefusedAndKeepsNothing() throws {
        let throttle = LoginThrottle()
        // Before: each became a key (255 KB kept per failure) and counted against the address.
        let names = [
            String(repeating: "a", count: 65), String(repeating: "a", count: 255 * 1024), "", ".", "..", "Alice", "bob smith", "ü",
        ]
        for _ in 0..<60 {
            for name in names {
                #expect(throws: wrong) { _ = try throttle.begin(app: 1, username: name, address: try address("192.0.2.1"), now: t0) }
            }
        }
        #expect(counts(throttle) == [0, 0])
        // The address was not counted: a real user logs in from it.
        let attempt = try throttle.begin(app: 1, username: "bob", address: try address("192.0.2.1"), now: t0)
        throttle.end(attempt, now: t0, succeeded: true)
        #expect(counts(throttle) == [0, 0])
    }

    @Test func entriesExpireByTime() throws {
        let throttle = LoginThrottle()
        for index in 0..<10 { try fail(throttle, "user\(index)", from: try address("10.0.0.\(index)"), at: t0) }
        for _ in 0..<10 { try fail(throttle, "bob", from: try address("10.0.1.1"), at: t0) }
        #expect(counts(throttle) == [11, 11])
        #expect(throws: throttled) { _ = try throttle.begin(app: 1, username: "bob", address: nil, now: t0 + window - 1) }
        // An attempt still being checked outlives its window.
        let slow = try throttle.begin(app: 1, username: "slow", address: try address("10.0.2.1"), now: t0)
        // A window later every entry has expired and is dropped; bob may try again.
        let later = t0 + window
        let again = try throttle.begin(app: 1, username: "bob", address: nil, now: later)
        #expect(counts(throttle) == [2, 1])  // bob (in flight) and slow
        throttle.end(again, now: later, succeeded: true)
        throttle.end(slow, now: later, succeeded: false)
        #expect(counts(throttle) == [1, 1])  // slow's failure counts, in a new window
        // Entries go by time, not by number: the next sweep, a window after slow's failure, drops it.
        _ = try throttle.begin(app: 1, username: "carol", address: nil, now: later + window)
        #expect(counts(throttle) == [1, 0])
    }

    @Test func aFloodOfAddressesDoesNotResetAUsersFailures() throws {
        let throttle = LoginThrottle()
        for _ in 0..<10 { try fail(throttle, "bob", from: try address("192.0.2.1"), at: t0) }
        #expect(throws: throttled) { _ = try throttle.begin(app: 1, username: "bob", address: try address("192.0.2.2"), now: t0) }
        // 200,000 distinct addresses, each failing for another user (before: at 100,000 entries the table was wiped,
        // bob's count with it).
        for index in 0..<200_000 {
            try fail(throttle, "u\(index)", from: NetworkAddress(ipv4: 0x0A00_0000 + UInt32(index)), at: t0 + 1)
        }
        #expect(throws: throttled) { _ = try throttle.begin(app: 1, username: "bob", address: try address("198.51.100.1"), now: t0 + 2) }
        #expect(counts(throttle) == [200_001, LoginThrottle.Limits().maxAddresses])  // no user entry dropped; addresses capped
        // Past the cap a new address is not counted (rather than refused): its logins are limited per user alone.
        for index in 0..<60 { try fail(throttle, "late\(index)", from: try address("198.51.100.2"), at: t0 + 3) }
        // A window after its last failure bob may try again.
        throttle.end(try throttle.begin(app: 1, username: "bob", address: nil, now: t0 + window), now: t0 + window, succeeded: true)
    }

    @Test func pastTheCapKnownAddressesKeepTheirCounts() throws {
        let throttle = LoginThrottle(limits: .init(perUser: 10, perAddress: 2, maxAddresses: 2))
        for index in 0..<2 { try fail(throttle, "a\(index)", from: try address("192.0.2.1"), at: t0) }
        try fail(throttle, "b0", from: try address("192.0.2.2"), at: t0)
        #expect(throws: throttled) { _ = try throttle.begin(app: 1, username: "c", address: try address("192.0.2.1"), now: t0) }
        for index in 0..<5 { try fail(throttle, "d\(index)", from: try address("192.0.2.3"), at: t0) }
        #expect(counts(throttle) == [8, 2])  // a0, a1, b0 and d0-d4 (the refused c is not kept); .3 is not counted
        // The cap is per app: app 1's flood leaves app 2 counting its addresses.
        for _ in 0..<2 {
            throttle.end(try throttle.begin(app: 2, username: "e", address: try address("192.0.2.3"), now: t0), now: t0, succeeded: false)
        }
        #expect(throws: throttled) { _ = try throttle.begin(app: 2, username: "f", address: try address("192.0.2.3"), now: t0) }
    }

    @Test func anIPv6ClientCountsAsItsSlash64() throws {
        let throttle = LoginThrottle(limits: .init(perUser: 10, perAddress: 3))
        for (index, text) in ["2001:db8:0:7::1", "2001:db8:0:7::2", "2001:db8:0:7:ffff:ffff:ffff:ffff"].enumerated() {
            try fail(throttle, "u\(index)", from: try address(text), at: t0)
        }
        #expect(throws: throttled) { _ = try throttle.begin(app: 1, username: "v", address: try address("2001:db8:0:7:abcd::9"), now: t0) }
        try fail(throttle, "v", from: try address("2001:db8:0:8::1"), at: t0)
        // Another app counts its own.
        throttle.end(try throttle.begin(app: 2, username: "v", address: try address("2001:db8:0:7::1"), now: t0), now: t0, succeeded: true)
    }
}

/// Client addresses: one pure resolution, used by the throttle and the console cookie.
@Suite struct ClientOriginTests {
    @Test func addressesParseExactlyAndPrintCanonically() throws {
        let canonical = [
            "1.2.3.4": "1.2.3.4", "0.0.0.0": "0.0.0.0", "255.255.255.255": "255.255.255.255",
            "::ffff:1.2.3.4": "1.2.3.4", "::FFFF:102:304": "1.2.3.4", "0:0:0:0:0:ffff:1.2.3.4": "1.2.3.4",
            "2001:DB8:0:0:0:0:0:1": "2001:db8::1", "2001:0db8::0001": "2001:db8::1", "2001:db8:0:0:1:0:0:1": "2001:db8::1:0:0:1",
            "2001:db8:0:0:1:0:0:0": "2001:db8:0:0:1::", "2001:db8:0:1:1:1:1:1": "2001:db8:0:1:1:1:1:1", "::": "::", "::1": "::1",
            "1::": "1::", "1:2:3:4:5:6:7::": "1:2:3:4:5:6:7:0", "::2:3:4:5:6:7:8": "0:2:3:4:5:6:7:8", "fe80::1:2.3.4.5": "fe80::1:203:405",
            "1:2:3:4:5:6:1.2.3.4": "1:2:3:4:5:6:102:304", "::1.2.3.4": "::102:304",
        ]
        for (text, printed) in canonical { #expect(NetworkAddress(text)?.description == printed, "\(text)") }
        let invalid = [
            "", "1.2.3", "1.2.3.4.5", "256.1.1.1", "01.2.3.4", "1.2.3.-1", "+1.2.3.4", " 1.2.3.4", "1.2.3.4 ", "1.2.3.4:80", "1..2.3",
            "localhost", "::1%eth0", "[::1]", "1:2:3:4:5:6:7:8:9", "1:2:3:4:5:6:7:8::", "1::2::3", ":::", ":1::", "1::2:", "12345::",
            "g::", "::1.2.3", "1.2.3.4::", "::1.2.3.4:5", "1:2:3:4:5:6:7:1.2.3.4", "1:2:3:4:5:6:7", String(repeating: "1:", count: 40),
        ]
        for text in invalid { #expect(NetworkAddress(text) == nil, "\(text)") }
        let forwarded = [
            "1.2.3.4:5678": "1.2.3.4", "[2001:db8::1]:443": "2001:db8::1", "[2001:db8::1]": "2001:db8::1", "2001:db8::1": "2001:db8::1",
        ]
        for (text, printed) in forwarded { #expect(NetworkAddress(forwarded: text)?.description == printed, "\(text)") }
        for text in ["[::1]x", "[::1]:", "1.2.3.4:", "1.2.3.4:123456", "unknown", "[1.2.3.4", "", "_hidden"] {
            #expect(NetworkAddress(forwarded: text) == nil, "\(text)")
        }
    }

    @Test func rangesMatchExactly() throws {
        func range(_ text: String) throws -> AddressRange { try AddressRange(parsing: text) }
        #expect(try range("10.0.0.0/8").contains(try address("10.255.1.2")))
        #expect(try !range("10.0.0.0/8").contains(try address("11.0.0.0")))
        #expect(try range("10.0.0.1").contains(try address("::ffff:10.0.0.1")))  // a dual-stack listener's form
        #expect(try !range("10.0.0.1").contains(try address("10.0.0.2")))
        #expect(try range("0.0.0.0/0").contains(try address("1.2.3.4")))
        #expect(try !range("0.0.0.0/0").contains(try address("::1")))
        #expect(try range("::/0").contains(try address("1.2.3.4")))
        #expect(try range("2001:db8::/32").contains(try address("2001:db8:ffff::1")))
        #expect(try !range("2001:db8::/32").contains(try address("2001:db9::")))
        #expect(try range("fe80::/10").contains(try address("febf::1")))
        #expect(try !range("fe80::/10").contains(try address("fec0::1")))
        #expect(try range("192.168.1.128/25").contains(try address("192.168.1.255")))
        #expect(try !range("192.168.1.128/25").contains(try address("192.168.1.127")))
        for text in [
            "10.0.0.1/8", "fe80::1/64", "10.0.0.0/33", "::/129", "1.2.3.4/", "/8", "10.0.0.0/8/8", "10.0.0.0/-1", "10.0.0.0/ 8", "nope",
        ] {
            #expect(throws: BeaconError.self, "\(text)") { try range(text) }
        }
    }

    @Test func theSettingParsesOrNamesTheBadEntry() throws {
        #expect(try TrustedProxies(parsing: "").isEmpty)
        #expect(try TrustedProxies(parsing: " 127.0.0.1 , ::1,").description == "127.0.0.1, ::1")
        do {
            _ = try TrustedProxies(parsing: "127.0.0.1, nope")
            Issue.record("an invalid entry was accepted")
        } catch {
            #expect(error.code == .illegalArgument && error.message.contains("'nope'"))
        }
    }

    @Test func onlyATrustedPeerIsBelieved() throws {
        let proxies = try TrustedProxies(parsing: "127.0.0.1, 10.0.0.0/8, ::1")
        func ip(_ text: String) -> NetworkAddress? { NetworkAddress(text) }
        func origin(_ peer: String?, _ forwardedFor: [String], _ proto: [String] = []) -> ClientOrigin {
            proxies.origin(peer: peer, forwardedFor: forwardedFor, forwardedProto: proto)
        }
        // An untrusted peer is the client, whatever it writes.
        #expect(origin("203.0.113.9", ["198.51.100.1"], ["https"]) == ClientOrigin(address: ip("203.0.113.9"), isHTTPS: false))
        #expect(
            TrustedProxies.none.origin(peer: "127.0.0.1", forwardedFor: ["198.51.100.1"], forwardedProto: ["https"])
                == ClientOrigin(address: ip("127.0.0.1"), isHTTPS: false))
        // A trusted peer: the rightmost entry that is not a trusted proxy; what the client wrote to its left is ignored.
        #expect(origin("127.0.0.1", ["198.51.100.1"], ["https"]) == ClientOrigin(address: ip("198.51.100.1"), isHTTPS: true))
        #expect(origin("127.0.0.1", ["6.6.6.6, 198.51.100.1"]).address == ip("198.51.100.1"))
        #expect(origin("127.0.0.1", ["6.6.6.6", "198.51.100.1"]).address == ip("198.51.100.1"))  // two header lines
        #expect(origin("127.0.0.1", ["6.6.6.6, 198.51.100.1 ,10.1.2.3"]).address == ip("198.51.100.1"))  // a chain
        #expect(origin("127.0.0.1", ["10.0.0.5"]).address == ip("10.0.0.5"))  // proxies all the way: the farthest
        #expect(origin("127.0.0.1", []).address == ip("127.0.0.1"))
        // What is not an address stops the walk at the last hop believed.
        #expect(origin("127.0.0.1", ["198.51.100.1, unknown"]).address == ip("127.0.0.1"))
        #expect(origin("127.0.0.1", ["198.51.100.1, 10.1.2.3, "]).address == ip("127.0.0.1"))
        #expect(origin("127.0.0.1", ["unknown, 10.1.2.3"]).address == ip("10.1.2.3"))
        // IPv6, ports, a dual-stack listener's mapped peer.
        #expect(origin("::1", ["2001:db8::7"]).address == ip("2001:db8::7"))
        #expect(origin("::ffff:127.0.0.1", ["[2001:db8::7]:1234"]).address == ip("2001:db8::7"))
        #expect(origin("2001:db8::2", ["198.51.100.1"]).address == ip("2001:db8::2"))
        #expect(origin(nil, ["198.51.100.1"]) == ClientOrigin(address: nil, isHTTPS: false))
        // The scheme the nearest proxy wrote.
        #expect(origin("127.0.0.1", [], ["HTTPS"]).isHTTPS)
        #expect(!origin("127.0.0.1", [], ["http"]).isHTTPS)
        #expect(!origin("127.0.0.1", [], ["https", "http"]).isHTTPS)
        #expect(origin("127.0.0.1", [], ["http, https"]).isHTTPS)
    }
}

/// The throttle through the server, behind a proxy and not.
@Suite struct LoginThrottleServerTests {
    private static func login(_ beacon: TestBeacon, _ username: String, _ password: String, forwardedFor: String) async throws -> (
        Int, JSONValue
    ) {
        try await REST.call(
            beacon.baseURL, "POST", "/acme/chat/token",
            body: ["grant_type": "password", "username": .string(username), "password": .string(password)], token: nil,
            headers: ["X-Forwarded-For": forwardedFor])
    }

    /// Before, every client behind the documented proxy shared its address: 50 bad logins locked every login of the app.
    @Test func behindATrustedProxyOneClientCannotLockOutAnother() async throws {
        try await TestBeacon.run(trustedProxies: try TrustedProxies(parsing: "127.0.0.1")) { beacon in
            try await beacon.createUsers("carol")
            for index in 0..<50 {
                let (status, answer) = try await Self.login(beacon, "ghost\(index)", "wrong", forwardedFor: "203.0.113.\(index)")
                #expect(status == 400 && answer["error"] == "invalid_grant")
            }
            #expect(try await Self.login(beacon, "carol", "pw", forwardedFor: "198.51.100.7").0 == 200)
            // One client is still limited: entries it writes left of the proxy's own are ignored.
            for index in 0..<50 { _ = try await Self.login(beacon, "ghost\(index)", "wrong", forwardedFor: "10.9.9.\(index), 192.0.2.1") }
            let limited = try await Self.login(beacon, "carol", "pw", forwardedFor: "10.0.0.1, 192.0.2.1")
            #expect(limited.0 == 429 && limited.1["error"] == "too_many_requests")
            #expect(try await Self.login(beacon, "carol", "pw", forwardedFor: "198.51.100.8").0 == 200)
        }
    }

    @Test func withoutATrustedProxyForwardingHeadersAreIgnoredAndImpossibleNamesAreNotCounted() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.createUsers("carol")
            // Usernames no user can have: refused, and counted against nothing.
            for index in 0..<60 {
                let (status, answer) = try await Self.login(
                    beacon, String(repeating: "x", count: 10_000 + index), "wrong", forwardedFor: "203.0.113.1")
                #expect(status == 400 && answer["error"] == "invalid_grant")
            }
            #expect(try await Self.login(beacon, "carol", "pw", forwardedFor: "203.0.113.1").0 == 200)
            // The peer is the client: distinct X-Forwarded-For values do not escape the per-address limit.
            for index in 0..<50 { _ = try await Self.login(beacon, "ghost\(index)", "wrong", forwardedFor: "203.0.113.\(index)") }
            #expect(try await Self.login(beacon, "carol", "pw", forwardedFor: "198.51.100.7").0 == 429)
        }
    }
}
