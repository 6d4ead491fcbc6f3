import Synchronization

/// What a test helper throws when what it waited for or asked for did not happen.
public struct TestFailure: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// Waits until `condition` holds, checking it every `interval`, at most `timeout`; throws `TestFailure` (with `what`)
/// after that. For conditions only a query can see (a REST answer, a table); what arrives as events is waited for with
/// `Collector.wait`, without polling.
public func waitUntil(
    _ what: @autoclosure () -> String, timeout: Duration = .seconds(20), interval: Duration = .milliseconds(10),
    _ condition: () async throws -> Bool
) async throws {
    let deadline = ContinuousClock.now + timeout
    while try await !condition() {
        guard ContinuousClock.now < deadline else { throw TestFailure("timed out after \(timeout) waiting for \(what())") }
        try await Task.sleep(for: interval)
    }
}

/// Records everything an async sequence yields and lets tests wait for a condition, with a generous timeout so that a
/// broken build fails instead of hanging.
public final class Collector<Element: Sendable>: Sendable {
    private struct State {
        var items: [Element] = []
        var waiters: [(id: Int, condition: @Sendable ([Element]) -> Bool, continuation: CheckedContinuation<[Element], any Error>)] = []
        var nextID = 0
    }
    private let state = Mutex(State())

    public init(_ stream: some AsyncSequence<Element, Never> & Sendable) {
        Task { [weak self] in
            for await item in stream { self?.append(item) }
        }
    }

    public var items: [Element] { state.withLock { $0.items } }

    private func append(_ item: Element) {
        let ready = state.withLock { state -> [(CheckedContinuation<[Element], any Error>, [Element])] in
            state.items.append(item)
            let items = state.items
            let (done, waiting) = (state.waiters.filter { $0.condition(items) }, state.waiters.filter { !$0.condition(items) })
            state.waiters = waiting
            return done.map { ($0.continuation, items) }
        }
        for (continuation, items) in ready { continuation.resume(returning: items) }
    }

    /// Waits until `condition` holds for everything received so far; returns it.
    @discardableResult
    public func wait(timeout: Duration = .seconds(20), until condition: @escaping @Sendable ([Element]) -> Bool) async throws -> [Element] {
        let id = state.withLock { state in
            state.nextID += 1
            return state.nextID
        }
        let timer = Task {
            try await Task.sleep(for: timeout)
            self.fail(id)
        }
        defer { timer.cancel() }
        return try await withCheckedThrowingContinuation { continuation in
            let items: [Element]? = state.withLock { state in
                if condition(state.items) { return state.items }
                state.waiters.append((id, condition, continuation))
                return nil
            }
            if let items { continuation.resume(returning: items) }
        }
    }

    public func wait(count: Int) async throws -> [Element] {
        try await wait { $0.count >= count }
    }

    private func fail(_ id: Int) {
        let waiter = state.withLock { state -> CheckedContinuation<[Element], any Error>? in
            guard let index = state.waiters.firstIndex(where: { $0.id == id }) else { return nil }
            return state.waiters.remove(at: index).continuation
        }
        waiter?.resume(throwing: TestFailure("timed out; received so far: \(items)"))
    }
}

/// A gate a hook waits at until the test opens it.
public final class Gate: Sendable {
    private struct State {
        var open = false
        var waiting: [CheckedContinuation<Void, Never>] = []
    }
    private let state = Mutex(State())
    /// Every arrival, so that a test can wait for a number of them (`waitForArrivals`).
    private let arrivals: Collector<Void>
    private let arrivalSink: AsyncStream<Void>.Continuation

    public init() {
        let (stream, sink) = AsyncStream.makeStream(of: Void.self)
        arrivals = Collector(stream)
        arrivalSink = sink
    }

    /// Called by the hook: counts the arrival and waits until the gate opens.
    public func pass() async {
        await withCheckedContinuation { continuation in
            let open = state.withLock { state in
                if !state.open { state.waiting.append(continuation) }
                return state.open
            }
            arrivalSink.yield()
            if open { continuation.resume() }
        }
    }

    public func open() {
        let waiting = state.withLock { state in
            state.open = true
            defer { state.waiting.removeAll() }
            return state.waiting
        }
        for continuation in waiting { continuation.resume() }
    }

    /// Waits until `count` hooks have arrived (bounded: 20 s).
    public func waitForArrivals(_ count: Int) async throws {
        do {
            _ = try await arrivals.wait(count: count)
        } catch {
            throw TestFailure("only \(arrivals.items.count) of \(count) arrived at the gate")
        }
    }
}
