import BeaconCore
import BeaconProtocol
import BeaconStorage
import Foundation
import Hummingbird
import Logging
import NIOCore
import Synchronization

/// Shared pieces of the REST handlers: app lookup, body decoding, Easemob envelopes (authentication: `Authentication.swift`).
struct API: Sendable {
    let store: any BeaconStore
    let tokens: TokenIssuer
    let clock: @Sendable () -> Int64
    let logger: Logger
    /// The reverse proxies whose forwarding headers Beacon believes (`origin(of:context:)`).
    var proxies = TrustedProxies.none
    /// The server's secret key: seals and opens apps' Tencent secret keys (`TencentIdentities`). Nil: no Tencent door.
    var box: SecretBox?
    private let apps = AppCache()

    static let maxBodyBytes = 256 * 1024

    init(store: any BeaconStore, tokens: TokenIssuer, clock: @escaping @Sendable () -> Int64, logger: Logger) {
        self.store = store
        self.tokens = tokens
        self.clock = clock
        self.logger = logger
    }

    /// Where `request` comes from (the client's address and scheme), as `proxies` decides: the one place that does.
    func origin(of request: Request, context: BeaconRequestContext) -> ClientOrigin {
        proxies.origin(of: request, context: context)
    }

    /// The app named `key` (its cached copy, at most `AppCache.lifetime` old).
    func app(named key: AppKey) async throws -> AppRecord {
        let now = clock()
        if let app = apps.get(key, now: now) { return app }
        guard let app = try await store.app(key) else {
            throw BeaconError(.appNotFound, "application \(key) does not exist")
        }
        apps.put(app, now: now)
        return app
    }

    /// `app` as stored now, not as cached (the cache gets it too); nil when it is gone. For what must not trust a copy up
    /// to `AppCache.lifetime` old: checking a client secret, and an app token the cached copy refuses.
    func currentApp(_ app: AppRecord) async throws -> AppRecord? {
        let now = clock()
        guard let current = try await store.app(id: app.id) else { return nil }
        apps.put(current, now: now)
        return current
    }

    /// Gives `app` a new client secret (`AppProvisioning.rotateSecret`) and replaces this node's cached copy at once.
    /// With `keepingTencentKey`, the app's Tencent secret key stays as it is.
    func rotateClientSecret(of app: AppRecord, keepingTencentKey: Bool = false) async throws -> AppCredentials {
        let now = clock()
        let (credentials, rotated) = try await AppProvisioning.rotateSecret(
            of: app, in: store, box: keepingTencentKey ? nil : box, now: now)
        apps.put(rotated, now: now)
        if let failure = credentials.tencentFailure {
            logger.warning("the Tencent secret key was not rotated", metadata: ["app": "\(app.key)", "error": "\(failure)"])
        }
        return credentials
    }

    func body<T: Decodable>(_ type: T.Type, from request: Request) async throws -> T {
        try Self.decode(T.self, from: try await collectBody(of: request))
    }

    /// The decoded body, or nil when the request has none.
    func bodyIfPresent<T: Decodable>(_ type: T.Type, from request: Request) async throws -> T? {
        let buffer = try await collectBody(of: request)
        return buffer.readableBytes == 0 ? nil : try Self.decode(T.self, from: buffer)
    }

    /// The request's body, refused with `request_entity_too_large` beyond `maxBodyBytes`.
    func collectBody(of request: Request) async throws -> ByteBuffer {
        var request = request
        do {
            return try await request.collectBody(upTo: Self.maxBodyBytes)
        } catch is NIOTooManyBytesError {
            throw BeaconError(.requestTooLarge, "request body exceeds \(Self.maxBodyBytes) bytes")
        }
    }

    private static func decode<T: Decodable>(_ type: T.Type, from buffer: ByteBuffer) throws -> T {
        do {
            return try JSONDecoder().decode(T.self, from: Data(buffer: buffer))
        } catch {
            throw BeaconError(.jsonParse, "bad request body: \(describe(error))")
        }
    }

    /// An Easemob success envelope with `data`.
    func respond<T: Codable & Sendable>(_ request: Request, app: AppRecord, action: String, data: T, count: Int? = nil) -> Response {
        Self.json(envelope(request, app: app, action: action, data: data, entities: nil, count: count))
    }

    /// An Easemob success envelope with `entities`.
    func respond<T: Codable & Sendable>(
        _ request: Request, app: AppRecord, action: String, entities: T, count: Int? = nil, cursor: String? = nil
    ) -> Response {
        Self.json(envelope(request, app: app, action: action, data: nil, entities: entities, count: count, cursor: cursor))
    }

    private func envelope<T>(
        _ request: Request, app: AppRecord, action: String, data: T?, entities: T?, count: Int?, cursor: String? = nil
    ) -> Envelope<T> {
        Envelope(
            action: action, organization: app.key.org, application: String(app.id), applicationName: app.key.name,
            path: request.uri.path, uri: request.uri.description, timestamp: clock(), data: data, entities: entities, count: count,
            cursor: cursor)
    }

    static func json(_ value: some Encodable, status: HTTPResponse.Status = .ok) -> Response {
        Response(
            status: status, headers: [.contentType: "application/json; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(bytes: encode(value))))
    }

    /// Compact JSON with sorted keys.
    static func encode(_ value: some Encodable) -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return Array((try? encoder.encode(value)) ?? Data("{}".utf8))
    }
}

/// Apps by key (found ones only), each copy used for at most `lifetime`: an app's key never changes, but its client
/// secret may be rotated — by another node, or by `beacon app rotate-secret` beside the server — and only a fresh copy
/// tells which app tokens that revoked.
final class AppCache: Sendable {
    /// How long a copy is used (ms): after a rotation elsewhere, how long this node may still accept an app token of the
    /// old secret (README, "App credentials"). The node that rotates replaces its copy at once.
    static let lifetime: Int64 = 5_000

    private struct Entry {
        var app: AppRecord
        var readAt: Int64
    }
    private let table = Mutex<[AppKey: Entry]>([:])

    /// The copy of `key`, unless it is `lifetime` old (or the clock went back since it was read).
    func get(_ key: AppKey, now: Int64) -> AppRecord? {
        table.withLock { entries in
            guard let entry = entries[key], now >= entry.readAt, now - entry.readAt < Self.lifetime else { return nil }
            return entry.app
        }
    }

    func put(_ app: AppRecord, now: Int64) {
        table.withLock { $0[app.key] = Entry(app: app, readAt: now) }
    }
}
