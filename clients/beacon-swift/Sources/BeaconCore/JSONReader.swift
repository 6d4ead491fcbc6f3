/// Reads JSON text (RFC 8259) into a `JSONValue`: what `JSONDecoder().decode(JSONValue.self, from:)` gives, several
/// times faster. `JSONDecoder` reaches a `JSONValue` only by guessing each value's kind and catching the error of every
/// wrong guess; reading the text directly knows the kind from its first byte. Used where messages are read in bulk (the
/// stores' rows, the SDK's frames). Nesting deeper than `maxDepth` is refused rather than recursed into.
public enum JSONReader {
    public static let maxDepth = 512

    /// Why a text is not JSON, with the byte offset where reading stopped.
    public struct Malformed: Error, CustomStringConvertible, Equatable {
        public var offset: Int
        public var reason: String
        public var description: String { "malformed JSON at byte \(offset): \(reason)" }
    }

    public static func value(of text: String) throws(Malformed) -> JSONValue {
        var text = text
        return try text.withUTF8 { bytes in Result { () throws(Malformed) in try value(of: bytes) } }.get()
    }

    public static func value(of bytes: UnsafeBufferPointer<UInt8>) throws(Malformed) -> JSONValue {
        var reader = Reader(bytes: bytes)
        reader.skipWhitespace()
        let value = try reader.readValue(depth: 0)
        reader.skipWhitespace()
        guard reader.position == bytes.count else { throw reader.malformed("unexpected text after the value") }
        return value
    }

    private struct Reader {
        let bytes: UnsafeBufferPointer<UInt8>
        var position = 0

        init(bytes: UnsafeBufferPointer<UInt8>) {
            self.bytes = bytes
        }

        func malformed(_ reason: String) -> Malformed { Malformed(offset: position, reason: reason) }

        var current: UInt8? { position < bytes.count ? bytes[position] : nil }

        mutating func skipWhitespace() {
            while let byte = current, byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 { position += 1 }
        }

        mutating func readValue(depth: Int) throws(Malformed) -> JSONValue {
            guard depth < JSONReader.maxDepth else { throw malformed("nested deeper than \(JSONReader.maxDepth)") }
            guard let byte = current else { throw malformed("the text ends where a value was expected") }
            switch byte {
            case UInt8(ascii: "{"): return try readObject(depth: depth)
            case UInt8(ascii: "["): return try readArray(depth: depth)
            case UInt8(ascii: "\""): return .string(try readString())
            case UInt8(ascii: "t"): return try readLiteral("true", .bool(true))
            case UInt8(ascii: "f"): return try readLiteral("false", .bool(false))
            case UInt8(ascii: "n"): return try readLiteral("null", .null)
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try readNumber()
            default: throw malformed("a value cannot start here")
            }
        }

        mutating func readLiteral(_ word: StaticString, _ value: JSONValue) throws(Malformed) -> JSONValue {
            let count = word.utf8CodeUnitCount
            guard bytes.count - position >= count else { throw malformed("unknown literal") }
            for index in 0..<count where bytes[position + index] != word.utf8Start[index] { throw malformed("unknown literal") }
            position += count
            return value
        }

        mutating func readObject(depth: Int) throws(Malformed) -> JSONValue {
            position += 1  // {
            var fields: [String: JSONValue] = [:]
            skipWhitespace()
            if current == UInt8(ascii: "}") {
                position += 1
                return .object(fields)
            }
            while true {
                guard current == UInt8(ascii: "\"") else { throw malformed("an object key must be a string") }
                let key = try readString()
                skipWhitespace()
                guard current == UInt8(ascii: ":") else { throw malformed("expected ':' after an object key") }
                position += 1
                skipWhitespace()
                let value = try readValue(depth: depth + 1)
                // A repeated key keeps its first value, as JSONDecoder does.
                if fields[key] == nil { fields[key] = value }
                skipWhitespace()
                switch current {
                case UInt8(ascii: ","):
                    position += 1
                    skipWhitespace()
                case UInt8(ascii: "}"):
                    position += 1
                    return .object(fields)
                default: throw malformed("expected ',' or '}' in an object")
                }
            }
        }

