import BeaconCore
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// An IP address as 16 bytes: IPv6, or IPv4 held IPv4-mapped (`::ffff:a.b.c.d`), so that an IPv4 client seen by a
/// dual-stack listener (which reports `::ffff:a.b.c.d`) and the same client written `a.b.c.d` are one address.
struct NetworkAddress: Hashable, Sendable, CustomStringConvertible {
    /// Always 16 bytes, network order.
    let bytes: [UInt8]

    private init(bytes: [UInt8]) {
        self.bytes = bytes
    }

    /// An IPv4 address from its 32 bits.
    init(ipv4 value: UInt32) {
        let shifts: [UInt32] = [24, 16, 8, 0]
        bytes = [UInt8](repeating: 0, count: 10) + [0xff, 0xff] + shifts.map { UInt8(truncatingIfNeeded: value >> $0) }
    }

    /// `a.b.c.d` (decimal, no leading zeros), or an IPv6 address as RFC 4291 writes it (1-4 hex digits per group, at most
    /// one `::`, optionally an IPv4 tail); nil for anything else (brackets, ports, zone ids, spaces).
    init?(_ text: some StringProtocol) {
        let text = Substring(text)
        if !text.contains(":") {
            guard let value = Self.ipv4(text) else { return nil }
            self.init(ipv4: value)
        } else {
            guard let bytes = Self.ipv6(text) else { return nil }
            self.init(bytes: bytes)
        }
    }

    /// An `X-Forwarded-For` entry: an address, or one with a port (`a.b.c.d:port`, `[v6]:port`), or in brackets (`[v6]`).
    init?(forwarded entry: some StringProtocol) {
        let entry = Substring(entry)
        func isPort(_ text: Substring) -> Bool {
            (1...5).contains(text.utf8.count) && text.utf8.allSatisfy(Self.isDigit)
        }
        if entry.first == "[" {
            guard let close = entry.firstIndex(of: "]") else { return nil }
            let rest = entry[entry.index(after: close)...]
            guard rest.isEmpty || (rest.first == ":" && isPort(rest.dropFirst())) else { return nil }
            self.init(entry[entry.index(after: entry.startIndex)..<close])
        } else if entry.utf8.filter({ $0 == UInt8(ascii: ":") }).count == 1 {
            let parts = entry.split(separator: ":", omittingEmptySubsequences: false)
            guard parts.count == 2, parts[0].contains("."), isPort(parts[1]) else { return nil }
            self.init(parts[0])
        } else {
            self.init(entry)
        }
    }

    var isIPv4: Bool {
        bytes[..<10].allSatisfy { $0 == 0 } && bytes[10] == 0xff && bytes[11] == 0xff
    }

    /// The address with every bit after the first `bits` (of 128) cleared.
    func masked(to bits: Int) -> NetworkAddress {
        NetworkAddress(
            bytes: bytes.enumerated().map { index, byte in
                let kept = min(max(bits - index * 8, 0), 8)
                return kept == 8 ? byte : byte & ~(UInt8(0xff) >> kept)
            })
    }

    /// Dotted decimal for IPv4; RFC 5952 for IPv6 (lowercase, no leading zeros, the longest run of two or more zero
    /// groups, the first of equals, as `::`).
    var description: String {
        if isIPv4 { return bytes[12...].map { String($0) }.joined(separator: ".") }
        let groups = (0..<8).map { UInt16(bytes[2 * $0]) << 8 | UInt16(bytes[2 * $0 + 1]) }
        var best = (start: 0, length: 0)
        var run = (start: 0, length: 0)
        for (index, group) in groups.enumerated() {
            if group == 0 {
                run = run.length == 0 ? (start: index, length: 1) : (start: run.start, length: run.length + 1)
                if run.length > best.length { best = run }
            } else {
                run = (start: 0, length: 0)
            }
        }
        let hex = groups.map { String($0, radix: 16) }
        guard best.length >= 2 else { return hex.joined(separator: ":") }
        return hex[..<best.start].joined(separator: ":") + "::" + hex[(best.start + best.length)...].joined(separator: ":")
    }

    private static func isDigit(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
    }

