/// The waits between reconnect attempts: a ceiling doubling from `initial` up to `maximum`, each wait drawn at random
/// in the ceiling's upper half, so that clients dropped together (a server restart) do not all come back together.
struct ReconnectBackoff: Sendable {
    let initial: Duration
    let maximum: Duration
    private var ceiling: Duration

    init(initial: Duration, maximum: Duration) {
        self.initial = initial.bounded(below: .milliseconds(10))
        self.maximum = maximum.bounded(below: self.initial)
        ceiling = self.initial
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

extension Duration {
    /// Within [`lowest`, one day]: the options' durations are the app's to set, and a negative delay would spin a loop
    /// while `.seconds(Int64.max)` would trap in a sleep's deadline.
    func bounded(below lowest: Duration) -> Duration {
        min(max(self, lowest), .seconds(86_400))
    }
}
