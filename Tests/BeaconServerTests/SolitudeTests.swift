import Testing

@testable import BeaconServer

/// `Solitude`: when a node may read presence from memory, and when a joining node's devices may register.
@Suite struct SolitudeTests {
    let joined = ContinuousClock.now

    @Test func aNodeIsAloneOnlyWhileItsLastHeartbeatThatFoundNobodyIsRecent() {
        var solitude = Solitude(joinedAt: joined)
        #expect(!solitude.isAlone(at: joined))  // no heartbeat yet
        let beat = joined + .milliseconds(100)
        solitude.heartbeat(sentAt: beat, others: 0)
        #expect(solitude.isAlone(at: beat + .milliseconds(1999)))
        #expect(!solitude.isAlone(at: beat + Solitude.aloneWindow))
        // Another node seen: no longer alone, whatever came before.
        solitude.heartbeat(sentAt: beat + .seconds(1), others: 1)
        #expect(!solitude.isAlone(at: beat + .seconds(1)))
        solitude.heartbeat(sentAt: beat + .seconds(2), others: 0)
        #expect(solitude.isAlone(at: beat + .seconds(3)))
        // A failed heartbeat: others may have joined unseen.
        solitude.heartbeatFailed()
        #expect(!solitude.isAlone(at: beat + .seconds(2)))
        // Leaving: a node joining now finds nobody, so this one is never alone again.
        solitude.heartbeat(sentAt: beat + .seconds(4), others: 0)
        solitude.leave()
        #expect(!solitude.isAlone(at: beat + .seconds(4)))
        solitude.heartbeat(sentAt: beat + .seconds(5), others: 0)
        #expect(!solitude.isAlone(at: beat + .seconds(5)))
    }

    @Test func aNodeJoiningBesideOthersRegistersDevicesAfterTheFenceUnlessItFindsItselfAlone() {
        var beside = Solitude(joinedAt: joined)
        // Longer than a node may stay alone, with room for clocks that do not run exactly alike.
        #expect(joined.duration(to: beside.registrationsFrom) > Solitude.aloneWindow)
        beside.heartbeat(sentAt: joined + .milliseconds(10), others: 2)
        #expect(beside.registrationsFrom == joined + Solitude.registrationFence)

        var alone = Solitude(joinedAt: joined)
        alone.heartbeat(sentAt: joined + .milliseconds(10), others: 0)
        #expect(alone.registrationsFrom == joined + .milliseconds(10))
        // Once open, registrations stay open when others join later (they wait for this node's beats to see them).
        alone.heartbeat(sentAt: joined + .seconds(5), others: 1)
        #expect(alone.registrationsFrom == joined + .milliseconds(10))
    }
}
