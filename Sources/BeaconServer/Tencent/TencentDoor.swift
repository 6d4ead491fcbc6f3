import BeaconCore
import BeaconStorage
import BeaconTencent
import Foundation
import Hummingbird

/// Tencent Cloud IM's REST door, `POST /v4/{service}/{command}?sdkappid=&identifier=&usersig=&random=&contenttype=json`,
/// onto the same engine as Easemob's (docs/tencent.md): the app is found by its SDKAppID (`TencentAppResolver`), the
/// caller by its UserSig (`UserSigScheme`, which only the app's admin identifier passes), and every answer is HTTP 200
/// with Tencent's envelope, `{"ActionStatus":"OK"|"FAIL","ErrorCode":n,"ErrorInfo":"…"}` and the command's fields
/// (`TencentEnvelope`). The commands themselves are in the `TencentCommands+…` files, one per Tencent service.
struct TencentDoor {
    let commands: TencentCommands

    static let path = "/v4/:service/:command"

    func register(on router: Router<BeaconRequestContext>, table: RouteTable) {
        let group = router.group()
            .add(middleware: TencentEnvelope())
            .add(middleware: TencentAppResolver(api: commands.api))
            .add(middleware: SchemeAuthenticator(schemes: [UserSigScheme(api: commands.api)]))
            .add(middleware: RequireCaller())
        // Tencent's API is POST; some server SDKs send reads (`account_check`) as GET with the same body, which only the
        // commands that read answer (`TencentCommands.reads`).
        for method in [HTTPRequest.Method.post, .get] {
            table.add(method, Self.path, on: group) { request, context in
                let service = try context.parameters.require("service")
                let command = try context.parameters.require("command")
                guard let handler = commands.handler(service: service, command: command) else {
                    throw TencentFailure(60009, "\(service)/\(command) is not a command Beacon serves (docs/tencent.md lists them)")
                }
                guard request.method == .post || TencentCommands.reads.contains("\(service)/\(command)") else {
                    throw TencentFailure(60009, "\(service)/\(command) changes things: send it with POST")
                }
                let body = try await commands.api.collectBody(of: request)
                return try await handler(TencentCall(app: try context.app, body: Data(buffer: body)))
            }
        }
    }

    /// An `OK` answer with the command's fields.
    static func answer(_ fields: some Encodable) throws -> Response {
        var encoded = ByteBuffer()
        try encoded.writeBytes(JSONEncoder().encode(TencentEnvelope.Answer(status: "OK", code: 0, info: "", fields: fields)))
        return Response(status: .ok, headers: [.contentType: "application/json; charset=utf-8"], body: .init(byteBuffer: encoded))
    }
}

/// One command's request: its app and its JSON body.
struct TencentCall: Sendable {
    let app: AppRecord
    let body: Data

    /// The body as `T`: Tencent's JSON error (`jsonParse`) when it is not JSON or not of that shape. An empty body is `{}`.
    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        do {
            return try JSONDecoder().decode(T.self, from: body.isEmpty ? Data("{}".utf8) : body)
        } catch {
            throw BeaconError(.jsonParse, "the body is not the JSON this command takes: \(describe(error))")
        }
    }
}

/// A Tencent error: its `ErrorCode` and `ErrorInfo`.
struct TencentFailure: Error, Sendable, Equatable {
    let code: Int
    let info: String

    init(_ code: Int, _ info: String) {
        self.code = code
        self.info = info
    }

    /// Beacon's error as the Tencent service `service` numbers it (Tencent's documented codes; docs/tencent.md).
    init(_ error: BeaconError, service: String) {
        let codes: [BeaconError.Code: [String: Int]] = [
            .jsonParse: ["openim": 90001, "group_open_http_svc": 10011],
            .illegalArgument: ["im_open_login_svc": 70402, "openim": 90010, "group_open_http_svc": 10004, "profile": 40001],
            .userNotFound: ["im_open_login_svc": 70107, "openim": 20003, "group_open_http_svc": 10019, "profile": 40003],
            .groupNotFound: ["group_open_http_svc": 10010],
            .forbidden: ["openim": 90009, "group_open_http_svc": 10007, "profile": 40004],
            .duplicate: ["group_open_http_svc": 10021],
            .messageNotFound: ["openim": 20022, "group_open_http_svc": 10030],
            .internalError: ["im_open_login_svc": 70500, "openim": 91000, "group_open_http_svc": 10002, "profile": 40006],
        ]
        let common: [BeaconError.Code: Int] = [
            .jsonParse: 60003, .illegalArgument: 60003, .unauthorized: 60004, .badAccessToken: 60004, .forbidden: 60010,
            .tooManyRequests: 60007, .requestTooLarge: 80002, .resourceNotFound: 60009, .appNotFound: 70020,
        ]
        self.init(codes[error.code]?[service] ?? common[error.code] ?? 70500, error.message)
    }

