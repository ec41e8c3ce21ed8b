import SparseCacheBase

/// Decodes a `Transfer-Encoding: chunked` body (RFC 9112, section 7.1) as it arrives, without
/// copying body bytes: each ``feed(_:)`` answers where the body bytes are in the buffer it was
/// given, so a caller can write them straight from its receive buffer.
///
/// Only the lines between chunks (sizes, trailers) are kept across calls, and they are
/// bounded by ``Limits``: an origin cannot make the decoder hold more than that, whatever it
/// sends. Strict like ``HTTPResponseParser``: a malformed size or a missing line end after a
/// chunk's data would shift every later chunk boundary, so either is a failure rather than a
/// guess. Tolerant of bare LF line ends, as the head parser is.
struct ChunkedDecoder {
    /// Why the body cannot be decoded; `reason` names the problem, for an error message.
    struct Failure: Error, Equatable {
        var reason: String
    }

    /// Bounds on the lines the decoder keeps between calls.
    struct Limits: Sendable {
        /// A chunk-size line with its extensions and its line end.
        var line = 4096
        /// The trailer section: every trailer line with its line end, and the empty line that ends it.
        var trailers = 16 * 1024

        init() {}
    }

    /// Where the decoder is in the chunked grammar.
    private enum State {
        /// Reading a chunk-size line (the part that has arrived is in `line`).
        case size
        /// Inside a chunk's data, with this many bytes left.
        case data(remaining: Int64)
        /// After a chunk's data, before its line end; `sawCR` once the CR of a CRLF has arrived.
        case dataEnd(sawCR: Bool)
        /// After the last chunk, reading trailer lines; `bytes` counts the completed ones.
        case trailers(bytes: Int)
        case finished
    }

    private let limits: Limits
    private var state = State.size
    /// The current size or trailer line as far as it has arrived (its LF excluded).
    private var line: [UInt8] = []
    /// The first failure: every later call repeats it, since the stream position is lost.
    private var failure: Failure?

    init(limits: Limits = Limits()) {
        self.limits = limits
    }

    /// Whether the last chunk and the trailer section have been read: the body is complete.
    var isFinished: Bool {
        if case .finished = state { return true }
        return false
    }

    /// Decodes as much of `input` as it can. Returns the body bytes as ranges of `input`'s
    /// indices (0-based offsets into the buffer), in order, and how many bytes of `input` were
    /// used: all of them until the body finishes; in the call that finishes it, `consumed` stops
    /// right after the trailer section's final line end (anything after belongs to the next
    /// response). Lines split across calls are kept internally, so every call may be given only
    /// the new bytes. After the body has finished, returns no body and consumed 0.
    ///
    /// - Throws: ``Failure`` naming the problem (a malformed or oversized chunk-size line, a
    ///   size past Int64, a missing line end after a chunk's data, a malformed or oversized
    ///   trailer section), then the same failure on every later call.
    mutating func feed(_ input: UnsafeRawBufferPointer) throws(Failure) -> (body: [Range<Int>], consumed: Int) {
        if let failure { throw failure }
        do {
            return try decode(input)
        } catch {
            failure = error
            throw error
        }
    }

