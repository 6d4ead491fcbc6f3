import BeaconCore
import BeaconStorage
import BeaconTesting
import Foundation
import GRDB
import Testing

@testable import BeaconSQLite

/// Data stored by an earlier version keeps its meaning after the migrations that followed.
@Suite struct SQLiteMigrationTests {
    @Test func readStateStartsFromWhatDevicesReceivedAndOldBadgeCountersAreDropped() async throws {
        let directory = StoreKind.temporaryDirectory("beacon-migration")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("beacon.sqlite").path
        do {
            // The schema before read state, with bob's inbox: three messages from alice (a device of bob's acknowledged
            // the first two), a command, and one he sent himself; his old "since last online" counter says 7.
            let queue = try DatabaseQueue(path: path)
            try SQLiteStore.migrator.migrate(queue, upTo: "v7-hardening")
            try await queue.write { db in
                try db.execute(
                    sql:
                        "INSERT INTO apps (id, org, name, client_id, client_secret_hash, per_chat, per_group, max_age_seconds, created_at) VALUES (1, 'acme', 'chat', 'id', 'h', 500, 200, 604800, 0)"
                )
                try db.execute(
                    sql:
                        "INSERT INTO users (app_id, username, uuid, password_hash, created_at, modified_at, inbox_seq, badge) VALUES (1, 'bob', 'u', 'h', 0, 0, 5, 7), (1, 'alice', 'v', 'h', 0, 0, 0, 0)"
                )
                for (id, sender, recipient, type) in [
                    (1, "alice", "bob", "txt"), (2, "alice", "bob", "txt"), (3, "alice", "bob", "txt"), (4, "alice", "bob", "cmd"),
                    (5, "bob", "alice", "txt"),
                ] {
                    try db.execute(
                        sql:
                            "INSERT INTO messages (app_id, id, sender, recipient, chat_type, type, body, ext, timestamp) VALUES (1, ?, ?, ?, 'chat', ?, '{}', '{}', 0)",
                        arguments: [id, sender, recipient, type])
                    try db.execute(
                        sql:
                            "INSERT INTO inbox (app_id, username, seq, message_id, conversation, chat_type, created_at) VALUES (1, 'bob', ?, ?, 'chat:alice', 'chat', 0)",
                        arguments: [id, id])
                }
                try db.execute(
                    sql: "INSERT INTO device_cursors (app_id, username, device_id, acked_seq, updated_at) VALUES (1, 'bob', 'd', 2, 0)")
            }
        }
        let store = try SQLiteStore(path: path)
        let summary = try #require(try await store.conversations(of: "bob", app: 1, limit: 10).first)
        #expect(summary.read?.seq == 2)
        #expect(summary.read?.upTo == 2)
        #expect(summary.unread == 1)  // message 3: not the command, not bob's own
        #expect(try await store.badge(of: "bob", app: 1) == 1)
        // Migration-made markers are not news to devices (version 0).
        #expect(try await store.readMarkers(of: "bob", app: 1, after: 0, limit: 10).isEmpty)
    }
}
