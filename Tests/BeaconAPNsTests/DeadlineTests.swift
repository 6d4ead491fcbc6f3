import APNsSimulator
import BeaconAPNs
import BeaconTesting
import Crypto
import Foundation
import Testing

/// A send with a deadline (its sender's lease on the job) is over by it, answer included: no request is written whose
/// answer could come later, so that the job, claimed again elsewhere once the lease runs out, is never sent twice.
@Suite struct DeadlineTests {
    @Test func aSendWhoseDeadlinePassesWhileItWaitsForAStreamIsNeverWritten() async throws {
        // Until APNs accepts a token the connection allows one stream; a request never answered holds it for 4 s (ample: the
        // stream must still be held at the late send's last moment to write, even when this test starts it late on a
        // loaded machine).
        let configuration = APNsClient.Configuration(connections: 1, requestTimeout: .seconds(4), waitTimeout: .seconds(30))
        try await withSimulatorAndClient(client: configuration) { simulator, client, _ in
            let holder = try await holdTheOnlyTurn(client, simulator)
            defer { holder.cancel() }
            let before = simulator.requestsReceived
            let started = ContinuousClock.now
            // The last moment to write it is 300 ms from now (its 4 s answer time must fit before the deadline).
            await #expect(throws: APNsFailure.deadlinePassed) {
                _ = try await client.send(alert("late"), deadline: ContinuousClock.now + .milliseconds(4300))
            }
            // Before: it waited up to 30 s for the stream, then was written whatever the time.
            #expect(started.duration(to: .now) < .seconds(2))
            // The stream frees up (the held request times out): still nothing more reaches APNs.
            try await waitUntil("the holder released", timeout: .seconds(10)) { holder.isReleased }
            try await Task.sleep(for: .milliseconds(300))
            #expect(simulator.requestsReceived == before)
            #expect(!simulator.deliveries().map(\.payload).compactMap(alertBody).contains("late"))
        }
    }

    @Test func theDeadlineIsCheckedLastJustBeforeTheRequestIsWritten() async throws {
        let configuration = APNsClient.Configuration(connections: 1, requestTimeout: .seconds(5))
        try await withSimulatorAndClient(client: configuration) { simulator, client, _ in
            try await warmUp(client)
            let before = simulator.requestsReceived
            // The sender's own last check (a slow database) ends after the last moment to write (200 ms from now).
            await #expect(throws: APNsFailure.deadlinePassed) {
                _ = try await client.send(
                    alert("late"), deadline: ContinuousClock.now + .milliseconds(5200),
                    stillWanted: {
                        try? await Task.sleep(for: .milliseconds(600))
                        return true
                    })
            }
            try await Task.sleep(for: .milliseconds(200))
            #expect(simulator.requestsReceived == before)
            // With time enough, the same send goes.
            _ = try await client.send(alert("in time"), deadline: ContinuousClock.now + .seconds(60))
            let bodies = simulator.deliveries().map(\.payload).compactMap(alertBody)
            #expect(bodies.contains("in time") && !bodies.contains("late"))
        }
    }

    @Test func aSendWaitingForAConnectionStopsAtItsDeadline() async throws {
        // Nothing listens on port 1: the first connect fails, and the next one waits out a 20 s backoff.
        let configuration = APNsClient.Configuration(
            connections: 1, requestTimeout: .seconds(1), reconnectDelay: .seconds(20), maxReconnectDelay: .seconds(20))
        let key = APNsSigningKey(teamID: teamID, keyID: keyID, privateKey: P256.Signing.PrivateKey())
        let client = APNsClient(credentials: .token(key), endpoint: APNsEndpoint(host: "127.0.0.1", port: 1), configuration: configuration)
        do throws(APNsFailure) {
            _ = try await client.send(alert("first"))
            Issue.record("a send to a closed port went through")
        } catch {
            #expect(error.isTransient)
        }
        let started = ContinuousClock.now
        await #expect(throws: APNsFailure.deadlinePassed) {
            _ = try await client.send(alert("second"), deadline: ContinuousClock.now + .milliseconds(1300))
        }
        #expect(started.duration(to: .now) < .seconds(5))  // before: it waited for the backoff and the connect
        await client.shutdown()
    }
}
