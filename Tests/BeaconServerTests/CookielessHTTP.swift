import BeaconCore
import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Plain HTTP requests that neither keep nor send cookies by themselves: every request says which cookie it sends (the
/// console's session tests).
enum CookielessHTTP {
    /// An answer: its status, its headers (names lowercased) and its body as JSON (a string when it is not JSON).
    struct Answer {
        var status: Int
        var headers: [String: String]
        var json: JSONValue
    }

    private static let session: URLSession = {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpCookieStorage = nil
        configuration.httpShouldSetCookies = false
        return URLSession(configuration: configuration)
    }()

    static func send(
        _ baseURL: URL, _ method: String, _ path: String, body: String? = nil, headers: [String: String] = [:]
    ) async throws -> Answer {
        var request = URLRequest(url: URL(string: baseURL.absoluteString + path)!)
        request.httpMethod = method
        request.httpShouldHandleCookies = false
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        request.httpBody = body.map { Data($0.utf8) }
        let (data, response) = try await session.data(for: request)
        let http = response as? HTTPURLResponse
        let headers = Dictionary(
            (http?.allHeaderFields ?? [:]).map { (String(describing: $0.key).lowercased(), String(describing: $0.value)) },
            uniquingKeysWith: { $1 })
        return Answer(
            status: http?.statusCode ?? 0, headers: headers,
            json: (try? JSONDecoder().decode(JSONValue.self, from: data)) ?? .string(String(decoding: data, as: UTF8.self)))
    }
}
