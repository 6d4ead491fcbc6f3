import Foundation
import Subprocess
import Synchronization

#if canImport(System)
    import System
#else
    import SystemPackage
#endif

// Children are started with swift-subprocess, not Foundation's `Process`: on Linux `Process.run()` reads past the end of a
// `/proc/self/fd` entry (swift-corelibs-foundation #5472, in Swift 6.3.1) and crashes a process holding a thousand or so
// descriptors — which a test run does (seen: SIGSEGV in `__memmove_avx_unaligned_erms` under `Process.run()`).
// swift-subprocess also waits for its children without parking a thread of Swift's cooperative pool.

/// What a program printed on its standard output and how it ended.
public struct ChildProcessResult: Sendable {
    public var status: Int32
    public var output: Data
}

/// Runs a program to its end; ends it (SIGTERM, then SIGKILL) when it still runs after `timeout`.
public func runToExit(
    _ executable: URL, _ arguments: [String], in directory: URL? = nil, timeout: Duration = .seconds(60)
) async throws -> ChildProcessResult {
    try await withThrowingTaskGroup(of: ChildProcessResult.self) { group in
        group.addTask {
            let result = try await Subprocess.run(
                .path(FilePath(executable.path)), arguments: Arguments(arguments),
                workingDirectory: directory.map { FilePath($0.path) }, output: .bytes(limit: 64 << 20),
                // Its complaints reach the test log, as a failing command's should.
                error: .fileDescriptor(.standardError, closeAfterSpawningProcess: false))
            return ChildProcessResult(status: result.terminationStatus.code, output: Data(result.standardOutput))
        }
        group.addTask {
            try await Task.sleep(for: timeout)
            throw TestFailure("\(executable.lastPathComponent) \(arguments.joined(separator: " ")) still ran after \(timeout)")
        }
        defer { group.cancelAll() }  // cancelled, a child that still runs is ended
        guard let first = try await group.next() else { throw CancellationError() }
        return first
    }
}

/// A program running beside the test: its standard output and error, line by line, signals, and its end.
public final class ChildProcess: Sendable {
    /// Every line the program prints (standard output and error together), until it ends.
    public let lines: AsyncStream<String>
    private let signals: AsyncStream<Int32>.Continuation
    /// The program's exit status once it ended (the signal's number when a signal ended it; -1 when it could not be
    /// waited for).
    private let end: Collector<Int32>
    private let identifier = Locked<pid_t>(0)

    /// Starts `executable`; returns once it runs (throws when it cannot be started).
    public init(_ executable: URL, _ arguments: [String], environment: [String: String] = [:]) async throws {
        let (lines, lineSink) = AsyncStream.makeStream(of: String.self)
        let (signals, signalSink) = AsyncStream.makeStream(of: Int32.self)
        let (started, start) = AsyncStream.makeStream(of: (any Error)?.self, bufferingPolicy: .bufferingNewest(1))
        let (ends, endSink) = AsyncStream.makeStream(of: Int32.self)
        let variables = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        let identifier = self.identifier
        Task {
            var code: Int32 = -1
            defer {
                lineSink.finish()
                endSink.yield(code)
                endSink.finish()
            }
            do {
                let result = try await Subprocess.run(
                    .path(FilePath(executable.path)), arguments: Arguments(arguments),
                    environment: .custom(variables.map { Array("\($0.key)=\($0.value)\0".utf8) }),
                    input: .none, output: .sequence, error: .combinedWithOutput
                ) { execution in
                    identifier.withLock { $0 = execution.processIdentifier.value }
                    start.yield(nil)
                    // The execution is valid only here: signals asked for are sent from here, while the program runs.
                    await withTaskGroup(of: Void.self) { group in
                        group.addTask {
                            for await signal in signals { try? execution.send(signal: Signal(rawValue: signal)) }
                        }
                        do {
                            for try await line in execution.standardOutput.strings(bufferingPolicy: .unbounded) { lineSink.yield(line) }
                        } catch {
                            // A program whose output cannot be read can be neither watched nor signalled later: it ends.
                            lineSink.yield("(output unreadable: \(error))")
                            try? execution.send(signal: .kill)
                        }
                        // The output ended: the program is ending (a signal asked for from now on is not sent).
                        group.cancelAll()
                    }
                }
                code = result.terminationStatus.code
            } catch {
                start.yield(error)
            }
        }
        self.lines = lines
        self.signals = signalSink
        self.end = Collector(ends)
        if case .some(.some(let failure)) = await started.first(where: { _ in true }) { throw failure }
    }

    deinit {
        // A test that ends without stopping its child does not leave it running.
        signals.yield(SIGKILL)
    }

    /// Sends `signal` to the program, unless it has ended.
    public func signal(_ signal: Int32) {
        signals.yield(signal)
    }

    /// Waits (bounded) for the program to end; its exit status, or nil if it still runs.
    public func exitStatus(within timeout: Duration) async -> Int32? {
        try? await end.wait(timeout: timeout) { !$0.isEmpty }.first
    }

    /// The program's process id.
    public var processIdentifier: pid_t { identifier.withLock { $0 } }

    /// Ends the program if it still runs, and waits (bounded) for its end.
    public func stop() async {
        signal(SIGKILL)
        _ = await exitStatus(within: .seconds(10))
    }
}

extension TerminationStatus {
    /// The exit code, or the number of the signal that ended the program.
    var code: Int32 {
        switch self {
        case .exited(let code): code
        case .signaled(let signal): signal
        }
    }
}
