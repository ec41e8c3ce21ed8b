import SparseCacheBase

/// How the body of an HTTP/1.x message is delimited (RFC 9112, section 6.3): what a recipient
/// must read after the head before the connection can carry the next message. A request is
/// `.none`, `.length` or `.chunked` (``HTTPRequestParser``); a response to a GET any of them.
package enum HTTPBodyFraming: Sendable, Equatable {
    /// No body at all: a request without Content-Length or Transfer-Encoding; an interim (1xx)
    /// response, 204 No Content or 304 Not Modified, whatever their header fields say.
    case none
    /// Exactly this many bytes, from `Content-Length`.
    case length(Int64)
    /// A `Transfer-Encoding` whose last coding is `chunked`: decode with ``ChunkedDecoder``.
    case chunked
    /// No length the client can know: the body ends when the origin closes the connection, so
    /// the connection cannot be reused (and a cut connection cannot be told from the end).
    case untilClose
}
