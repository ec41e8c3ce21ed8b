@_spi(Locking) import SparseCacheBase

/// The body of one request, read from the client's connection as the handler asks for it:
/// ``HTTPServer`` hands one to its handler with every request (empty for a request without a
/// body).
///
/// Pulled, never pushed: bytes are received only when ``next()`` is called, so a handler that
/// forwards them to a slow origin holds back the client through TCP instead of filling memory.
/// Bytes that arrived with the head come first; a chunked body is decoded (trailers ignored).
/// Every read stays inside the request's limits:
/// - at most ``maximum`` bytes (``HTTPServer/Options/maximumBodySize``): past it, ``next()``
///   throws ``HTTPRequestBodyError`` with status 413;
/// - a deadline like Apache's `mod_reqtimeout` (`body=20,MinRate=500`): the body must arrive
///   within ``HTTPServer/Options/bodyTimeout`` plus one second for every
///   ``HTTPServer/Options/bodyMinimumRate`` bytes received, so a client that trickles a body
///   cannot hold a connection for long; past it the connection is closed.
///
/// `Expect: 100-continue` (RFC 9110, section 10.1.1): the interim `100 Continue` goes out when
/// the handler first asks for the body, and never once it has answered without reading it.
///
/// One reader at a time: the chunks come in order, each once.
public final class HTTPRequestBody: Sendable, AsyncSequence {
    public typealias Element = [UInt8]

    /// How the body is delimited: `.none`, `.length` or `.chunked`.
    package let framing: HTTPBodyFraming
    /// The most body bytes the server takes for one request.
    package let maximum: Int64

    private let connection: TCPConnection?
    private let deadline: Deadline
    private let sendContinue: @Sendable () async throws -> Void
    private let state: Lock<State>

    /// How long the body may take: `timeout`, plus a second per `rate` bytes received.
    struct Deadline: Sendable {
        var timeout: Duration
        var rate: Int64
    }

    private struct State {
        /// Received and not handed out: the rest of what came with the head, or the bytes of
        /// the next request (pipelined) once the body is complete.
        var buffered: [UInt8]
        /// Bytes still to come of a body of known length.
        var remaining: Int64
        var decoder: ChunkedDecoder?
        var received: Int64 = 0
        var started: ContinuousClock.Instant?
        var finished: Bool
        var reading = false
        var failure: HTTPRequestBodyError?
        var expectsContinue: Bool
    }

    /// A body read from `connection` (see ``HTTPServer``).
    ///
    /// - Parameters:
    ///   - buffered: bytes received after the head.
    ///   - expectsContinue: the request has `Expect: 100-continue` (HTTP/1.1); `sendContinue`
    ///     sends the interim response when the handler first reads.
    init(
        framing: HTTPBodyFraming, buffered: [UInt8], connection: TCPConnection?, maximum: Int64, deadline: Deadline,
        expectsContinue: Bool, sendContinue: @escaping @Sendable () async throws -> Void
    ) {
        self.framing = framing
        self.maximum = maximum
        self.connection = connection
        self.deadline = deadline
        self.sendContinue = sendContinue
        var remaining: Int64 = 0
        var decoder: ChunkedDecoder?
        switch framing {
        case .length(let length): remaining = length
        case .chunked: decoder = ChunkedDecoder()
        case .none, .untilClose: break
        }
        state = Lock(
            State(
                buffered: buffered, remaining: remaining, decoder: decoder, finished: remaining == 0 && decoder == nil,
                expectsContinue: expectsContinue && (remaining > 0 || decoder != nil)))
    }

    /// A body framed as `framing` in `buffered` and nothing more (no connection: what is not
    /// there is a body cut short): the decoding of a connection's body, for tests and fuzzing.
    package convenience init(framing: HTTPBodyFraming, buffered: [UInt8], maximum: Int64) {
        self.init(
            framing: framing, buffered: buffered, connection: nil, maximum: maximum, deadline: Deadline(timeout: .seconds(1), rate: 1),
            expectsContinue: false, sendContinue: {})
    }

    /// What was received past the body's end (the next request's bytes) once it is complete.
    package var leftover: [UInt8]? { state.withLock { $0.finished && $0.failure == nil ? $0.buffered : nil } }

