/// Encodes a body as `Transfer-Encoding: chunked` (RFC 9112, section 7.1): the sending side of
/// ``ChunkedDecoder``, for a body whose length is not known when its head goes out (a request
/// body streamed to an origin, a response streamed to a client as it arrives).
///
/// Stateless: each call frames the bytes it is given, so a writer sends `chunk(_:)` for every
/// piece and `end()` once. An empty piece is framed as nothing, never as the zero-size chunk that
/// would end the body early.
package enum ChunkedEncoder {
    /// One chunk: the size in hexadecimal, CRLF, the bytes, CRLF. Empty for empty `bytes`.
    package static func chunk(_ bytes: some Collection<UInt8>) -> [UInt8] {
        guard !bytes.isEmpty else { return [] }
        var framed = Array(String(bytes.count, radix: 16).utf8)
        framed.reserveCapacity(framed.count + bytes.count + 4)
        framed += HTTPSyntax.crlf
        framed += bytes
        framed += HTTPSyntax.crlf
        return framed
    }

    /// The last chunk and the trailer section that ends the body: `0` CRLF, any trailer fields,
    /// CRLF. Trailer values are sanitized like any field value.
    package static func end(trailers: HTTPHeaders = []) -> [UInt8] {
        var text = "0\r\n"
        for field in trailers { text += "\(field.name): \(HTTPSyntax.sanitizedFieldValue(field.value))\r\n" }
        text += "\r\n"
        return Array(text.utf8)
    }
}
