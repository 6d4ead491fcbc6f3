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
        #expect(!solitude.isAlone(at: beat + Solitude.fence))
        // Another node seen: no longer alone, whatever came before.
        solitude.heartbeat(sentAt: beat + .seconds(1), others: 1)
        #expect(!solitude.isAlone(at: beat + .seconds(1)))
        solitude.heartbeat(sentAt: beat + .seconds(2), others: 0)
        #expect(solitude.isAlone(at: beat + .seconds(3)))
        // A failed heartbeat: others may have joined unseen.
        solitude.heartbeatFailed()
        #expect(!solitude.isAlone(at: beat + .seconds(2)))
    }

    @Test func anEarlierBeatAnsweredLaterDoesNotMoveSolitudeBack() {
        var solitude = Solitude(joinedAt: joined)
        solitude.heartbeat(sentAt: joined + .seconds(2), others: 0)
        solitude.heartbeat(sentAt: joined + .seconds(1), others: 0)
        #expect(solitude.isAlone(at: joined + .milliseconds(3500)))
    }

    @Test func aNodeJoiningBesideOthersRegistersDevicesAfterTheFenceUnlessItFindsItselfAlone() {
        var beside = Solitude(joinedAt: joined)
        #expect(beside.registrationsFrom == joined + Solitude.fence)
        beside.heartbeat(sentAt: joined + .milliseconds(10), others: 2)
        #expect(beside.registrationsFrom == joined + Solitude.fence)

        var alone = Solitude(joinedAt: joined)
        alone.heartbeat(sentAt: joined + .milliseconds(10), others: 0)
        #expect(alone.registrationsFrom == joined + .milliseconds(10))
        // Once open, registrations stay open when others join later (they wait for this node's beats to see them).
        alone.heartbeat(sentAt: joined + .seconds(5), others: 1)
        #expect(alone.registrationsFrom == joined + .milliseconds(10))
    }
}