    /// A body held in memory, for handlers called without a connection (tests) or a request
    /// without a body (`HTTPRequestBody(bytes: [])`).
    public init(bytes: [UInt8]) {
        framing = bytes.isEmpty ? .none : .length(Int64(bytes.count))
        maximum = .max
        connection = nil
        deadline = Deadline(timeout: .seconds(1), rate: 1)
        sendContinue = {}
        state = Lock(State(buffered: bytes, remaining: Int64(bytes.count), decoder: nil, finished: bytes.isEmpty, expectsContinue: false))
    }

    /// The body's length when the request announced it (`Content-Length`); nil for chunked.
    public var length: Int64? {
        switch framing {
        case .none: 0
        case .length(let length): length
        case .chunked, .untilClose: nil
        }
    }

    /// Whether the request has a body at all.
    public var isEmpty: Bool { framing == .none }

    /// Body bytes handed out so far.
    public var received: Int64 { state.withLock { $0.received } }

    /// Whether the body has been read to its end.
    public var isComplete: Bool { state.withLock { $0.finished } }

    /// The failure that ended the body, if one did.
    public var failure: HTTPRequestBodyError? { state.withLock { $0.failure } }

    /// The next piece of the body, or nil at its end.
    ///
    /// - Throws: ``HTTPRequestBodyError`` when the body is past ``maximum`` (413), malformed (400), cut short
    ///   (400) or too slow (408; the connection is closed), and the same failure on every later
    ///   call; ``HTTPError`` `.invalidArgument` when another ``next()`` is in progress.
    public func next() async throws -> [UInt8]? {
        let (start, askContinue) = try state.withLock { state throws -> (Bool, Bool) in
            if let failure = state.failure { throw failure }
            guard !state.reading else {
                throw HTTPError(.invalidArgument, operation: "read body", detail: "a request body has one reader at a time")
            }
            if state.finished { return (false, false) }
            state.reading = true
            if state.started == nil { state.started = .now }
            defer { state.expectsContinue = false }
            return (true, state.expectsContinue)
        }
        guard start else { return nil }
        defer { state.withLock { $0.reading = false } }
        do {
            if askContinue { try await sendContinue() }
            while true {
                if let piece = try await step() { return piece.isEmpty ? nil : piece }
            }
        } catch {
            let failure = (error as? HTTPRequestBodyError) ?? HTTPRequestBodyError(status: 400, reason: "the request body was cut short: \(error)")
            state.withLock { if $0.failure == nil { $0.failure = failure } }
            throw failure
        }
    }

    /// The whole body, when it is at most `limit` bytes.
    ///
    /// - Throws: ``HTTPRequestBodyError`` (413 when the body is larger than `limit`), as ``next()``.
    public func collect(upTo limit: Int64) async throws -> [UInt8] {
        if let length, length > limit { throw Self.tooLarge(limit) }
        var bytes: [UInt8] = []
        while let piece = try await next() {
            guard Int64(bytes.count + piece.count) <= limit else { throw Self.tooLarge(limit) }
            bytes += piece
        }
        return bytes
    }

    package static func tooLarge(_ limit: Int64) -> HTTPRequestBodyError {
        HTTPRequestBodyError(status: 413, reason: "request body larger than the limit of \(limit) bytes")
    }

    /// One round: body bytes (empty at the end), or nil when only framing was consumed.
    private func step() async throws -> [UInt8]? {
        let pending = try state.withLock { state throws(HTTPRequestBodyError) -> [UInt8]?? in
            guard !state.buffered.isEmpty else { return .none }
            return .some(try Self.take(&state, from: nil))
        }
        if let pending { return try checked(pending) }
        guard let connection else { throw HTTPRequestBodyError(status: 400, reason: "the request body was cut short") }
        let want = state.withLock { state in state.decoder == nil ? Int(Swift.min(state.remaining, 256 << 10)) : 256 << 10 }
        let bytes = try await receive(connection, maximum: want)
        if bytes.isEmpty {
            throw HTTPRequestBodyError(status: 400, reason: "the client closed the connection before the end of the request body")
        }
        return try checked(try state.withLock { state throws(HTTPRequestBodyError) in try Self.take(&state, from: bytes) })
    }

    /// Counts what ``take(_:from:)`` handed out against the maximum.
    private func checked(_ piece: [UInt8]?) throws -> [UInt8]? {
        guard let piece else { return nil }
        let total = state.withLock { state in
            state.received += Int64(piece.count)
            return state.received
        }
        if total > maximum { throw Self.tooLarge(maximum) }
        return piece
    }

