/// Makes 64-bit, time-ordered message ids: 41 bits of milliseconds since 2020-01-01, 10 bits of node id,
/// 12 bits of sequence within the millisecond. Pure: the caller supplies the clock reading.
public struct MessageIDGenerator: Sendable {
    public static let epochMilliseconds: Int64 = 1_577_836_800_000
    public let node: UInt64
    private var lastMilliseconds: Int64 = 0
    private var sequence: UInt64 = 0

    public init(node: UInt16 = 0) {
        self.node = UInt64(node & 0x3FF)
    }

    /// The next id at `nowMilliseconds`. Never repeats and never goes backwards, even if the clock does.
    public mutating func next(nowMilliseconds: Int64) -> UInt64 {
        var now = max(nowMilliseconds, lastMilliseconds)
        if now == lastMilliseconds {
            sequence += 1
            if sequence > 0xFFF {
                now += 1
                sequence = 0
            }
        } else {
            sequence = 0
        }
        lastMilliseconds = now
        // A clock before the epoch (a machine that booted at 1970) gives the epoch's ids rather than a trap; the
        // subtraction happens only when it cannot overflow.
        let elapsed = now > Self.epochMilliseconds ? UInt64(now - Self.epochMilliseconds) : 0
        return elapsed << 22 | node << 12 | sequence
    }

    /// The smallest id made at or after `milliseconds` (ids are time-ordered, so "since" is an id range).
    public static func firstID(atOrAfter milliseconds: Int64) -> UInt64 {
        milliseconds > epochMilliseconds ? UInt64(milliseconds - epochMilliseconds) << 22 : 0
    }

    /// The millisecond timestamp encoded in an id.
    public static func timestamp(of id: UInt64) -> Int64 {
        Int64(id >> 22) + epochMilliseconds
    }
}
