/// A failure that reaches an API caller: a stable machine-readable code and a human description. (How the REST API
/// answers it, its HTTP status and Easemob's exception name, is the server's: `BeaconServer`'s `ErrorMiddleware`.)
///
/// Codes follow Easemob's REST error names where one exists (`illegal_argument`, `auth_bad_access_token`, …),
/// so that clients written against Easemob keep working. The full list is documented in `docs/errors.md`.
public struct BeaconError: Error, Sendable, Equatable, CustomStringConvertible {
    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code.rawValue): \(message)" }

    /// Stable error codes. Never rename one: clients match on them.
    public enum Code: String, Sendable, CaseIterable {
        case illegalArgument = "illegal_argument"
        case jsonParse = "json_parse"
        case invalidGrant = "invalid_grant"
        case invalidP12Password = "invalid_p12_password"
        case invalidP12File = "invalid_p12_file"
        case invalidP8Key = "invalid_p8_key"
        case certificateExpired = "certificate_expired"
        case notifierNotFound = "notifier_not_found"
        case invalidTemplate = "invalid_template"
        case tooManyRequests = "too_many_requests"
        case requestTooLarge = "request_entity_too_large"
        case unauthorized = "unauthorized"
        case badAccessToken = "auth_bad_access_token"
        case forbidden = "forbidden_op"
        case resourceNotFound = "service_resource_not_found"
        case appNotFound = "organization_application_not_found"
        case userNotFound = "user_not_found"
        case groupNotFound = "group_not_found"
        case messageNotFound = "message_not_found"
        case webhookNotFound = "webhook_not_found"
        case duplicate = "duplicate_unique_property_exists"
        case methodNotAllowed = "method_not_allowed"
        case internalError = "internal_error"
    }

    public static func illegal(_ message: String) -> BeaconError { BeaconError(.illegalArgument, message) }
}
