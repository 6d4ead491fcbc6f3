import APNsSimulator
import BeaconAPNs
import BeaconTesting
import Crypto
import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization
import Testing

@Suite struct TokenAuthTests {
    @Test func anAcceptedNotificationIsRecordedAsSent() async throws {
        try await withSimulatorAndClient { simulator, client, _ in
            let notification = alert("hi", collapseID: "chat-1")
            let accepted = try await client.send(notification)
            #expect(accepted.apnsID == notification.apnsID.uuidString.lowercased())
            #expect(accepted.uniqueID != nil)  // development only
            let deliveries = simulator.deliveries(deviceToken: deviceToken)
            #expect(deliveries.count == 1)
            #expect(deliveries[0].topic == bundleID)
            #expect(deliveries[0].pushType == "alert")
            #expect(deliveries[0].priority == 10)
            #expect(deliveries[0].expiration == 0)
            #expect(deliveries[0].collapseID == "chat-1")
            #expect(deliveries[0].apnsID == accepted.apnsID)
            #expect(deliveries[0].payload == .object(["aps": .object(["alert": .object(["body": .string("hi")])])]))
        }
    }

    @Test func productionSendsNoUniqueID() async throws {
        try await withSimulatorAndClient(environment: .production) { _, client, _ in
            let accepted = try await client.send(alert())
            #expect(accepted.uniqueID == nil)
        }
    }

