import BeaconClient
import BeaconCore
import BeaconProtocol
import BeaconTesting
import Foundation
import HummingbirdWSClient
import Logging
import NIOCore
import Synchronization
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Seeded fuzzing of everything a request or a frame can carry, against a running server: no input may stop the
/// process or answer 5xx, and every refusal carries a code from docs/errors.md. `BEACON_FUZZ_SEED` replays a run,
/// `BEACON_FUZZ_CASES` scales it.
@Suite struct FuzzTests {
    static let seed = ProcessInfo.processInfo.environment["BEACON_FUZZ_SEED"].flatMap(UInt64.init) ?? 0xBEAC0
    static let cases = ProcessInfo.processInfo.environment["BEACON_FUZZ_CASES"].flatMap(Int.init) ?? 1500

    /// The error codes docs/errors.md lists (its first column).
    static let documentedCodes: Set<String> = {
        let errors = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../docs/errors.md")
        let text = (try? String(contentsOf: errors, encoding: .utf8)) ?? ""
        return Set(
            text.split(separator: "\n").compactMap { line -> String? in
                guard line.hasPrefix("| `") else { return nil }
                return line.split(separator: "`").dropFirst().first.map(String.init)
            })
    }()

    /// Each route with a valid body to start mutating from (`<group>` becomes a real group id).
    static let routes: [(method: String, path: String, body: JSONValue?)] = [
        ("POST", "/token", ["grant_type": "password", "username": "alice", "password": "pw"]),
        ("POST", "/users", [["username": "fuzz1", "password": "pw"]]),
        ("GET", "/users/{user}", nil),
        ("PUT", "/users/{user}", ["nickname": "Al", "timezone": "Asia/Tokyo", "notification_display_style": 1]),
        ("DELETE", "/users/{user}", nil),
        ("GET", "/users/{user}/offline_msg_count", nil),
        ("GET", "/users/{user}/offline_msg_status/{id}", nil),
        ("POST", "/users/{user}/disconnect", nil),
        ("POST", "/chatgroups", ["groupname": "g", "owner": "alice", "members": ["bob"]]),
        ("GET", "/chatgroups/{group}", nil),
        ("GET", "/chatgroups/{group}/users", nil),
        ("POST", "/chatgroups/{group}/users/{user}", nil),
        ("DELETE", "/chatgroups/{group}/users/{user}", nil),
        (
            "POST", "/messages/users",
            [
                "from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "hi"],
                "ext": ["em_push_title": "t", "em_apns_ext": ["em_push_content": "c"], "em_push_ext": ["type": "call"]],
                "offline_push_info": ["push_flag": 0, "title": "T", "desc": "D", "apns_info": ["badge_mode": 1]], "msg_id": "m1",
            ]
        ),
        (
            "POST", "/messages/chatgroups",
            ["from": "alice", "to": ["<group>"], "type": "txt", "body": ["msg": "hi"], "ext": ["em_at_list": ["bob"]]]
        ),
        ("POST", "/messages", ["target_type": "users", "target": ["bob"], "msg": ["type": "txt", "msg": "x"], "from": "alice"]),
        (
            "POST", "/push/certificates",
            [
                "name": "n", "kind": "p8", "file": "-----BEGIN PRIVATE KEY-----", "key_id": "K", "team_id": "T",
                "environment": "development",
                "bundle_id": "b",
            ]
        ),
        ("GET", "/push/certificates", nil),
        ("DELETE", "/push/certificates/{name}", nil),
        ("PUT", "/users/{user}/push/binding", ["device_id": "d", "device_token": "abcd", "notifier_name": "ios-dev", "voip_token": "ef"]),
        ("GET", "/users/{user}/push/binding", nil),
        ("GET", "/push/deliveries?username={user}&message_id={id}&limit={id}", nil),
        ("PUT", "/users/{user}/notification/chat/{user}", ["type": "NONE", "ignoreInterval": "21:00-07:00", "ignoreDuration": 86_400_000]),
        ("GET", "/users/{user}/notification/{chattype}/{user}", nil),
        ("POST", "/users/{user}/notification/query", ["conversations": [["chattype": "chat", "key": "bob"]]]),
        ("PUT", "/push/policy", ["multi_device": "all_offline", "timezone": "UTC", "display_strings": ["image": "[Image]"]]),
        ("GET", "/push/policy", nil),
        ("POST", "/notification/template", ["name": "t", "title_pattern": "{0} {$fromNickname}", "content_pattern": "{1} {$msg}"]),
        ("GET", "/notification/template/{name}", nil),
        ("PUT", "/notification/template/{name}", ["title_pattern": "{0}", "content_pattern": "{99}"]),
        ("DELETE", "/notification/template/{name}", nil),
        ("PUT", "/users/{user}/notification/template", ["templateName": "t"]),
        ("PUT", "/users/{user}/notification/language", ["translationLanguage": "en"]),
        ("PUT", "/push/nickname", [["username": "alice", "push_nickname": "A"]]),
    ]

