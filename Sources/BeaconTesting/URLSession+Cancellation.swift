import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

extension URLSession {
    /// `data(for:)` in a task of its own, not cancelled with the caller's: on Linux, cancelling a request as it completes
    /// deadlocks FoundationNetworking (the SDK's `SystemTransport` does the same, and says why at length).
    public func dataIgnoringCancellation(for request: URLRequest) async throws -> (Data, URLResponse) {
        try await Task { try await self.data(for: request) }.value
    }
}
