import AsyncHTTPClient
import Foundation
import NIOCore
import NIOPosix
import NIOSSL

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Why a push-result webhook delivery failed, as `last_error` shows it: a coarse category, never a status code or an
/// error's text, so that a tenant cannot use its webhook to learn what answers where (issue 22). The log has the detail.
/// The list is documented in docs/operations.md and in openapi.json (`Webhook.last_error`).
enum WebhookFailure: String, Error, Sendable, CaseIterable {
    /// The URL's host is, or resolves to, an address this server refuses (`--webhook-private-targets` off).
    case refusedAddress = "refused_address"
    /// The host name did not resolve.
    case dns
    /// No connection could be made, or it broke before an answer.
    case connect
    /// No connection, answer or complete exchange in time.
    case timeout
    /// The TLS handshake failed (certificate, host name, protocol).
    case tls
    /// The receiver answered 3xx (redirects are not followed).
    case http3xx = "http_3xx"
    /// The receiver answered 4xx.
    case http4xx = "http_4xx"
    /// The receiver answered 5xx.
    case http5xx = "http_5xx"
    /// The receiver answered something that is not an HTTP answer Beacon takes (malformed, or a status outside 2xx–5xx).
    case invalidResponse = "invalid_response"
    /// Beacon could not make the request (its app is gone, or the stored URL cannot be used).
    case internalError = "internal"

    /// The category of a receiver's answer that is not 2xx.
    init(status: Int) {
        switch status {
        case 300..<400: self = .http3xx
        case 400..<500: self = .http4xx
        case 500..<600: self = .http5xx
        default: self = .invalidResponse
        }
    }

    /// The category of what a delivery threw.
    static func category(of error: any Error) -> WebhookFailure {
        switch error {
        case let failure as WebhookFailure:
            return failure
        case let answer as WebhookAnswer:
            return WebhookFailure(status: answer.status)
        case is TimedOut:
            return .timeout
        case let error as HTTPClientError:
            // A connection that could not be made in time is a failure to connect (the other address family is tried then).
            if error == .connectTimeout || error == .remoteConnectionClosed { return .connect }
            let timeouts: [HTTPClientError] = [
                .readTimeout, .writeTimeout, .deadlineExceeded, .tlsHandshakeTimeout, .getConnectionFromPoolTimeout,
            ]
            if timeouts.contains(error) { return .timeout }
            return .invalidResponse
        case is NIOSSLError, is BoringSSLError, is NIOSSLExtraError:
            return .tls
        case let error as NIOConnectionError:
            return error.connectionErrors.isEmpty && (error.dnsAError != nil || error.dnsAAAAError != nil) ? .dns : .connect
        case is SocketAddressError.UnknownHost:
            return .dns
        case is ChannelError:
            return .connect
        case is IOError:
            return .connect
        default:
            return .invalidResponse
        }
    }

    /// What `last_error` shows for a stored value: the category itself; a value stored before categories (Beacon before
    /// issue 22 stored `HTTP 503` or an error's text) as the nearest category, never the text.
    static func shown(_ stored: String) -> String {
        if let category = WebhookFailure(rawValue: stored) { return category.rawValue }
        if stored.hasPrefix("HTTP "), let status = Int(stored.dropFirst(5)) { return WebhookFailure(status: status).rawValue }
        if stored.hasPrefix("no answer within") { return WebhookFailure.timeout.rawValue }
        return WebhookFailure.connect.rawValue
    }
}

/// A receiver's answer that is not 2xx (its status is for the log; `last_error` shows its category).
struct WebhookAnswer: Error, CustomStringConvertible {
    var status: Int
    var description: String { "HTTP \(status)" }
}

