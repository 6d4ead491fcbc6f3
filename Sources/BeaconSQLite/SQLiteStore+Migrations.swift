import BeaconCore
import BeaconStorage
import Foundation
import GRDB

/// The schema, one migration per version (GRDB's migrator records which ran).
extension SQLiteStore {
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE settings (name TEXT PRIMARY KEY, value TEXT NOT NULL);
                    CREATE TABLE apps (
                        id INTEGER PRIMARY KEY AUTOINCREMENT, org TEXT NOT NULL, name TEXT NOT NULL,
                        client_id TEXT NOT NULL UNIQUE, client_secret_hash TEXT NOT NULL,
                        per_chat INTEGER NOT NULL, per_group INTEGER NOT NULL, max_age_seconds INTEGER NOT NULL,
                        created_at INTEGER NOT NULL, UNIQUE (org, name));
                    CREATE TABLE users (
                        app_id INTEGER NOT NULL, username TEXT NOT NULL, uuid TEXT NOT NULL, password_hash TEXT NOT NULL,
                        nickname TEXT, timezone TEXT, created_at INTEGER NOT NULL, modified_at INTEGER NOT NULL,
                        tokens_valid_after INTEGER NOT NULL DEFAULT 0, inbox_seq INTEGER NOT NULL DEFAULT 0,
                        PRIMARY KEY (app_id, username));
                    CREATE TABLE chat_groups (
                        app_id INTEGER NOT NULL, id TEXT NOT NULL, name TEXT NOT NULL, description TEXT NOT NULL,
                        owner TEXT NOT NULL, max_users INTEGER NOT NULL, created_at INTEGER NOT NULL,
                        PRIMARY KEY (app_id, id));
                    CREATE TABLE group_members (
                        app_id INTEGER NOT NULL, group_id TEXT NOT NULL, username TEXT NOT NULL, joined_at INTEGER NOT NULL,
                        PRIMARY KEY (app_id, group_id, username));
                    CREATE INDEX group_members_by_user ON group_members (app_id, username);
                    CREATE TABLE messages (
                        app_id INTEGER NOT NULL, id INTEGER NOT NULL, sender TEXT NOT NULL, recipient TEXT NOT NULL,
                        chat_type TEXT NOT NULL, type TEXT NOT NULL, body TEXT NOT NULL, ext TEXT NOT NULL,
                        timestamp INTEGER NOT NULL, PRIMARY KEY (app_id, id));
                    CREATE TABLE inbox (
                        app_id INTEGER NOT NULL, username TEXT NOT NULL, seq INTEGER NOT NULL, message_id INTEGER NOT NULL,
                        conversation TEXT NOT NULL, chat_type TEXT NOT NULL, origin_device TEXT, created_at INTEGER NOT NULL,
                        PRIMARY KEY (app_id, username, seq));
                    CREATE INDEX inbox_by_message ON inbox (app_id, message_id);
                    CREATE INDEX inbox_by_age ON inbox (app_id, created_at);
                    CREATE TABLE device_cursors (
                        app_id INTEGER NOT NULL, username TEXT NOT NULL, device_id TEXT NOT NULL, acked_seq INTEGER NOT NULL,
                        updated_at INTEGER NOT NULL, PRIMARY KEY (app_id, username, device_id));
                    """)
        }
        migrator.registerMigration("v2-push") { db in
            try db.execute(
                sql: """
                    ALTER TABLE users ADD COLUMN badge INTEGER NOT NULL DEFAULT 0;
                    CREATE TABLE push_configs (
                        app_id INTEGER NOT NULL, name TEXT NOT NULL, kind TEXT NOT NULL, environment TEXT NOT NULL,
                        bundle_id TEXT NOT NULL, voip INTEGER NOT NULL, key_id TEXT, team_id TEXT, sealed_secret BLOB NOT NULL,
                        expires_at INTEGER, created_at INTEGER NOT NULL, PRIMARY KEY (app_id, name));
                    CREATE TABLE push_bindings (
                        app_id INTEGER NOT NULL, username TEXT NOT NULL, device_id TEXT NOT NULL, notifier TEXT NOT NULL,
                        device_token TEXT NOT NULL, bound_at INTEGER NOT NULL, PRIMARY KEY (app_id, username, device_id, notifier));
                    CREATE INDEX push_bindings_by_token ON push_bindings (app_id, device_token);
                    CREATE TABLE push_jobs (
                        id INTEGER PRIMARY KEY AUTOINCREMENT, app_id INTEGER NOT NULL, message_id INTEGER NOT NULL,
                        username TEXT NOT NULL, device_id TEXT NOT NULL, notifier TEXT NOT NULL, device_token TEXT NOT NULL,
                        topic TEXT NOT NULL, push_type TEXT NOT NULL, priority INTEGER NOT NULL, expiration INTEGER NOT NULL,
                        collapse_id TEXT, apns_id TEXT NOT NULL, payload TEXT NOT NULL, status TEXT NOT NULL,
                        attempts INTEGER NOT NULL DEFAULT 0, last_status INTEGER, last_reason TEXT, created_at INTEGER NOT NULL,
                        updated_at INTEGER NOT NULL, next_attempt_at INTEGER NOT NULL, claimed_until INTEGER NOT NULL DEFAULT 0);
                    CREATE INDEX push_jobs_due ON push_jobs (status, next_attempt_at);
                    CREATE INDEX push_jobs_by_user ON push_jobs (app_id, username, message_id);
                    CREATE INDEX push_jobs_by_message ON push_jobs (app_id, message_id);
                    CREATE TABLE push_attempts (
                        job_id INTEGER NOT NULL, at INTEGER NOT NULL, http_status INTEGER, reason TEXT, outcome TEXT NOT NULL);
                    CREATE INDEX push_attempts_by_job ON push_attempts (job_id);
                    """)
        }
        migrator.registerMigration("v3-push-settings") { db in
            try db.execute(
                sql: """
                    CREATE TABLE push_settings (
                        app_id INTEGER NOT NULL, username TEXT NOT NULL, scope TEXT NOT NULL, remind_type TEXT, quiet_hours TEXT,
                        silent_until INTEGER, PRIMARY KEY (app_id, username, scope));
                    ALTER TABLE apps ADD COLUMN multi_device TEXT NOT NULL DEFAULT 'all_offline';
                    ALTER TABLE apps ADD COLUMN default_timezone TEXT NOT NULL DEFAULT 'UTC';
                    ALTER TABLE push_jobs ADD COLUMN skip_reason TEXT;
                    """)
        }
        migrator.registerMigration("v4-push-display") { db in
            try db.execute(
                sql: """
                    ALTER TABLE users ADD COLUMN display_style INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE users ADD COLUMN push_language TEXT;
                    ALTER TABLE users ADD COLUMN push_template TEXT;
                    """)
        }
        migrator.registerMigration("v5-push-templates") { db in
            try db.execute(
                sql: """
                    CREATE TABLE push_templates (
                        app_id INTEGER NOT NULL, name TEXT NOT NULL, title_pattern TEXT NOT NULL, content_pattern TEXT NOT NULL,
                        created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, PRIMARY KEY (app_id, name));
                    """)
        }
        migrator.registerMigration("v6-display-strings") { db in
            try db.execute(sql: "ALTER TABLE apps ADD COLUMN display_strings TEXT NOT NULL DEFAULT '{}'")
        }
        migrator.registerMigration("v7-hardening") { db in
            try db.execute(
                sql: """
                    ALTER TABLE push_bindings ADD COLUMN voip_token TEXT;
                    CREATE INDEX push_bindings_by_voip_token ON push_bindings (app_id, voip_token);
                    ALTER TABLE push_jobs ADD COLUMN claim_token INTEGER NOT NULL DEFAULT 0;
                    CREATE INDEX push_jobs_by_status ON push_jobs (app_id, username, status);
                    CREATE TABLE pending_routes (
                        app_id INTEGER NOT NULL, message_id INTEGER NOT NULL, created_at INTEGER NOT NULL,
                        PRIMARY KEY (app_id, message_id));
                    CREATE INDEX pending_routes_by_age ON pending_routes (created_at);
                    CREATE TABLE send_receipts (
                        app_id INTEGER NOT NULL, scope TEXT NOT NULL, reference TEXT NOT NULL, message_ids TEXT NOT NULL,
                        created_at INTEGER NOT NULL, PRIMARY KEY (app_id, scope, reference));
                    CREATE INDEX send_receipts_by_age ON send_receipts (app_id, created_at);
                    CREATE INDEX device_cursors_by_age ON device_cursors (app_id, updated_at);
                    DELETE FROM settings WHERE name = 'token_signing_key';
                    """)
        }
        migrator.registerMigration("v8-read-state") { db in
            // The badge becomes the unread count: `badge` is now only the total a client reported (at inbox position
            // `badge_seq`), so the old "since last online" counters are cleared. Entries stored before this migration
            // count as unread when they were received and not `cmd` (their ext flags are not looked at), and what a device
            // of the user received (acknowledged) counts as read: each conversation gets a marker (version 0) there.
            try db.execute(
                sql: """
                    ALTER TABLE inbox ADD COLUMN counts INTEGER NOT NULL DEFAULT 0;
                    UPDATE inbox SET counts = 1 WHERE EXISTS (SELECT 1 FROM messages m WHERE m.app_id = inbox.app_id
                        AND m.id = inbox.message_id AND m.sender != inbox.username AND m.type != 'cmd');
                    UPDATE users SET badge = 0;
                    ALTER TABLE users ADD COLUMN badge_seq INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE users ADD COLUMN read_version INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE apps ADD COLUMN badge_counts_muted INTEGER NOT NULL DEFAULT 0;
                    CREATE TABLE conversation_reads (
                        app_id INTEGER NOT NULL, username TEXT NOT NULL, conversation TEXT NOT NULL, read_seq INTEGER NOT NULL,
                        up_to INTEGER NOT NULL, version INTEGER NOT NULL, updated_at INTEGER NOT NULL,
                        PRIMARY KEY (app_id, username, conversation));
                    CREATE INDEX conversation_reads_by_version ON conversation_reads (app_id, username, version);
                    INSERT INTO conversation_reads (app_id, username, conversation, read_seq, up_to, version, updated_at)
                    SELECT i.app_id, i.username, i.conversation, MAX(i.seq), 0, 0, 0 FROM inbox i
                    JOIN (SELECT app_id, username, MAX(acked_seq) AS acked FROM device_cursors GROUP BY app_id, username) c
                        ON c.app_id = i.app_id AND c.username = i.username
                    WHERE i.seq <= c.acked GROUP BY i.app_id, i.username, i.conversation;
                    UPDATE conversation_reads SET up_to = (SELECT message_id FROM inbox i WHERE i.app_id = conversation_reads.app_id
                        AND i.username = conversation_reads.username AND i.seq = conversation_reads.read_seq);
                    ALTER TABLE push_jobs ADD COLUMN read_version INTEGER NOT NULL DEFAULT 0;
                    """)
        }
        migrator.registerMigration("v9-webhooks") { db in
            // The push-result webhook's outbox is filled by triggers, so that every path that decides a push job (recorded
            // skips, APNs' answers, expiry, superseded withdrawals, reads, deleted users, changed bindings) records its
            // event in the same transaction, and none can forget to.
            try db.execute(
                sql: """
                    CREATE TABLE webhooks (
                        app_id INTEGER PRIMARY KEY, url TEXT NOT NULL, sealed_secret BLOB NOT NULL, enabled INTEGER NOT NULL,
                        failures INTEGER NOT NULL DEFAULT 0, next_attempt_at INTEGER NOT NULL DEFAULT 0, last_error TEXT,
                        dropped_events INTEGER NOT NULL DEFAULT 0, claimed_until INTEGER NOT NULL DEFAULT 0,
                        claim_token INTEGER NOT NULL DEFAULT 0, updated_at INTEGER NOT NULL);
                    CREATE TABLE webhook_events (
                        id INTEGER PRIMARY KEY AUTOINCREMENT, app_id INTEGER NOT NULL, kind TEXT NOT NULL, at INTEGER NOT NULL,
                        username TEXT NOT NULL, device_id TEXT NOT NULL, notifier TEXT NOT NULL, message_id INTEGER, push_type TEXT,
                        outcome TEXT, reason TEXT, apns_status INTEGER, apns_id TEXT, attempts INTEGER);
                    CREATE INDEX webhook_events_by_app ON webhook_events (app_id, id);
                    CREATE TRIGGER push_jobs_decided_webhook AFTER INSERT ON push_jobs WHEN NEW.status != 'pending' BEGIN
                        INSERT INTO webhook_events (app_id, kind, at, username, device_id, notifier, message_id, push_type, outcome,
                            reason, apns_status, apns_id, attempts)
                        SELECT NEW.app_id, 'push', NEW.updated_at, NEW.username, NEW.device_id, NEW.notifier, NEW.message_id,
                            NEW.push_type, NEW.status, NEW.last_reason, NEW.last_status, NEW.apns_id, NEW.attempts
                        WHERE EXISTS (SELECT 1 FROM webhooks w WHERE w.app_id = NEW.app_id AND w.enabled = 1);
                    END;
                    CREATE TRIGGER push_jobs_finished_webhook AFTER UPDATE OF status ON push_jobs
                    WHEN NEW.status != 'pending' AND NEW.status != OLD.status BEGIN
                        INSERT INTO webhook_events (app_id, kind, at, username, device_id, notifier, message_id, push_type, outcome,
                            reason, apns_status, apns_id, attempts)
                        SELECT NEW.app_id, 'push', NEW.updated_at, NEW.username, NEW.device_id, NEW.notifier, NEW.message_id,
                            NEW.push_type, NEW.status, NEW.last_reason, NEW.last_status, NEW.apns_id, NEW.attempts
                        WHERE EXISTS (SELECT 1 FROM webhooks w WHERE w.app_id = NEW.app_id AND w.enabled = 1);
                    END;
                    """)
        }
        migrator.registerMigration("v10-console-sessions") { db in
            try db.execute(
                sql: """
                    CREATE TABLE console_sessions (
                        digest TEXT PRIMARY KEY, app_id INTEGER NOT NULL, created_at INTEGER NOT NULL, expires_at INTEGER NOT NULL);
                    CREATE INDEX console_sessions_by_expiry ON console_sessions (expires_at);
                    """)
        }
        migrator.registerMigration("v11-app-credentials") { db in
            // App tokens issued before a rotation of the client secret are refused (`rotateClientSecret`).
            try db.execute(
                sql: """
                    ALTER TABLE apps ADD COLUMN tokens_valid_after INTEGER NOT NULL DEFAULT 0;
                    CREATE INDEX console_sessions_by_app ON console_sessions (app_id);
                    """)
        }
        migrator.registerMigration("v12-schema-as-postgres") { db in
            // `skip_reason` (v3) was never written or read: a skip's reason is `last_reason`, as on PostgreSQL. The schema
            // conformance test keeps the two engines' schemas alike.
            try db.execute(sql: "ALTER TABLE push_jobs DROP COLUMN skip_reason")
        }
        migrator.registerMigration("v13-tencent-identity") { db in
            // An app's Tencent Cloud IM identity (`setTencentIdentity`): its SDKAppID, its sealed secret key, its admin.
            try db.execute(
                sql: """
                    ALTER TABLE apps ADD COLUMN tencent_app_id INTEGER;
                    ALTER TABLE apps ADD COLUMN tencent_sealed_key BLOB;
                    ALTER TABLE apps ADD COLUMN tencent_admin TEXT;
                    CREATE UNIQUE INDEX apps_by_tencent_app_id ON apps (tencent_app_id);
                    """)
        }
        migrator.registerMigration("v14-recall-limit") { db in
            // How long after sending a user may recall a message (`PushPolicyRecord.recallLimitSeconds`).
            try db.execute(sql: "ALTER TABLE apps ADD COLUMN recall_limit_seconds INTEGER NOT NULL DEFAULT 120")
        }
        migrator.registerMigration("v15-route-progress") { db in
            // A route recorded in parts: the last recipient whose pushes are recorded (`PendingRoute.routedThrough`).
            try db.execute(sql: "ALTER TABLE pending_routes ADD COLUMN routed_through TEXT")
        }
        migrator.registerMigration("v16-push-contents") { db in
            // A route's payload stored once per rendering (`PushContents`): its jobs refer to it with their own badge.
            // Ids are never reused (AUTOINCREMENT): a job never finds another message's content under its id.
            try db.execute(
                sql: """
                    CREATE TABLE push_contents (
                        id INTEGER PRIMARY KEY AUTOINCREMENT, app_id INTEGER NOT NULL, message_id INTEGER NOT NULL,
                        head TEXT NOT NULL, badge_offset INTEGER);
                    CREATE INDEX push_contents_by_message ON push_contents (app_id, message_id);
                    ALTER TABLE push_jobs ADD COLUMN content_id INTEGER;
                    ALTER TABLE push_jobs ADD COLUMN badge INTEGER;
                    CREATE INDEX push_jobs_by_content ON push_jobs (content_id) WHERE content_id IS NOT NULL;
                    """)
        }
        return migrator
    }
}
