import BeaconAPNs
import BeaconCore
import BeaconPush
import BeaconStorage
import Foundation
import Logging
import ServiceLifecycle
import Synchronization

/// Outcomes of one batch's sends, handed from the sending tasks to the one that records them.
final class OutcomeBuffer: Sendable {
    private struct State {
        var outcomes: [PushAttemptOutcome] = []
        var finished = false
    }
    private let state = Mutex(State())
    private let wake = WakeSignal()

    func add(_ outcome: PushAttemptOutcome) {
        state.withLock { $0.outcomes.append(outcome) }
        wake.signal()
    }

    /// No more outcomes will come.
    func finish() {
        state.withLock { $0.finished = true }
        wake.signal()
    }

    /// Up to `limit` outcomes, waiting for the first; nil once finished and empty.
    func next(upTo limit: Int) async -> [PushAttemptOutcome]? {
        while true {
            let (taken, finished) = state.withLock { state in
                let taken = Array(state.outcomes.prefix(limit))
                state.outcomes.removeFirst(taken.count)
                return (taken, state.finished)
            }
            if !taken.isEmpty { return taken }
            // Cancelled: what was not written is sent again once its claim expires (at least once).
            if finished || Task.isCancelled { return nil }
            await wake.wait(upTo: .seconds(1))
        }
    }
}
