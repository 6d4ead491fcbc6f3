import Foundation

/// Directories only their owner may read: where stores and secrets live.
public enum PrivateDirectory {
    /// Creates `directory` readable by its owner only (0700), or tightens an existing one to that.
    public static func create(_ directory: String) throws {
        try FileManager.default.createDirectory(
            atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: directory)
    }
}

extension UInt64 {
    /// A message id as the stores keep it (a signed 64-bit column); nil for ids no message can have (above `Int64.max`).
    public var storedID: Int64? { self <= UInt64(Int64.max) ? Int64(bitPattern: self) : nil }
}
