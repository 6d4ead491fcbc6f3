import Synchronization

/// The first of several results offered (later ones are dropped), handed to one waiter: how a wait is bounded by a timer
/// racing the work, in this package's timeouts and deadlines.
package final class FirstOutcome<T: Sendable>: Sendable {
    private enum State {
        case empty
        case waiting(CheckedContinuation<T, any Error>)
        case resolved(Result<T, any Error>)
        case handedOver
    }

    private let state = Mutex<State>(.empty)

    package init() {}

    /// Offers a result: the first one offered is kept, later ones dropped.
    package func resolve(_ result: Result<T, any Error>) {
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

    /// Waits for the first result (one waiter only: a second gets `CancellationError`).
    package func value() async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            let ready: Result<T, any Error>? = state.withLock { state in
                switch state {
                case .resolved(let result):
                    state = .handedOver
                    return result
                case .empty:
                    state = .waiting(continuation)
                    return nil
                case .waiting, .handedOver:
                    return .failure(CancellationError())  // one waiter only
                }
            }
            if let ready { continuation.resume(with: ready) }
        }
    }
}
