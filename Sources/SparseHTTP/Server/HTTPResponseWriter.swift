import Foundation
@_spi(Locking) import SparseCacheBase

/// Writes one response on a connection: a head, then a body of exactly the length the head
/// announced. For a HEAD request the body is counted but not sent.
///
/// `Sendable` so a body can be written from the closure a ``CacheReader`` calls; the writes of
/// one response are sequential, and the lock only keeps the bookkeeping consistent.
public final class HTTPResponseWriter: Sendable {
    public let request: HTTPRequestHead
    let connection: TCPConnection
    private let activity: @Sendable (_ sending: Bool) -> Void

    private struct State {
        var status = 0
        var headSent = false
        /// The body length announced; nil for a body sent as it comes (chunked, or until close).
        var announced: Int64? = 0
        var bodyBytes: Int64 = 0
        /// The body is chunked: every write is framed, and ``finishBody()`` sends the last chunk.
        var chunked = false
        /// ``finishBody()`` was called (a body of unannounced length is complete).
        var finished = false
        var closes: Bool
        var cacheHitBytes: Int64 = 0
        var cacheMissBytes: Int64 = 0
        var note: String?
        var cacheOutcome: String?
        /// A head held back to go out with the first body bytes.
        var pendingHead: [UInt8]?
        /// Interim responses waiting to go out, in order, and whether a task is sending them:
        /// the final head waits until they are out (``sendInterim(_:)``).
        var interims: [[UInt8]] = []
        /// Interim responses taken for this response: at most ``maximumInterims``.
        var interimCount = 0
        var sendingInterims = false
        var afterInterims: [CheckedContinuation<Void, Never>] = []
        /// Rewrites the fields of every final head (``rewriteHeads(_:)``).
        var rewrite: (@Sendable ([(String, String)]) -> [(String, String)])?
    }

    private let state: Lock<State>

    init(request: HTTPRequestHead, connection: TCPConnection, closes: Bool, activity: @escaping @Sendable (_ sending: Bool) -> Void) {
        self.request = request
        self.connection = connection
        self.activity = activity
        state = Lock(State(closes: closes || !request.keepAlive))
    }

    /// The status sent (0 before the head).
    public var status: Int { state.withLock { $0.status } }
    /// Whether a head is on its way to the client. False while one is held for its first body
    /// bytes and nothing has gone out: a handler that fails before the body can still answer
    /// with an error, which replaces the held head (a client must never get an empty reply).
    package var headSent: Bool { state.withLock { $0.headSent && $0.pendingHead == nil } }
    /// Body bytes written so far.
    package var bodyBytes: Int64 { state.withLock { $0.bodyBytes } }
    /// The connection closes after this response.
    var closesConnection: Bool { state.withLock { $0.closes } }
    /// The client's address, as `host:port`.
    package var peer: String { connection.peer }
    /// Whether the body is complete: a connection whose response fell short must close, since
    /// the client can no longer tell where the next response starts.
    var isComplete: Bool {
        let isHead = request.method == .head
        return state.withLock { state in
            guard state.headSent else { return false }
            if isHead { return true }
            if let announced = state.announced { return state.bodyBytes == announced }
            return state.finished
        }
    }
    var cacheBytes: (hit: Int64, miss: Int64) { state.withLock { ($0.cacheHitBytes, $0.cacheMissBytes) } }
    var note: String? { state.withLock { $0.note } }
    var cacheOutcome: String? { state.withLock { $0.cacheOutcome } }

    /// Counts body bytes by where they came from, for the request log.
    package func countCacheBytes(hit: Int64 = 0, miss: Int64 = 0) {
        state.withLock {
            $0.cacheHitBytes += hit
            $0.cacheMissBytes += miss
        }
    }

    /// What a cache made of the request (`hit`, `miss`, `stale`, ...), for the log and the
    /// metrics.
    package func setCacheOutcome(_ outcome: String) {
        state.withLock { $0.cacheOutcome = outcome }
    }

    /// A short text for the request log (an error's reason, say).
    func setNote(_ note: String) {
        state.withLock { $0.note = note }
    }

    /// Passes the fields of every final head this writer sends from now on through `rewrite`
    /// (before `Date`, `Server` and the framing are added): fields a handler adds to each of
    /// its answers, whoever writes the head (the handler, or the server answering for it after
    /// it failed), as nginx's `add_header`. Interim (1xx) heads are sent as they are.
    package func rewriteHeads(_ rewrite: @escaping @Sendable ([(String, String)]) -> [(String, String)]) {
        state.withLock { $0.rewrite = rewrite }
    }