    private mutating func decode(_ input: UnsafeRawBufferPointer) throws(Failure) -> (body: [Range<Int>], consumed: Int) {
        var body: [Range<Int>] = []
        var index = 0
        while index < input.count {
            switch state {
            case .size:
                guard try takeLine(input, at: &index, room: limits.line, what: "chunk size line", limit: limits.line) else { continue }
                let size = try Self.chunkSize(line)
                line.removeAll(keepingCapacity: true)
                state = size == 0 ? .trailers(bytes: 0) : .data(remaining: size)
            case .data(let remaining):
                let count = Int(min(remaining, Int64(input.count - index)))
                body.append(index..<(index + count))
                index += count
                state = remaining == Int64(count) ? .dataEnd(sawCR: false) : .data(remaining: remaining - Int64(count))
            case .dataEnd(let sawCR):
                let byte = input[index]
                if byte == Self.lf {
                    state = .size
                } else if byte == Self.cr, !sawCR {
                    state = .dataEnd(sawCR: true)
                } else {
                    // The chunk is longer than its size said, or the size was wrong: either
                    // way every later boundary would be misplaced.
                    throw Failure(reason: "no line end after a chunk's data (found \(HTTPSyntax.quoted([byte])))")
                }
                index += 1
            case .trailers(let bytes):
                let start = index
                let pending = line.count
                guard try takeLine(input, at: &index, room: limits.trailers - bytes, what: "trailer section", limit: limits.trailers) else {
                    continue
                }
                if line.isEmpty {
                    line.removeAll(keepingCapacity: true)
                    state = .finished
                    return (body, index)
                }
                // Trailers are ignored, but one that is not a field line means the framing is off.
                if let problem = HTTPResponseParser.fieldLineProblem(line[...], complete: true) {
                    throw Failure(reason: "malformed trailer field: \(problem)")
                }
                line.removeAll(keepingCapacity: true)
                state = .trailers(bytes: bytes + pending + (index - start))
            case .finished:
                return (body, index)
            }
        }
        return (body, index)
    }

    /// Gathers the current line into `line` from `input` at `index`, up to and including its LF.
    /// Returns true once the line has ended, with `line` holding it without its line end.
    ///
    /// - Parameters:
    ///   - room: the most the line may take with its line end. Only the bytes that could still
    ///     fit are searched and copied, so a flood without a line end costs nothing.
    ///   - what: the line's part of the grammar, and `limit` the configured limit on it, for
    ///     failure messages.
    private mutating func takeLine(
        _ input: UnsafeRawBufferPointer, at index: inout Int, room: Int, what: String, limit: Int
    ) throws(Failure) -> Bool {
        let searchEnd = min(input.count, index + max(0, room - line.count))
        var newline = index
        while newline < searchEnd, input[newline] != Self.lf { newline += 1 }
        guard newline < searchEnd else {
            // No LF where one would fit: too long if more bytes follow, or if even an LF arriving
            // next would take the line past its room.
            guard searchEnd == input.count, line.count + (searchEnd - index) < room else {
                throw Failure(reason: "\(what) longer than \(limit) bytes")
            }
            line.append(contentsOf: UnsafeRawBufferPointer(rebasing: input[index..<searchEnd]))
            index = searchEnd
            return false
        }
        line.append(contentsOf: UnsafeRawBufferPointer(rebasing: input[index..<newline]))
        index = newline + 1
        if line.last == Self.cr { line.removeLast() }
        if line.contains(Self.cr) { throw Failure(reason: "bare CR in the \(what)") }
        return true
    }

    /// The size a chunk-size line declares: 1 to 16 hex digits, then optional whitespace and
    /// extensions after `;` (ignored, but without control characters).
    private static func chunkSize(_ line: [UInt8]) throws(Failure) -> Int64 {
        var size: UInt64 = 0
        var digits = 0
        while digits < line.count, let value = hexValue(line[digits]) {
            digits += 1
            guard digits <= 16 else { throw Failure(reason: "chunk size of more than 16 hex digits: \(HTTPSyntax.quoted(line))") }
            size = size << 4 | UInt64(value)
        }
        guard digits > 0 else { throw Failure(reason: "malformed chunk size line: \(HTTPSyntax.quoted(line))") }
        guard size <= UInt64(Int64.max) else {
            throw Failure(reason: "chunk size overflows a 64-bit length: \(HTTPSyntax.quoted(line))")
        }
        // RFC 9112 allows whitespace (BWS) before the `;` of an extension; some servers also pad
        // the size itself with trailing spaces.
        var rest = line[digits...]
        while let first = rest.first, first == 0x20 || first == 0x09 { rest = rest.dropFirst() }
        if let first = rest.first {
            guard first == UInt8(ascii: ";") else { throw Failure(reason: "malformed chunk size line: \(HTTPSyntax.quoted(line))") }
            guard !rest.contains(where: HTTPSyntax.isControl) else {
                throw Failure(reason: "control character in a chunk extension: \(HTTPSyntax.quoted(line))")
            }
        }
        return Int64(size)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    private static let cr: UInt8 = 0x0D
    private static let lf: UInt8 = 0x0A
}
