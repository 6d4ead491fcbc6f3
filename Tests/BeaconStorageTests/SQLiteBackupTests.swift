import BeaconCore
import BeaconStorage
import BeaconTesting
import Foundation
import GRDB
import Testing

@testable import BeaconSQLite

/// `beacon backup`: an online copy of the embedded database that opens as a store with everything in it.
@Suite struct SQLiteBackupTests {
    @Test func aBackupTakenWhileWritingOpensWithEveryCommittedMessage() async throws {
        let directory = StoreKind.temporaryDirectory("beacon-backup")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try SQLiteStore(directory: directory.appendingPathComponent("live").path)
        let app = try await makeApp(store)
        try await makeUsers(store, app, ["alice", "bob"])
        for id in UInt64(1)...20 {
            _ = try await store.append(text(id, from: "alice", to: "bob"), app: app.id, deliveries: [Delivery(username: "bob")])
        }
        let target = directory.appendingPathComponent("copy.sqlite").path
        // Writes go on while the copy is taken: it holds one consistent snapshot (at least the 20 before it).
        async let writes: Void = {
            for id in UInt64(21)...60 {
                _ = try await store.append(text(id, from: "alice", to: "bob"), app: app.id, deliveries: [Delivery(username: "bob")])
            }
        }()
        try await SQLiteStore.backup(database: store.path, to: target)
        try await writes
        let mode = try FileManager.default.attributesOfItem(atPath: target)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        let copy = try SQLiteStore(path: target)
        let inbox = try await copy.inbox(of: "bob", app: app.id, after: 0, limit: 100)
        #expect(inbox.count >= 20)
        #expect(inbox.map(\.seq) == Array(1...Int64(inbox.count)))
        #expect(try await copy.user("alice", app: app.id) != nil)
        // Never over an existing file.
        await #expect(throws: BeaconError.self) { try await SQLiteStore.backup(database: store.path, to: target) }
    }

    /// The source is opened read-only: a missing database is an error (nothing is created where it was expected), and a
    /// database of an older schema is copied as it is, not migrated.
    @Test func aBackupCreatesAndMigratesNothing() async throws {
        let directory = StoreKind.temporaryDirectory("beacon-backup")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let missing = directory.appendingPathComponent("nothing.sqlite").path
        await #expect(throws: BeaconError.self) {
            try await SQLiteStore.backup(database: missing, to: directory.appendingPathComponent("a").path)
        }
        #expect(!FileManager.default.fileExists(atPath: missing))
        #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("a").path))

        let live = directory.appendingPathComponent("live.sqlite").path
        let store = try SQLiteStore(path: live)
        #expect(try await store.pendingMigrations().isEmpty)
        // As if an older version had made it: the newest migration not applied yet.
        let queue = try DatabaseQueue(path: live)
        let newest = try #require(SQLiteStore.migrator.migrations.last)
        try await queue.write { db in try db.execute(sql: "DELETE FROM grdb_migrations WHERE identifier = ?", arguments: [newest]) }
        try queue.close()
        #expect(try await store.pendingMigrations() == [newest])
        try await SQLiteStore.backup(database: live, to: directory.appendingPathComponent("copy").path)
        #expect(try await store.pendingMigrations() == [newest])

        let notBeacon = directory.appendingPathComponent("other.sqlite").path
        try await DatabaseQueue(path: notBeacon).write { db in try db.execute(sql: "CREATE TABLE t (x)") }
        await #expect(throws: BeaconError.self) {
            try await SQLiteStore.backup(database: notBeacon, to: directory.appendingPathComponent("b").path)
        }
    }
}