    @Test func manyConcurrentNotificationsShareTheConnectionOnceTheStreamLimitRises() async throws {
        try await withSimulatorAndClient(client: .init(connections: 1, requestTimeout: .seconds(10))) { simulator, client, _ in
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 0..<300 {
                    group.addTask { _ = try await client.send(alert("m\(index)", token: String(format: "%064x", index))) }
                }
                try await group.waitForAll()
            }
            #expect(simulator.deliveries().count == 300)
        }
    }

    /// Rejections carry a JSON body: 2,000 of them (~77 KB) are more than HTTP/2's first connection window (64 KiB),
    /// so they all arrive only if the client opens the window again as it reads them (without: 1,699 arrived).
    @Test func answersWithBodiesKeepArrivingPastTheConnectionWindow() async throws {
        // A generous timeout: under the whole suite's load an answer can take seconds; a closed window never answers.
        try await withSimulatorAndClient(client: .init(connections: 1, requestTimeout: .seconds(30))) { simulator, client, _ in
            simulator.markUnregistered(deviceToken: "cafe", timestamp: 1_700_000_000_000)
            let rejected = try await withThrowingTaskGroup(of: Int.self) { group in
                for sender in 0..<100 {
                    group.addTask {
                        var count = 0
                        for index in stride(from: sender, to: 2000, by: 100) {
                            if await rejection(client, alert("\(index)", token: "cafe")) == Rejection(410, .unregistered) { count += 1 }
                        }
                        return count
                    }
                }
                return try await group.reduce(0, +)
            }
            #expect(rejected == 2000)
        }
    }

    /// A header HTTP/2 cannot carry is refused before a stream is taken, as a failure not worth retrying; had it reached
    /// NIOHTTP2, each would keep a stream slot, and with the server's limit at 2 the third would end the connection.
    @Test func aHeaderHTTP2CannotCarryIsRefusedWithoutCostingTheConnection() async throws {
        try await withSimulatorAndClient(maxConcurrentStreams: 2, client: .init(connections: 1, requestTimeout: .seconds(10))) {
            simulator, client, _ in
            _ = try await client.send(alert("first"))
            for bad in [alert(collapseID: "a\nb"), alert(collapseID: "nul\u{0}"), alert(token: "ab cd"), alert(topic: "com.example\r")] {
                do throws(APNsFailure) {
                    _ = try await client.send(bad)
                    Issue.record("sent \(bad)")
                } catch {
                    guard case .invalidRequest = error else { throw error }
                    #expect(!error.isTransient)
                }
            }
            _ = try await client.send(alert("last"))
            #expect(simulator.deliveries().compactMap { alertBody($0.payload) } == ["first", "last"])
        }
    }

    @Test func appleRejectionsAreTypedWithTheirStatus() async throws {
        try await withSimulatorAndClient { simulator, client, _ in
            simulator.markUnregistered(deviceToken: "cafe", timestamp: 1_700_000_000_000)
            simulator.registerDeviceToken("beef", topic: "com.other.app")
            let cases: [(APNsNotification, Int, APNsReason)] = [
                (alert(token: "xyz"), 400, .badDeviceToken),
                (alert(payload: []), 400, .payloadEmpty),
                (alert(payload: Array(repeating: UInt8(ascii: " "), count: 4097)), 413, .payloadTooLarge),
                (alert(collapseID: String(repeating: "c", count: 65)), 400, .badCollapseId),
                (alert(priority: 7), 400, .badPriority),
                (alert(pushType: .background, priority: 10), 400, .badPriority),
                // A background push may not carry an alert (nor a badge or sound).
                (alert(pushType: .background, priority: 5), 400, .invalidPushType),
                (alert(topic: bundleID, pushType: .voip), 400, .topicDisallowed),
                (alert(token: "beef"), 400, .deviceTokenNotForTopic),
            ]
            for (notification, status, reason) in cases {
                let answer = await rejection(client, notification)
                #expect(answer?.status == status, "\(reason)")
                #expect(answer?.reason == reason)
            }
            do throws(APNsFailure) {
                _ = try await client.send(alert(token: "cafe"))
                Issue.record("expected 410")
            } catch {
                guard case .rejected(let status, let reason, _, let timestamp) = error else { throw error }
                #expect(status == 410)
                #expect(reason == .unregistered)
                #expect(timestamp == 1_700_000_000_000)
            }
            // VoIP is allowed 5120 bytes on its own topic.
            let voip = alert(
                topic: bundleID + ".voip", pushType: .voip, payload: Array(("{\"x\":\"" + String(repeating: "v", count: 5000) + "\"}").utf8)
            )
            _ = try await client.send(voip)
            #expect(simulator.deliveries().map(\.pushType) == ["voip"])
        }
    }

    @Test func aKeyTheSimulatorDoesNotKnowIsRefused() async throws {
        try await withSimulatorAndClient { simulator, _, _ in
            let stranger = APNsSigningKey(teamID: teamID, keyID: "OTHERKEY00", privateKey: P256.Signing.PrivateKey())
            let impostor = APNsSigningKey(teamID: teamID, keyID: keyID, privateKey: P256.Signing.PrivateKey())
            let endpoints = await simulator.endpoints()
            for key in [stranger, impostor] {
                let client = APNsClient(credentials: .token(key), endpoint: simulator.endpoint(endpoints))
                #expect(await rejection(client, alert()) == Rejection(403, .invalidProviderToken))
                await client.shutdown()
            }
        }
    }

    @Test func tokensAreReusedThenRefreshedAndAnExpiredOneIsReplacedAndRetried() async throws {
        let clock = TestClock.wall()
        try await withSimulatorAndClient(clock: clock, client: .init(connections: 1, tokenLifetime: .seconds(50 * 60))) {
            simulator, client, _ in
            _ = try await client.send(alert("1"))
            clock.advance(minutes: 30)
            _ = try await client.send(alert("2"))  // same token: a new one within 20 minutes would be refused
            clock.advance(minutes: 25)
            _ = try await client.send(alert("3"))  // 55 minutes: a fresh token, 55 minutes after the first
            #expect(simulator.deliveries().count == 3)
        }
        // A client that keeps its token too long hears ExpiredProviderToken, makes a new one and retries once.
        let late = TestClock.wall()
        try await withSimulatorAndClient(clock: late, client: .init(connections: 1, tokenLifetime: .seconds(3 * 3600))) {
            simulator, client, _ in
            _ = try await client.send(alert("1"))
            late.advance(minutes: 61)
            _ = try await client.send(alert("2"))
            #expect(simulator.deliveries().count == 2)
        }
    }

    @Test func changingTheTokenTooOftenIsRefused() async throws {
        let clock = TestClock.wall()
        try await withSimulatorAndClient(clock: clock, client: .init(connections: 1, tokenLifetime: .seconds(60))) { _, client, _ in
            _ = try await client.send(alert("1"))
            clock.advance(minutes: 2)
            #expect(await rejection(client, alert("2")) == Rejection(429, .tooManyProviderTokenUpdates))
        }
    }
}