    /// Sends the status line and headers. `Content-Length` (or `Transfer-Encoding`),
    /// `Connection`, and `Date` and `Server` when `headers` has none, are added here; `headers`
    /// holds the rest (a cached response brings its origin's `Date`, RFC 9110, section 6.6.1).
    ///
    /// - Parameter contentLength: the body length; nil for a body whose length is not known
    ///   yet (a response streamed as it arrives from an origin): it goes chunked to an HTTP/1.1
    ///   client and until the connection closes to an HTTP/1.0 one, and ends with
    ///   ``finishBody()``. Responses that never have a body (1xx, 204, 304) announce none and
    ///   send no `Content-Length` (RFC 9110, section 8.6 forbids it for 1xx and 204, and for
    ///   304 allows only the length of the 200 it stands for).
    ///
    /// With `withFirstBody`, the head waits for the first ``writeBody(_:)`` and goes out in the
    /// same send: one segment and one wake-up of the client for a small cached response instead
    /// of two. Only for bodies that follow at once (the server sends a head still held when the
    /// handler returns): a client waiting on a slow origin should see the head at once. Until
    /// it goes out, another `writeHead` replaces it: a handler whose body fails before its
    /// first byte (a stored answer removed under its reader) answers with an error instead.
    public func writeHead(status: Int, headers: [(String, String)] = [], contentLength: Int64?, withFirstBody: Bool = false) async throws {
        let bodiless = (100...199).contains(status) || status == 204 || status == 304
        let hold = withFirstBody && (contentLength ?? 1) > 0 && request.method != .head && !bodiless
        let chunked = contentLength == nil && !bodiless && request.minorVersion >= 1
        // Interim responses already on their way go out first, whole (RFC 9110, section 15.2:
        // they precede the final response); the head is claimed only with none in flight.
        var claimed: [UInt8]??
        while true {
            claimed = state.withLock { state -> [UInt8]?? in
                if state.sendingInterims { return .none }
                // A held head that never went out is replaced (see ``headSent``).
                guard !state.headSent || state.pendingHead != nil else { return .some(nil) }
                state.pendingHead = nil
                state.headSent = true
                state.status = status
                state.announced = bodiless ? 0 : contentLength
                state.chunked = chunked && request.method != .head
                // An HTTP/1.0 client learns where a body of unknown length ends from the close.
                if contentLength == nil, !bodiless, !chunked { state.closes = true }
                let bytes = Self.encodedHead(
                    status: status, headers: state.rewrite?(headers) ?? headers, contentLength: bodiless ? nil : contentLength, chunked: chunked,
                    closes: state.closes)
                if hold { state.pendingHead = bytes }
                return .some(bytes)
            }
            if claimed != nil { break }
            await waitForInterims()
        }
        guard let head = claimed ?? nil else {
            throw HTTPError(.invalidArgument, operation: "respond", peer: request.target, detail: "the response head was already sent")
        }
        if !hold { try await send(head) }
    }

    /// A final response head as sent: `headers`, then `Date` and `Server` when they have none,
    /// the framing (`Content-Length`, or `Transfer-Encoding: chunked` when `chunked`), and
    /// `Connection`.
    static func encodedHead(status: Int, headers: [(String, String)], contentLength: Int64?, chunked: Bool, closes: Bool) -> [UInt8] {
        var fields = HTTPHeaders(headers)
        if !fields.contains("date") { fields.append(name: "Date", value: HTTPDate.now()) }
        if !fields.contains("server") { fields.append(name: "Server", value: "sparsecache") }
        if let contentLength {
            fields.append(name: "Content-Length", value: String(contentLength))
        } else if chunked {
            fields.append(name: "Transfer-Encoding", value: "chunked")
        }
        fields.append(name: "Connection", value: closes ? "close" : "keep-alive")
        return HTTPResponseHead(status: status, headers: fields).encoded()
    }

    /// Sends part of the body (nothing for a HEAD request, whose handler need not call this).
    /// Throws when it would run past the announced length.
    public func writeBody(_ bytes: [UInt8]) async throws {
        let isHead = request.method == .head
        let (head, chunked) = try state.withLock { state -> ([UInt8]?, Bool) in
            guard state.headSent, !state.finished, state.bodyBytes + Int64(bytes.count) <= state.announced ?? .max else {
                throw HTTPError(
                    .invalidArgument, operation: "respond", peer: request.target,
                    detail: "body bytes past the announced Content-Length \(state.announced ?? 0) or the end of the body")
            }
            state.bodyBytes += Int64(bytes.count)
            defer { state.pendingHead = nil }
            return (state.pendingHead, state.chunked)
        }
        if isHead || bytes.isEmpty && head == nil { return }
        let framed = chunked ? ChunkedEncoder.chunk(bytes) : bytes
        if let head {
            // Two buffers in one sendmsg: joining them copied every small cached answer once more.
            activity(true)
            defer { activity(false) }
            try await connection.send(head, framed) { self.activity(true) }
        } else {
            try await send(framed)
        }
    }