    /// Path and query values that broke or could break parsers and conversions.
    static let hostileSegments = [
        "alice", "bob", "", ".", "..", "18446744073709551615", "18446744073709551616", "9223372036854775807", "9223372036854775808",
        "-9223372036854775809", "-1", "0", "1e400", "NaN", "%00", "a%00b", "%2F", "%25", "%E2%80%AE", "%F0%9F%98%80", "%C3%28", "%FF",
        String(repeating: "a", count: 300), String(repeating: "9", count: 400), "'%20OR%201=1--", "chat", "groupchat", "t",
    ]

    @Test func hostileRequestsNeverStopTheServerOrAnswer5xx() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.createUsers("alice", "bob")
            let group = try await beacon.createGroup(owner: "alice", members: ["bob"])
            let userToken = try await beacon.userToken("alice")
            var random = SeededRandom(seed: Self.seed)
            var outcomes: [Int: Int] = [:]
            var failures: [String] = []
            for index in 0..<Self.cases {
                let route = Self.routes[random.next(below: Self.routes.count)]
                var path = route.path
                for placeholder in ["{user}", "{id}", "{group}", "{name}", "{chattype}"] {
                    while let range = path.range(of: placeholder) {
                        let value =
                            random.chance(0.3)
                            ? (placeholder == "{group}" ? group : placeholder == "{user}" ? "alice" : "1")
                            : Self.hostileSegments[random.next(below: Self.hostileSegments.count)]
                        path.replaceSubrange(range, with: value)
                    }
                }
                let raw = route.body.map { body in Self.mutatedBytes(of: body.replacingGroup(with: group), random: &random) }
                let token: String? = random.chance(0.15) ? (random.chance(0.5) ? nil : userToken) : beacon.appToken
                guard let url = URL(string: beacon.baseURL.absoluteString + "/acme/chat" + path) else { continue }
                let (status, json) = try await Self.send(route.method, url, raw, token: token)
                outcomes[status, default: 0] += 1
                let code = json["error"]?.stringValue
                if status >= 500 || (status >= 400 && !(code.map(Self.documentedCodes.contains) ?? false)) {
                    failures.append(
                        "#\(index) \(route.method) \(path) body \(raw.map { String(decoding: $0.prefix(300), as: UTF8.self) } ?? "-") → \(status) \(json)"
                    )
                }
            }
            #expect(failures.isEmpty, "\(failures.count) bad answers (seed \(Self.seed)):\n\(failures.prefix(20).joined(separator: "\n"))")
            #expect(try await beacon.rest("GET", "/push/policy").status == 200)  // still serving
            print("fuzz REST: \(Self.cases) requests, seed \(Self.seed), statuses \(outcomes.sorted { $0.key < $1.key })")
        }
    }

    @Test func hostileFramesNeverStopTheServer() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.createUsers("alice", "bob")
            let token = try await beacon.userToken("alice")
            let hostileFrames = Self.hostileFrames(seed: Self.seed &+ 1, count: Self.cases / 2)
            let answers = Locked<[ServerFrame]>([])
            let undecodable = Locked(0)
            let url = "ws://127.0.0.1:\(beacon.port)/acme/chat/ws?device_id=fuzz&access_token=\(token)"
            try await WebSocketClient.connect(url: url, configuration: .init(maxFrameSize: 1 << 20), logger: Logger(label: "fuzz")) {
                inbound, outbound, _ in
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        for try await message in inbound.messages(maxSize: 1 << 20) {
                            guard case .text(let text) = message,
                                let frame = try? JSONDecoder().decode(ServerFrame.self, from: Data(text.utf8))
                            else {
                                undecodable.withLock { $0 += 1 }
                                continue
                            }
                            answers.withLock { $0.append(frame) }
                        }
                    }
                    for (index, frame) in hostileFrames.enumerated() {
                        do {
                            try await outbound.write(frame)
                        } catch {
                            try? await Task.sleep(for: .milliseconds(200))
                            let closing = answers.withLock { $0.filter { if case .closing = $0 { true } else { false } } }
                            Issue.record(
                                "the server closed the connection after frame \(index - 1) of \(hostileFrames.count): \(closing), \(answers.withLock { $0.count }) answers"
                            )
                            throw error
                        }
                    }
                    // Then a well-formed send must still be answered.
                    let probe = ClientFrame.send(.init(id: "probe", to: "bob", chatType: .chat, type: .txt, body: ["msg": "still here"]))
                    try await outbound.write(.text(String(decoding: try JSONEncoder().encode(probe), as: UTF8.self)))
                    try await waitUntil("the probe answered") {
                        answers.withLock { $0.contains { if case .sent("probe", _, _) = $0 { true } else { false } } }
                    }
                    try await outbound.close(.normalClosure, reason: nil)
                    group.cancelAll()
                }
            }
            let received = answers.withLock { $0 }
            let codes = received.compactMap { frame -> String? in if case .error(_, let code, _) = frame { code } else { nil } }
            #expect(
                received.contains { if case .sent("probe", _, _) = $0 { true } else { false } },
                "the connection stopped answering after \(received.count) answers; closing: \(received.filter { if case .closing = $0 { true } else { false } }), last: \(received.suffix(2))"
            )
            #expect(codes.allSatisfy(Self.documentedCodes.contains), "\(Set(codes).subtracting(Self.documentedCodes))")
            #expect(undecodable.withLock { $0 } == 0)
            #expect(try await beacon.rest("GET", "/users/alice").status == 200)
            print(
                "fuzz WebSocket: \(hostileFrames.count) frames, seed \(Self.seed &+ 1), \(codes.count) error frames, \(received.count) answers"
            )
        }
    }

    @Test func anOversizedFrameClosesOnlyItsConnection() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.createUsers("alice")
            let token = try await beacon.userToken("alice")
            let url = "ws://127.0.0.1:\(beacon.port)/acme/chat/ws?device_id=big&access_token=\(token)"
            let close = try await WebSocketClient.connect(
                url: url, configuration: .init(maxFrameSize: 1 << 20), logger: Logger(label: "fuzz")
            ) {
                inbound, outbound, _ in
                try await outbound.write(.text(String(repeating: "x", count: 70_000)))
                for try await _ in inbound.messages(maxSize: 1 << 20) {}
            }
            #expect(close?.closeCode == .messageTooLarge)
            #expect(try await beacon.rest("GET", "/users/alice").status == 200)
        }
    }

    /// Found by the fuzzer: an `ack` of Int64.max was stored as the cursor, and the device never got another message.
    @Test func anAckBeyondWhatWasSentIsRefused() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.createUsers("alice", "bob")
            let bob = try await RawDevice.connect(beacon, "bob", device: "phone")
            bob.send(#"{"op":"ack","seq":9223372036854775807}"#)
            _ = try await bob.frames.wait { $0.contains { if case .error(nil, "illegal_argument", _) = $0 { true } else { false } } }
            try await bob.close()
            _ = try await beacon.rest("POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "later"]])
            let again = try await RawDevice.connect(beacon, "bob", device: "phone")
            #expect(again.stored.map(\.text) == ["later"])
            try await again.close()
        }
    }

    @Test func deeplyNestedAndOversizedBodiesAreRefused() async throws {
        try await TestBeacon.run { beacon in
            let url = beacon.baseURL.appendingPathComponent("acme/chat/messages/users")
            for body in [
                Data(repeating: UInt8(ascii: "["), count: 200_000),
                Data((String(repeating: "{\"a\":", count: 50_000) + "1" + String(repeating: "}", count: 50_000)).utf8),
                Data(repeating: UInt8(ascii: "a"), count: 300_000), Data([0xFF, 0xFE, 0x00]), Data(),
            ] {
                let (status, json) = try await Self.send("POST", url, body, token: beacon.appToken)
                #expect(
                    (400..<500).contains(status) && (json["error"]?.stringValue.map(Self.documentedCodes.contains) ?? false),
                    "\(status) \(json)")
            }
            #expect(try await beacon.rest("GET", "/push/policy").status == 200)
        }
    }

    // MARK: Mutation

    /// Valid frames mutated, random text and binary frames.
    static func hostileFrames(seed: UInt64, count: Int) -> [WebSocketOutboundWriter.OutboundFrame] {
        var random = SeededRandom(seed: seed)
        let valid: [JSONValue] = [
            [
                "op": "send", "id": "x1", "to": "bob", "chat_type": "chat", "type": "txt", "body": ["msg": "hi"],
                "ext": ["em_push_title": "t"],
            ],
            [
                "op": "send", "id": "x2", "to": "bob", "chat_type": "groupchat", "type": "custom", "body": ["customEvent": "e"],
                "routetype": "ROUTE_ONLINE",
            ],
            ["op": "ack", "seq": 1], ["op": "sync"], ["op": "ping"],
        ]
        return (0..<count).compactMap { _ -> WebSocketOutboundWriter.OutboundFrame? in
            switch random.next(below: 10) {
            case 0: return .binary(ByteBuffer(bytes: random.bytes(count: random.next(below: 64))))
            case 1: return .text(String(decoding: random.bytes(count: random.next(below: 64)), as: UTF8.self))
            default:
                // Frames over 64 KB end the connection (close code 1009): `anOversizedFrameClosesOnlyItsConnection`.
                let bytes = mutatedBytes(of: valid[random.next(below: valid.count)], random: &random)
                return bytes.count > 60_000 ? nil : .text(String(decoding: bytes, as: UTF8.self))
            }
        }
    }

    static func send(_ method: String, _ url: URL, _ body: Data?, token: String?) async throws -> (Int, JSONValue) {
        var request = URLRequest(url: url)
        request.httpMethod = method
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        if let token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        request.httpBody = body
        let (data, response) = try await URLSession.shared.dataIgnoringCancellation(for: request)
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        return (
            status, (try? JSONDecoder().decode(JSONValue.self, from: data)) ?? .string(String(decoding: data.prefix(200), as: UTF8.self))
        )
    }

    /// A valid body, changed in one or two hostile ways (or sent as is).
    static func mutatedBytes(of body: JSONValue, random: inout SeededRandom) -> Data {
        var value = body
        for _ in 0..<(1 + random.next(below: 2)) { value = mutate(value, random: &random) }
        var bytes = (try? JSONEncoder().encode(value)) ?? Data()
        switch random.next(below: 12) {
        case 0: bytes = bytes.prefix(random.next(below: bytes.count + 1))  // truncated
        case 1 where !bytes.isEmpty: bytes[random.next(below: bytes.count)] = UInt8(random.next(below: 256))  // a flipped byte
        case 2:
            bytes = Data(String(decoding: bytes, as: UTF8.self).replacingOccurrences(of: "\"hi\"", with: "\"\u{0}\u{202E}\u{FFFF}\"").utf8)
        case 3:  // integers no Double holds exactly
            let text = String(decoding: bytes, as: UTF8.self)
            bytes = Data(
                text.replacingOccurrences(of: ":1", with: ":18446744073709551616").replacingOccurrences(
                    of: ":0", with: ":-9223372036854775809"
                ).utf8)
        default: break
        }
        return bytes
    }

    static let hostileValues: [JSONValue] = [
        .null, true, 0, -1, 1.5, .number(9.223372036854775807e18), .number(1.8446744073709552e19), .number(1e308), .number(-1e308),
        "", " ", "{-1}", "{100}", "{99999999999999999999}", "{{0}}", "{", "}", "{$msg}{$msg}{$msg}", "{$unknown}", "\u{0}",
        .string(String(repeating: "{0}", count: 400)), .string(String(repeating: "é", count: 3000)),
        .string(String(repeating: "x", count: 70_000)),
        "99:99-25:61", "Mars/Olympus", "ALL", "AT", "NONE", "call", "ROUTE_ONLINE", [], [:], [.null], ["em_push_ext": ["type": 5]],
        .array(Array(repeating: "bob", count: 500)),
    ]

    static func mutate(_ value: JSONValue, random: inout SeededRandom) -> JSONValue {
        switch value {
        case .object(var object) where !object.isEmpty && random.chance(0.8):
            let keys = object.keys.sorted()
            let key = keys[random.next(below: keys.count)]
            switch random.next(below: 4) {
            case 0: object[key] = nil
            case 1: object["x\(random.next(below: 100))"] = hostileValues[random.next(below: hostileValues.count)]
            default: object[key] = mutate(object[key]!, random: &random)
            }
            return .object(object)
        case .array(var array) where !array.isEmpty && random.chance(0.8):
            let index = random.next(below: array.count)
            array[index] = mutate(array[index], random: &random)
            return .array(array)
        default:
            return hostileValues[random.next(below: hostileValues.count)]
        }
    }
}

/// SplitMix64: a small, fast generator whose runs replay from their seed.
struct SeededRandom {
    private var state: UInt64

    init(seed: UInt64) {
        state = seed
    }

    mutating func nextUInt64() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    mutating func next(below bound: Int) -> Int {
        bound <= 0 ? 0 : Int(nextUInt64() % UInt64(bound))
    }

    mutating func chance(_ probability: Double) -> Bool {
        Double(nextUInt64() % 1_000_000) / 1_000_000 < probability
    }

    mutating func bytes(count: Int) -> [UInt8] {
        (0..<count).map { _ in UInt8(truncatingIfNeeded: nextUInt64()) }
    }
}

extension JSONValue {
    func replacingGroup(with group: String) -> JSONValue {
        switch self {
        case .string("<group>"): .string(group)
        case .array(let items): .array(items.map { $0.replacingGroup(with: group) })
        case .object(let object): .object(object.mapValues { $0.replacingGroup(with: group) })
        default: self
        }
    }
}