/// Where a push-result webhook may lead (issue 22). Unless the operator allows private targets
/// (`--webhook-private-targets`), never to an address of this machine or of an internal network — loopback, unspecified,
/// link-local (cloud metadata at 169.254.169.254 included), private, CGNAT, multicast or reserved, in IPv4 or in any IPv6
/// form that leads to such an IPv4 address. Checked when the webhook is set (`PUT`), and again before every delivery,
/// whose connections then go to the checked addresses only (`WebhookSender.send`): a name re-pointed between the check and
/// the connection (DNS rebinding) does not reach past it.
enum WebhookTarget {
    /// The host and port a request to `url` connects to, as AsyncHTTPClient reads them (Foundation's `URL`, an IPv6
    /// literal's brackets trimmed, the scheme's port by default); nil unless `url` is http or https with a host.
    static func endpoint(of url: String) -> (host: String, port: Int)? {
        guard let parsed = URL(string: url), let scheme = parsed.scheme?.lowercased(), scheme == "http" || scheme == "https",
            var host = parsed.host
        else { return nil }
        if host.hasPrefix("[") { host.removeFirst() }
        if host.hasSuffix("]") { host.removeLast() }
        guard !host.isEmpty else { return nil }
        return (host, parsed.port ?? (scheme == "https" ? 443 : 80))
    }

    /// Where a delivery to `host` connects, every address checked unless `allowPrivate`: `nil` alone when
    /// AsyncHTTPClient may connect as the URL says (private targets allowed, or an IP literal, which it connects to as
    /// written without resolving it), else the addresses to pin the connections to, as text (the first of each address
    /// family, in the resolver's order). Throws `WebhookFailure.refusedAddress` when any address of the host is refused,
    /// `.dns` when it resolves to none.
    static func connectionAddresses(host: String, port: Int, allowPrivate: Bool) async throws -> [String?] {
        if allowPrivate { return [nil] }
        if let refused = isRefused(ipAddress: host) {
            guard !refused else { throw WebhookFailure.refusedAddress }
            return [nil]
        }
        let addresses = try await resolve(host: host, port: port)
        guard !addresses.contains(where: { isRefused($0) }) else { throw WebhookFailure.refusedAddress }
        var pinned: [String?] = []
        var seenV4 = false
        var seenV6 = false
        for address in addresses {
            switch address {
            case .v4:
                guard !seenV4 else { continue }
                seenV4 = true
            case .v6:
                guard !seenV6 else { continue }
                seenV6 = true
            case .unixDomainSocket:
                continue
            }
            if let text = address.ipAddress { pinned.append(text) }
        }
        guard !pinned.isEmpty else { throw WebhookFailure.dns }
        return pinned
    }

    /// At `PUT /push/webhook`: whether `url`'s host is, or now resolves to, a refused address. A name that does not
    /// resolve (within 5 s) is accepted: every delivery resolves and checks again, and records `dns` while it fails.
    static func isRefusedWhenSet(_ url: String) async -> Bool {
        guard let target = endpoint(of: url) else { return false }
        let host = target.host
        let port = target.port
        do {
            _ = try await withTimeout(.seconds(5)) {
                try await WebhookTarget.connectionAddresses(host: host, port: port, allowPrivate: false)
            }
            return false
        } catch {
            return WebhookFailure.category(of: error) == .refusedAddress
        }
    }

    /// Every address `host` resolves to (getaddrinfo, on NIO's thread pool: never on an event loop), in the resolver's
    /// order. Throws `WebhookFailure.dns` when it resolves to none.
    static func resolve(host: String, port: Int) async throws -> [SocketAddress] {
        try await NIOThreadPool.singleton.runIfActive { () throws -> [SocketAddress] in
            var hints = addrinfo()
            #if os(Linux) && !canImport(Musl)
                hints.ai_socktype = CInt(SOCK_STREAM.rawValue)
            #else
                hints.ai_socktype = SOCK_STREAM
            #endif
            var list: UnsafeMutablePointer<addrinfo>?
            guard getaddrinfo(host, String(port), &hints, &list) == 0, let first = list else { throw WebhookFailure.dns }
            defer { freeaddrinfo(first) }
            var addresses: [SocketAddress] = []
            var next: UnsafeMutablePointer<addrinfo>? = first
            while let info = next {
                if let address = info.pointee.ai_addr {
                    let raw = UnsafeRawPointer(address)
                    switch info.pointee.ai_family {
                    case AF_INET: addresses.append(SocketAddress(raw.load(as: sockaddr_in.self), host: host))
                    case AF_INET6: addresses.append(SocketAddress(raw.load(as: sockaddr_in6.self), host: host))
                    default: break
                    }
                }
                next = info.pointee.ai_next
            }
            guard !addresses.isEmpty else { throw WebhookFailure.dns }
            return addresses
        }
    }

