import BeaconCore

/// How a route's payloads are stored: what the receivers of one rendering share is stored once, and each of their jobs
/// refers to it with its own badge; a payload nobody else in the route shares is stored whole in its job.
///
/// Receivers of one rendering (`MessagePayloads`) have payloads that differ only in `t`, their username, the last key:
/// the payload is a head (`{…,"t":`), the JSON string of the username, and `}`; the badge goes at the same offset of
/// the head. A job's payload is split so only when that holds byte for byte, so that `payload(head:…)` gives back exactly
/// the payload the job was recorded with.
public struct PushContents: Sendable {
    /// What receivers of one rendering share.
    public struct Content: Sendable, Hashable {
        /// The payload up to the receiver's username.
        public var head: String
        /// Where `,"badge":N` goes (a UTF-8 offset of `head`); nil: the payload carries no badge.
        public var badgeOffset: Int?
    }

    /// Heads are told apart by their bytes: `String`'s `==` (canonical equivalence) could take two for one.
    private struct Key: Hashable {
        var head: [UInt8]
        var badgeOffset: Int?
    }

    /// The contents the route's jobs share, in the order of their first job.
    public private(set) var contents: [Content] = []
    /// For each job of the route, the index in `contents` of the content it refers to; nil when its payload is stored whole.
    public private(set) var references: [Int?] = []

    /// Splits the payloads of `jobs`: a content is shared when at least two jobs have it.
    public init(_ jobs: [NewPushJob]) {
        let splits = jobs.map(Self.split)
        var counts: [Key: Int] = [:]
        for case (let key, _)? in splits { counts[key, default: 0] += 1 }
        var indexes: [Key: Int] = [:]
        references = splits.map { split in
            guard let (key, content) = split, counts[key, default: 0] > 1 else { return nil }
            if let index = indexes[key] { return index }
            indexes[key] = contents.count
            contents.append(content)
            return contents.count - 1
        }
    }

    /// The payload of a job that refers to a content: `head`, the receiver's username, and their badge where it goes.
    public static func payload(head: String, badgeOffset: Int?, badge: Int, username: String) -> String {
        let whole = head + tail(for: username)
        guard let badgeOffset else { return whole }
        return JSONWriter.insertBadge(badge, into: whole, atUTF8Offset: badgeOffset)
    }

    /// What follows a content's head in the payload of `username`: their JSON string and the closing brace.
    private static func tail(for username: String) -> String {
        var tail = ""
        JSONWriter.writeString(username, to: &tail)
        tail += "}"
        return tail
    }

    /// The job's payload as a content and its key; nil for a job skipped, or whose payload does not end with its
    /// receiver's username, or whose badge would not go into the head.
    private static func split(_ job: NewPushJob) -> (Key, Content)? {
        guard job.skipReason == nil else { return nil }
        let payload = job.payload.utf8
        let tail = tail(for: job.username).utf8
        guard payload.count > tail.count, payload.suffix(tail.count).elementsEqual(tail) else { return nil }
        let head = Array(payload.dropLast(tail.count))
        if let offset = job.badgeOffset, offset < 0 || offset > head.count { return nil }
        return (
            Key(head: head, badgeOffset: job.badgeOffset),
            Content(head: String(decoding: head, as: UTF8.self), badgeOffset: job.badgeOffset)
        )
    }
}
