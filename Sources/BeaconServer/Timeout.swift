import BeaconAPNs

/// The body did not finish in time.
struct TimedOut: Error {}

/// Runs `body` and answers its result, or throws `TimedOut` once `limit` has passed (the body is then cancelled).
///
/// The bound holds even for a body that does not stop when cancelled (a postgres-nio query waits for its round trip
/// whatever happens): such a body finishes in the background and its result is dropped. That is why this uses
/// unstructured tasks — a task group, the structured way, always waits for its children, so its bound would be only as
/// good as the body's response to cancellation. Cancelling the caller cancels the body; the wait still ends by `limit`.
func withTimeout<T: Sendable>(_ limit: Duration, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    let outcome = FirstOutcome<T>()
    let work = Task {
        do {
            outcome.resolve(.success(try await body()))
        } catch {
            outcome.resolve(.failure(error))
        }
    }
    let timer = Task {
        // Cancelled once the caller has its answer: then it neither resolves nor cancels anything.
        guard (try? await Task.sleep(for: limit)) != nil else { return }
        outcome.resolve(.failure(TimedOut()))
        work.cancel()
    }
    defer { timer.cancel() }
    return try await withTaskCancellationHandler {
        try await outcome.value()
    } onCancel: {
        work.cancel()
    }
}
