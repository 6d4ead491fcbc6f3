import Synchronization

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

/// The first of several results offered (later ones are dropped), handed to one waiter.
private final class FirstOutcome<T: Sendable>: Sendable {
    private enum State {
        case empty
        case waiting(CheckedContinuation<T, any Error>)
        case resolved(Result<T, any Error>)
        case handedOver
    }

    private let state = Mutex<State>(.empty)

    func resolve(_ result: Result<T, any Error>) {
        let waiter: CheckedContinuation<T, any Error>? = state.withLock { state in
            switch state {
            case .empty:
                state = .resolved(result)
                return nil
            case .waiting(let continuation):
                state = .handedOver
                return continuation
            case .resolved, .handedOver:
                return nil
            }
        }
        waiter?.resume(with: result)
    }

    /// Waits for the first result (call once).
    func value() async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            let ready: Result<T, any Error>? = state.withLock { state in
                guard case .resolved(let result) = state else {
                    state = .waiting(continuation)
                    return nil
                }
                state = .handedOver
                return result
            }
            if let ready { continuation.resume(with: ready) }
        }
    }
}