/// Damaged stored rows (a value of the wrong type, written by hand or by a broken disk) fail the operation that reads
/// them with an error; they never stop the process.
@Suite struct SQLiteDamagedRowTests {
    @Test func damagedReadStateAndWebhookRowsAreErrorsNotTraps() async throws {
        let directory = StoreKind.temporaryDirectory("beacon-damaged")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try SQLiteStore(directory: directory.path)
        let app = try await makeApp(store)
        try await makeUsers(store, app, ["alice", "bob"])
        _ = try await store.append(text(1, from: "alice", to: "bob"), app: app.id, deliveries: [Delivery(username: "bob")])
        _ = try await store.markRead(
            "bob", app: app.id, conversation: ConversationID(chatType: .chat, key: "alice"), upTo: nil, readingDevice: nil, now: now)
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

    @Test func damagedAppPushJobAndPushConfigurationRowsAreErrorsNotTraps() async throws {
        let directory = StoreKind.temporaryDirectory("beacon-damaged")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try SQLiteStore(directory: directory.path)
        let app = try await makeApp(store)
        try await makeUsers(store, app, ["alice", "bob"])
        try await store.bind(PushBinding(username: "bob", deviceID: "d1", notifier: "ios", deviceToken: "aa", boundAt: 1), app: app.id)
        #expect(try await queueOneJob(store, app, id: 1, at: now))
        try await store.savePushConfig(
            PushConfigRecord(
                appID: app.id, name: "ios", kind: .p8, environment: "development", bundleID: "com.x", voip: false, keyID: "K", teamID: "T",
                sealedSecret: [1, 2, 3], expiresAt: nil, createdAt: now))
        // Undamaged, they read (and the job is one a claim would hand out).
        #expect(try await store.app(id: app.id) != nil)
        #expect(try await store.pushJobs(app: app.id, matching: PushJobFilter(), limit: 10).map(\.status) == [.pending])
        #expect(try await store.pushConfig("ios", app: app.id) != nil)
        let queue = try DatabaseQueue(path: directory.appendingPathComponent("beacon.sqlite").path)
        try await queue.write { db in
            try db.execute(sql: "UPDATE apps SET per_chat = 'garbage'")
            try db.execute(sql: "UPDATE push_jobs SET priority = 'garbage'")
            try db.execute(sql: "UPDATE push_configs SET created_at = 'garbage'")
            try db.execute(sql: "UPDATE push_bindings SET bound_at = 'garbage'")
        }
        try queue.close()
        await #expect(throws: (any Error).self) { try await store.app(app.key) }
        await #expect(throws: (any Error).self) { try await store.app(id: app.id) }
        await #expect(throws: (any Error).self) { try await store.allApps() }
        await #expect(throws: (any Error).self) { try await store.pushJobs(app: app.id, matching: PushJobFilter(), limit: 10) }
        // A damaged job is never handed out: the claim ends it `failed` (`pushJobFieldsNoVersionWritesAreErrorsNotDefaults`).
        #expect(try await store.claimPushJobs(now: now, lease: 1000, limit: 10).isEmpty)
        await #expect(throws: (any Error).self) { try await store.pushConfig("ios", app: app.id) }
        await #expect(throws: (any Error).self) { try await store.pushConfigs(app: app.id) }
        await #expect(throws: (any Error).self) { try await store.bindings(of: ["bob"], app: app.id) }
        // The queue's counters read no damaged column: they still answer.
        #expect(try await store.pushQueueStats(now: now).pending == 0)
    }

    /// A stored push job or message whose fields hold well-typed values that no version of Beacon writes (an unknown push
    /// type, priority, status or chat type, an apns-id that is not a UUID, a push content that is gone) fails the read: it
    /// is never sent as an alert with a fresh apns-id or an empty payload, nor read as a chat.
    @Test(arguments: [
        "UPDATE push_jobs SET push_type = 'fax'", "UPDATE push_jobs SET priority = 7", "UPDATE push_jobs SET status = 'lost'",
        "UPDATE push_jobs SET apns_id = 'not-a-uuid'", "UPDATE push_jobs SET content_id = 999999",
    ])
    func pushJobFieldsNoVersionWritesAreErrorsNotDefaults(damage: String) async throws {
        let directory = StoreKind.temporaryDirectory("beacon-damaged")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try SQLiteStore(directory: directory.path)
        let app = try await makeApp(store)
        try await makeUsers(store, app, ["alice", "bob"])
        try await store.bind(PushBinding(username: "bob", deviceID: "d1", notifier: "ios", deviceToken: "aa", boundAt: 1), app: app.id)
        let apnsID = UUID()
        #expect(try await queueOneJob(store, app, id: 1, priority: .considerate, apnsID: apnsID, at: now))
        let stored = try await store.pushJobs(app: app.id, matching: PushJobFilter(), limit: 10)
        #expect(
            stored.map(\.job.pushType) == [.alert] && stored.map(\.job.priority) == [.considerate] && stored.map(\.job.apnsID) == [apnsID])
        let queue = try DatabaseQueue(path: directory.appendingPathComponent("beacon.sqlite").path)
        try await queue.write { db in try db.execute(sql: damage) }
        try queue.close()
        await #expect(throws: (any Error).self) { try await store.pushJobs(app: app.id, matching: PushJobFilter(), limit: 10) }
        // A claim never hands the damaged job out, and the jobs queued after it are claimed as ever: one damaged row
        // does not stop the queue.
        #expect(try await queueOneJob(store, app, id: 2, at: now + 1))
        let inspect = try DatabaseQueue(path: directory.appendingPathComponent("beacon.sqlite").path)
        defer { try? inspect.close() }
        func damagedRow() async throws -> Row? {
            try await inspect.read { db in
                try Row.fetchOne(db, sql: "SELECT status, last_reason, claimed_until FROM push_jobs WHERE message_id = 1")
            }
        }
        if damage.contains("status") {
            // Not pending: never claimed, left as it is.
            #expect(try await store.claimPushJobs(now: now + 1, lease: 1000, limit: 1).map(\.messageID) == [2])
            let status: String? = try await damagedRow()?["status"]
            #expect(status == "lost")
        } else {
            // The damaged job comes first (it is older): the claim that meets it ends it `failed`; the next claims the rest.
            #expect(try await store.claimPushJobs(now: now + 1, lease: 1000, limit: 1).isEmpty)
            #expect(try await store.claimPushJobs(now: now + 1, lease: 1000, limit: 1).map(\.messageID) == [2])
            let row = try await damagedRow()
            let status: String? = row?["status"]
            let reason: String? = row?["last_reason"]
            let claimedUntil: Int64? = row?["claimed_until"]
            #expect(status == "failed" && reason == "internal_error" && claimedUntil == 0)
        }
        #expect(try await store.pushQueueStats(now: now + 1).pending == 1)  // job 2, claimed; not the damaged one
    }

