import BeaconCore
import BeaconSQLite
import BeaconStorage
import Foundation
import GRDB
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

/// Damaged stored rows (a value of the wrong type, written by hand or by a broken disk) fail the operation that reads
/// them with an error; they never stop the process.
@Suite struct SQLiteDamagedRowTests {
    @Test func damagedReadStateAndWebhookRowsAreErrorsNotTraps() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("beacon-damaged-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try SQLiteStore(directory: directory.path)
        let app = try await makeApp(store)
        try await makeUsers(store, app, ["alice", "bob"])
        _ = try await store.append(text(1, from: "alice", to: "bob"), app: app.id, deliveries: [Delivery(username: "bob")])
        _ = try await store.markRead("bob", app: app.id, conversation: ConversationID(chatType: .chat, key: "alice"), upTo: nil, readingDevice: nil, now: now)
        try await store.setWebhook(WebhookConfig(url: "http://127.0.0.1:9/", sealedSecret: [1], enabled: true), app: app.id, now: now)
        try await store.bind(PushBinding(username: "bob", deviceID: "d", notifier: "ios", deviceToken: "t", boundAt: 1), app: app.id)
        #expect(try await store.removeBinding(deviceToken: "t", notifier: "ios", app: app.id, unlessBoundSince: nil, now: now))
        let queue = try DatabaseQueue(path: directory.appendingPathComponent("beacon.sqlite").path)
        try await queue.write { db in
            try db.execute(sql: "UPDATE conversation_reads SET up_to = 'garbage'")
            try db.execute(sql: "UPDATE users SET read_version = 'garbage' WHERE username = 'bob'")
            try db.execute(sql: "UPDATE webhook_events SET at = 'garbage'")
        }
        try queue.close()
        await #expect(throws: (any Error).self) { try await store.conversations(of: "bob", app: app.id, limit: 10) }
        await #expect(throws: (any Error).self) {
            try await store.markRead("bob", app: app.id, conversation: nil, upTo: nil, readingDevice: nil, now: now)
        }
        await #expect(throws: (any Error).self) { try await store.claimWebhookBatch(now: now, lease: 1000, limit: 10) }
        await #expect(throws: (any Error).self) { try await store.webhookOutboxStats() }
    }
}
