import SparseCacheBase

#if canImport(Glibc)
    import Glibc
#endif

/// A pure function from bytes to an origin's response head: no I/O, no state, so it can be
/// fuzzed. The client-side mirror of ``HTTPRequestParser``.
///
/// Strict where leniency could misframe a body: HTTP/1.0 and 1.1 only, exactly three status
/// digits, no whitespace before a header's colon, no folded lines, no bare CR, no control
/// characters, and no `Content-Length` that is ambiguous or sits beside a `Transfer-Encoding`
/// (see ``HTTPResponseHead/checkedFraming()``). Tolerant where origins in the wild are sloppy
/// and it is safe: bare LF line ends (RFC 9112, section 2.2), a status line without a reason
/// phrase, bytes of 0x80 and above in values (obs-text).
///
/// Anything that can never become valid is refused as soon as it has arrived (a first byte that
/// does not start `HTTP/1.`), so a caller talking to something that is not an HTTP/1.x origin
/// fails at once instead of waiting for a head that will not come.
enum HTTPResponseParser {
    /// Bounds on what an origin can make the parser hold and scan.
    struct Limits: Sendable {
        /// The whole head: status line, header fields and the empty line that ends them.
        var head = 64 * 1024
        /// Header field lines (nginx and Apache send a dozen; 200 leaves room for chatty CDNs).
        var fields = 200

        init() {}
    }

    /// What ``parse(_:limits:)`` found at the start of the bytes.
    enum Result: Sendable, Equatable {
        /// More bytes are needed.
        case incomplete
        /// A complete head; the body (or the next response, after a 1xx) starts at `consumed`.
        case response(HTTPResponseHead, consumed: Int)
        /// Not a response this client accepts; `reason` names the problem, for an error message.
        case invalid(reason: String)
    }

    /// Parses the response head at the start of `bytes`; bytes after it (the body, or the
    /// next response after an interim 1xx) are left alone. Only the first `limits.head` bytes
    /// are looked at, so a caller may pass everything it has received.
    static func parse(_ bytes: some Collection<UInt8>, limits: Limits = Limits()) -> Result {
        // Nothing past the limit can belong to an acceptable head.
        parse(window: Array(bytes.prefix(limits.head))[...], limits: limits)
    }

    /// ``parse(_:limits:)`` of the bytes an origin client has received, looked at where they
    /// are: no copy of the head, nor of the body bytes that came with it.
    static func parse(_ bytes: [UInt8], limits: Limits = Limits()) -> Result {
        parse(window: bytes[..<min(bytes.count, limits.head)], limits: limits)
    }

    /// The parse of `window`, the bytes from the start of the response (its indices start at
    /// 0) up to the head's size limit.
    ///
    /// Complete lines are read in one pass each over the bytes in place, with the checks a
    /// valid line needs; a line that fails one is looked at again by the line checks below,
    /// which name the problem. (Those checks, on slices and byte by byte through closures, made
    /// parsing an origin's head a tenth of a small miss's time.)
    private static func parse(window: ArraySlice<UInt8>, limits: Limits) -> Result {
        window.withUnsafeBufferPointer { bytes in
            var start = 0
            var statusLine: Range<Int>?
            var fields: [HTTPHeaderField] = []
            fields.reserveCapacity(16)
            while let newline = firstIndex(of: lf, in: bytes, from: start) {
                var end = newline
                if end > start, bytes[end - 1] == cr { end -= 1 }
                let line = start..<end
                start = newline + 1
                if let statusLine {
                    if line.isEmpty { return response(statusLine: window[statusLine], fields: fields, consumed: start) }
                    guard let field = plainField(bytes, line) else {
                        if window[line].contains(cr) { return .invalid(reason: "bare CR in the response head") }
                        return .invalid(reason: fieldLineProblem(window[line], complete: true) ?? "malformed header line")
                    }
                    fields.append(field)
                    if fields.count > limits.fields { return .invalid(reason: "more than \(limits.fields) header fields") }
                } else {
                    if window[line].contains(cr) { return .invalid(reason: "bare CR in the response head") }
                    if let problem = statusLineProblem(window[line], complete: true) { return .invalid(reason: problem) }
                    statusLine = line
                }
            }
            // The head has not ended: refuse now what no further bytes could make valid.
            var partial = window[start...]
            if partial.last == cr { partial = partial.dropLast() }  // its LF may be the next byte
            if partial.contains(cr) { return .invalid(reason: "bare CR in the response head") }
            let problem = statusLine == nil ? statusLineProblem(partial, complete: false) : fieldLineProblem(partial, complete: false)
            if let problem { return .invalid(reason: problem) }
            // A window full to the limit without an empty line: the end, if it ever comes, is past it.
            if window.count >= limits.head { return .invalid(reason: "response head longer than \(limits.head) bytes") }
            return .incomplete
        }
    }

