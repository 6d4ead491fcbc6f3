import BeaconAPNs
import BeaconCore
import BeaconPush
import BeaconStorage
import Foundation
import Logging
import ServiceLifecycle
import Synchronization

/// A wake-up that can be awaited with a limit; signals while nobody waits are kept (at most one).
final class WakeSignal: Sendable {
    private struct State {
        var pending = false
        var waiter: CheckedContinuation<Void, Never>?
        /// The current wait was cancelled before it could park.
        var cancelled = false
    }
    private let state = Mutex(State())

    func signal() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard let waiter = state.waiter else {
                state.pending = true
                return nil
            }
            state.waiter = nil
            return waiter
        }
        waiter?.resume()
    }

    /// Returns at the next signal, or after `limit`, or on cancellation.
    func wait(upTo limit: Duration) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.waitForSignal() }
            group.addTask { try? await Task.sleep(for: limit) }
            await group.next()
            group.cancelAll()
        }
    }

    private func waitForSignal() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let ready = state.withLock { state -> Bool in
                    if state.cancelled {
                        state.cancelled = false
                        return true
                    }
                    if state.pending {
                        state.pending = false
                        return true
                    }
                    state.waiter = continuation
                    return false
                }
                if ready { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
                guard let waiter = state.waiter else {
                    state.cancelled = true
                    return nil
                }
                state.waiter = nil
                return waiter
            }
            waiter?.resume()
        }
    }
}
