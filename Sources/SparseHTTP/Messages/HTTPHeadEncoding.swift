/// Message heads as bytes on the wire (RFC 9112, sections 3, 4 and 5): the start line, one line
/// per field, and the empty line. The one writer both sides use: the server's responses and the
/// origin client's requests. Field values are sanitized (``HTTPSyntax/sanitizedFieldValue(_:)``)
/// so no value can inject a line.
extension HTTPRequestHead {
    /// The head as sent: `METHOD target HTTP/1.x`, the fields, an empty line.
    package func encoded() -> [UInt8] {
        HTTPHeadEncoding.encode(startLine: "\(method) \(target) HTTP/1.\(minorVersion)", headers: headers)
    }
}

extension HTTPResponseHead {
    /// The head as sent: `HTTP/1.x status reason`, the fields, an empty line. An empty reason
    /// phrase is sent as the standard one for the status.
    package func encoded() -> [UInt8] {
        let phrase = reason.isEmpty ? HTTPStatus(status).reasonPhrase : HTTPSyntax.sanitizedFieldValue(reason)
        return HTTPHeadEncoding.encode(startLine: "HTTP/1.\(minorVersion) \(status) \(phrase)", headers: headers)
    }
}

package enum HTTPHeadEncoding {
    static func encode(startLine: String, headers: HTTPHeaders) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(startLine.utf8.count + headers.reduce(4) { $0 + $1.name.utf8.count + $1.value.utf8.count + 4 })
        append(startLine, to: &bytes)
        bytes.append(13)
        bytes.append(10)
        for field in headers { appendField(name: field.name, value: field.value, to: &bytes) }
        bytes.append(13)
        bytes.append(10)
        return bytes
    }

    /// Field lines as ``encode(startLine:headers:)`` writes them, for a ``HeadWriter``.
    package static func encodeFields(_ fields: [(String, String)]) -> [UInt8] {
        var bytes: [UInt8] = []
        for (name, value) in fields { appendField(name: name, value: value, to: &bytes) }
        return bytes
    }

    /// One field line as ``encode(startLine:headers:)`` writes it: `name: value` and CRLF.
    static func appendField(name: String, value: String, to bytes: inout [UInt8]) {
        append(name, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
        bytes.append(UInt8(ascii: " "))
        appendValue(value, to: &bytes)
        bytes.append(13)
        bytes.append(10)
    }

    /// A string's bytes copied as one block (every head of every answer is written here).
    private static func append(_ text: String, to bytes: inout [UInt8]) {
        var text = text
        text.withUTF8 { bytes.append(contentsOf: $0) }
    }

    /// A field value without its control characters, if it has any: a value that came from an
    /// origin or a stored index can never end the line and start another field.
    private static func appendValue(_ value: String, to bytes: inout [UInt8]) {
        var value = value
        value.withUTF8 { utf8 in
            if !utf8.contains(where: HTTPSyntax.isControl) {
                bytes.append(contentsOf: utf8)
            } else {
                for byte in utf8 where !HTTPSyntax.isControl(byte) { bytes.append(byte) }
            }
        }
    }
}
