import BeaconCore
import BeaconStorage

/// What both REST doors do to an account beyond a row: deleting a user (Easemob's `DELETE users/{username}`, Tencent's
/// `account_delete`) and ending its sessions (Easemob's `disconnect`, Tencent's `kick`).
struct AccountActions: Sendable {
    let store: any BeaconStore
    let switchboard: Switchboard
    let clock: @Sendable () -> Int64

    /// Deletes the user: disconnected, deleted, then disconnected again, so that a session that registered in between (its
    /// token still held) ends too, and none of the old user's devices stays online to receive what is sent to a new user of
    /// the name. False when there was no such user.
    func delete(_ username: String, app: AppRecord) async throws -> Bool {
        await switchboard.disconnectAll(of: username, app: app.id, reason: DeviceSession.kicked)
        let deleted = try await store.deleteUser(username, app: app.id, now: clock())
        await switchboard.disconnectAll(of: username, app: app.id, reason: DeviceSession.kicked)
        return deleted
    }

    /// Ends every session of the user: its tokens are refused, its device bindings removed (no more pushes to them), its
    /// connected devices closed with `kicked`.
    func kick(_ username: String, app: AppRecord) async throws {
        try await store.revokeTokens(of: username, app: app.id, before: clock() + 1)
        try await store.unbindAll(username: username, app: app.id)
        await switchboard.disconnectAll(of: username, app: app.id, reason: DeviceSession.kicked)
    }
}
