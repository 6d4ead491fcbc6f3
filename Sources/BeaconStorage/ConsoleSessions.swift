/// What the web console keeps and shows: its sessions, and an app's activity.
public protocol ConsoleStore: Sendable {
    /// Stores a new session, and forgets sessions that expired before `now`.
    func createConsoleSession(_ session: ConsoleSession, now: Int64) async throws
    /// Creates the session only while the app's client secret is still the one whose hash is `secretHash` (the one the
    /// sign-in checked): false, creating nothing, when a rotation came in between.
    func createConsoleSession(_ session: ConsoleSession, now: Int64, secretHash: String) async throws -> Bool
    /// The session with this digest, unless it expired before `now`.
    func consoleSession(digest: String, now: Int64) async throws -> ConsoleSession?
    /// Ends the session (signing out); false when there was none.
    func deleteConsoleSession(digest: String) async throws -> Bool
    /// Ends every console session of every app (`beacon rotate-key`); returns how many there were.
    func deleteAllConsoleSessions() async throws -> Int
    /// The app's users, its messages made since `since` (ms; counted by their time-ordered ids) and its push outcomes
    /// recorded since then.
    func activity(app: Int64, since: Int64) async throws -> AppActivity
}

/// A signed-in console session: an app administrator who gave the app's client credentials. The store keeps only a
/// digest of the session's secret id (the cookie), so a copy of the database opens no session.
public struct ConsoleSession: Sendable, Hashable {
    /// Lowercase hex SHA-256 of the session id.
    public var digest: String
    public var app: Int64
    /// Milliseconds since 1970.
    public var createdAt: Int64
    /// After this the session opens nothing (ms).
    public var expiresAt: Int64

    public init(digest: String, app: Int64, createdAt: Int64, expiresAt: Int64) {
        self.digest = digest
        self.app = app
        self.createdAt = createdAt
        self.expiresAt = expiresAt
    }
}

/// What an app did since a moment: the console's overview.
public struct AppActivity: Sendable, Hashable {
    /// Push records of one outcome.
    public struct Outcome: Sendable, Hashable {
        /// `sent`, `failed`, `expired`, `skipped` or `pending`.
        public var status: String
        /// The skip or failure reason; empty when none.
        public var reason: String
        public var count: Int

        public init(status: String, reason: String, count: Int) {
            self.status = status
            self.reason = reason
            self.count = count
        }
    }

    /// Users now (not only the new ones).
    public var users: Int
    /// Messages stored since then (and still kept).
    public var messages: Int
    /// Push records updated since then, by outcome (status, then reason).
    public var pushes: [Outcome]

    public init(users: Int, messages: Int, pushes: [Outcome]) {
        self.users = users
        self.messages = messages
        self.pushes = pushes
    }
}