    /// Takes the body's next bytes from `input` (or from the buffer when nil), keeping what lies
    /// past the body's end in the buffer. Body bytes, empty at the end, nil when `input` held
    /// only framing (chunk lines). A decoding failure is a 400.
    private static func take(_ state: inout State, from input: [UInt8]?) throws(HTTPRequestBodyError) -> [UInt8]? {
        let bytes: [UInt8]
        if let input {
            bytes = input
        } else {
            bytes = state.buffered
            state.buffered = []
        }
        if var decoder = state.decoder {
            let decoded: (body: [Range<Int>], consumed: Int)
            do {
                decoded = try bytes.withUnsafeBytes { try decoder.feed($0) }
            } catch {
                let reason = (error as? ChunkedDecoder.Failure)?.reason ?? "\(error)"
                throw HTTPRequestBodyError(status: 400, reason: "malformed chunked request body: \(reason)")
            }
            state.decoder = decoder
            var body: [UInt8] = []
            if decoded.body.count == 1, decoded.body[0] == bytes.indices {
                body = bytes
            } else {
                for piece in decoded.body { body += bytes[piece] }
            }
            if decoder.isFinished {
                state.finished = true
                state.decoder = nil
                state.buffered = Array(bytes[decoded.consumed...]) + state.buffered
            }
            if body.isEmpty { return state.finished ? [] : nil }
            return body
        }
        let count = Int(Swift.min(state.remaining, Int64(bytes.count)))
        state.remaining -= Int64(count)
        if count < bytes.count { state.buffered = Array(bytes[count...]) + state.buffered }
        if state.remaining == 0 { state.finished = true }
        return count == bytes.count ? bytes : Array(bytes[0..<count])
    }

    /// One receive, within the body's deadline: past it the connection is closed (a 408).
    private func receive(_ connection: TCPConnection, maximum: Int) async throws -> [UInt8] {
        let (started, received) = state.withLock { ($0.started ?? .now, $0.received) }
        let rate = Swift.max(deadline.rate, 1)
        let allowed = deadline.timeout + .seconds(received / rate) + .milliseconds((received % rate) * 1000 / rate)
        let left = started + allowed - ContinuousClock.now
        guard left > .zero else { throw slow(connection) }
        return try await withThrowingTaskGroup(of: [UInt8]?.self) { group in
            group.addTask { try await connection.receive(maximum: maximum, gathering: Swift.min(maximum, 64 << 10)) }
            group.addTask {
                try await Task.sleep(for: left)
                return nil
            }
            defer { group.cancelAll() }
            if let first = try await group.next(), let bytes = first { return bytes }
            throw slow(connection)
        }
    }

    private func slow(_ connection: TCPConnection) -> HTTPRequestBodyError {
        connection.close("request body timeout")
        return HTTPRequestBodyError(
            status: 408,
            reason: "the request body came too slowly (\(deadline.timeout) plus a second per \(deadline.rate) bytes)")
    }

    /// After the handler: reads and drops what it left of the body, up to `limit` bytes, so
    /// the connection can carry the next request. Returns the bytes received past the body
    /// (the next request's), or nil when the connection must close instead: the body failed,
    /// is longer than `limit`, or was never asked for with `Expect: 100-continue` (the client
    /// waits for a 100 that will not come, RFC 9110, section 10.1.1 lets the server close).
    func finish(drainLimit limit: Int64) async -> [UInt8]? {
        let (done, unasked) = state.withLock { state in (state.finished && state.failure == nil, state.expectsContinue) }
        if done { return state.withLock { $0.failure == nil ? $0.buffered : nil } }
        if unasked || failure != nil { return nil }
        if let length, length - received > limit { return nil }
        let budget = received + limit
        do {
            while try await next() != nil {
                if received > budget { return nil }
            }
        } catch {
            return nil
        }
        return state.withLock { $0.failure == nil ? $0.buffered : nil }
    }

    // MARK: AsyncSequence

    public struct AsyncIterator: AsyncIteratorProtocol {
        let body: HTTPRequestBody
        public mutating func next() async throws -> [UInt8]? { try await body.next() }
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(body: self) }
}

/// Why a request body could not be read, with the status the server answers when the handler
/// had not answered yet (413 too large, 400 malformed or cut short, 408 too slow).
public struct HTTPRequestBodyError: Error, Sendable, CustomStringConvertible {
    public var status: Int
    public var reason: String
    public var description: String { reason }
}
