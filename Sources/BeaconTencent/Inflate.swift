import CZlib

/// zlib's `uncompress` for a UserSig (Tencent compresses its JSON document with zlib): the system library rather than an
/// inflater of our own. At most `limit` bytes come out; more, or anything that is not one whole zlib stream, is nil.
enum Inflate {
    static func zlib(_ compressed: [UInt8], limit: Int) -> [UInt8]? {
        guard !compressed.isEmpty else { return nil }
        var stream = z_stream()
        guard inflateInit_(&stream, ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size)) == Z_OK else { return nil }
        defer { inflateEnd(&stream) }
        var output = [UInt8](repeating: 0, count: limit + 1)
        var input = compressed
        let status = input.withUnsafeMutableBufferPointer { input in
            output.withUnsafeMutableBufferPointer { output in
                stream.next_in = input.baseAddress
                stream.avail_in = uInt(input.count)
                stream.next_out = output.baseAddress
                stream.avail_out = uInt(output.count)
                return inflate(&stream, Z_FINISH)
            }
        }
        // Z_STREAM_END: the whole stream, within the room given (one byte more than `limit`, so that a stream of exactly
        // `limit + 1` bytes or more is refused rather than cut). Trailing bytes after the stream are refused too.
        guard status == Z_STREAM_END, stream.avail_in == 0, Int(stream.total_out) <= limit else { return nil }
        return Array(output[..<Int(stream.total_out)])
    }
}
