import BeaconCore

/// How the REST API answers each error code: Easemob's statuses and exception names.
extension BeaconError.Code {
    /// The HTTP status a REST answer with this code has.
    var httpStatus: Int {
        switch self {
        case .illegalArgument, .jsonParse, .invalidGrant, .invalidP12Password, .invalidP12File, .invalidP8Key, .certificateExpired,
            .notifierNotFound, .invalidTemplate:
            400
        case .tooManyRequests: 429
        case .requestTooLarge: 413
        case .unauthorized, .badAccessToken: 401
        case .forbidden: 403
        case .resourceNotFound, .appNotFound, .userNotFound, .groupNotFound, .messageNotFound, .webhookNotFound: 404
        case .duplicate: 400
        case .methodNotAllowed: 405
        case .internalError: 500
        }
    }

    /// Easemob's exception name for this code (`exception` in the error body).
    var exception: String {
        switch self {
        case .illegalArgument: "IllegalArgumentException"
        case .jsonParse: "JsonParseException"
        case .invalidGrant: "InvalidGrantException"
        case .invalidP12Password, .invalidP12File, .invalidP8Key, .certificateExpired: "InvalidPushCertificateException"
        case .notifierNotFound: "NotifierNotFoundException"
        case .invalidTemplate: "InvalidTemplateException"
        case .tooManyRequests: "TooManyRequestsException"
        case .requestTooLarge: "RequestEntityTooLargeException"
        case .unauthorized: "UnauthorizedException"
        case .badAccessToken: "UnauthorizedException"
        case .forbidden: "ForbiddenOperationException"
        case .resourceNotFound: "ResourceNotFoundException"
        case .appNotFound: "OrganizationApplicationNotFoundException"
        case .userNotFound: "UserNotFoundException"
        case .groupNotFound: "GroupNotFoundException"
        case .messageNotFound: "MessageNotFoundException"
        case .webhookNotFound: "WebhookNotFoundException"
        case .duplicate: "DuplicateUniquePropertyExistsException"
        case .methodNotAllowed: "MethodNotAllowedException"
        case .internalError: "InternalServerErrorException"
        }
    }
}