    /// A refused UserSig, as Tencent numbers it.
    init(_ failure: UserSig.Failure) {
        switch failure {
        case .malformed(let reason): self.init(70003, "UserSig is invalid: \(reason)")
        case .wrongApp: self.init(70014, "the UserSig was made for another SDKAppID")
        case .wrongIdentifier: self.init(70013, "the UserSig was made for another identifier")
        case .badSignature: self.init(70009, "the UserSig does not verify with this SDKAppID's secret key")
        case .expired: self.init(70001, "the UserSig has expired; make a new one")
        }
    }
}

/// Answers every request of the door with HTTP 200 and Tencent's envelope: a failure becomes `ActionStatus: FAIL` with its
/// Tencent code (`TencentFailure`).
struct TencentEnvelope: RouterMiddleware {
    typealias Context = BeaconRequestContext

    struct Answer<Fields: Encodable>: Encodable {
        let status: String
        let code: Int
        let info: String
        let fields: Fields

        enum CodingKeys: String, CodingKey {
            case status = "ActionStatus", code = "ErrorCode", info = "ErrorInfo"
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(status, forKey: .status)
            try container.encode(code, forKey: .code)
            try container.encode(info, forKey: .info)
            try fields.encode(to: encoder)
        }
    }

    struct NoFields: Encodable {}

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch {
            let service = context.parameters.get("service") ?? ""
            let failure: TencentFailure
            switch error {
            case let error as TencentFailure: failure = error
            case let error as UserSig.Failure: failure = TencentFailure(error)
            case let error as BeaconError: failure = TencentFailure(error, service: service)
            case let error as HTTPError where error.status == .contentTooLarge:
                failure = TencentFailure(80002, "the request body is too large")
            default: failure = TencentFailure(BeaconError(wrapping: error, logger: context.logger), service: service)
            }
            var encoded = ByteBuffer()
            try encoded.writeBytes(JSONEncoder().encode(Answer(status: "FAIL", code: failure.code, info: failure.info, fields: NoFields())))
            return Response(status: .ok, headers: [.contentType: "application/json; charset=utf-8"], body: .init(byteBuffer: encoded))
        }
    }
}

/// Finds the app by the `sdkappid` query parameter (Tencent's 60012 when it is missing, 70020 when no app has it).
struct TencentAppResolver: RouterMiddleware {
    typealias Context = BeaconRequestContext
    let api: API

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let text = request.uri.queryParameters.get("sdkappid"), !text.isEmpty else {
            throw TencentFailure(60012, "the request has no sdkappid")
        }
        guard let sdkAppID = Int64(text), sdkAppID > 0, let app = try await api.store.app(tencentAppID: sdkAppID) else {
            throw TencentFailure(70020, "SDKAppID \(text.prefix(20)) does not exist")
        }
        var context = context
        context.pathApp = app
        return try await next(request, context)
    }
}

/// Tencent's UserSig in the query (`identifier`, `usersig`): the app's admin identifier, with a UserSig that holds, calls
/// as the app; any other identifier is refused (60010), as at Tencent.
struct UserSigScheme: IdentityScheme {
    let api: API

    func identity(of request: Request, app: AppRecord) async throws -> RequestIdentity? {
        let query = request.uri.queryParameters
        guard let identifier = query.get("identifier"), !identifier.isEmpty else { return nil }
        guard let sig = query.get("usersig"), !sig.isEmpty else { throw TencentFailure(70002, "the request has no usersig") }
        try api.verifyUserSig(sig, identifier: identifier, app: app)
        guard identifier == app.tencent?.adminIdentifier else {
            throw TencentFailure(60010, "identifier \(identifier.prefix(64)) is not the app's administrator")
        }
        return RequestIdentity(app: app, caller: .app, user: nil)
    }
}

extension API {
    /// Checks that `sig` is a UserSig of `identifier` in `app`, signed with the app's Tencent secret key and not expired
    /// (throws `UserSig.Failure`); `appNotFound` when the app has no Tencent identity or this server no secret key.
    @discardableResult
    func verifyUserSig(_ sig: String, identifier: String, app: AppRecord) throws -> UserSig {
        guard let tencent = app.tencent, let box else {
            throw BeaconError(.appNotFound, "application \(app.key) has no Tencent identity (beacon app tencent)")
        }
        let key = try TencentIdentities.secretKey(of: tencent, box: box)
        return try UserSig.verify(sig, identifier: identifier, sdkAppID: tencent.sdkAppID, key: key, now: clock() / 1000)
    }
}
