import Testing

@testable import BeaconClient

@Suite struct BackoffTests {
    @Test func waitsDoubleUpToTheMaximumEachDrawnInTheUpperHalf() {
        var low = ReconnectBackoff(initial: .milliseconds(100), maximum: .milliseconds(700))
        var high = low
        let lows = (0..<5).map { _ in low.next(random: 0) }
        let highs = (0..<5).map { _ in high.next(random: 1) }
        #expect(lows == [.milliseconds(50), .milliseconds(100), .milliseconds(200), .milliseconds(350), .milliseconds(350)])
        #expect(highs == [.milliseconds(100), .milliseconds(200), .milliseconds(400), .milliseconds(700), .milliseconds(700)])
    }

    @Test func aResetStartsOverAndOutOfRangeRandomsAreClamped() {
        var backoff = ReconnectBackoff(initial: .seconds(1), maximum: .seconds(8))
        _ = backoff.next(random: 0.5)
        _ = backoff.next(random: 0.5)
        backoff.reset()
        #expect(backoff.next(random: 0.5) == .milliseconds(750))
        #expect(backoff.next(random: -3) == .seconds(1))
        #expect(backoff.next(random: 9) == .seconds(4))
    }

    @Test func aMaximumBelowTheInitialDelayIsTheInitialDelay() {
        var backoff = ReconnectBackoff(initial: .seconds(2), maximum: .seconds(1))
        #expect(backoff.next(random: 1) == .seconds(2))
        #expect(backoff.next(random: 1) == .seconds(2))
    }

    @Test func negativeAndHugeDelaysAreBounded() {
        var negative = ReconnectBackoff(initial: .seconds(-5), maximum: .seconds(-1))
        #expect((0..<100).allSatisfy { _ in negative.next(random: 1) == .milliseconds(10) })
        var huge = ReconnectBackoff(initial: .seconds(Int64.max), maximum: .seconds(Int64.max))
        #expect((0..<100).allSatisfy { _ in huge.next(random: 1) == .seconds(86_400) })
    }
}
