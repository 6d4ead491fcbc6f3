import BeaconCore
import BeaconServer
import BeaconTesting
import Foundation
import Logging
import Synchronization
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Structured logs (issue 10): JSON lines, one per request, never a token.
@Suite struct LoggingTests {
    /// Lines written by a JSON handler.
    final class Lines: Sendable {
        private let lines = Mutex<[String]>([])
        var all: [String] { lines.withLock { $0 } }
        var objects: [JSONValue] { all.compactMap { try? JSONDecoder().decode(JSONValue.self, from: Data($0.utf8)) } }
        func logger(level: Logger.Level = .info) -> Logger {
            var logger = Logger(label: "beacon") { label in JSONLogHandler(label: label) { line in self.lines.withLock { $0.append(line) } }
            }
            logger.logLevel = level
            return logger
        }
    }

    @Test func jsonLinesCarryLevelMessageAndMetadata() throws {
        let lines = Lines()
        var logger = lines.logger()
        logger[metadataKey: "node"] = "a"
        logger.info("hello \"world\"", metadata: ["user": "bob", "count": .stringConvertible(3), "level": "shadowed", "list": ["x", "y"]])
        logger.debug("not at info")
        #expect(lines.all.count == 1)
        #expect(lines.all[0].hasSuffix("}\n") && lines.all[0].filter { $0 == "\n" }.count == 1)
        let line = try #require(lines.objects.first)
        #expect(line["level"] == "info")
        #expect(line["label"] == "beacon")
        #expect(line["message"] == "hello \"world\"")
        #expect(line["node"] == "a" && line["user"] == "bob" && line["count"] == "3")
        #expect(line["_level"] == "shadowed")
        #expect(line["list"] == ["x", "y"])
        #expect(line["source"] == "BeaconServerTests")
        let time = try #require(line["time"]?.stringValue)
        #expect(time.hasSuffix("Z") && time.count == 24)
    }

    /// A message whose pushes cannot be decided is logged by id at every retry, never with its body (issue 22).
    @Test func aRoutingFailureLogsTheMessageIdNotItsBody() async throws {
        struct Refused: Error {}
        let lines = Lines()
        let clock = TestClock()
        let hooks = {
            var hooks = BeaconHooks()
            hooks.afterPresence = { _ in throw Refused() }
            return hooks
        }()
        try await withSimulator { simulator in
            try await TestBeacon.run(clock: clock, push: simulator, hooks: hooks, logger: lines.logger()) { beacon in
                try await beacon.createUsers("alice", "bob")
                try await beacon.uploadP8()  // an app without a push configuration routes nothing
                let (status, answer) = try await beacon.rest(
                    "POST", "/messages/users", ["from": "alice", "to": ["bob"], "type": "txt", "body": ["msg": "my PIN is 4711"]])
                #expect(status == 200, "\(answer)")
                // The sweep retries the pending route once it is old enough, and fails again.
                clock.advance(seconds: 10)
                var failures: [JSONValue] = []
                try await waitUntil("the failed retry logged", timeout: .seconds(10), interval: .milliseconds(50)) {
                    failures = lines.objects.filter { $0["message"] == "routing a pending message failed" }
                    return !failures.isEmpty
                }
                let failure = try #require(failures.first)
                // The metadata's `message` (shadowed by the line's own as `_message`) is the id alone.
                #expect(UInt64(failure["_message"]?.stringValue ?? "") != nil, "\(failure)")
                #expect(failure["error"] != nil)
                // (The words, not the digits: a message id, a port or a key id may hold "4711" by chance.)
                #expect(!lines.all.contains { $0.contains("PIN is") })
            }
        }
    }

    @Test func everyRequestIsOneLineWithItsRouteStatusAndIdAndNoToken() async throws {
        let lines = Lines()
        try await TestBeacon.run(logger: lines.logger()) { beacon in
            try await beacon.createUsers("bob")
            let token = try await beacon.userToken("bob")
            var request = URLRequest(url: URL(string: beacon.baseURL.absoluteString + "/acme/chat/users/bob?access_token=\(token)")!)
            request.httpMethod = "GET"
            let (_, response) = try await URLSession.shared.dataIgnoringCancellation(for: request)
            let requestID = try #require((response as? HTTPURLResponse)?.value(forHTTPHeaderField: "X-Request-Id"))
            _ = try await beacon.rest("GET", "/users/ghost")
            let requests = lines.objects.filter { $0["message"] == "request" }
            let mine = try #require(requests.first { $0["request_id"]?.stringValue == requestID })
            #expect(mine["method"] == "GET")
            #expect(mine["route"] == "/{org}/{app}/users/{username}")
            #expect(mine["path"] == "/acme/chat/users/bob")
            #expect(mine["status"] == "200")
            #expect(Double(mine["duration_ms"]?.stringValue ?? "") != nil)
            #expect(requests.contains { $0["path"] == "/acme/chat/users/ghost" && $0["status"] == "404" })
            // Nothing logged holds a token or a password.
            #expect(!lines.all.contains { $0.contains(token) || $0.contains(beacon.appToken) || $0.contains("\"pw\"") })
        }
    }
}
