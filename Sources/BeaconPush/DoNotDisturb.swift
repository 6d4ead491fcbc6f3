import BeaconCore
import Foundation

/// A daily do-not-disturb window, `H:M-H:M` in the user's own time zone.
///
/// start < end: from start to end each day. start > end: from start until end the next day.
/// start == end: all day, every day — except `0:0-0:0`, which means "no window" (the seeds' rule).
public struct DailyQuietHours: Sendable, Hashable, CustomStringConvertible {
    /// Minutes after midnight.
    public var start: Int
    public var end: Int

    public init(start: Int, end: Int) {
        self.start = start
        self.end = end
    }

    /// Parses `H:M-H:M` (H 0–23, M 0–59, one or two digits each). Returns nil for `0:0-0:0` (off);
    /// throws `illegal_argument` for anything malformed.
    public static func parse(_ text: String) throws(BeaconError) -> DailyQuietHours? {
        let halves = text.split(separator: "-", omittingEmptySubsequences: false)
        guard halves.count == 2, let start = minutes(halves[0]), let end = minutes(halves[1]) else {
            throw .illegal("ignoreInterval must be H:M-H:M with H in 0-23 and M in 0-59, got '\(text)'")
        }
        if start == 0 && end == 0 { return nil }
        return DailyQuietHours(start: start, end: end)
    }

    private static func minutes(_ text: Substring) -> Int? {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, (1...2).contains(parts[0].count), (1...2).contains(parts[1].count),
            parts.allSatisfy({ $0.allSatisfy(\.isASCIIDigit) }), let hours = Int(parts[0]), let minutes = Int(parts[1]),
            (0...23).contains(hours), (0...59).contains(minutes)
        else { return nil }
        return hours * 60 + minutes
    }

    /// `H:M-H:M` as Easemob writes it back.
    public var description: String { "\(start / 60):\(start % 60)-\(end / 60):\(end % 60)" }

    /// Whether `instant` falls in the window, in `timeZone` (daylight-saving changes included).
    public func contains(_ instant: Date, in timeZone: TimeZone) -> Bool {
        if start == end { return true }
        // Local minute of the day: the zone's offset at that instant (daylight saving included), no calendar needed.
        let local = Int((instant.timeIntervalSince1970).rounded(.down)) + timeZone.secondsFromGMT(for: instant)
        let now = ((local % 86_400) + 86_400) % 86_400 / 60
        if start < end { return now >= start && now < end }
        return now >= start || now < end
    }
}

extension Character {
    fileprivate var isASCIIDigit: Bool { ("0"..."9").contains(self) }
}

/// A user's app-level push settings.
public struct AppPushSettings: Sendable, Hashable {
    public var remindType: RemindType?
    public var quietHours: DailyQuietHours?
    /// One-shot do-not-disturb until this instant (ms).
    public var silentUntil: Int64?

    public init(remindType: RemindType? = nil, quietHours: DailyQuietHours? = nil, silentUntil: Int64? = nil) {
        self.remindType = remindType
        self.quietHours = quietHours
        self.silentUntil = silentUntil
    }
}

/// A user's settings for one conversation.
public struct ConversationPushSettings: Sendable, Hashable {
    /// nil or `.default`: inherit.
    public var remindType: RemindType?
    public var silentUntil: Int64?

    public init(remindType: RemindType? = nil, silentUntil: Int64? = nil) {
        self.remindType = remindType
        self.silentUntil = silentUntil
    }
}

/// The longest one-shot do-not-disturb: 7 days, in ms (REST) and minutes (SDK).
public enum SilentDuration {
    public static let maxMilliseconds: Int64 = 604_800_000
    public static let maxMinutes = 10_080

    /// The expiry for a REST `ignoreDuration` (ms) set at `now`: nil clears it.
    public static func expiry(milliseconds: Int64, now: Int64) throws(BeaconError) -> Int64? {
        guard (0...maxMilliseconds).contains(milliseconds) else {
            throw .illegal("ignoreDuration must be 0-\(maxMilliseconds) ms, got \(milliseconds)")
        }
        return milliseconds == 0 ? nil : now + milliseconds
    }
}
