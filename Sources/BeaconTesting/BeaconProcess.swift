import BeaconCore
import BeaconProtocol
import Foundation
import HummingbirdWSClient
import Logging
import Synchronization

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The `beacon` executable run as a child process, as an operator runs it: its output is kept line by line.
public final class BeaconProcess: Sendable {
    public let child: ChildProcess
    public let lines: Collector<String>

    /// `beacon` beside the running program (the test bundle: `swift test` builds every product of the package; or
    /// `beacon-bench`).
    public static var executable: URL {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("beacon")
    }

    public init(_ arguments: [String], environment: [String: String] = [:], executable: URL = BeaconProcess.executable) async throws {
        child = try await ChildProcess(executable, arguments, environment: environment)
        lines = Collector(child.lines)
    }

    /// Waits for a line containing `marker`; returns it.
    public func line(containing marker: String, timeout: Duration = .seconds(60)) async throws -> String {
        let lines = try await self.lines.wait(timeout: timeout) { $0.contains { $0.contains(marker) } }
        return lines.first { $0.contains(marker) } ?? ""
    }

    public func signal(_ signal: Int32) {
        child.signal(signal)
    }

    /// Waits (bounded) for the process to end; its exit status, or nil if it is still running.
    public func exitStatus(within timeout: Duration) async -> Int32? {
        await child.exitStatus(within: timeout)
    }

    /// Ends the process if it still runs (tests clean up after themselves).
    public func stop() async {
        await child.stop()
    }
}

/// `beacon apns-sim` as its own process, with its control API.
public struct SimulatorProcess: Sendable {
    public let process: BeaconProcess
    public let apnsURL: String
    public let controlURL: URL
    public let caFile: String

    public static func start(in directory: URL) async throws -> SimulatorProcess {
        let caFile = directory.appendingPathComponent("apns-ca.pem").path
        let process = try await BeaconProcess(["apns-sim", "--port", "0", "--control-port", "0", "--ca-out", caFile])
        let ready = try await process.line(containing: "\"control_url\"")
        let json = try JSONDecoder().decode([String: String].self, from: Data(ready.utf8))
        guard let apns = json["apns_url"], let control = json["control_url"].flatMap(URL.init(string:)) else {
            throw TestFailure("unexpected apns-sim output: \(ready)")
        }
        return SimulatorProcess(process: process, apnsURL: apns, controlURL: control, caFile: caFile)
    }

    public func control(_ method: String, _ path: String, _ body: JSONValue? = nil) async throws -> JSONValue {
        let (status, json) = try await REST.call(controlURL, method, path, body: body)
        guard (200..<300).contains(status) else { throw TestFailure("simulator \(method) \(path): \(status) \(json)") }
        return json
    }
}

/// `beacon serve` on a data directory, pushing to a `SimulatorProcess` (or to no APNs at all).
public struct ServerProcess: Sendable {
    public let process: BeaconProcess
    public let baseURL: URL
    public let port: Int

    public static func start(
        dataDirectory: URL, simulator: SimulatorProcess?, extra: [String] = [], environment: [String: String] = [:],
        executable: URL = BeaconProcess.executable
    ) async throws -> ServerProcess {
        let push = simulator.map { ["--apns-endpoint", $0.apnsURL, "--apns-ca", $0.caFile] } ?? []
        let process = try await BeaconProcess(
            ["serve", "--port", "0", "--data-dir", dataDirectory.path] + push + extra,
            environment: environment.merging(["BEACON_LOG_LEVEL": "notice"]) { first, _ in first }, executable: executable)
        let ready = try await process.line(containing: "Beacon listening on http://")
        guard let portText = ready.split(separator: ":").last.map({ $0.filter(\.isNumber) }), let port = Int(portText),
            let baseURL = URL(string: "http://127.0.0.1:\(port)")
        else {
            throw TestFailure("no port in: \(ready)")
        }
        return ServerProcess(process: process, baseURL: baseURL, port: port)
    }

    public func rest(_ method: String, _ path: String, _ body: JSONValue? = nil, token: String?, headers: [String: String] = [:])
        async throws -> (
            status: Int, json: JSONValue
        )
    {
        try await REST.call(baseURL, method, "/acme/chat" + path, body: body, token: token, headers: headers)
    }

    public func token(_ body: JSONValue) async throws -> String {
        try await REST.token(baseURL, app: "acme/chat", body)
    }

    public func webSocketURL(token: String, device: String) -> String {
        "ws://127.0.0.1:\(port)/acme/chat/ws?device_id=\(device)&access_token=\(token)"
    }

    /// Connects a device, reads everything stored for it up to `synced` (acknowledging nothing), and disconnects.
    public func storedMessages(token: String, device: String) async throws -> [(seq: Int64, messageID: String)] {
        let received = Mutex<[(Int64, String)]>([])
        try await WebSocketClient.connect(url: webSocketURL(token: token, device: device), logger: Logger(label: "test")) {
            inbound, outbound, _ in
            for try await message in inbound.messages(maxSize: 1 << 20) {
                guard case .text(let text) = message, let frame = try? JSONDecoder().decode(ServerFrame.self, from: Data(text.utf8)) else {
                    continue
                }
                if case .message(let seq?, let wire) = frame { received.withLock { $0.append((seq, wire.msgID)) } }
                if case .synced = frame { break }
            }
            try await outbound.close(.normalClosure, reason: nil)
        }
        return received.withLock { $0 }
    }
}

/// Runs `body` with a fresh temporary directory, removed afterwards.
public func withTemporaryDirectory<T>(_ body: (URL) async throws -> T) async throws -> T {
    let directory = StoreKind.temporaryDirectory("beacon-process")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    return try await body(directory)
}

/// A value shared between tasks.
public final class Locked<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>
    public init(_ value: Value) { mutex = Mutex(value) }
    public func withLock<T>(_ body: (inout Value) throws -> T) rethrows -> T { try mutex.withLock { try body(&$0) } }
}
