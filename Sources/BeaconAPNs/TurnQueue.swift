import NIOCore
import Synchronization

/// Something async callers wait on for their turn (an in-flight permit, an HTTP/2 stream slot).
///
/// Every wait is bounded: a waiter leaves the queue when its deadline has passed (`APNsFailure.timeout`, found by
/// `expireOverdue`, which the owner calls periodically) or its task is cancelled (`CancellationError`, at once),
/// whichever comes first, and a turn handed to nobody is never lost. (One periodic sweep rather than a timer per waiter:
/// under load most notifications wait, and a timer each cost more than the send.)
protocol TurnQueue: AnyObject, Sendable {
    /// Takes a turn now if one is free: `.success` when taken, `.failure` when no turn will ever come, nil to wait.
    func takeTurnIfFree() -> Result<Void, APNsFailure>?
    /// Like `takeTurnIfFree`, but queues `waiter` when it must wait. Runs the check and the queuing under one lock, and
    /// must refuse (with `CancellationError`) when the current task is already cancelled.
    func takeTurnOrQueue(_ waiter: Waiter) -> Result<Void, any Error>?
    /// Removes a queued waiter; nil when it has already been given its turn.
    func withdraw(_ id: UInt64) -> CheckedContinuation<Void, any Error>?
}

/// One caller waiting for its turn.
struct Waiter {
    var id: UInt64
    var deadline: ContinuousClock.Instant
    var continuation: CheckedContinuation<Void, any Error>
}

private let waiterIDs = Atomic<UInt64>(0)

extension TurnQueue {
    /// Waits for a turn for at most `timeout`, and not past `cutoff` when given (give or take the owner's sweep interval).
    func waitForTurn(timeout: Duration, until cutoff: ContinuousClock.Instant? = nil) async throws {
        if let now = takeTurnIfFree() { return try now.get() }
        let id = waiterIDs.wrappingAdd(1, ordering: .relaxed).oldValue
        let deadline = cutoff.map { min($0, ContinuousClock.now + timeout) } ?? ContinuousClock.now + timeout
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                if let now = takeTurnOrQueue(Waiter(id: id, deadline: deadline, continuation: continuation)) {
                    continuation.resume(with: now)
                }
            }
        } onCancel: {
            withdraw(id)?.resume(throwing: CancellationError())
        }
    }
}

/// The queue of a `TurnQueue`, kept inside its owner's lock. Waiters of one queue share a timeout, so the queue is in
/// deadline order too, unless a sender's own deadline (`waitForTurn(timeout:until:)`) cut a wait shorter: then the
/// sweep looks through the whole queue until it is in order again.
struct Waiters {
    private var queue = CircularBuffer<Waiter>()
    /// Whether the queue is in deadline order (the overdue are at its front).
    private var inDeadlineOrder = true

    var isEmpty: Bool { queue.isEmpty }

    mutating func append(_ waiter: Waiter) {
        if let last = queue.last, waiter.deadline < last.deadline { inDeadlineOrder = false }
        queue.append(waiter)
    }

    mutating func popFirst() -> CheckedContinuation<Void, any Error>? {
        queue.popFirst()?.continuation
    }

    mutating func remove(_ id: UInt64) -> CheckedContinuation<Void, any Error>? {
        guard let index = queue.firstIndex(where: { $0.id == id }) else { return nil }
        return queue.remove(at: index).continuation
    }

    /// Removes the waiters whose deadline has passed.
    mutating func removeOverdue(now: ContinuousClock.Instant) -> [CheckedContinuation<Void, any Error>] {
        var overdue: [CheckedContinuation<Void, any Error>] = []
        if inDeadlineOrder {
            while let first = queue.first, first.deadline <= now {
                overdue.append(queue.removeFirst().continuation)
            }
            return overdue
        }
        var kept = CircularBuffer<Waiter>(initialCapacity: queue.count)
        var ordered = true
        for waiter in queue {
            if waiter.deadline <= now {
                overdue.append(waiter.continuation)
            } else {
                if let last = kept.last, waiter.deadline < last.deadline { ordered = false }
                kept.append(waiter)
            }
        }
        queue = kept
        inDeadlineOrder = ordered
        return overdue
    }

    mutating func removeAll() -> [CheckedContinuation<Void, any Error>] {
        defer {
            queue.removeAll()
            inDeadlineOrder = true
        }
        return queue.map(\.continuation)
    }
}

/// A counting semaphore: at most `limit` turns out at once.
final class Limiter: TurnQueue {
    private struct State {
        var available: Int
        var waiters = Waiters()
        /// Set by `close`: no turn will come any more.
        var closedReason: String?
    }
    private let state: Mutex<State>

    init(limit: Int) {
        state = Mutex(State(available: limit))
    }

    func takeTurnIfFree() -> Result<Void, APNsFailure>? {
        state.withLock { state in
            if let reason = state.closedReason { return .failure(.connectionLost(reason)) }
            guard state.available > 0 else { return nil }
            state.available -= 1
            return .success(())
        }
    }

    func takeTurnOrQueue(_ waiter: Waiter) -> Result<Void, any Error>? {
        state.withLock { state in
            if let reason = state.closedReason { return .failure(APNsFailure.connectionLost(reason)) }
            if state.available > 0 {
                state.available -= 1
                return .success(())
            }
            if Task.isCancelled { return .failure(CancellationError()) }
            state.waiters.append(waiter)
            return nil
        }
    }

    func withdraw(_ id: UInt64) -> CheckedContinuation<Void, any Error>? {
        state.withLock { $0.waiters.remove(id) }
    }

    /// Ends the waits whose deadline has passed with `APNsFailure.timeout`.
    func expireOverdue() {
        let overdue = state.withLock { $0.waiters.removeOverdue(now: .now) }
        for waiter in overdue { waiter.resume(throwing: APNsFailure.timeout) }
    }

    /// Ends every wait, now and later, with `APNsFailure.connectionLost(reason)` (the client was retired or shut down:
    /// nothing sweeps its waits any more).
    func close(reason: String) {
        let waiters = state.withLock { state in
            state.closedReason = state.closedReason ?? reason
            return state.waiters.removeAll()
        }
        for waiter in waiters { waiter.resume(throwing: APNsFailure.connectionLost(reason)) }
    }

    /// Gives the turn back: to the first waiter, else to the pool.
    func release() {
        let next = state.withLock { state -> CheckedContinuation<Void, any Error>? in
            if let next = state.waiters.popFirst() { return next }
            state.available += 1
            return nil
        }
        next?.resume()
    }
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
    var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        let (whole, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        let (total, carry) = whole.addingReportingOverflow(attoseconds / 1_000_000_000)
        return overflow || carry ? (seconds < 0 ? .min : .max) : total
    }
}
