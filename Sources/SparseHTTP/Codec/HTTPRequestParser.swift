import Foundation
import SparseCacheBase

/// A pure function from bytes to a request head: no I/O, no state, so it can be fuzzed.
///
/// Strict on purpose: a proxy that guesses at malformed framing invites request smuggling.
/// CRLF line ends only, no whitespace before a header's colon, no folded lines, HTTP/1.0 and 1.1
/// only (a request line without a version is refused as soon as it ends), one `Host` and a valid
/// one, no `%00` in the target's path. A body is framed by `Content-Length` (digits only; repeated values must be
/// equal) or by `Transfer-Encoding: chunked`, never both (RFC 9112, section 6.3: a request with
/// both is refused, as nginx does, since two parsers could disagree on where it ends).
package enum HTTPRequestParser {
    package struct Limits: Sendable {
        package var requestLine = 8 * 1024
        /// The whole head: request line and header fields.
        package var head = 32 * 1024
        package var fields = 100

        package init() {}
    }

    package enum Result: Sendable, Equatable {
        /// More bytes are needed.
        case incomplete
        /// A complete head, how many bytes it took (its body, then the next request, start
        /// there), and how its body is framed: `.none`, `.length` (never 0) or `.chunked`.
        case request(HTTPRequestHead, consumed: Int, body: HTTPBodyFraming)
        /// Not a request this server accepts: answer `status` and close the connection.
        case invalid(status: Int, reason: String)
    }

    package static func parse(_ bytes: some Collection<UInt8>, limits: Limits = Limits()) -> Result {
        // In place when the bytes are contiguous (the server's buffer is an array): a request's
        // head is looked at without copying it.
        if let result = bytes.withContiguousStorageIfAvailable({ parse(UnsafeBufferPointer(rebasing: $0.prefix(limits.head + 4)), limits: limits) }) {
            return result
        }
        return Array(bytes.prefix(limits.head + 4)).withUnsafeBufferPointer { parse($0, limits: limits) }
    }

    private typealias Bytes = Slice<UnsafeBufferPointer<UInt8>>

    private static func parse(_ buffer: UnsafeBufferPointer<UInt8>, limits: Limits) -> Result {
        guard let headEnd = headEnd(buffer) else {
            // The request line is too long once it ends past the limit, or has not ended by then.
            if (lineEnd(buffer[...], from: 0) ?? buffer.count) > limits.requestLine {
                return .invalid(status: 414, reason: "request line longer than \(limits.requestLine) bytes")
            }
            if buffer.count > limits.head {
                return .invalid(status: 431, reason: "request head longer than \(limits.head) bytes")
            }
            // A bare LF or CR already seen can never become valid.
            if let problem = strayLineBreak(buffer[...]) { return .invalid(status: 400, reason: problem) }
            // A request line that has ended is judged at once: one without a version (HTTP/0.9,
            // `GET /`) must not leave its client waiting for an answer to a head that never ends.
            if let end = lineEnd(buffer[...], from: 0), case .invalid(let status, let reason) = splitRequestLine(buffer[0..<end]) {
                return .invalid(status: status, reason: reason)
            }
            return .incomplete
        }
        if headEnd > limits.head { return .invalid(status: 431, reason: "request head longer than \(limits.head) bytes") }
        let head = buffer[0..<headEnd]
        if let problem = strayLineBreak(head) { return .invalid(status: 400, reason: problem) }
        // Lines end with CRLF (no stray CR or LF is left): one line per LF after the first.
        let requestLineEnd = lineEnd(head, from: 0) ?? headEnd
        let requestLine = head[0..<requestLineEnd]
        if requestLine.count > limits.requestLine {
            return .invalid(status: 414, reason: "request line longer than \(limits.requestLine) bytes")
        }
        guard lineFeeds(head) <= limits.fields else {
            return .invalid(status: 431, reason: "more than \(limits.fields) header fields")
        }
        let method: Bytes, target: Bytes, minor: Int
        switch splitRequestLine(requestLine) {
        case .valid(let parts): (method, target, minor) = parts
        case .invalid(let status, let reason): return .invalid(status: status, reason: reason)
        }
        var fields: [HTTPHeaderField] = []
        fields.reserveCapacity(12)
        var lineStart = requestLineEnd + 2
        while lineStart <= headEnd {
            let end = lineEnd(head, from: lineStart) ?? headEnd
            let line = head[lineStart..<end]
            lineStart = end + 2
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")), colon > line.startIndex else {
                return .invalid(
                    status: 400, reason: line.first == 0x20 || line.first == 0x09 ? "folded header line" : "malformed header field")
            }
            let name = line[line.startIndex..<colon]
            guard name.allSatisfy(HTTPSyntax.isTokenByte) else { return .invalid(status: 400, reason: "malformed header name") }
            let value = line[(colon + 1)...].trimmingHTTPWhitespace()
            guard value.allSatisfy({ $0 == 0x09 || ($0 >= 0x20 && $0 != 0x7F) }) else {
                return .invalid(status: 400, reason: "control character in header '\(string(name))'")
            }
            fields.append(HTTPHeaderField(name: string(name), value: string(value)))
        }
        let request = HTTPRequestHead(method: Self.method(method), target: string(target), minorVersion: minor, headers: HTTPHeaders(fields))
        if minor == 1, request.header("host") == nil { return .invalid(status: 400, reason: "HTTP/1.1 request without Host") }
        // RFC 9112, section 3.2: more than one Host is a 400.
        if request.headers.lazy.filter({ $0.hasName("host") }).count > 1 { return .invalid(status: 400, reason: "more than one Host field") }
        // RFC 9112, section 3.2: an invalid Host is a 400 too. Its value is `uri-host [":" port]`
        // (RFC 9110 section 7.2, RFC 3986 section 3.2.2): a path, a user or a space in it is not.
        if let host = request.header("host"), !isValidHost(host.utf8) {
            return .invalid(status: 400, reason: "invalid Host \(HTTPSyntax.quoted(host.utf8)): not host[:port]")
        }
        switch bodyFraming(request) {
        case .success(let framing): return .request(request, consumed: headEnd + 4, body: framing)
        case .failure(let refusal): return .invalid(status: refusal.status, reason: refusal.reason)
        }
    }

    private enum RequestLine {
        case valid((method: Bytes, target: Bytes, minor: Int))
        case invalid(status: Int, reason: String)
    }

    /// The method, target and version of a request line (RFC 9112, section 3), or why it is
    /// refused.
    private static func splitRequestLine(_ requestLine: Bytes) -> RequestLine {
        // Exactly two spaces: method, target, version. One space is an HTTP/0.9 request
        // (`GET /`, RFC 9112 section 2.3 leaves it to the server; nginx answers 400 too).
        guard let firstSpace = requestLine.firstIndex(of: 0x20) else { return .invalid(status: 400, reason: "malformed request line") }
        guard let secondSpace = requestLine[(firstSpace + 1)...].firstIndex(of: 0x20) else {
            return .invalid(status: 400, reason: "request line without an HTTP version (HTTP/0.9 is not supported)")
        }
        guard !requestLine[(secondSpace + 1)...].contains(0x20) else { return .invalid(status: 400, reason: "malformed request line") }
        let method = requestLine[..<firstSpace], target = requestLine[(firstSpace + 1)..<secondSpace]
        let version = requestLine[(secondSpace + 1)...]
        guard !method.isEmpty, method.allSatisfy(HTTPSyntax.isTokenByte) else { return .invalid(status: 400, reason: "malformed method") }
        guard !target.isEmpty, target.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            return .invalid(status: 400, reason: "malformed request target")
        }
        // CONNECT names an authority (`host:port`, RFC 9112, section 3.2.3): accepted to be
        // refused by the handler with a reason rather than as malformed.
        let authority = method.elementsEqual("CONNECT".utf8) && target.contains(UInt8(ascii: ":")) && !target.contains(UInt8(ascii: "/"))
        guard target.first == UInt8(ascii: "/") || (target.count == 1 && target.first == UInt8(ascii: "*")) || isAbsoluteHTTP(target)
            || authority
        else {
            return .invalid(status: 400, reason: "request target must be a path or an http:// URL")
        }
        // A path whose percent-decoding holds NUL ends early for any C string the origin
        // makes of it (a file name): refused, as nginx does. The query is not decoded, as
        // nginx does not (trackers and forms carry binary data there).
        if containsEncodedNUL(target) { return .invalid(status: 400, reason: "percent-encoded NUL (%00) in the request target") }
        let minor: Int
        if version.elementsEqual("HTTP/1.1".utf8) {
            minor = 1
        } else if version.elementsEqual("HTTP/1.0".utf8) {
            minor = 0
        } else {
            let text = string(version)
            if text.hasPrefix("HTTP/"), text.count == 8 {
                return .invalid(status: 505, reason: "HTTP version \(text.dropFirst(5)) not supported")
            }
            return .invalid(status: 400, reason: "malformed HTTP version")
        }
        return .valid((method, target, minor))
    }

    /// The method of a request line: the byte-for-byte (case-sensitive, RFC 9110 section 9.1)
    /// match among the common ones, whose tokens are constants; any other token as it is.
    private static func method(_ bytes: Bytes) -> HTTPMethod {
        if bytes.elementsEqual("GET".utf8) { return .get }
        if bytes.elementsEqual("HEAD".utf8) { return .head }
        if bytes.elementsEqual("POST".utf8) { return .post }
        return HTTPMethod(rawValue: string(bytes))
    }

    private static func string(_ bytes: Bytes) -> String {
        String(decoding: UnsafeBufferPointer(rebasing: bytes), as: UTF8.self)
    }

    /// Whether the part of `target` before its query holds `%00`.
    private static func containsEncodedNUL(_ target: Bytes) -> Bool {
        let base = target.base
        var index = target.startIndex
        while index + 2 < target.endIndex {
            let byte = base[index]
            if byte == UInt8(ascii: "?") { return false }
            if byte == UInt8(ascii: "%"), base[index + 1] == UInt8(ascii: "0"), base[index + 2] == UInt8(ascii: "0") { return true }
            index += 1
        }
        return false
    }

    private struct Refusal: Error {
        var status: Int
        var reason: String
    }

    /// How a request's body is delimited (RFC 9112, section 6.3), or why it cannot be told.
    private static func bodyFraming(_ request: HTTPRequestHead) -> Swift.Result<HTTPBodyFraming, Refusal> {
        let headers = request.headers
        if headers.contains("transfer-encoding") {
            // RFC 9112, section 6.1: a 1.0 recipient cannot know chunked; RFC 9112 6.3 with nginx:
            // both framings at once are the classic smuggling vector, so neither is trusted.
            if request.minorVersion == 0 {
                return .failure(Refusal(status: 400, reason: "Transfer-Encoding in an HTTP/1.0 request"))
            }
            if headers.contains("content-length") {
                return .failure(Refusal(status: 400, reason: "both Transfer-Encoding and Content-Length"))
            }
            let codings = headers.listElements("transfer-encoding").map { $0.lowercased() }
            // Section 6.3: chunked must be the final coding, else the length cannot be known.
            guard codings.last == "chunked" else {
                return .failure(Refusal(status: 400, reason: "Transfer-Encoding without chunked as the final coding"))
            }
            // Section 7: chunked at most once; section 6.1: a coding we do not know is a 501.
            if let other = codings.dropLast().first(where: { $0 != "chunked" }) {
                return .failure(Refusal(status: 501, reason: "transfer coding '\(other)' not implemented"))
            }
            if codings.count > 1 { return .failure(Refusal(status: 400, reason: "chunked applied more than once")) }
            return .success(HTTPBodyFraming.chunked)
        }
        let values = headers.values("content-length")
        guard !values.isEmpty else { return .success(HTTPBodyFraming.none) }
        // RFC 9110, section 8.6: a list of identical values may be taken as one; anything else,
        // or anything but digits, cannot be trusted.
        var length: Int64?
        for element in values.flatMap({ $0.split(separator: ",", omittingEmptySubsequences: false) }) {
            let digits = element.utf8.trimmingHTTPWhitespace()
            guard !digits.isEmpty, digits.count <= 18, digits.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
                let value = Int64(String(decoding: digits, as: UTF8.self))
            else {
                return .failure(Refusal(status: 400, reason: "malformed Content-Length \(HTTPSyntax.quoted(element.utf8))"))
            }
            if let length, length != value { return .failure(Refusal(status: 400, reason: "Content-Length values differ")) }
            length = value
        }
        return .success(length.map { $0 == 0 ? HTTPBodyFraming.none : .length($0) } ?? HTTPBodyFraming.none)
    }

    /// Whether `value` is a Host field value (RFC 9110 section 7.2): empty, or `host [":" port]`
    /// with the host an IP literal in brackets or a registered name (RFC 3986 section 3.2.2:
    /// unreserved characters, sub-delims and percent-encodings; an IPv4 address is one too) and
    /// the port digits.
    package static func isValidHost(_ value: String.UTF8View) -> Bool {
        var bytes = value[...]
        if bytes.first == UInt8(ascii: "[") {
            // IPv6address or IPvFuture: hex digits, ':' and '.', or the IPvFuture characters.
            guard let close = bytes.firstIndex(of: UInt8(ascii: "]")) else { return false }
            let literal = bytes[bytes.index(after: bytes.startIndex)..<close]
            guard !literal.isEmpty, literal.allSatisfy({ isUnreserved($0) || isSubDelimiter($0) || $0 == UInt8(ascii: ":") }) else {
                return false
            }
            bytes = bytes[bytes.index(after: close)...]
        } else {
            var index = bytes.startIndex
            while index != bytes.endIndex, bytes[index] != UInt8(ascii: ":") {
                let byte = bytes[index]
                if byte == UInt8(ascii: "%") {
                    // A percent-encoding: two hex digits.
                    let digits = bytes[bytes.index(after: index)...].prefix(2)
                    guard digits.count == 2, digits.allSatisfy(isHexDigit) else { return false }
                    index = digits.endIndex
                    continue
                }
                guard isUnreserved(byte) || isSubDelimiter(byte) else { return false }
                index = bytes.index(after: index)
            }
            bytes = bytes[index...]
        }
        guard let colon = bytes.first else { return true }
        return colon == UInt8(ascii: ":") && bytes.dropFirst().allSatisfy { $0 >= 0x30 && $0 <= 0x39 }
    }

    /// RFC 3986 unreserved: letters, digits, `-`, `.`, `_`, `~`.
    private static func isUnreserved(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
            true
        default: false
        }
    }

    private static func isHexDigit(_ byte: UInt8) -> Bool {
        (byte >= 0x30 && byte <= 0x39) || ((byte | 0x20) >= 0x61 && (byte | 0x20) <= 0x66)
    }

    /// RFC 3986 sub-delims: `!$&'()*+,;=`.
    private static func isSubDelimiter(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "!"), UInt8(ascii: "$"), UInt8(ascii: "&"), UInt8(ascii: "'"), UInt8(ascii: "("), UInt8(ascii: ")"),
            UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: ","), UInt8(ascii: ";"), UInt8(ascii: "="):
            true
        default: false
        }
    }

    /// An absolute-form target (`http://host/path`), as clients send to a proxy they are
    /// configured to use: the scheme, case-insensitive, and a non-empty authority.
    package static func isAbsoluteHTTP(_ target: some Collection<UInt8>) -> Bool {
        // Without allocating: every request's target is asked.
        let scheme: StaticString = "http://"
        var index = target.startIndex
        for position in 0..<scheme.utf8CodeUnitCount {
            guard index != target.endIndex else { return false }
            let byte = target[index]
            guard (byte >= 0x41 && byte <= 0x5A ? byte | 0x20 : byte) == scheme.utf8Start[position] else { return false }
            target.formIndex(after: &index)
        }
        return index != target.endIndex && target[index] != UInt8(ascii: "/")
    }

    /// Where the first CRLF CRLF starts: the end of the head.
    private static func headEnd(_ bytes: UnsafeBufferPointer<UInt8>) -> Int? {
        var index = 0
        while index + 3 < bytes.count {
            if bytes[index] == 13, bytes[index + 1] == 10, bytes[index + 2] == 13, bytes[index + 3] == 10 { return index }
            index += 1
        }
        return nil
    }

    /// Where the first CRLF at or after `start` starts.
    private static func lineEnd(_ bytes: Bytes, from start: Int) -> Int? {
        // On the buffer itself (a slice shares its indices): the byte loops here ran through
        // the slice's own index type, as calls, once per byte of every request head.
        let base = bytes.base
        var index = start
        while index + 1 < bytes.endIndex {
            if base[index] == 13, base[index + 1] == 10 { return index }
            index += 1
        }
        return nil
    }

    /// A CR not followed by LF, or an LF not preceded by CR.
    private static func strayLineBreak(_ bytes: Bytes) -> String? {
        let base = bytes.base
        let start = bytes.startIndex, end = bytes.endIndex
        var index = start
        while index < end {
            let byte = base[index]
            if byte == 13, index + 1 < end, base[index + 1] != 10 { return "bare CR" }
            if byte == 10, index == start || base[index - 1] != 13 { return "bare LF" }
            index += 1
        }
        return nil
    }

    /// How many LF bytes `bytes` holds (its lines, once no stray line break is left).
    private static func lineFeeds(_ bytes: Bytes) -> Int {
        let base = bytes.base
        var count = 0
        for index in bytes.startIndex..<bytes.endIndex where base[index] == 10 { count += 1 }
        return count
    }
}
