import BeaconCore
import Logging
import PostgresNIO

/// Versioned migrations, run under an advisory lock so that nodes starting together apply each one once.
extension PostgresStore {
    /// A schema change: applied once, in its own transaction, in order.
    struct Migration {
        var version: String
        var sql: [String]
    }

    /// The advisory lock key migrations run under (any constant shared by every node: "beacon" in ASCII).
    static let migrationLock: Int64 = 0x6265_6163_6f6e
    /// Brings the schema up to date: the migrations not yet recorded in `schema_migrations`, each in a transaction,
    /// while holding an advisory lock (a second node starting at the same moment waits, then finds nothing to do).
    /// Returns the versions it applied.
    @discardableResult
    public func migrate() async throws -> [String] {
        try await client.withConnection { connection in
            try await connection.query("SELECT pg_advisory_lock(\(Self.migrationLock))", logger: logger)
            do {
                if let schema {
                    // Created only when missing (a schema a DBA made beforehand needs no CREATE privilege on the
                    // database), under the lock (two nodes starting together), quoted (validated when the URL was read).
                    let exists =
                        try await connection.query(
                            "SELECT 1 FROM pg_namespace WHERE nspname = \(schema)", logger: logger
                        ).collect().count > 0
                    if !exists {
                        try await connection.query(PostgresQuery(unsafeSQL: "CREATE SCHEMA \"\(schema)\""), logger: logger)
                    }
                }
                let applied = try await Self.applyMissing(on: connection, logger: logger)
                try await connection.query("SELECT pg_advisory_unlock(\(Self.migrationLock))", logger: logger)
                return applied
            } catch {
                _ = try? await connection.query("SELECT pg_advisory_unlock(\(Self.migrationLock))", logger: logger)
                throw error
            }
        }
    }

    public func pendingMigrations() async throws -> [String] {
        let applied = try await rows("SELECT version FROM schema_migrations").map { try $0["version"].decode(String.self) }
        return Self.migrations.map(\.version).filter { !applied.contains($0) }
    }

