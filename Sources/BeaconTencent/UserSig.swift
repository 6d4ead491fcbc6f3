import BeaconCore
import Crypto
import Foundation

/// A Tencent Cloud IM UserSig (version 2), as Tencent's own generators make it (`TLSSigAPIv2` in Python, Java, Go,
/// Node…): a JSON document, zlib-compressed, in base64 with `*`, `-` and `_` for `+`, `/` and `=`. The document names
/// the user (`TLS.identifier`), the app (`TLS.sdkappid`), when it was made (`TLS.time`, seconds), for how long it holds
/// (`TLS.expire`, seconds), an optional `TLS.userbuf`, and `TLS.sig`: the base64 HMAC-SHA256, keyed with the app's secret
/// key as text, of those fields as `TLS.name:value` lines.
public struct UserSig: Sendable, Hashable {
    public var identifier: String
    public var sdkAppID: Int64
    /// When it was made, seconds since 1970.
    public var time: Int64
    /// How long it holds after `time`, in seconds.
    public var expire: Int64
    public var userbuf: String?

    /// Why a UserSig is refused.
    public enum Failure: Error, Hashable, Sendable {
        /// Not a UserSig at all (not base64, not zlib, not the JSON document, a field missing or of the wrong kind).
        case malformed(String)
        /// Made for another app.
        case wrongApp
        /// Made for another user.
        case wrongIdentifier
        /// Its signature does not match the app's secret key.
        case badSignature
        /// Past `time + expire`.
        case expired
    }

    /// Longest UserSig text taken, and longest document it may inflate to.
    static let maxLength = 8192

    /// The UserSig in `text` if it was made with `key` for `identifier` in app `sdkAppID` and still holds at `now`
    /// (seconds since 1970).
    public static func verify(_ text: String, identifier: String, sdkAppID: Int64, key: String, now: Int64) throws(Failure) -> UserSig {
        let (sig, signature) = try decode(text)
        guard sig.sdkAppID == sdkAppID else { throw .wrongApp }
        guard sig.identifier == identifier else { throw .wrongIdentifier }
        guard
            HMAC<SHA256>.isValidAuthenticationCode(
                signature, authenticating: Array(sig.signedContent.utf8), using: SymmetricKey(data: Array(key.utf8)))
        else { throw .badSignature }
        guard now <= sig.time + sig.expire else { throw .expired }
        return sig
    }

    /// The document in `text` and the signature it carries, unchecked.
    static func decode(_ text: String) throws(Failure) -> (UserSig, signature: [UInt8]) {
        guard !text.isEmpty, text.utf8.count <= maxLength else { throw .malformed("a UserSig is 1-\(maxLength) characters") }
        let standard = String(text.map { $0 == "*" ? "+" : $0 == "-" ? "/" : $0 == "_" ? "=" : $0 })
        guard let compressed = Data(base64Encoded: standard), let document = Inflate.zlib([UInt8](compressed), limit: maxLength) else {
            throw .malformed("not zlib-compressed base64")
        }
        let fields: [String: JSONValue]
        do {
            guard let object = try document.withUnsafeBufferPointer({ try JSONReader.value(of: $0) }).objectValue else {
                throw Failure.malformed("the document is not a JSON object")
            }
            fields = object
        } catch let failure as Failure {
            throw failure
        } catch {
            throw .malformed("the document is not JSON")
        }
        /// An integer field: a JSON number (Tencent's generators) or its decimal text. The generators take any expiry, a
        /// negative one too (a UserSig already expired).
        func integer(_ name: String, allowsNegative: Bool = false) throws(Failure) -> Int64 {
            let value: Int64? =
                switch fields[name] {
                case .number(let number): Int64(exactly: number)
                case .string(let text): Int64(text)
                default: nil
                }
            // Bounded so that `time + expire` cannot overflow.
            guard let value, ((allowsNegative ? -(1 << 40) : 0)...(1 << 40)).contains(value) else {
                throw .malformed("\(name) is not a whole number of seconds")
            }
            return value
        }
        guard let identifier = fields["TLS.identifier"]?.stringValue else { throw .malformed("TLS.identifier is missing") }
        guard let sigText = fields["TLS.sig"]?.stringValue, let signature = Data(base64Encoded: sigText) else {
            throw .malformed("TLS.sig is missing or not base64")
        }
        let userbuf: String?
        switch fields["TLS.userbuf"] {
        case nil, .null: userbuf = nil
        case .string(let text): userbuf = text
        default: throw .malformed("TLS.userbuf is not text")
        }
        // The signed text is `TLS.name:value` lines: a value holding a line break could pass for other fields.
        guard !identifier.contains("\n"), userbuf?.contains("\n") != true else { throw .malformed("a field holds a line break") }
        let sig = UserSig(
            identifier: identifier, sdkAppID: try integer("TLS.sdkappid"), time: try integer("TLS.time"),
            expire: try integer("TLS.expire", allowsNegative: true), userbuf: userbuf)
        return (sig, [UInt8](signature))
    }

    /// The text `TLS.sig` signs, exactly as the generators build it.
    var signedContent: String {
        var content = "TLS.identifier:\(identifier)\nTLS.sdkappid:\(sdkAppID)\nTLS.time:\(time)\nTLS.expire:\(expire)\n"
        if let userbuf { content += "TLS.userbuf:\(userbuf)\n" }
        return content
    }
}
