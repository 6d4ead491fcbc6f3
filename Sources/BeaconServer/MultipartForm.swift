import Foundation

/// A minimal `multipart/form-data` reader (RFC 7578): named parts, each text or bytes. Enough for certificate
/// uploads from a browser form or `curl -F`.
struct MultipartForm {
    struct Part {
        var name: String
        var filename: String?
        var data: [UInt8]
    }

    var parts: [Part]

    /// Parses `body` with the boundary from a `Content-Type: multipart/form-data; boundary=…` header.
    init?(contentType: String, body: [UInt8]) {
        guard contentType.lowercased().hasPrefix("multipart/form-data"),
            let boundaryParameter = contentType.split(separator: ";").map({ $0.trimmingCharacters(in: .whitespaces) })
                .first(where: { $0.lowercased().hasPrefix("boundary=") })
        else { return nil }
        let boundary = Array("--" + boundaryParameter.dropFirst("boundary=".count).trimmingCharacters(in: CharacterSet(charactersIn: "\"")))
            .flatMap { Array(String($0).utf8) }
        var parts: [Part] = []
        var sections = Self.split(body, on: boundary)
        guard sections.count >= 2 else { return nil }
        sections.removeFirst()  // preamble
        for section in sections {
            if section.starts(with: Array("--".utf8)) { break }  // closing delimiter
            var bytes = section[...]
            if bytes.starts(with: [13, 10]) { bytes = bytes.dropFirst(2) }
            guard let headerEnd = Self.firstIndex(of: [13, 10, 13, 10], in: bytes) else { return nil }
            let headers = String(decoding: bytes[bytes.startIndex..<headerEnd], as: UTF8.self)
            var content = bytes[(headerEnd + 4)...]
            if content.suffix(2) == [13, 10] { content = content.dropLast(2) }
            guard let disposition = headers.split(separator: "\r\n").first(where: { $0.lowercased().hasPrefix("content-disposition:") }),
                let name = Self.parameter("name", in: String(disposition))
            else { return nil }
            parts.append(Part(name: name, filename: Self.parameter("filename", in: String(disposition)), data: Array(content)))
        }
        self.parts = parts
    }

    func text(_ name: String) -> String? {
        parts.first { $0.name == name }.map { String(decoding: $0.data, as: UTF8.self) }
    }

    func bytes(_ name: String) -> [UInt8]? {
        parts.first { $0.name == name }?.data
    }

    private static func parameter(_ name: String, in header: String) -> String? {
        for piece in header.split(separator: ";").map({ $0.trimmingCharacters(in: .whitespaces) }) where piece.hasPrefix(name + "=") {
            return String(piece.dropFirst(name.count + 1)).trimmingCharacters(in: CharacterSet(charactersIn: "\""))
        }
        return nil
    }

    private static func split(_ body: [UInt8], on delimiter: [UInt8]) -> [[UInt8]] {
        var sections: [[UInt8]] = []
        var start = 0
        var index = 0
        while index + delimiter.count <= body.count {
            if body[index] == delimiter[0], Array(body[index..<index + delimiter.count]) == delimiter {
                sections.append(Array(body[start..<index]))
                index += delimiter.count
                start = index
            } else {
                index += 1
            }
        }
        sections.append(Array(body[start...]))
        return sections
    }

    private static func firstIndex(of needle: [UInt8], in haystack: ArraySlice<UInt8>) -> Int? {
        var index = haystack.startIndex
        while index + needle.count <= haystack.endIndex {
            if Array(haystack[index..<index + needle.count]) == needle { return index }
            index += 1
        }
        return nil
    }
}