    private static func applyMissing(on connection: PostgresConnection, logger: Logger) async throws -> [String] {
        try await connection.query(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
            logger: logger)
        var done = Set<String>()
        for try await version in try await connection.query("SELECT version FROM schema_migrations", logger: logger).decode(String.self) {
            done.insert(version)
        }
        var applied: [String] = []
        for migration in migrations where !done.contains(migration.version) {
            try await connection.withTransaction(logger: logger) { connection in
                for statement in migration.sql {
                    try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
                try await connection.query("INSERT INTO schema_migrations (version) VALUES (\(migration.version))", logger: logger)
            }
            applied.append(migration.version)
        }
        return applied
    }

    /// The schema, as SQLite's (`SQLiteStore.migrator`) ends up, in PostgreSQL's types. Times are milliseconds since 1970.
    static let migrations: [Migration] = [
        Migration(
            version: "v1",
            sql: [
                "CREATE TABLE settings (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
                """
                CREATE TABLE apps (
                    id BIGSERIAL PRIMARY KEY, org TEXT NOT NULL, name TEXT NOT NULL, client_id TEXT NOT NULL UNIQUE,
                    client_secret_hash TEXT NOT NULL, per_chat BIGINT NOT NULL, per_group BIGINT NOT NULL,
                    max_age_seconds BIGINT NOT NULL, created_at BIGINT NOT NULL,
                    multi_device TEXT NOT NULL DEFAULT 'all_offline', default_timezone TEXT NOT NULL DEFAULT 'UTC',
                    display_strings TEXT NOT NULL DEFAULT '{}', UNIQUE (org, name))
                """,
                """
                CREATE TABLE users (
                    app_id BIGINT NOT NULL, username TEXT NOT NULL, uuid TEXT NOT NULL, password_hash TEXT NOT NULL,
                    nickname TEXT, timezone TEXT, created_at BIGINT NOT NULL, modified_at BIGINT NOT NULL,
                    tokens_valid_after BIGINT NOT NULL DEFAULT 0, inbox_seq BIGINT NOT NULL DEFAULT 0, badge BIGINT NOT NULL DEFAULT 0,
                    display_style BIGINT NOT NULL DEFAULT 0, push_language TEXT, push_template TEXT,
                    PRIMARY KEY (app_id, username))
                """,
                """
                CREATE TABLE chat_groups (
                    app_id BIGINT NOT NULL, id TEXT NOT NULL, name TEXT NOT NULL, description TEXT NOT NULL, owner TEXT NOT NULL,
                    max_users BIGINT NOT NULL, created_at BIGINT NOT NULL, PRIMARY KEY (app_id, id))
                """,
                """
                CREATE TABLE group_members (
                    app_id BIGINT NOT NULL, group_id TEXT NOT NULL, username TEXT NOT NULL, joined_at BIGINT NOT NULL,
                    PRIMARY KEY (app_id, group_id, username))
                """,
                "CREATE INDEX group_members_by_user ON group_members (app_id, username)",
                """
                CREATE TABLE messages (
                    app_id BIGINT NOT NULL, id BIGINT NOT NULL, sender TEXT NOT NULL, recipient TEXT NOT NULL, chat_type TEXT NOT NULL,
                    type TEXT NOT NULL, body TEXT NOT NULL, ext TEXT NOT NULL, timestamp BIGINT NOT NULL, PRIMARY KEY (app_id, id))
                """,
                """
                CREATE TABLE inbox (
                    app_id BIGINT NOT NULL, username TEXT NOT NULL, seq BIGINT NOT NULL, message_id BIGINT NOT NULL,
                    conversation TEXT NOT NULL, chat_type TEXT NOT NULL, origin_device TEXT, created_at BIGINT NOT NULL,
                    PRIMARY KEY (app_id, username, seq))
                """,
                "CREATE INDEX inbox_by_message ON inbox (app_id, message_id)",
                "CREATE INDEX inbox_by_age ON inbox (app_id, created_at)",
                """
                CREATE TABLE device_cursors (
                    app_id BIGINT NOT NULL, username TEXT NOT NULL, device_id TEXT NOT NULL, acked_seq BIGINT NOT NULL,
                    updated_at BIGINT NOT NULL, PRIMARY KEY (app_id, username, device_id))
                """,
                "CREATE INDEX device_cursors_by_age ON device_cursors (app_id, updated_at)",
                """
                CREATE TABLE push_configs (
                    app_id BIGINT NOT NULL, name TEXT NOT NULL, kind TEXT NOT NULL, environment TEXT NOT NULL, bundle_id TEXT NOT NULL,
                    voip BOOLEAN NOT NULL, key_id TEXT, team_id TEXT, sealed_secret BYTEA NOT NULL, expires_at BIGINT,
                    created_at BIGINT NOT NULL, PRIMARY KEY (app_id, name))
                """,
                """
                CREATE TABLE push_bindings (
                    app_id BIGINT NOT NULL, username TEXT NOT NULL, device_id TEXT NOT NULL, notifier TEXT NOT NULL,
                    device_token TEXT NOT NULL, voip_token TEXT, bound_at BIGINT NOT NULL,
                    PRIMARY KEY (app_id, username, device_id, notifier))
                """,
                "CREATE INDEX push_bindings_by_token ON push_bindings (app_id, device_token)",
                "CREATE INDEX push_bindings_by_voip_token ON push_bindings (app_id, voip_token)",
                """
                CREATE TABLE push_jobs (
                    id BIGSERIAL PRIMARY KEY, app_id BIGINT NOT NULL, message_id BIGINT NOT NULL, username TEXT NOT NULL,
                    device_id TEXT NOT NULL, notifier TEXT NOT NULL, device_token TEXT NOT NULL, topic TEXT NOT NULL,
                    push_type TEXT NOT NULL, priority BIGINT NOT NULL, expiration BIGINT NOT NULL, collapse_id TEXT, apns_id TEXT NOT NULL,
                    payload TEXT NOT NULL, status TEXT NOT NULL, attempts BIGINT NOT NULL DEFAULT 0, last_status BIGINT, last_reason TEXT,
                    created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL, next_attempt_at BIGINT NOT NULL,
                    claimed_until BIGINT NOT NULL DEFAULT 0, claim_token BIGINT NOT NULL DEFAULT 0)
                """,
                // The claim reads pending jobs only: a partial index stays small however many finished records there are.
                "CREATE INDEX push_jobs_due ON push_jobs (next_attempt_at, id) WHERE status = 'pending'",
                "CREATE INDEX push_jobs_by_user ON push_jobs (app_id, username, message_id)",
                "CREATE INDEX push_jobs_by_message ON push_jobs (app_id, message_id)",
                "CREATE INDEX push_jobs_by_status ON push_jobs (app_id, username, status)",
                "CREATE INDEX push_jobs_finished ON push_jobs (app_id, updated_at) WHERE status != 'pending'",
                """
                CREATE TABLE push_attempts (
                    id BIGSERIAL PRIMARY KEY, job_id BIGINT NOT NULL, at BIGINT NOT NULL, http_status BIGINT, reason TEXT,
                    outcome TEXT NOT NULL)
                """,
                "CREATE INDEX push_attempts_by_job ON push_attempts (job_id)",
                """
                CREATE TABLE push_settings (
                    app_id BIGINT NOT NULL, username TEXT NOT NULL, scope TEXT NOT NULL, remind_type TEXT, quiet_hours TEXT,
                    silent_until BIGINT, PRIMARY KEY (app_id, username, scope))
                """,
                """
                CREATE TABLE push_templates (
                    app_id BIGINT NOT NULL, name TEXT NOT NULL, title_pattern TEXT NOT NULL, content_pattern TEXT NOT NULL,
                    created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL, PRIMARY KEY (app_id, name))
                """,
                """
                CREATE TABLE pending_routes (
                    app_id BIGINT NOT NULL, message_id BIGINT NOT NULL, created_at BIGINT NOT NULL, PRIMARY KEY (app_id, message_id))
                """,
                "CREATE INDEX pending_routes_by_age ON pending_routes (created_at)",
                """
                CREATE TABLE send_receipts (
                    app_id BIGINT NOT NULL, scope TEXT NOT NULL, reference TEXT NOT NULL, message_ids TEXT NOT NULL,
                    created_at BIGINT NOT NULL, PRIMARY KEY (app_id, scope, reference))
                """,
                "CREATE INDEX send_receipts_by_age ON send_receipts (app_id, created_at)",
            ]),
        Migration(
            version: "v2-cluster",
            sql: [
                // Every live node, beating every second; a node silent for 5 s is declared dead by another.
                """
                CREATE TABLE cluster_nodes (
                    epoch BIGINT PRIMARY KEY, name TEXT NOT NULL, slot INT NOT NULL UNIQUE CHECK (slot BETWEEN 0 AND 1023),
                    started_at BIGINT NOT NULL,
                    heartbeat_at BIGINT NOT NULL)
                """,
                // Which node holds each connected device. Logged, not UNLOGGED: a PostgreSQL crash must not forget devices
                // that are still connected (they would be pushed messages they receive live, and never re-decided).
                """
                CREATE TABLE device_presence (
                    app_id BIGINT NOT NULL, username TEXT NOT NULL, device_id TEXT NOT NULL, node_epoch BIGINT NOT NULL,
                    connection_id BIGINT NOT NULL, connected_at BIGINT NOT NULL, PRIMARY KEY (app_id, username, device_id))
                """,
                "CREATE INDEX device_presence_by_node ON device_presence (node_epoch)",
                """
                CREATE TABLE node_mailbox (id BIGSERIAL PRIMARY KEY, node_epoch BIGINT NOT NULL, body TEXT NOT NULL)
                """,
                "CREATE INDEX node_mailbox_by_node ON node_mailbox (node_epoch, id)",
                // The node whose claim holds a job: its death releases the claim at once instead of at the lease's end.
                "ALTER TABLE push_jobs ADD COLUMN claimed_by BIGINT NOT NULL DEFAULT 0",
                "CREATE INDEX push_jobs_claimed_by ON push_jobs (claimed_by) WHERE status = 'pending' AND claimed_by != 0",
            ]),
        Migration(
            version: "v3-read-state",
            sql: [
                // The badge becomes the unread count: `badge` is now only the total a client reported (at inbox position
                // `badge_seq`). Entries stored before count as unread when received and not `cmd`; what a device of the user
                // acknowledged counts as read (below).
                "ALTER TABLE inbox ADD COLUMN counts BOOLEAN NOT NULL DEFAULT false",
                """
                UPDATE inbox i SET counts = true FROM messages m
                WHERE m.app_id = i.app_id AND m.id = i.message_id AND m.sender != i.username AND m.type != 'cmd'
                """,
                "UPDATE users SET badge = 0",
                "ALTER TABLE users ADD COLUMN badge_seq BIGINT NOT NULL DEFAULT 0",
                "ALTER TABLE users ADD COLUMN read_version BIGINT NOT NULL DEFAULT 0",
                "ALTER TABLE apps ADD COLUMN badge_counts_muted BOOLEAN NOT NULL DEFAULT false",
                """
                CREATE TABLE conversation_reads (
                    app_id BIGINT NOT NULL, username TEXT NOT NULL, conversation TEXT NOT NULL, read_seq BIGINT NOT NULL,
                    up_to BIGINT NOT NULL, version BIGINT NOT NULL, updated_at BIGINT NOT NULL,
                    PRIMARY KEY (app_id, username, conversation))
                """,
                "CREATE INDEX conversation_reads_by_version ON conversation_reads (app_id, username, version)",
                // What a device of the user received (acknowledged) counts as read: a marker (version 0) per conversation.
                """
                INSERT INTO conversation_reads (app_id, username, conversation, read_seq, up_to, version, updated_at)
                SELECT i.app_id, i.username, i.conversation, MAX(i.seq), 0, 0, 0 FROM inbox i
                JOIN (SELECT app_id, username, MAX(acked_seq) AS acked FROM device_cursors GROUP BY app_id, username) c
                    ON c.app_id = i.app_id AND c.username = i.username
                WHERE i.seq <= c.acked GROUP BY i.app_id, i.username, i.conversation
                """,
                """
                UPDATE conversation_reads r SET up_to = i.message_id FROM inbox i
                WHERE i.app_id = r.app_id AND i.username = r.username AND i.seq = r.read_seq
                """,
                "ALTER TABLE push_jobs ADD COLUMN read_version BIGINT NOT NULL DEFAULT 0",
            ]),
        Migration(
            version: "v4-webhooks",
            sql: [
                """
                CREATE TABLE webhooks (
                    app_id BIGINT PRIMARY KEY, url TEXT NOT NULL, sealed_secret BYTEA NOT NULL, enabled BOOLEAN NOT NULL,
                    failures BIGINT NOT NULL DEFAULT 0, next_attempt_at BIGINT NOT NULL DEFAULT 0, last_error TEXT,
                    dropped_events BIGINT NOT NULL DEFAULT 0, claimed_until BIGINT NOT NULL DEFAULT 0,
                    claim_token BIGINT NOT NULL DEFAULT 0, updated_at BIGINT NOT NULL)
                """,
                """
                CREATE TABLE webhook_events (
                    id BIGSERIAL PRIMARY KEY, app_id BIGINT NOT NULL, kind TEXT NOT NULL, at BIGINT NOT NULL,
                    username TEXT NOT NULL, device_id TEXT NOT NULL, notifier TEXT NOT NULL, message_id BIGINT, push_type TEXT,
                    outcome TEXT, reason TEXT, apns_status BIGINT, apns_id TEXT, attempts BIGINT)
                """,
                "CREATE INDEX webhook_events_by_app ON webhook_events (app_id, id)",
                // The outbox is filled by a trigger, so that every path that decides a push job records its event in the
                // same transaction, and none can forget to.
                """
                CREATE FUNCTION push_job_webhook_event() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
                BEGIN
                    IF NEW.status <> 'pending' AND (TG_OP = 'INSERT' OR OLD.status <> NEW.status) THEN
                        INSERT INTO webhook_events (app_id, kind, at, username, device_id, notifier, message_id, push_type, outcome,
                            reason, apns_status, apns_id, attempts)
                        SELECT NEW.app_id, 'push', NEW.updated_at, NEW.username, NEW.device_id, NEW.notifier, NEW.message_id,
                            NEW.push_type, NEW.status, NEW.last_reason, NEW.last_status, NEW.apns_id, NEW.attempts
                        WHERE EXISTS (SELECT 1 FROM webhooks w WHERE w.app_id = NEW.app_id AND w.enabled);
                    END IF;
                    RETURN NULL;
                END
                $$
                """,
                """
                CREATE TRIGGER push_jobs_webhook AFTER INSERT OR UPDATE OF status ON push_jobs
                FOR EACH ROW EXECUTE FUNCTION push_job_webhook_event()
                """,
            ]),
        // The trigger key-share locks the webhook row it saw: a concurrent deletion of the webhook waits for the push's
        // transaction and then deletes its events too, instead of leaving them behind for a later webhook.
        Migration(
            version: "v5-webhook-event-lock",
            sql: [
                """
                CREATE OR REPLACE FUNCTION push_job_webhook_event() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
                BEGIN
                    IF NEW.status <> 'pending' AND (TG_OP = 'INSERT' OR OLD.status <> NEW.status) THEN
                        INSERT INTO webhook_events (app_id, kind, at, username, device_id, notifier, message_id, push_type, outcome,
                            reason, apns_status, apns_id, attempts)
                        SELECT NEW.app_id, 'push', NEW.updated_at, NEW.username, NEW.device_id, NEW.notifier, NEW.message_id,
                            NEW.push_type, NEW.status, NEW.last_reason, NEW.last_status, NEW.apns_id, NEW.attempts
                        WHERE EXISTS (SELECT 1 FROM webhooks w WHERE w.app_id = NEW.app_id AND w.enabled FOR KEY SHARE);
                    END IF;
                    RETURN NULL;
                END
                $$
                """
            ]),
        Migration(
            version: "v6-console-sessions",
            sql: [
                """
                CREATE TABLE console_sessions (
                    digest TEXT PRIMARY KEY, app_id BIGINT NOT NULL, created_at BIGINT NOT NULL, expires_at BIGINT NOT NULL)
                """,
                "CREATE INDEX console_sessions_by_expiry ON console_sessions (expires_at)",
            ]),
        Migration(
            version: "v7-app-credentials",
            sql: [
                // App tokens issued before a rotation of the client secret are refused (`rotateClientSecret`).
                "ALTER TABLE apps ADD COLUMN tokens_valid_after BIGINT NOT NULL DEFAULT 0",
                "CREATE INDEX console_sessions_by_app ON console_sessions (app_id)",
            ]),
        Migration(
            version: "v8-tencent-identity",
            sql: [
                // An app's Tencent Cloud IM identity (`setTencentIdentity`): its SDKAppID, its sealed secret key, its admin.
                "ALTER TABLE apps ADD COLUMN tencent_app_id BIGINT UNIQUE",
                "ALTER TABLE apps ADD COLUMN tencent_sealed_key BYTEA",
                "ALTER TABLE apps ADD COLUMN tencent_admin TEXT",
            ]),
        Migration(
            version: "v9-recall-limit",
            sql: [
                // How long after sending a user may recall a message (`PushPolicyRecord.recallLimitSeconds`).
                "ALTER TABLE apps ADD COLUMN recall_limit_seconds BIGINT NOT NULL DEFAULT 120"
            ]),
        Migration(
            version: "v10-route-progress",
            sql: [
                // A route recorded in parts: the last recipient whose pushes are recorded (`PendingRoute.routedThrough`).
                "ALTER TABLE pending_routes ADD COLUMN routed_through TEXT"
            ]),
        Migration(
            version: "v11-push-contents",
            sql: [
                // A route's payload stored once per rendering (`PushContents`): its jobs refer to it with their own badge.
                """
                CREATE TABLE push_contents (
                    id BIGSERIAL PRIMARY KEY, app_id BIGINT NOT NULL, message_id BIGINT NOT NULL, head TEXT NOT NULL,
                    badge_offset BIGINT)
                """,
                "CREATE INDEX push_contents_by_message ON push_contents (app_id, message_id)",
                "ALTER TABLE push_jobs ADD COLUMN content_id BIGINT",
                "ALTER TABLE push_jobs ADD COLUMN badge BIGINT",
                // Whether a content is still referred to, when jobs are deleted.
                "CREATE INDEX push_jobs_by_content ON push_jobs (content_id) WHERE content_id IS NOT NULL",
            ]),
    ]
}