    private static func firstIndex(of byte: UInt8, in bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> Int? {
        guard start < bytes.count, let base = bytes.baseAddress,
            let found = memchr(base + start, Int32(byte), bytes.count - start)
        else { return nil }
        return base.distance(to: found.assumingMemoryBound(to: UInt8.self))
    }

    /// The field of a header line (without its line end) that needs no closer look: a name of
    /// token bytes, a colon, a value without control characters (tab aside). Nil for any other
    /// line, which ``fieldLineProblem(_:complete:)`` then explains.
    private static func plainField(_ bytes: UnsafeBufferPointer<UInt8>, _ line: Range<Int>) -> HTTPHeaderField? {
        var colon = line.lowerBound
        while colon < line.upperBound, HTTPSyntax.isTokenByte(bytes[colon]) { colon += 1 }
        guard colon > line.lowerBound, colon < line.upperBound, bytes[colon] == UInt8(ascii: ":") else { return nil }
        for index in (colon + 1)..<line.upperBound where HTTPSyntax.isControl(bytes[index]) { return nil }
        let value = HTTPSyntax.trimmed(bytes, (colon + 1)..<line.upperBound)
        return HTTPHeaderField(
            name: String(decoding: UnsafeBufferPointer(rebasing: bytes[line.lowerBound..<colon]), as: UTF8.self),
            value: String(decoding: UnsafeBufferPointer(rebasing: bytes[value]), as: UTF8.self))
    }

    /// The head from its status line and fields, unless its framing fields are unusable.
    private static func response(statusLine: ArraySlice<UInt8>, fields: [HTTPHeaderField], consumed: Int) -> Result {
        let base = statusLine.startIndex
        let digit = { (offset: Int) in Int(statusLine[base + offset] - UInt8(ascii: "0")) }
        let head = HTTPResponseHead(
            status: digit(9) * 100 + digit(10) * 10 + digit(11), minorVersion: digit(7),
            reason: String(decoding: statusLine.dropFirst(13), as: UTF8.self), headers: HTTPHeaders(fields))
        if let problem = head.checkedFraming().problem { return .invalid(reason: problem) }
        return .response(head, consumed: consumed)
    }

    // MARK: Line checks

    /// What is wrong with a status line (without its line end), or nil. `complete` false: the
    /// line is still arriving, so only problems no further bytes can fix count.
    ///
    /// The grammar is fixed-width up to the reason phrase (`HTTP/1.x SP DIGIT DIGIT DIGIT`), so
    /// a prefix is checked byte by byte against it.
    static func statusLineProblem(_ line: ArraySlice<UInt8>, complete: Bool) -> String? {
        func version() -> String { "not an HTTP/1.0 or HTTP/1.1 response: \(HTTPSyntax.quoted(line))" }
        func code() -> String { "malformed status code (three digits, 100-999): \(HTTPSyntax.quoted(line))" }
        for (offset, byte) in zip(0..., line) {
            switch offset {
            case 0..<7: if byte != versionPrefix[offset] { return version() }
            case 7: if byte != UInt8(ascii: "0") && byte != UInt8(ascii: "1") { return version() }
            case 8: if byte != space { return version() }
            case 9: if !(UInt8(ascii: "1")...UInt8(ascii: "9")).contains(byte) { return code() }
            case 10, 11: if !(UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) { return code() }
            case 12: if byte != space { return code() }
            default: if HTTPSyntax.isControl(byte) { return "control character in the reason phrase: \(HTTPSyntax.quoted(line))" }
            }
        }
        guard complete, line.count < 12 else { return nil }
        return line.count < 8 ? version() : code()
    }

    /// What is wrong with a header field line (without its line end), or nil. Shared with the
    /// trailer section of ``ChunkedDecoder``. `complete` false: the line is still arriving.
    static func fieldLineProblem(_ line: ArraySlice<UInt8>, complete: Bool) -> String? {
        guard let first = line.first else { return nil }
        // A line starting with whitespace continues the previous one (obs-fold, RFC 9112
        // section 5.2): refused rather than unfolded, as most clients now do.
        if first == space || first == tab { return "obsolete line folding (a header line starting with whitespace)" }
        guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else {
            if complete { return "header line without a colon: \(HTTPSyntax.quoted(line))" }
            // The name is still arriving: a byte that is not a token character already spoils it.
            return nameProblem(line)
        }
        let name = line[..<colon]
        if name.isEmpty { return "empty header name" }
        if let problem = nameProblem(name) { return problem }
        if line[(colon + 1)...].contains(where: HTTPSyntax.isControl) {
            return "control character in the value of header \(HTTPSyntax.quoted(name))"
        }
        return nil
    }

    /// Names are RFC 9110 tokens. Whitespace before the colon gets a message of its own: it is
    /// the classic way two parsers disagree on a field's name (RFC 9112, section 5.1).
    private static func nameProblem(_ name: ArraySlice<UInt8>) -> String? {
        if name.allSatisfy(HTTPSyntax.isTokenByte) { return nil }
        var withoutTrailingSpace = name
        while let last = withoutTrailingSpace.last, last == space || last == tab { withoutTrailingSpace = withoutTrailingSpace.dropLast() }
        if !withoutTrailingSpace.isEmpty, withoutTrailingSpace.allSatisfy(HTTPSyntax.isTokenByte) {
            return "whitespace before the colon in header \(HTTPSyntax.quoted(withoutTrailingSpace))"
        }
        return "invalid character in header name \(HTTPSyntax.quoted(name))"
    }

    private static let versionPrefix = Array("HTTP/1.".utf8)
    private static let cr = HTTPSyntax.cr
    private static let lf = HTTPSyntax.lf
    private static let space = HTTPSyntax.space
    private static let tab = HTTPSyntax.tab
}
