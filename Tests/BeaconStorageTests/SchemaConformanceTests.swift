import BeaconCore
import BeaconSQLite
import BeaconTesting
import Foundation
import GRDB
import Logging
import PostgresNIO
import Testing

@testable import BeaconPostgres

/// One table as an engine declares it: columns (a portable kind, and whether NULL is refused), primary key, unique keys
/// and foreign keys.
struct TableShape: Equatable, CustomStringConvertible {
    struct Column: Equatable {
        /// `integer` (SQLite's INTEGER; PostgreSQL's bigint, integer, smallint or boolean), `text` or `bytes`.
        var kind: String
        var notNull: Bool
    }
    var columns: [String: Column] = [:]
    var primaryKey: [String] = []
    var uniqueKeys: Set<[String]> = []
    /// Referencing columns → referenced table.
    var foreignKeys: Set<[String]> = []

    var description: String {
        "columns \(columns.sorted { $0.key < $1.key }.map { "\($0.key):\($0.value.kind)\($0.value.notNull ? "!" : "")" }), "
            + "primary key \(primaryKey), unique \(uniqueKeys.sorted { $0.description < $1.description }), foreign \(foreignKeys)"
    }
}

/// SQLite's and PostgreSQL's schemas, as migrated by this version, declare the same tables, columns and constraints; what
/// only one engine has is listed here with its reason. (Neither declares foreign keys: deleting a user or an app deletes
/// its rows explicitly, in one transaction, on both engines — `deleteUser` — so that a deletion never fails half-way
/// on a key and rows that outlive a referenced one, such as delivery records, stay possible by design.)
@Suite(.enabled(if: postgresAvailable, "needs BEACON_TEST_POSTGRES_URL"))
struct SchemaConformanceTests {
    /// Tables of one engine only.
    static let onlySQLite: Set<String> = [
        "grdb_migrations",  // GRDB's record of applied migrations
        "sqlite_sequence",  // SQLite's AUTOINCREMENT counters
    ]
    static let onlyPostgres: Set<String> = [
        "schema_migrations",  // the record of applied migrations
        "cluster_nodes", "device_presence", "node_mailbox",  // ClusterStore: several nodes share PostgreSQL only
    ]
    /// Columns of one engine only, as `table.column`.
    static let columnsOnlyInPostgres: Set<String> = [
        "push_jobs.claimed_by",  // which node holds a claim (released when that node dies)
        "push_attempts.id",  // SQLite keys these rows by its implicit rowid
    ]

    /// Primary-key columns SQLite accepts NULL in (a primary key that is not a lone INTEGER is nullable unless declared NOT
    /// NULL; PostgreSQL's never are). Beacon never writes NULL there; declaring it needs the table rebuilt.
    static let nullableOnlyInSQLite: Set<String> = ["settings.name", "console_sessions.digest"]

