import BeaconCore
import BeaconStorage
import BeaconTesting
import Foundation
import Logging
import PostgresNIO
import Testing

@testable import BeaconPostgres

/// PostgreSQL's side of `SQLiteDamagedRowTests`: a stored push job whose fields hold values no version of Beacon writes
/// is never sent and never stops the queue — the claim that meets it ends it `failed` (`internal_error`).
@Suite(.enabled(if: postgresAvailable, "needs BEACON_TEST_POSTGRES_URL"))
struct PostgresDamagedRowTests {
    @Test(arguments: [
        "UPDATE push_jobs SET push_type = 'fax' WHERE message_id = 1", "UPDATE push_jobs SET priority = 7 WHERE message_id = 1",
        "UPDATE push_jobs SET apns_id = 'not-a-uuid' WHERE message_id = 1",
        "UPDATE push_jobs SET content_id = 999999 WHERE message_id = 1",
    ])
    func aDamagedJobEndsFailedAndHoldsNoOtherBack(damage: String) async throws {
        let url = try StoreKind.freshPostgresURL()
        let (configuration, _) = try PostgresStore.configuration(url: url)
        try await PostgresStore.withStore(url: url, logger: Logger(label: "test")) { store in
            let app = try await makeApp(store)
            try await makeUsers(store, app, ["alice", "bob"])
            try await store.bind(PushBinding(username: "bob", deviceID: "d1", notifier: "ios", deviceToken: "aa", boundAt: 1), app: app.id)
            for id: UInt64 in [1, 2] { #expect(try await queueOneJob(store, app, id: id, at: now + Int64(id))) }
            // The damage, through a connection of its own on the store's schema.
            let client = PostgresClient(configuration: configuration)
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await client.run() }
                defer { group.cancelAll() }
                try await client.query(PostgresQuery(unsafeSQL: damage))
            }
            // The damaged job is older: the claim that meets it ends it; the next claims the other.
            #expect(try await store.claimPushJobs(now: now + 10, lease: 1000, limit: 1).isEmpty)
            #expect(try await store.claimPushJobs(now: now + 10, lease: 1000, limit: 1).map(\.messageID) == [2])
            #expect(try await store.pushQueueStats(now: now + 10).pending == 1)
        }
    }

    /// A push content that is not its jobs' message's fails only the jobs that refer to it: they end `failed`, never sent
    /// with another message's payload; the queue goes on.
    @Test func aPushContentOfAnotherMessageFailsTheJobsThatReferToIt() async throws {
        let url = try StoreKind.freshPostgresURL()
        let (configuration, _) = try PostgresStore.configuration(url: url)
        try await PostgresStore.withStore(url: url, logger: Logger(label: "test")) { store in
            let app = try await makeApp(store)
            try await makeUsers(store, app, ["alice", "bob"])
            for (device, token) in [("d1", "aa"), ("d2", "bb")] {
                try await store.bind(
                    PushBinding(username: "bob", deviceID: device, notifier: "ios", deviceToken: token, boundAt: 1), app: app.id)
            }
            #expect(try await queueSharedJobs(store, app, id: 1))
            #expect(try await queueOneJob(store, app, id: 2, at: now + 1))
            let client = PostgresClient(configuration: configuration)
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await client.run() }
                defer { group.cancelAll() }
                try await client.query("UPDATE push_contents SET message_id = message_id + 100")
                #expect(try await store.claimPushJobs(now: now + 10, lease: 1000, limit: 10).map(\.messageID) == [2])
                var ends: [String] = []
                for try await (status, reason) in try await client.query("SELECT status, last_reason FROM push_jobs WHERE message_id = 1")
                    .decode((String, String?).self)
                {
                    ends.append("\(status)/\(reason ?? "")")
                }
                #expect(ends == ["failed/internal_error", "failed/internal_error"])
            }
        }
    }
}
