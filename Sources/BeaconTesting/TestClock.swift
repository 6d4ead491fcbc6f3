import Foundation
import Synchronization

/// The clock tests give a server, a simulator or an APNs client: it moves only when told to (`advance`), from a fixed
/// instant, or, made with `wall()`, it runs with real time from now on and tests move it ahead.
public final class TestClock: Sendable {
    private let start: Int64
    /// Real time since the clock was made counts too (`wall()`).
    private let origin: ContinuousClock.Instant?
    private let moved = Mutex<Int64>(0)

    /// A clock standing at `milliseconds` since 1970 until advanced.
    public init(milliseconds: Int64 = 1_800_000_000_000) {
        start = milliseconds
        origin = nil
    }

    private init(runningFrom date: Date) {
        start = Int64(date.timeIntervalSince1970 * 1000)
        origin = .now
    }

    /// A clock showing the real time, that tests move ahead.
    public static func wall() -> TestClock { TestClock(runningFrom: Date()) }

    /// Milliseconds since 1970.
    public var now: Int64 {
        let running = origin.map { ContinuousClock.now - $0 } ?? .zero
        return start + moved.withLock { $0 } + running.components.seconds * 1000 + running.components.attoseconds / 1_000_000_000_000_000
    }

    public var date: Date { Date(timeIntervalSince1970: Double(now) / 1000) }

    public func advance(seconds: Int64) { moved.withLock { $0 += seconds * 1000 } }

    public func advance(minutes: Double) { moved.withLock { $0 += Int64(minutes * 60_000) } }
}