    @Test func bothEnginesDeclareTheSameTablesColumnsAndKeys() async throws {
        var sqlite = try await Self.sqliteSchema()
        var postgres = try await Self.postgresSchema()
        for table in Self.onlySQLite { #expect(sqlite.removeValue(forKey: table) != nil, "\(table) is gone: drop it from the list") }
        for table in Self.onlyPostgres { #expect(postgres.removeValue(forKey: table) != nil, "\(table) is gone: drop it from the list") }
        for entry in Self.columnsOnlyInPostgres {
            let parts = entry.split(separator: ".").map(String.init)
            #expect(postgres[parts[0]]?.columns.removeValue(forKey: parts[1]) != nil, "\(entry) is gone: drop it from the list")
        }
        postgres["push_attempts"]?.primaryKey = []  // its `id`, above
        for entry in Self.nullableOnlyInSQLite {
            let parts = entry.split(separator: ".").map(String.init)
            #expect(sqlite[parts[0]]?.primaryKey.contains(parts[1]) == true, "\(entry) is no longer a primary key: drop it from the list")
        }
        #expect(Set(sqlite.keys) == Set(postgres.keys))
        for table in Set(sqlite.keys).intersection(postgres.keys).sorted() {
            #expect(sqlite[table] == postgres[table], "\(table):\n  SQLite     \(sqlite[table]!)\n  PostgreSQL \(postgres[table]!)")
        }
        #expect(sqlite.count > 15)  // the catalogs were read
    }

    static func sqliteSchema() async throws -> [String: TableShape] {
        let directory = StoreKind.temporaryDirectory("beacon-schema")
        defer { try? FileManager.default.removeItem(at: directory) }
        _ = try SQLiteStore(directory: directory.path)  // migrates
        let database = try DatabaseQueue(path: directory.appendingPathComponent("beacon.sqlite").path)
        return try await database.read { db in
            var tables: [String: TableShape] = [:]
            for table in try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table'") {
                var shape = TableShape()
                var keyed: [(Int, String)] = []
                let rows = try Row.fetchAll(db, sql: "SELECT name, type, \"notnull\", pk FROM pragma_table_info(?)", arguments: [table])
                let keyColumns = rows.filter { ($0["pk"] as Int) > 0 }
                for row in rows {
                    let name: String = row["name"]
                    let type: String = row["type"]
                    let kind = ["INTEGER": "integer", "TEXT": "text", "BLOB": "bytes"][type.uppercased()] ?? type
                    let position: Int = row["pk"]
                    // A lone INTEGER PRIMARY KEY is the rowid: never NULL, declared or not.
                    let isRowID = position > 0 && keyColumns.count == 1 && kind == "integer"
                    let notNull = row["notnull"] == 1 || isRowID || Self.nullableOnlyInSQLite.contains("\(table).\(name)")
                    shape.columns[name] = .init(kind: kind, notNull: notNull)
                    if position > 0 { keyed.append((position, name)) }
                }
                shape.primaryKey = keyed.sorted { $0.0 < $1.0 }.map(\.1)
                for index in try Row.fetchAll(
                    db, sql: "SELECT name, origin FROM pragma_index_list(?) WHERE \"unique\" = 1", arguments: [table])
                {
                    guard (index["origin"] as String) != "pk" else { continue }
                    shape.uniqueKeys.insert(
                        try String.fetchAll(
                            db, sql: "SELECT name FROM pragma_index_info(?) ORDER BY seqno", arguments: [index["name"] as String]))
                }
                var foreign: [Int: [String]] = [:]
                var referenced: [Int: String] = [:]
                for key in try Row.fetchAll(
                    db, sql: "SELECT id, \"table\", \"from\" FROM pragma_foreign_key_list(?) ORDER BY id, seq", arguments: [table])
                {
                    foreign[key["id"], default: []].append(key["from"])
                    referenced[key["id"]] = key["table"]
                }
                for (id, columns) in foreign { shape.foreignKeys.insert(columns + ["→", referenced[id] ?? ""]) }
                tables[table] = shape
            }
            return tables
        }
    }

    static func postgresSchema() async throws -> [String: TableShape] {
        let url = try StoreKind.freshPostgresURL()
        try await PostgresStore.withStore(url: url, logger: Logger(label: "test")) { _ in }  // migrates
        let (configuration, schemaName) = try PostgresStore.configuration(url: url)
        let schema = try #require(schemaName)
        let client = PostgresClient(configuration: configuration)
        return try await withThrowingTaskGroup(of: [String: TableShape]?.self) { group in
            group.addTask {
                await client.run()
                return nil
            }
            defer { group.cancelAll() }
            var tables: [String: TableShape] = [:]
            let columns = try await client.query(
                """
                SELECT table_name::text, column_name::text, data_type::text, is_nullable::text FROM information_schema.columns
                WHERE table_schema = \(schema)
                """)
            for try await (table, column, type, nullable) in columns.decode((String, String, String, String).self) {
                let kind =
                    [
                        "bigint": "integer", "integer": "integer", "smallint": "integer", "boolean": "integer", "text": "text",
                        "bytea": "bytes",
                    ][type] ?? type
                tables[table, default: TableShape()].columns[column] = .init(kind: kind, notNull: nullable == "NO")
            }
            // Keys, their columns in key order: constraints, and unique indexes that are not constraints.
            let keys = try await client.query(
                """
                SELECT c.relname::text, k.contype::text,
                       array_to_string(ARRAY(SELECT a.attname FROM unnest(k.conkey) WITH ORDINALITY u(n, o)
                                             JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.n ORDER BY u.o), ','),
                       COALESCE((SELECT r.relname::text FROM pg_class r WHERE r.oid = k.confrelid), '')
                FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace s ON s.oid = c.relnamespace
                WHERE s.nspname = \(schema) AND k.contype IN ('p', 'u', 'f')
                UNION ALL
                SELECT c.relname::text, 'u',
                       array_to_string(ARRAY(SELECT a.attname FROM unnest(i.indkey::int2[]) WITH ORDINALITY u(n, o)
                                             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = u.n ORDER BY u.o), ','), ''
                FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace s ON s.oid = c.relnamespace
                WHERE s.nspname = \(schema) AND i.indisunique AND NOT i.indisprimary
                  AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)
                """)
            for try await (table, type, columnList, referenced) in keys.decode((String, String, String, String).self) {
                let columns = columnList.split(separator: ",").map(String.init)
                switch type {
                case "p": tables[table, default: TableShape()].primaryKey = columns
                case "u": tables[table, default: TableShape()].uniqueKeys.insert(columns)
                default: tables[table, default: TableShape()].foreignKeys.insert(columns + ["→", referenced])
                }
            }
            return tables
        }
    }
}