    private static func isHexDigit(_ byte: UInt8) -> Bool {
        isDigit(byte) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "F")).contains(byte)
    }

    private static func ipv4(_ text: Substring) -> UInt32? {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4 else { return nil }
        var value: UInt32 = 0
        for part in parts {
            // No leading zeros: `010` is octal to some parsers and decimal to others.
            guard (1...3).contains(part.utf8.count), part.utf8.allSatisfy(isDigit),
                part.utf8.count == 1 || part.utf8.first != UInt8(ascii: "0"), let octet = UInt32(part), octet <= 255
            else { return nil }
            value = value << 8 | octet
        }
        return value
    }

    private static func ipv6(_ text: Substring) -> [UInt8]? {
        let colon = UInt8(ascii: ":")
        let chars = Array(text.utf8)
        guard chars.count <= 45 else { return nil }  // 6 full groups and an IPv4 tail
        /// The groups of a part without `::`; an IPv4 tail only at the end of the whole address.
        func groups(_ part: ArraySlice<UInt8>, endsAddress: Bool) -> [UInt16]? {
            if part.isEmpty { return [] }
            let pieces = part.split(separator: colon, omittingEmptySubsequences: false)
            var result: [UInt16] = []
            for (index, piece) in pieces.enumerated() {
                if piece.contains(UInt8(ascii: ".")) {
                    guard endsAddress, index == pieces.count - 1, let value = ipv4(Substring(String(decoding: piece, as: UTF8.self))) else {
                        return nil
                    }
                    result += [UInt16(truncatingIfNeeded: value >> 16), UInt16(truncatingIfNeeded: value)]
                } else {
                    guard (1...4).contains(piece.count), piece.allSatisfy(isHexDigit),
                        let group = UInt16(String(decoding: piece, as: UTF8.self), radix: 16)
                    else { return nil }
                    result.append(group)
                }
            }
            return result
        }
        let all: [UInt16]
        if let split = chars.indices.dropLast().first(where: { chars[$0] == colon && chars[$0 + 1] == colon }) {
            // A second `::` leaves an empty piece in the tail, which `groups` refuses.
            guard let head = groups(chars[..<split], endsAddress: false), let tail = groups(chars[(split + 2)...], endsAddress: true),
                head.count + tail.count <= 7
            else { return nil }
            all = head + Array(repeating: 0, count: 8 - head.count - tail.count) + tail
        } else {
            guard let parsed = groups(chars[...], endsAddress: true), parsed.count == 8 else { return nil }
            all = parsed
        }
        return all.flatMap { [UInt8(truncatingIfNeeded: $0 >> 8), UInt8(truncatingIfNeeded: $0)] }
    }
}

/// An address range: `address/bits` (CIDR), or one address.
struct AddressRange: Hashable, Sendable, CustomStringConvertible {
    /// The range's first address.
    let base: NetworkAddress
    /// Leading bits (of 128) every address of the range shares with `base`.
    let bits: Int
    let description: String

    /// `10.0.0.0/8`, `fd00::/8`, `127.0.0.1`, `::1`; throws `illegal_argument` for anything else, and for a range whose
    /// address has bits set past its prefix (`10.0.0.1/8`: one host or `10.0.0.0/8` was meant, and Beacon does not guess).
    init(parsing text: some StringProtocol) throws(BeaconError) {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard (1...2).contains(parts.count), let address = NetworkAddress(parts[0]) else {
            throw .illegal("'\(text.prefix(100))' is not an IP address or CIDR range (e.g. 127.0.0.1, ::1, 10.0.0.0/8)")
        }
        // The notation decides the prefix's scale: `/8` counts IPv4 bits after a dotted address, IPv6 bits otherwise.
        let written6 = parts[0].contains(":")
        var bits = written6 ? 128 : 32
        if parts.count == 2 {
            guard (1...3).contains(parts[1].utf8.count), parts[1].utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
                let given = Int(parts[1]), given <= bits
            else { throw .illegal("'\(text.prefix(100))': the prefix length must be 0-\(bits)") }
            bits = given
        }
        let total = written6 ? bits : 96 + bits
        guard address.masked(to: total) == address else {
            throw .illegal(
                "'\(text.prefix(100))' has bits set past its prefix: write the range's first address (\(address.masked(to: total))/\(bits))"
            )
        }
        base = address
        self.bits = total
        description = String(text)
    }