    /// Whether a webhook may not reach `address` while private targets are refused.
    static func isRefused(_ address: SocketAddress) -> Bool {
        switch address {
        case .v4(let v4): isRefused(bytes: withUnsafeBytes(of: v4.address.sin_addr) { Array($0) })
        case .v6(let v6): isRefused(bytes: withUnsafeBytes(of: v6.address.sin6_addr) { Array($0) })
        case .unixDomainSocket: true
        }
    }

    /// `isRefused` of an IP address written out (`127.0.0.1`, `::ffff:10.0.0.1`); nil when `text` is not one.
    static func isRefused(ipAddress text: String) -> Bool? {
        guard let address = try? SocketAddress(ipAddress: text, port: 0) else { return nil }
        return isRefused(address)
    }

    /// The check on an address's bytes, in network order: 4 for IPv4, 16 for IPv6 (anything else is refused).
    static func isRefused(bytes: [UInt8]) -> Bool {
        switch bytes.count {
        case 4: isRefusedIPv4(bytes[0], bytes[1], bytes[2])
        case 16: isRefusedIPv6(bytes)
        default: true
        }
    }

    /// By the first three bytes of an IPv4 address.
    private static func isRefusedIPv4(_ a: UInt8, _ b: UInt8, _ c: UInt8) -> Bool {
        switch a {
        // 0.0.0.0/8 ("this network": 0.0.0.0 reaches this machine), 10.0.0.0/8 (private), 127.0.0.0/8 (loopback)
        case 0, 10, 127: return true
        // 100.64.0.0/10, carrier-grade NAT
        case 100: return (b & 0xC0) == 64
        // 169.254.0.0/16, link-local (cloud metadata services)
        case 169: return b == 254
        // 172.16.0.0/12, private
        case 172: return (b & 0xF0) == 16
        // 192.168.0.0/16, private; 192.0.0.0/24, IETF protocol assignments
        case 192: return b == 168 || (b == 0 && c == 0)
        // 198.18.0.0/15, benchmarking (network devices)
        case 198: return (b & 0xFE) == 18
        // 224.0.0.0/4 multicast, 240.0.0.0/4 reserved, 255.255.255.255 broadcast
        case 224...: return true
        default: return false
        }
    }

    private static func isRefusedIPv6(_ b: [UInt8]) -> Bool {
        let embedded = Array(b[12..<16])
        let zeros = { (range: Range<Int>) in b[range].allSatisfy { $0 == 0 } }
        // ::ffff:a.b.c.d (IPv4-mapped) and ::a.b.c.d (IPv4-compatible, which covers :: and ::1) lead where their IPv4
        // address does; so do ::ffff:0:a.b.c.d (IPv4-translated) and 64:ff9b::a.b.c.d (NAT64).
        if zeros(0..<10), (b[10] == 0xFF && b[11] == 0xFF) || (b[10] == 0 && b[11] == 0) { return isRefused(bytes: embedded) }
        if zeros(0..<8), b[8] == 0xFF, b[9] == 0xFF, zeros(10..<12) { return isRefused(bytes: embedded) }
        if b[0] == 0, b[1] == 0x64, b[2] == 0xFF, b[3] == 0x9B, zeros(4..<12) { return isRefused(bytes: embedded) }
        // 64:ff9b:1::/48, local-use NAT64 (any embedding: refused whole); 100::/64, discard-only
        if b[0] == 0, b[1] == 0x64, b[2] == 0xFF, b[3] == 0x9B, b[4] == 0, b[5] == 1 { return true }
        if b[0] == 0x01, b[1] == 0, zeros(2..<8) { return true }
        // 2002::/16 (6to4) carries an IPv4 address in its bytes 2 to 5.
        if b[0] == 0x20, b[1] == 0x02, isRefused(bytes: Array(b[2..<6])) { return true }
        // fc00::/7, unique local
        if (b[0] & 0xFE) == 0xFC { return true }
        // fe80::/10 link-local, fec0::/10 site-local (deprecated)
        if b[0] == 0xFE, (b[1] & 0xC0) == 0x80 || (b[1] & 0xC0) == 0xC0 { return true }
        // ff00::/8, multicast
        return b[0] == 0xFF
    }
}
