import BeaconCore
import BeaconSQLite
import BeaconStorage
import Foundation
import Testing

/// `beacon backup`: an online copy of the embedded database that opens as a store with everything in it.
@Suite struct SQLiteBackupTests {
    @Test func aBackupTakenWhileWritingOpensWithEveryCommittedMessage() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("beacon-backup-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try SQLiteStore(directory: directory.appendingPathComponent("live").path)
        let app = try await makeApp(store)
        try await makeUsers(store, app, ["alice", "bob"])
        for id in UInt64(1)...20 { _ = try await store.append(text(id, from: "alice", to: "bob"), app: app.id, deliveries: [Delivery(username: "bob")]) }
        let target = directory.appendingPathComponent("copy.sqlite").path
        // Writes go on while the copy is taken: it holds one consistent snapshot (at least the 20 before it).
        async let writes: Void = {
            for id in UInt64(21)...60 { _ = try await store.append(text(id, from: "alice", to: "bob"), app: app.id, deliveries: [Delivery(username: "bob")]) }
        }()
        try await store.backup(to: target)
        try await writes
        let mode = try FileManager.default.attributesOfItem(atPath: target)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        let copy = try SQLiteStore(path: target)
        let inbox = try await copy.inbox(of: "bob", app: app.id, after: 0, limit: 100)
        #expect(inbox.count >= 20)
        #expect(inbox.map(\.seq) == Array(1...Int64(inbox.count)))
        #expect(try await copy.user("alice", app: app.id) != nil)
        // Never over an existing file.
        await #expect(throws: BeaconError.self) { try await store.backup(to: target) }
    }
}