    func contains(_ address: NetworkAddress) -> Bool {
        address.masked(to: bits) == base
    }
}

/// Where a request comes from, as Beacon believes it.
struct ClientOrigin: Sendable, Equatable {
    /// The client's address; nil when the connection has none Beacon can read (not an IP socket).
    var address: NetworkAddress?
    /// The client reached the TLS proxy over HTTPS, as a trusted proxy says (`X-Forwarded-Proto`). Beacon itself speaks
    /// plain HTTP only.
    var isHTTPS: Bool
}

/// The reverse proxies whose forwarding headers Beacon believes (`--trusted-proxy`); the one place that decides where a
/// request comes from (the login throttle's address, the console cookie's `Secure`).
///
/// From a peer that is not a trusted proxy, the peer is the client and `X-Forwarded-For` and `X-Forwarded-Proto` are
/// ignored: anyone can write them. From a trusted proxy, the client is the rightmost `X-Forwarded-For` entry that is not
/// itself a trusted proxy: a proxy appends the address it saw, so entries left of it are what the client wrote. An entry
/// that is not an address stops the walk at the last hop believed. The scheme is the last `X-Forwarded-Proto` value, the
/// one the nearest proxy wrote.
public struct TrustedProxies: Sendable, Equatable, CustomStringConvertible {
    let ranges: [AddressRange]

    /// No proxy: the peer is the client.
    public static let none = TrustedProxies(ranges: [])

    private init(ranges: [AddressRange]) {
        self.ranges = ranges
    }

    /// A comma-separated list of IP addresses and CIDR ranges (`127.0.0.1, 10.0.0.0/8, ::1`); empty for none. Throws
    /// `illegal_argument` naming the first entry that is neither.
    public init(parsing list: String) throws(BeaconError) {
        var ranges: [AddressRange] = []
        for entry in list.split(separator: ",") {
            let trimmed = entry.trimmingCharacters(in: .whitespaces)
            if trimmed.isEmpty { continue }
            ranges.append(try AddressRange(parsing: trimmed))
        }
        self.init(ranges: ranges)
    }

    /// No proxy is trusted.
    public var isEmpty: Bool { ranges.isEmpty }

    public var description: String {
        ranges.isEmpty ? "none" : ranges.map(\.description).joined(separator: ", ")
    }

    func contains(_ address: NetworkAddress) -> Bool {
        ranges.contains { $0.contains(address) }
    }

    /// The origin of a request from `peer` (the connection's address as NIO writes it) with these header values (each
    /// header's values in order; `X-Forwarded-For` values are comma-separated lists).
    func origin(peer: String?, forwardedFor: [String], forwardedProto: [String]) -> ClientOrigin {
        guard let peer = peer.flatMap({ NetworkAddress($0) }) else { return ClientOrigin(address: nil, isHTTPS: false) }
        guard contains(peer) else { return ClientOrigin(address: peer, isHTTPS: false) }
        var client = peer
        let hops = forwardedFor.flatMap { $0.split(separator: ",") }
        for hop in hops.reversed() {
            guard let address = NetworkAddress(forwarded: hop.trimmingCharacters(in: .whitespaces)) else { break }
            client = address
            if !contains(address) { break }
        }
        let scheme = forwardedProto.flatMap { $0.split(separator: ",") }.last?.trimmingCharacters(in: .whitespaces).lowercased()
        return ClientOrigin(address: client, isHTTPS: scheme == "https")
    }

    // From literal valid tokens: the initializers cannot fail, and no input reaches them.
    static let forwardedFor = HTTPField.Name("X-Forwarded-For")!
    static let forwardedProto = HTTPField.Name("X-Forwarded-Proto")!

    /// The origin of `request`, which came over `context`'s connection.
    func origin(of request: Request, context: BeaconRequestContext) -> ClientOrigin {
        origin(
            peer: context.remoteAddress?.ipAddress,
            forwardedFor: request.headers[values: Self.forwardedFor], forwardedProto: request.headers[values: Self.forwardedProto])
    }
}
