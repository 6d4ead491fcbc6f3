import Foundation

/// What a program printed on its standard output and how it ended.
public struct ChildProcessResult: Sendable {
    public var status: Int32
    public var output: Data
}

/// Runs a program to its end without blocking a thread of Swift's cooperative pool.
///
/// `Process.waitUntilExit()` and reading a pipe to its end both block the calling thread, and on Linux
/// `waitUntilExit()` called off the main thread can miss the child's end and park that thread for good: with two cores the
/// pool has two threads, so two such waits stop every test of the run. Here the end is reported by `terminationHandler`
/// (set before the child starts, so a quick exit is not missed) and the output goes to a file read afterwards.
public func runToExit(
    _ executable: URL, _ arguments: [String], in directory: URL? = nil, timeout: Duration = .seconds(60)
) async throws -> ChildProcessResult {
    let outputFile = FileManager.default.temporaryDirectory.appendingPathComponent("child-output-\(UUID().uuidString)")
    guard FileManager.default.createFile(atPath: outputFile.path, contents: nil) else {
        throw ChildProcessError("cannot create \(outputFile.path)")
    }
    defer { try? FileManager.default.removeItem(at: outputFile) }
    let output = try FileHandle(forWritingTo: outputFile)
    defer { try? output.close() }

    let process = Process()
    process.executableURL = executable
    process.arguments = arguments
    if let directory { process.currentDirectoryURL = directory }
    process.standardOutput = output
    let (ended, end) = AsyncStream.makeStream(of: Int32.self, bufferingPolicy: .bufferingNewest(1))
    process.terminationHandler = { end.yield($0.terminationStatus) }
    try process.run()
    let status = await withTaskGroup(of: Int32?.self) { group in
        group.addTask { await ended.first { _ in true } }
        group.addTask {
            try? await Task.sleep(for: timeout)
            return nil
        }
        let first = await group.next() ?? nil
        group.cancelAll()
        return first
    }
    guard let status else {
        process.terminate()
        throw ChildProcessError("\(executable.lastPathComponent) \(arguments.joined(separator: " ")) still ran after \(timeout)")
    }
    return ChildProcessResult(status: status, output: try Data(contentsOf: outputFile))
}

/// A child program that could not be run to its end.
public struct ChildProcessError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