@Suite struct FaultTests {
    @Test func goAwayStopsTheConnectionAndTheNextSendReconnects() async throws {
        try await withSimulatorAndClient(client: .init(connections: 1, requestTimeout: .seconds(15), reconnectDelay: .milliseconds(10))) {
            simulator, client, _ in
            var faults = SimulatorFaults()
            faults.goAwayAfter = 2
            faults.goAwayReason = "Shutdown"
            simulator.setFaults(faults)
            _ = try await client.send(alert("1"))
            _ = try await client.send(alert("2"))
            do throws(APNsFailure) {
                _ = try await client.send(alert("3"))
                Issue.record("expected the GOAWAY to fail the third send")
            } catch {
                #expect(error.isTransient)
                if case .connectionLost(let why) = error { #expect(why.contains("Shutdown")) } else { Issue.record("\(error)") }
            }
            _ = try await client.send(alert("4"))  // a new connection
            #expect(simulator.deliveries().count == 3)
        }
    }

    @Test func aResetConnectionFailsInFlightSendsAndIsReplaced() async throws {
        try await withSimulatorAndClient(client: .init(connections: 1, requestTimeout: .seconds(15), reconnectDelay: .milliseconds(10))) {
            simulator, client, _ in
            var faults = SimulatorFaults()
            faults.resetAfter = 1
            simulator.setFaults(faults)
            _ = try await client.send(alert("1"))
            await #expect(throws: APNsFailure.self) { _ = try await client.send(alert("2")) }
            _ = try await client.send(alert("3"))
            #expect(simulator.deliveries().map(\.payload).count == 2)
        }
    }

    @Test func nothingWaitsForeverWhenAPNsNeverAnswers() async throws {
        try await withSimulatorAndClient(client: .init(requestTimeout: .milliseconds(300))) { simulator, client, _ in
            var faults = SimulatorFaults()
            faults.neverAnswer = true
            simulator.setFaults(faults)
            do throws(APNsFailure) {
                _ = try await client.send(alert())
                Issue.record("expected a timeout")
            } catch {
                #expect(error == .timeout)
                #expect(error.isTransient)
            }
        }
    }

    @Test func injectedStatusesAreReportedAsTransient() async throws {
        try await withSimulatorAndClient { simulator, client, _ in
            var faults = SimulatorFaults()
            faults.tooManyRequestsTokens = [deviceToken]
            simulator.setFaults(faults)
            #expect(await rejection(client, alert()) == Rejection(429, .tooManyRequests))
            faults = SimulatorFaults()
            faults.failStatus = 503
            faults.failReason = "Shutdown"
            faults.failCount = 1
            simulator.setFaults(faults)
            #expect(await rejection(client, alert()) == Rejection(503, .shutdown))
            faults.failStatus = 500
            faults.failReason = nil
            simulator.setFaults(faults)
            #expect(await rejection(client, alert()) == Rejection(500, .internalServerError))
            _ = try await client.send(alert())  // fail_count was 1
            faults = SimulatorFaults()
            faults.maxPerTokenPerSecond = 2
            simulator.setFaults(faults)
            // Twenty at once: at least one is over the rate unless the machine spreads them over ten seconds (a loaded CI
            // machine once spread three over more than one).
            let answers = await withTaskGroup(of: Rejection?.self) { group in
                for _ in 0..<20 { group.addTask { await rejection(client, alert()) } }
                return await group.reduce(into: [Rejection?]()) { $0.append($1) }
            }
            #expect(answers.contains(Rejection(429, .tooManyRequests)))
            #expect(APNsFailure.rejected(status: 429, reason: .tooManyRequests, apnsID: nil, timestamp: nil).isTransient)
            #expect(!APNsFailure.rejected(status: 400, reason: .badDeviceToken, apnsID: nil, timestamp: nil).isTransient)
        }
    }
}

@Suite struct CertificateAuthTests {
    @Test func aClientCertificateFromARegisteredAuthorityMayPushToItsTopics() async throws {
        try await withSimulatorAndClient { simulator, _, _ in
            let pki = try ClientPKI.make()
            try simulator.registerCertificateAuthority(pem: pki.caPEM, topics: [bundleID])
            let endpoints = await simulator.endpoints()
            let client = APNsClient(credentials: .certificate(chain: pki.chain, key: pki.key), endpoint: simulator.endpoint(endpoints))
            _ = try await client.send(alert())
            _ = try await client.send(alert(topic: bundleID + ".voip", pushType: .voip))
            #expect(await rejection(client, alert(topic: "com.other.app")) == Rejection(400, .topicDisallowed))
            await client.shutdown()
            #expect(simulator.deliveries().count == 2)
        }
    }

