import BeaconCore
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import Synchronization

/// Log lines as JSON objects, one per line, for log shippers (`BEACON_LOG_FORMAT=json`):
/// `{"time":"2026-11-23T19:04:24.120Z","level":"info","label":"beacon","message":"…","source":"BeaconServer",…metadata}`.
/// Metadata keys are top-level fields (nested values as JSON); keys named like the fixed fields are prefixed with `_`.
public struct JSONLogHandler: LogHandler {
    public var logLevel: Logger.Level = .info
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    private let label: String
    private let write: @Sendable (String) -> Void

    /// A handler writing each line (newline included) with `write`; standard output by default.
    public init(
        label: String, metadataProvider: Logger.MetadataProvider? = nil,
        write: @escaping @Sendable (String) -> Void = JSONLogHandler.standardOutput
    ) {
        self.label = label
        self.metadataProvider = metadataProvider
        self.write = write
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var fields: [String: JSONValue] = [:]
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { $1 } }
        if let extra = event.metadata { merged.merge(extra) { $1 } }
        for (key, value) in merged {
            fields[Self.fixed.contains(key) ? "_" + key : key] = Self.json(value)
        }
        fields["time"] = .string(Date.ISO8601FormatStyle(includingFractionalSeconds: true).format(Date()))
        fields["level"] = .string(event.level.rawValue)
        fields["label"] = .string(label)
        fields["message"] = .string(event.message.description)
        fields["source"] = .string(event.source)
        write(String(decoding: API.encode(JSONValue.object(fields)), as: UTF8.self) + "\n")
    }

    private static let fixed: Set<String> = ["time", "level", "label", "message", "source"]

    private static func json(_ value: Logger.Metadata.Value) -> JSONValue {
        switch value {
        case .string(let text): .string(text)
        case .stringConvertible(let value): .string(value.description)
        case .array(let values): .array(values.map(json))
        case .dictionary(let values): .object(values.mapValues(json))
        }
    }

    private static let output = Mutex(())

    /// Writes a line to standard output, one line at a time.
    public static let standardOutput = lines(to: .standardOutput)
    /// Writes a line to standard error, one line at a time.
    public static let standardError = lines(to: .standardError)

    private static func lines(to handle: FileHandle) -> @Sendable (String) -> Void {
        { line in
            // A failed write (a closed pipe, a full disk) loses the line; it must not stop the server.
            output.withLock { _ in try? handle.write(contentsOf: Data(line.utf8)) }
        }
    }
}

/// One info line per HTTP request, after it is answered: method, route pattern, path (never the query, which may hold a
/// token), status, duration and Hummingbird's request id, which is also returned as `X-Request-Id`. Bodies are never
/// logged.
struct RequestLogMiddleware: RouterMiddleware {
    typealias Context = BeaconRequestContext
    let logger: Logger

    /// From a literal valid token: the initializer cannot fail, and no input reaches it.
    private static let requestIDHeader = HTTPField.Name("X-Request-Id")!

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let start = ContinuousClock.now
        var response = try await next(request, context)
        let elapsed = start.duration(to: .now)
        response.headers[Self.requestIDHeader] = context.id
        logger.info(
            "request",
            metadata: [
                "request_id": .string(context.id), "method": .string(request.method.rawValue),
                "route": .string(context.endpointPath ?? "NotFound"), "path": .string(request.uri.path),
                "status": .stringConvertible(response.status.code),
                "duration_ms": .string(String(format: "%.3f", elapsed / .milliseconds(1))),
            ])
        return response
    }
}
