/// The waits between reconnect attempts: a ceiling doubling from `initial` up to `maximum`, each wait drawn at random
/// in the ceiling's upper half, so that clients dropped together (a server restart) do not all come back together.
struct ReconnectBackoff: Sendable {
    let initial: Duration
    let maximum: Duration
    private var ceiling: Duration

    init(initial: Duration, maximum: Duration) {
        self.initial = initial
        self.maximum = max(initial, maximum)
        ceiling = initial
    }

    /// The wait before the next attempt; `random` is in [0, 1] (`Double.random(in: 0...1)` outside tests).
    mutating func next(random: Double) -> Duration {
        let wait = ceiling * (0.5 + 0.5 * min(max(random, 0), 1))
        ceiling = min(ceiling * 2, maximum)
        return wait
    }

    /// After a connection that worked: the next wait starts from `initial` again.
    mutating func reset() {
        ceiling = initial
    }
}
