import BeaconCore

/// Everything Beacon keeps: the composition of one protocol per area (apps, users, groups, messages, read state, push
/// configurations, push settings, the push queue, webhooks, the console). Several databases implement it: SQLite
/// (embedded default) and PostgreSQL; an engine for several nodes also implements `ClusterStore`. Every implementation
/// must pass the conformance suites in `Tests/BeaconStorageTests` (behaviour, and the schema's tables and constraints).
///
/// Times are milliseconds since 1970, supplied by the caller so that tests control the clock.
public protocol BeaconStore: AppStore, UserStore, GroupStore, MessageStore, ReadStateStore, PushConfigStore, PushSettingsStore,
    PushQueueStore, WebhookStore, ConsoleStore
{
    /// How long this store's transactions took so far (`beacon_store_transaction_duration_seconds`).
    var transactionTimings: TransactionTimings { get }
    /// What deciding and rendering one message's pushes reads (`RoutingInputs`; a default reads it one area at a time).
    func routingInputs(sender: String, recipients: [String], scopes: [String], app: Int64) async throws -> RoutingInputs
}