        mutating func readArray(depth: Int) throws(Malformed) -> JSONValue {
            position += 1  // [
            var items: [JSONValue] = []
            skipWhitespace()
            if current == UInt8(ascii: "]") {
                position += 1
                return .array(items)
            }
            while true {
                items.append(try readValue(depth: depth + 1))
                skipWhitespace()
                switch current {
                case UInt8(ascii: ","):
                    position += 1
                    skipWhitespace()
                case UInt8(ascii: "]"):
                    position += 1
                    return .array(items)
                default: throw malformed("expected ',' or ']' in an array")
                }
            }
        }

        /// -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, read by `Double`'s own parser once the grammar is checked.
        mutating func readNumber() throws(Malformed) -> JSONValue {
            let start = position
            if current == UInt8(ascii: "-") { position += 1 }
            func isDigit(_ byte: UInt8?) -> Bool { byte.map { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) } ?? false }
            if current == UInt8(ascii: "0") {
                position += 1
            } else {
                guard isDigit(current) else { throw malformed("a number needs digits") }
                while isDigit(current) { position += 1 }
            }
            if current == UInt8(ascii: ".") {
                position += 1
                guard isDigit(current) else { throw malformed("a fraction needs digits") }
                while isDigit(current) { position += 1 }
            }
            if current == UInt8(ascii: "e") || current == UInt8(ascii: "E") {
                position += 1
                if current == UInt8(ascii: "+") || current == UInt8(ascii: "-") { position += 1 }
                guard isDigit(current) else { throw malformed("an exponent needs digits") }
                while isDigit(current) { position += 1 }
            }
            let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<position]), as: UTF8.self)
            guard let number = Double(text), number.isFinite else {
                throw Malformed(offset: start, reason: "\(text) is not a finite number")
            }
            return .number(number)
        }

        mutating func readString() throws(Malformed) -> String {
            position += 1  // "
            let start = position
            // Most strings hold no escape: one scan, then one copy.
            while let byte = current {
                if byte == UInt8(ascii: "\"") {
                    let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<position]), as: UTF8.self)
                    position += 1
                    return text
                }
                if byte == UInt8(ascii: "\\") { break }
                guard byte >= 0x20 else { throw malformed("a control character must be escaped in a string") }
                position += 1
            }
            var utf8 = Array(UnsafeBufferPointer(rebasing: bytes[start..<position]))
            while let byte = current {
                switch byte {
                case UInt8(ascii: "\""):
                    position += 1
                    return String(decoding: utf8, as: UTF8.self)
                case UInt8(ascii: "\\"):
                    position += 1
                    try readEscape(into: &utf8)
                case ..<0x20:
                    throw malformed("a control character must be escaped in a string")
                default:
                    utf8.append(byte)
                    position += 1
                }
            }
            throw malformed("a string is not closed")
        }

        mutating func readEscape(into utf8: inout [UInt8]) throws(Malformed) {
            guard let byte = current else { throw malformed("a string is not closed") }
            position += 1
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): utf8.append(byte)
            case UInt8(ascii: "b"): utf8.append(0x08)
            case UInt8(ascii: "f"): utf8.append(0x0C)
            case UInt8(ascii: "n"): utf8.append(0x0A)
            case UInt8(ascii: "r"): utf8.append(0x0D)
            case UInt8(ascii: "t"): utf8.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = UInt32(try readHex4())
                if (0xD800..<0xDC00).contains(scalar) {
                    // A high surrogate: its low half must follow as another \u escape.
                    guard bytes.count - position >= 2, bytes[position] == UInt8(ascii: "\\"), bytes[position + 1] == UInt8(ascii: "u")
                    else {
                        throw malformed("a high surrogate without its low surrogate")
                    }
                    position += 2
                    let low = UInt32(try readHex4())
                    guard (0xDC00..<0xE000).contains(low) else { throw malformed("a high surrogate without its low surrogate") }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                }
                guard let unicode = Unicode.Scalar(scalar) else { throw malformed("a lone low surrogate") }
                UTF8.encode(unicode) { utf8.append($0) }
            default:
                throw malformed("unknown escape")
            }
        }

        mutating func readHex4() throws(Malformed) -> UInt16 {
            guard bytes.count - position >= 4 else { throw malformed("\\u needs four hex digits") }
            var value: UInt16 = 0
            for _ in 0..<4 {
                let byte = bytes[position]
                let digit: UInt8
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
                default: throw malformed("\\u needs four hex digits")
                }
                value = value << 4 | UInt16(digit)
                position += 1
            }
            return value
        }
    }
}
