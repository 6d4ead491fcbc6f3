import BeaconCore
import Logging

/// What went wrong in a request body or a frame, in words a client developer can act on.
func describe(_ error: any Error) -> String {
    switch error {
    case DecodingError.keyNotFound(let key, _): "missing field '\(key.stringValue)'"
    case DecodingError.typeMismatch(_, let context), DecodingError.valueNotFound(_, let context):
        "wrong type at '\(context.codingPath.map(\.stringValue).joined(separator: "."))'"
    case DecodingError.dataCorrupted(let context):
        context.codingPath.isEmpty
            ? "malformed JSON"
            : "bad value at '\(context.codingPath.map(\.stringValue).joined(separator: "."))': \(context.debugDescription)"
    default: "\(error)"
    }
}

extension BeaconError {
    /// A `BeaconError` for any error: decoding errors become `json_parse`, unknown ones `internal_error` (logged).
    init(wrapping error: any Error, logger: Logger) {
        switch error {
        case let error as BeaconError: self = error
        case is DecodingError: self.init(.jsonParse, describe(error))
        default:
            logger.error("unexpected error", metadata: ["error": "\(String(reflecting: error))"])
            self.init(.internalError, "internal error")
        }
    }
}