    @Test func aCertificateForTheOtherEnvironmentIsRefused() async throws {
        try await withSimulatorAndClient(environment: .production) { simulator, _, _ in
            let pki = try ClientPKI.make()
            try simulator.registerCertificateAuthority(pem: pki.caPEM, topics: [bundleID], environment: .development)
            let client = APNsClient(
                credentials: .certificate(chain: pki.chain, key: pki.key), endpoint: simulator.endpoint(await simulator.endpoints()))
            #expect(await rejection(client, alert()) == Rejection(403, .badCertificateEnvironment))
            await client.shutdown()
        }
    }

    @Test func withoutACertificateOrTokenTheProviderTokenIsMissing() async throws {
        try await withSimulatorAndClient { simulator, _, _ in
            // An unregistered authority: its certificate is not trusted, so the handshake fails and nothing is sent.
            let pki = try ClientPKI.make()
            let client = APNsClient(
                credentials: .certificate(chain: pki.chain, key: pki.key), endpoint: simulator.endpoint(await simulator.endpoints()),
                configuration: .init(requestTimeout: .seconds(2)))
            await #expect(throws: APNsFailure.self) { _ = try await client.send(alert()) }
            await client.shutdown()
            #expect(simulator.deliveries().isEmpty)
        }
    }

    @Test func p12FilesLoadWithTheirPassword() async throws {
        let pki = try ClientPKI.make()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("p12-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        try pki.keyPEM.write(to: directory.appendingPathComponent("key.pem"), atomically: true, encoding: .utf8)
        try pki.certificatePEM.write(to: directory.appendingPathComponent("cert.pem"), atomically: true, encoding: .utf8)
        let openssl = try await runToExit(
            URL(fileURLWithPath: "/usr/bin/openssl"),
            ["pkcs12", "-export", "-inkey", "key.pem", "-in", "cert.pem", "-passout", "pass:s3cret", "-out", "push.p12"], in: directory)
        #expect(openssl.status == 0)
        let p12 = try [UInt8](Data(contentsOf: directory.appendingPathComponent("push.p12")))
        guard case .certificate(let chain, _) = try APNsCredentials.certificate(p12: p12, password: "s3cret") else {
            Issue.record("expected certificate credentials")
            return
        }
        #expect(chain.count == 1)
        #expect(throws: (any Error).self) { try APNsCredentials.certificate(p12: p12, password: "wrong") }
    }
}

@Suite struct ReconnectTests {
    /// A broken endpoint (it accepts TCP and hangs up at once) must not see a rapid open/close loop.
    @Test func reconnectsBackOffInsteadOfLooping() async throws {
        let accepted = Counter()
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { channel in
                accepted.increment()
                return channel.close()
            }
            .bind(host: "127.0.0.1", port: 0).get()
        defer { try? server.close().wait() }
        let client = APNsClient(
            credentials: .token(APNsSigningKey(teamID: teamID, keyID: keyID, privateKey: P256.Signing.PrivateKey())),
            endpoint: APNsEndpoint(host: "127.0.0.1", port: server.localAddress!.port!, trustRoots: []),
            configuration: .init(connections: 1, requestTimeout: .milliseconds(500), reconnectDelay: .milliseconds(200)))
        let start = ContinuousClock.now
        var failures = 0
        while start.duration(to: .now) < .seconds(1) {
            do {
                _ = try await client.send(alert())
            } catch {
                failures += 1
                #expect(error.isTransient)
            }
        }
        await client.shutdown()
        // Delays of 0.2, 0.4, 0.8 s… allow at most four connections in one second, however many sends tried.
        #expect(failures >= 1)
        #expect(accepted.value <= 4, "\(accepted.value) connections for \(failures) failed sends")
    }
}

final class Counter: Sendable {
    private let count = Mutex(0)
    func increment() { count.withLock { $0 += 1 } }
    var value: Int { count.withLock { $0 } }
}
