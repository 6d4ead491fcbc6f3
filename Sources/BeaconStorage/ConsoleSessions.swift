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
