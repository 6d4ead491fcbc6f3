import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

extension URLSession {
    /// `data(for:)`, not cancelled with the calling task: it ends when the request does (URLSession's own timeout bounds it).
    ///
    /// On Linux, cancelling a task while FoundationNetworking completes its request deadlocks the process: the cancel
    /// handler runs under the task's status lock and waits (`DispatchQueue.sync`) for the session's queue, which is
    /// resuming the task's continuation and waits for that lock. Seen as a whole test run hanging with no output.
    func dataIgnoringCancellation(for request: URLRequest) async throws -> (Data, URLResponse) {
        try await Task { try await self.data(for: request) }.value
    }
}
