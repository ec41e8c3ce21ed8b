/// A response head written field by field into a buffer the caller owns, with no allocation:
/// for answers whose head is mostly known ahead (fields encoded once with
/// ``HTTPHeadEncoding/encodeFields(_:)``), written per request in a few copies. The bytes are
/// those ``HTTPResponseHead/encoded()`` and ``HTTPResponseWriter`` would send for the same
/// fields in the same order.
package struct HeadWriter {
    private let buffer: UnsafeMutableRawBufferPointer
    /// Bytes written so far.
    package private(set) var count = 0

    /// Room a head needs beyond its pre-encoded fields: the status line, a few numeric and
    /// short fields, `Date`, and what ``finish(contentLength:closes:addDate:addServer:)`` adds.
    package static let variableCapacity = 512

    /// Writes into `buffer`, which must hold the whole head (a longer one stops the process).
    package init(_ buffer: UnsafeMutableRawBufferPointer) {
        self.buffer = buffer
    }

    /// `HTTP/1.1 status reason`: the standard reason phrase, as a head without one is sent.
    package mutating func statusLine(_ status: Int) {
        append("HTTP/1.1 ")
        append(Int64(status))
        append(" ")
        var phrase = HTTPStatus(status).reasonPhrase
        phrase.withUTF8 { append(UnsafeRawBufferPointer($0)) }
        append("\r\n")
    }

    /// Field lines encoded by ``HTTPHeadEncoding/encodeFields(_:)``.
    package mutating func encodedFields(_ fields: [UInt8]) {
        fields.withUnsafeBytes { append($0) }
    }

    /// `name: prefix` and `number` in decimal.
    package mutating func field(_ name: StaticString, _ prefix: StaticString = "", number: Int64) {
        append(name)
        append(": ")
        append(prefix)
        append(number)
        append("\r\n")
    }

    /// `Content-Range: bytes first-last/length` for `range` of `length` bytes.
    package mutating func contentRange(_ range: Range<Int64>, of length: Int64) {
        append("Content-Range: bytes ")
        append(range.lowerBound)
        append("-")
        append(range.upperBound - 1)
        append("/")
        append(length)
        append("\r\n")
    }

    /// What ``HTTPResponseWriter`` adds after a response's own fields (see
    /// ``HTTPResponseWriter/encodedHead(status:headers:contentLength:chunked:closes:)``):
    /// `Date` and `Server` when the fields lack them, `Content-Length`, `Connection`, and the
    /// empty line that ends the head.
    package mutating func finish(contentLength: Int64, closes: Bool, addDate: Bool, addServer: Bool) {
        if addDate {
            append("Date: ")
            var date = HTTPDate.now()
            date.withUTF8 { append(UnsafeRawBufferPointer($0)) }
            append("\r\n")
        }
        if addServer { append("Server: sparsecache\r\n") }
        field("Content-Length", number: contentLength)
        append(closes ? "Connection: close\r\n\r\n" : "Connection: keep-alive\r\n\r\n")
    }

    private mutating func append(_ bytes: UnsafeRawBufferPointer) {
        precondition(count + bytes.count <= buffer.count, "a response head past its buffer")
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return }
        (buffer.baseAddress! + count).copyMemory(from: base, byteCount: bytes.count)
        count += bytes.count
    }

    private mutating func append(_ text: StaticString) {
        append(UnsafeRawBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    /// A decimal number, as `String(value)` writes it.
    private mutating func append(_ value: Int64) {
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)
        withUnsafeMutableBytes(of: &digits) { scratch in
            var magnitude = value.magnitude
            var position = scratch.count
            repeat {
                position -= 1
                scratch[position] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
            } while magnitude > 0
            if value < 0 {
                position -= 1
                scratch[position] = UInt8(ascii: "-")
            }
            append(UnsafeRawBufferPointer(rebasing: scratch[position...]))
        }
    }
}
