import BeaconCore
import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// REST calls to a Beacon server, a `beacon` process or a simulator's control API, as an app's backend makes them.
public enum REST {
    /// `method path` on `baseURL`, with a JSON `body` (or the bytes of `raw`) and a bearer `token`; the status and the
    /// answer (JSON, or the text of an answer that is not).
    public static func call(
        _ baseURL: URL, _ method: String, _ path: String, body: JSONValue? = nil, raw: Data? = nil, token: String? = nil,
        headers: [String: String] = [:]
    ) async throws -> (status: Int, json: JSONValue) {
        guard let url = URL(string: baseURL.absoluteString + path) else { throw TestFailure("not a URL: \(baseURL)\(path)") }
        var request = URLRequest(url: url)
        request.httpMethod = method
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        if let token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        if let raw {
            request.httpBody = raw
        } else if let body {
            request.httpBody = try JSONEncoder().encode(body)
        }
        let (data, response) = try await URLSession.shared.dataIgnoringCancellation(for: request)
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        let json = (try? JSONDecoder().decode(JSONValue.self, from: data)) ?? .string(String(decoding: data, as: UTF8.self))
        return (status, json)
    }

    /// An access token from `POST /{org}/{app}/token` (`grant_type` password or client_credentials).
    public static func token(_ baseURL: URL, app: String, _ body: JSONValue) async throws -> String {
        let (status, answer) = try await call(baseURL, "POST", "/\(app)/token", body: body)
        guard status == 200, let token = answer["access_token"]?.stringValue else {
            throw TestFailure("token request failed: \(status) \(answer)")
        }
        return token
    }
}
