import BeaconTesting
import Foundation
import Testing

/// The README's configuration table is what `beacon config-reference` prints from the settings the code reads, and the
/// flags it lists are the ones `beacon serve` takes.
@Suite struct ConfigReferenceTests {
    /// What `beacon ARGUMENTS` prints.
    private static func output(_ arguments: [String]) async throws -> String {
        let result = try await runToExit(BeaconProcess.executable, arguments)
        #expect(result.status == 0)
        return String(decoding: result.output, as: UTF8.self)
    }

    private static let readme = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("README.md")

    @Test func readmeTableIsThePrintedReference() async throws {
        let text = try String(contentsOf: Self.readme, encoding: .utf8)
        let begin = try #require(text.range(of: "<!-- BEGIN config-reference"))
        let tableStart = try #require(text[begin.upperBound...].range(of: "\n")).upperBound
        let end = try #require(text.range(of: "<!-- END config-reference -->"))
        let printed = try await Self.output(["config-reference"])
        #expect(printed.hasPrefix("| flag | environment | file key | default | what |"))
        #expect(
            String(text[tableStart..<end.lowerBound]) == printed,
            "README.md's configuration table differs from `beacon config-reference`: paste its output between the markers")
    }

    @Test func everyServeFlagIsInTheReferenceAndBack() async throws {
        let flagPattern = try Regex(#"`(--[a-z0-9-]+)"#)
        let documented = Set(
            try await Self.output(["config-reference"]).split(separator: "\n").dropFirst(2).compactMap { row in
                row.split(separator: "|", omittingEmptySubsequences: false).dropFirst().first.flatMap { cell in
                    cell.firstMatch(of: flagPattern).map { String($0.output[1].substring ?? "") }
                }
            })
        let helpPattern = try Regex(#"^  (--[a-z0-9-]+)"#).anchorsMatchLineEndings()
        let offered = Set(try await Self.output(["serve", "--help"]).matches(of: helpPattern).map { String($0.output[1].substring ?? "") })
            .subtracting(["--help", "--version"])
        #expect(documented.count >= 10)
        #expect(documented == offered)
    }

    /// swift-configuration's environment provider derives `BEACON_DATA_DIR` from key `dataDir`: the documented variable of
    /// every setting with a file key is that name, so that a reader of the table can guess it (except the database URL's,
    /// `BEACON_DATABASE_URL`, as other servers name it; `Settings.environmentKey` tells the provider every variable).
    @Test func environmentVariablesAreTheNamesTheProviderReads() async throws {
        var checked = 0
        for row in try await Self.output(["config-reference"]).split(separator: "\n").dropFirst(2) {
            let cells = row.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count > 3, cells[3].hasPrefix("`"), cells[2].hasPrefix("`") else { continue }
            let key = cells[3].trimmingCharacters(in: CharacterSet(charactersIn: "`"))
            let environment = cells[2].trimmingCharacters(in: CharacterSet(charactersIn: "`"))
            let derived = "BEACON_" + key.map { $0.isUppercase ? "_\($0)" : $0.uppercased() }.joined()
            #expect(environment == (key == "database" ? "BEACON_DATABASE_URL" : derived), "\(key)")
            checked += 1
        }
        #expect(checked >= 10)
    }

    /// Settings `serve` cannot use stop it, naming the setting: a missing companion setting or an invalid entry is a
    /// usage error (exit 64), a file that cannot be read an error of its own (exit 1); the simulator wins over an APNs
    /// endpoint set in the environment, whose CA is then not needed.
    @Test func unusableSettingsStopServeAndTheSimulatorWinsOverAnEndpoint() async throws {
        try await withTemporaryDirectory { directory in
            let data = ["--data-dir", directory.path, "--port", "0"]
            func refusal(_ arguments: [String], environment: [String: String] = [:], says message: String, exits status: Int32) async throws
            {
                let process = try await BeaconProcess(["serve"] + arguments + data, environment: environment)
                _ = try await process.line(containing: message)
                #expect(await process.exitStatus(within: .seconds(60)) == status, "\(arguments) \(environment)")
                await process.stop()
            }
            let endpoint = "https://127.0.0.1:1"
            try await refusal(["--apns-endpoint", endpoint], says: "--apns-endpoint needs --apns-ca FILE", exits: 64)
            // The variable is read (so that the simulator's case below shows the simulator winning over it).
            try await refusal([], environment: ["BEACON_APNS_ENDPOINT": endpoint], says: "--apns-endpoint needs --apns-ca FILE", exits: 64)
            try await refusal(["--trusted-proxy", "bogus"], says: "trustedProxies (--trusted-proxy, BEACON_TRUSTED_PROXIES)", exits: 64)
            let unreadable = directory.appendingPathComponent("none").path
            try await refusal(["--apns-endpoint", endpoint, "--apns-ca", unreadable], says: "Error:", exits: 1)
            let server = try await BeaconProcess(
                ["serve", "--apns-simulator"] + data, environment: ["BEACON_APNS_ENDPOINT": endpoint, "BEACON_LOG_LEVEL": "notice"])
            _ = try await server.line(containing: "APNs simulator at")
            await server.stop()
        }
    }
}
