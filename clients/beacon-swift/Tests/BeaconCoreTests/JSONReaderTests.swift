import BeaconCore
import Foundation
import Testing

/// `JSONReader` reads what `JSONDecoder` reads into a `JSONValue`, refuses what is not JSON, and never traps.
@Suite struct JSONReaderTests {
    /// A deterministic generator (SplitMix64), so that a failure names a reproducible seed.
    struct Random {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        mutating func below(_ bound: Int) -> Int { Int(next() % UInt64(bound)) }
    }

    static let alphabet: [Unicode.Scalar] = [
        "a", "Z", "0", " ", "\"", "\\", "/", "\n", "\r", "\t", "\u{01}", "\u{1F}", "\u{7F}", "é", "名", "😀", "\u{FFFF}", "\u{2028}",
    ]

    static func string(_ random: inout Random) -> String {
        var text = ""
        for _ in 0..<random.below(12) { text.unicodeScalars.append(alphabet[random.below(alphabet.count)]) }
        return text
    }

    static func value(_ random: inout Random, depth: Int = 0) -> JSONValue {
        switch random.below(depth > 3 ? 4 : 6) {
        case 0: return .null
        case 1: return .bool(random.below(2) == 0)
        case 2:
            let numbers: [Double] = [0, -0.5, 1, -17, 1_795_321_311_812, 9_007_199_254_740_991, 1.25e-7, 6.02e23, 0.1, -3.75]
            return .number(numbers[random.below(numbers.count)])
        case 3: return .string(string(&random))
        case 4: return .array((0..<random.below(4)).map { _ in value(&random, depth: depth + 1) })
        default:
            var fields: [String: JSONValue] = [:]
            for _ in 0..<random.below(4) { fields[string(&random)] = value(&random, depth: depth + 1) }
            return .object(fields)
        }
    }

    @Test func readsBackWhatTheWriterWrites() throws {
        var random = Random(state: 20_261_124)
        for _ in 0..<3_000 {
            let value = Self.value(&random)
            let text = JSONWriter.string(value)
            #expect(try JSONReader.value(of: text) == value, "\(text)")
            #expect(try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8)) == value, "\(text)")
        }
    }

    @Test(arguments: [
        #" { "a" : [ 1 , 2.5e3 , -0.0 , true , false , null ] , "b" : "x\u00e9\ud83d\ude00\/\b\f\n\r\t\"\\" } "#,
        "[]", "{}", "0", "-1", "1E+2", "1e-2", "0.5", "\"\"", "\"名前\"", "[[[]]]", "{\"a\":{\"b\":{}}}", "\t\r\n 7 \n",
        #"{"dup":1,"dup":2}"#, "123456789012345678901234567890", #""\u0041\u00DF\u6771""#,
    ])
    func agreesWithJSONDecoder(text: String) throws {
        #expect(try JSONReader.value(of: text) == JSONDecoder().decode(JSONValue.self, from: Data(text.utf8)))
    }

    @Test(arguments: [
        "", " ", "{", "}", "[1,]", "[,1]", "{\"a\" 1}", "{\"a\":1,}", "{a:1}", "01", "1.", ".5", "-", "+1", "1e", "1e+", "--1",
        "tru", "nul", "falsey", "\"\\x\"", "\"a", "\"\u{01}\"", "[1] 2", "\"\\ud800\"", "\"\\ud800\\u0041\"", "\"\\udc00\"",
        "\"\\u12\"", "\"\\u12G4\"", "1e400", "-1e400", "NaN", "Infinity", "[1 2]", "{\"a\":}", "'a'",
        String(repeating: "[", count: 600) + String(repeating: "]", count: 600),
    ])
    func refusesWhatIsNotJSON(text: String) {
        #expect(throws: JSONReader.Malformed.self) { try JSONReader.value(of: text) }
    }

    @Test func nestingUpToTheLimitIsRead() throws {
        let depth = JSONReader.maxDepth
        let text = String(repeating: "[", count: depth) + String(repeating: "]", count: depth)
        var value = try JSONReader.value(of: text)
        var levels = 0
        while case .array(let items) = value, let first = items.first {
            value = first
            levels += 1
        }
        #expect(levels == depth - 1)
    }

    /// Random bytes and truncations of valid texts: every one is read or refused, none traps.
    @Test func anyTextIsReadOrRefused() {
        var random = Random(state: 42)
        var refused = 0
        let pieces = Array("{}[]\",:.-+eE0123456789tfnrul\\ u\u{01}".utf8)
        for round in 0..<5_000 {
            let text: String
            if round % 2 == 0 {
                let valid = JSONWriter.string(Self.value(&random))
                text = String(decoding: Array(valid.utf8).prefix(random.below(valid.utf8.count + 1)), as: UTF8.self)
            } else {
                let bytes = (0..<random.below(24)).map { _ in pieces[random.below(pieces.count)] }
                text = String(decoding: bytes, as: UTF8.self)
            }
            do { _ = try JSONReader.value(of: text) } catch { refused += 1 }
        }
        #expect(refused > 1_000)
    }
}
