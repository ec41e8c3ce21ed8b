/// The byte-level grammar HTTP/1.1 messages share (RFC 9110, section 5; RFC 9112, section 5):
/// one definition for the request parser, the response parser, the chunked codec and the
/// writers, so client and server can never disagree on what a token or a field value is.
package enum HTTPSyntax {
    /// The `Host` field value of a URL's host and port (RFC 9110, section 7.2): an IPv6 address
    /// in brackets, the port left out when it is the default 80 or not given.
    package static func hostField(_ host: String, port: Int?) -> String {
        // The colon looked for among the bytes: Foundation's substring search showed in a miss.
        let bracketed = host.utf8.contains(UInt8(ascii: ":")) && !host.hasPrefix("[") ? "[\(host)]" : host
        return bracketed + (port.map { $0 == 80 ? "" : ":\($0)" } ?? "")
    }

    /// RFC 9110 token characters (section 5.6.2): method names, header names, codings.
    ///
    /// One switch: every byte of every header name goes through here.
    @inline(__always)
    package static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "!"), UInt8(ascii: "#")...UInt8(ascii: "'"), UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "-"),
            UInt8(ascii: "."), UInt8(ascii: "^")...UInt8(ascii: "`"), UInt8(ascii: "|"), UInt8(ascii: "~"):
            true
        default: false
        }
    }

    /// Whether `bytes[range]`, with ASCII letters in lower case, are `lowercase` (written in
    /// lower case): a field name or a media type compared where it lies, without a lower-case
    /// copy.
    package static func equalsIgnoringCase(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>, _ lowercase: StaticString) -> Bool {
        guard range.count == lowercase.utf8CodeUnitCount else { return false }
        let other = lowercase.utf8Start
        var offset = 0
        while offset < range.count {
            let byte = bytes[range.lowerBound + offset]
            if (byte >= 0x41 && byte <= 0x5A ? byte | 0x20 : byte) != other[offset] { return false }
            offset += 1
        }
        return true
    }

    /// Control characters other than HTAB, and DEL: never part of a field value, a reason
    /// phrase or a chunk extension.
    package static func isControl(_ byte: UInt8) -> Bool { (byte < 0x20 && byte != tab) || byte == 0x7F }

    /// A field value as it may be sent: control characters dropped, so a value that came from an
    /// origin or a stored index can never end the line and start another field.
    package static func sanitizedFieldValue(_ value: String) -> String {
        guard value.utf8.contains(where: isControl) else { return value }
        return String(decoding: value.utf8.filter { !isControl($0) }, as: UTF8.self)
    }

    /// Bytes as a short quoted string for an error message: printable ASCII as is, anything
    /// else escaped (a peer's garbage can hold any byte), cut at about 40 characters.
    package static func quoted(_ bytes: some Collection<UInt8>) -> String {
        var text = ""
        for byte in bytes {
            let piece: String
            switch byte {
            case 0x0D: piece = "\\r"
            case 0x0A: piece = "\\n"
            case 0x09: piece = "\\t"
            case UInt8(ascii: "\""), UInt8(ascii: "\\"): piece = "\\" + String(UnicodeScalar(byte))
            case 0x20..<0x7F: piece = String(UnicodeScalar(byte))
            default: piece = "\\x" + (byte < 0x10 ? "0" : "") + String(byte, radix: 16)
            }
            if text.utf8.count + piece.utf8.count > 40 { return "\"\(text)\"..." }
            text += piece
        }
        return "\"\(text)\""
    }

    /// The non-empty elements of comma-separated list values, trimmed (RFC 9110, section 5.6.1).
    package static func listElements(_ values: [String]) -> [String] {
        // Straight into one array, from each value's bytes in place (Connection, Vary and
        // Cache-Control are read for every proxied answer; the generic split and trim over a
        // string's UTF-8 view cost a microsecond for one `Connection: keep-alive`).
        var elements: [String] = []
        for value in values {
            var value = value
            value.withUTF8 { bytes in
                _ = forEachListElement(in: bytes) { element in
                    elements.append(String(decoding: UnsafeBufferPointer(rebasing: bytes[element]), as: UTF8.self))
                    return false
                }
            }
        }
        return elements
    }

    /// Calls `body` with where each element of a comma-separated list lies in `bytes`, without
    /// its surrounding whitespace; empty elements are skipped unless `includingEmpty`. Stops
    /// when `body` returns true, and returns whether it did.
    package static func forEachListElement(
        in bytes: UnsafeBufferPointer<UInt8>, includingEmpty: Bool = false, _ body: (Range<Int>) -> Bool
    ) -> Bool {
        var start = 0
        while true {
            var end = start
            while end < bytes.count, bytes[end] != UInt8(ascii: ",") { end += 1 }
            let element = trimmed(bytes, start..<end)
            if includingEmpty || !element.isEmpty, body(element) { return true }
            if end >= bytes.count { return false }
            start = end + 1
        }
    }

    /// `range` of `bytes` without its leading and trailing spaces and tabs (HTTP's optional
    /// whitespace, RFC 9110 section 5.6.3).
    package static func trimmed(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> Range<Int> {
        var first = range.lowerBound, last = range.upperBound
        while first < last, bytes[first] == space || bytes[first] == tab { first += 1 }
        while last > first, bytes[last - 1] == space || bytes[last - 1] == tab { last -= 1 }
        return first..<last
    }

    package static let cr: UInt8 = 0x0D
    package static let lf: UInt8 = 0x0A
    package static let space: UInt8 = 0x20
    package static let tab: UInt8 = 0x09
    package static let crlf: [UInt8] = [cr, lf]
}

extension BidirectionalCollection where Element == UInt8, SubSequence == Self {
    /// Without leading and trailing spaces and tabs: HTTP's optional whitespace around field
    /// values and list elements (RFC 9110, section 5.6.3).
    package func trimmingHTTPWhitespace() -> Self {
        var bytes = self
        while let first = bytes.first, first == HTTPSyntax.space || first == HTTPSyntax.tab { bytes = bytes.dropFirst() }
        while let last = bytes.last, last == HTTPSyntax.space || last == HTTPSyntax.tab { bytes = bytes.dropLast() }
        return bytes
    }
}