    /// A push content that no longer decodes, or that is not its jobs' message's, fails only the jobs that refer to it:
    /// they end `failed` (`internal_error`) and are never sent with an empty or another message's payload; the queue goes on.
    @Test(arguments: ["UPDATE push_contents SET badge_offset = 'garbage'", "UPDATE push_contents SET message_id = message_id + 100"])
    func aDamagedPushContentFailsOnlyTheJobsThatReferToIt(damage: String) async throws {
        let directory = StoreKind.temporaryDirectory("beacon-damaged")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try SQLiteStore(directory: directory.path)
        let app = try await makeApp(store)
        try await makeUsers(store, app, ["alice", "bob"])
        for (device, token) in [("d1", "aa"), ("d2", "bb")] {
            try await store.bind(
                PushBinding(username: "bob", deviceID: device, notifier: "ios", deviceToken: token, boundAt: 1), app: app.id)
        }
        #expect(try await queueSharedJobs(store, app, id: 1))
        let queue = try DatabaseQueue(path: directory.appendingPathComponent("beacon.sqlite").path)
        defer { try? queue.close() }
        try await queue.write { db in try db.execute(sql: damage) }
        #expect(try await queueOneJob(store, app, id: 2, at: now + 1))
        #expect(try await store.claimPushJobs(now: now + 1, lease: 1000, limit: 10).map(\.messageID) == [2])
        let ends = try await queue.read { db in
            try Row.fetchAll(db, sql: "SELECT status, last_reason FROM push_jobs WHERE message_id = 1").map {
                "\($0["status"] as String? ?? "")/\($0["last_reason"] as String? ?? "")"
            }
        }
        #expect(ends == ["failed/internal_error", "failed/internal_error"])
    }

    @Test func aStoredMessageOfAnUnknownChatTypeIsAnErrorNotAChat() async throws {
        let directory = StoreKind.temporaryDirectory("beacon-damaged")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try SQLiteStore(directory: directory.path)
        let app = try await makeApp(store)
        try await makeUsers(store, app, ["alice", "bob"])
        _ = try await store.append(text(1, from: "alice", to: "bob"), app: app.id, deliveries: [Delivery(username: "bob")])
        #expect(try await store.inbox(of: "bob", app: app.id, after: 0, limit: 10).count == 1)
        let queue = try DatabaseQueue(path: directory.appendingPathComponent("beacon.sqlite").path)
        try await queue.write { db in try db.execute(sql: "UPDATE messages SET chat_type = 'broadcast'") }
        try queue.close()
        await #expect(throws: (any Error).self) { try await store.inbox(of: "bob", app: app.id, after: 0, limit: 10) }
    }
}