    /// Ends a body whose length was not announced (the last chunk). Does nothing for a body of
    /// announced length.
    public func finishBody() async throws {
        let chunked = state.withLock { state -> Bool in
            guard state.headSent, state.announced == nil, !state.finished else { return false }
            state.finished = true
            return state.chunked
        }
        if chunked { try await send(ChunkedEncoder.end()) }
    }

    /// Hands an origin's interim response (`102`, `103 Early Hints`, ...) to the client before
    /// the final response, as a proxy must (RFC 9110, section 15.2), without its hop-by-hop
    /// fields. Not to an HTTP/1.0 client (it cannot tell an interim response from the final
    /// one), nor once the final head went out (an interim response of a request made for this
    /// client in the background comes too late then), nor for `100` and `101`, which answer
    /// what only the proxy and the origin negotiate.
    ///
    /// Returns at once: the bytes go out on a task of their own, and ``writeHead(status:headers:contentLength:withFirstBody:)``
    /// waits until every interim response taken before it is out, so an origin exchange never
    /// waits on a slow client and the order on the wire is the order of arrival.
    public func sendInterim(_ head: HTTPResponseHead) {
        guard request.minorVersion >= 1, (102...199).contains(head.status) else { return }
        let bytes = HTTPResponseHead(status: head.status, reason: head.reason, headers: head.headers.removingHopByHop()).encoded()
        enqueueInterim(bytes, counted: true)
    }

    /// The most interim responses one response passes on; an origin that sends more has the
    /// rest dropped (memory stays bounded whatever it sends, and however slowly the client
    /// reads).
    static let maximumInterims = 8

    /// Queues `bytes` to go out before the final head and starts the task that sends them;
    /// false when the final head was already claimed (or, `counted`, the limit reached).
    @discardableResult
    private func enqueueInterim(_ bytes: [UInt8], counted: Bool) -> Bool {
        let (queued, start) = state.withLock { state -> (Bool, Bool) in
            guard !state.headSent, !counted || state.interimCount < Self.maximumInterims else { return (false, false) }
            if counted { state.interimCount += 1 }
            state.interims.append(bytes)
            guard !state.sendingInterims else { return (true, false) }
            state.sendingInterims = true
            return (true, true)
        }
        if start { Task { await self.drainInterims() } }
        return queued
    }

    /// Sends the queued interim responses until none is left, then lets a final head go.
    private func drainInterims() async {
        var failed = false
        while true {
            let (next, waiting) = state.withLock { state -> ([UInt8]?, [CheckedContinuation<Void, Never>]) in
                guard !state.interims.isEmpty, !failed else {
                    state.interims.removeAll()
                    state.sendingInterims = false
                    defer { state.afterInterims.removeAll() }
                    return (nil, state.afterInterims)
                }
                return (state.interims.removeFirst(), [])
            }
            guard let next else {
                for continuation in waiting { continuation.resume() }
                return
            }
            // A client that went away fails the final response's send too, with its error.
            do { try await send(next) } catch { failed = true }
        }
    }

    /// Returns once no interim response is being sent.
    private func waitForInterims() async {
        guard state.withLock({ $0.sendingInterims }) else { return }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let waits = state.withLock { state -> Bool in
                guard state.sendingInterims else { return false }
                state.afterInterims.append(continuation)
                return true
            }
            if !waits { continuation.resume() }
        }
    }

    /// Sends the interim `100 Continue` (RFC 9110, section 15.2.1) for a request with
    /// `Expect: 100-continue` whose body the handler starts reading, unless a final answer
    /// already went out.
    func sendContinue() async throws {
        // Through the interim queue: never interleaved with an origin's interim response or
        // the final head on the socket.
        if enqueueInterim(Array("HTTP/1.1 100 Continue\r\n\r\n".utf8), counted: false) { await waitForInterims() }
    }

    /// Sends a head still held for the first body bytes (a handler that wrote none).
    func flush() async throws {
        let head = state.withLock { state in
            defer { state.pendingHead = nil }
            return state.pendingHead
        }
        if let head { try await send(head) }
    }

    /// A complete response with a one-line text body (errors, mostly).
    public func respond(status: Int, message: String, headers: [(String, String)] = []) async throws {
        setNote(message)
        let body = Array((message + "\n").utf8)
        try await writeHead(
            status: status, headers: [("Content-Type", "text/plain; charset=utf-8")] + headers, contentLength: Int64(body.count))
        try await writeBody(body)
    }

    private func send(_ bytes: [UInt8]) async throws {
        activity(true)
        defer { activity(false) }
        try await connection.send(bytes) { self.activity(true) }
    }
}
