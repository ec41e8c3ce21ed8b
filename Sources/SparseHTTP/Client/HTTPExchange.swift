@_spi(Locking) import SparseCacheBase

/// One HTTP/1.1 request on a connection of its own, over the project's non-blocking sockets:
/// the transport the cache's origin client (`HTTPRangeSource`) uses for `http://` origins. A
/// GET mostly; any method, with a request body streamed after the head (``RequestBody``).
///
/// The body is pulled: a chunk is received only when the caller asks for the next one, so a
/// slow disk holds back the origin through TCP instead of filling memory (URLSession cannot be
/// paused on Linux). Chunks are received straight into the arrays handed out, and as many
/// bytes as have already arrived are taken at once (up to ``chunkSize``).
///
/// The head must arrive within `timeout` of the request, and no wait for the body may last
/// longer: the connection is then closed (``OriginDeadlines``, one timer for every exchange). A
/// dropped exchange closes its connection too (the caller walked away).
///
/// Connections are kept alive: one whose response ended exactly where its framing said goes
/// back to an ``OriginConnectionPool`` for the next request to the same origin.
package actor HTTPExchange {
    /// Takes an interim (1xx) response as it arrives, before the final one: a proxy hands it
    /// to its client (``HTTPResponseWriter/sendInterim(_:)``). Called on the exchange's task;
    /// it must return at once.
    package typealias InterimSink = @Sendable (HTTPResponseHead) -> Void

    /// The most interim (1xx) responses an origin may send before its final one: beyond, the
    /// answer is malformed (a loop of 1xx would hold the exchange until its timeout).
    static let maximumInterims = 32

    /// The most a body chunk holds.
    static let chunkSize = 1 << 20
    /// What one receive gathers before handing bytes over when more have already arrived.
    static let gatherSize = 256 << 10

    package nonisolated let head: HTTPResponseHead
    /// The whole body, when it came in the reads that brought the head (a small answer mostly
    /// does): the exchange is over once it is made, its connection back in the pool. A caller
    /// may take the body from here, without a call into the exchange per chunk, instead of
    /// from ``nextChunk()`` (which gives it once, then nil).
    package nonisolated let arrivedBody: [UInt8]?
    /// `head.framing`, worked out once.
    package nonisolated let bodyFraming: HTTPBodyFraming
    private let connection: TCPConnection
    private let name: String
    private let pool: OriginConnectionPool?
    private let origin: String
    private var buffered: [UInt8]
    private var framing: Framing
    /// The longest a wait for body bytes may last.
    private let timeout: Duration
    /// Who has the connection once the exchange is over. A cancel (any thread) and the hand-back
    /// to the pool (the actor) decide under this lock, so a connection is either closed or
    /// pooled, never both.
    private let lifecycle = Lock(Lifecycle())

    private struct Lifecycle {
        var ended = false
        var cancelled = false
        var pooled = false
        /// Run once the exchange is over, however it ends.
        var actions: [FinishAction] = []
    }

    private enum Framing {
        /// ``arrivedBody``, not yet handed out by ``nextChunk()``.
        case arrived
        case length(remaining: Int64)
        case chunked(ChunkedDecoder)
        case untilClose
        case done
    }

    private init(
        connection: TCPConnection, name: String, head: HTTPResponseHead, buffered: [UInt8], pool: OriginConnectionPool?, origin: String,
        timeout: Duration
    ) {
        self.connection = connection
        self.timeout = timeout
        self.name = name
        self.head = head
        self.buffered = buffered
        self.pool = pool
        self.origin = origin
        bodyFraming = head.framing
        switch bodyFraming {
        case .none: framing = .done
        case .length(let length): framing = length == 0 ? .done : .length(remaining: length)
        case .chunked: framing = .chunked(ChunkedDecoder())
        case .untilClose: framing = .untilClose
        }
        // Exactly the body's length after the head: the answer is complete (the caller hands
        // the connection back once the head's deadline is disarmed). More bytes than that
        // answer no request of ours: ``nextChunk()`` reads such a body and does not pool its
        // connection.
        if case .length(let length) = bodyFraming, length > 0, Int64(buffered.count) == length {
            arrivedBody = buffered
            self.buffered = []
            framing = .arrived
        } else {
            arrivedBody = nil
        }
    }

    deinit {
        end(closing: "the exchange was dropped")
    }

    /// Runs `action` once the exchange is over: its body read to the end, failed, cancelled or
    /// dropped (at once if it already is).
    package nonisolated func onFinish(_ action: FinishAction) {
        let ended = lifecycle.withLock { state in
            if !state.ended { state.actions.append(action) }
            return state.ended
        }
        if ended { action.run() }
    }

    /// Ends the exchange: closes the connection unless it went back to the pool, and runs the
    /// finish actions. Later calls do nothing more.
    private nonisolated func end(closing reason: String, cancelled: Bool = false) {
        let (close, actions) = lifecycle.withLock { state in
            if cancelled { state.cancelled = true }
            state.ended = true
            defer { state.actions = [] }
            return (!state.pooled, state.actions)
        }
        if close { connection.close(reason) }
        for action in actions { action.run() }
    }

    /// Hands the connection back to the pool when the response ended exactly at its end and
    /// the origin keeps the connection; closes it otherwise. Then ends the exchange.
    private func complete(leftover: Bool) {
        if lifecycle.withLock({ $0.ended }) { return }
        framing = .done
        if !leftover, buffered.isEmpty {
            handBack()
        } else {
            end(closing: "the response ended")
        }
    }

    /// The response ended exactly at its end: the connection goes back to the pool if the
    /// origin keeps it (and nobody cancelled), then the exchange ends.
    private nonisolated func handBack() {
        if let pool, head.keepAlive(framing: bodyFraming) {
            let pooled = lifecycle.withLock { state -> Bool in
                guard !state.ended, !state.cancelled, !state.pooled else { return false }
                state.pooled = true
                return true
            }
            if pooled { pool.put(connection, origin: origin) }
        }
        end(closing: "the response ended")
    }

    /// A request body to send after the head: its chunks in order from `next` (nil at the end).
    /// The head must announce it: `Content-Length: length`, or `Transfer-Encoding: chunked`
    /// when `length` is nil (the exchange then frames every chunk).
    package struct RequestBody: Sendable {
        package var length: Int64?
        package var next: @Sendable () async throws -> [UInt8]?

        package init(length: Int64?, next: @escaping @Sendable () async throws -> [UInt8]?) {
            self.length = length
            self.next = next
        }
    }

    /// Sends `request` (a complete head) on an idle connection from `pool` or a new one, and
    /// waits for the response head, handing interim (1xx) responses to `interim`; all of it
    /// within `timeout`.
    ///
    /// With a `body`, or when the request is not `idempotent` (RFC 9110, section 9.2.2), the
    /// request goes on a new connection and is never sent twice: a pooled connection may have
    /// been closed by the origin as the request went out, and retrying is safe only for an
    /// idempotent request whose bytes can be sent again (RFC 9112, section 9.3.1). The body is
    /// sent as `body.next` gives it, each send within `timeout` (the origin's back-pressure
    /// holds back the caller's reads), then the response head is awaited within `timeout`.
    ///
    /// - Parameters:
    ///   - name: the URL, for error messages.
    ///   - resolver: where a new connection's name lookup blocks; asked for only when a new
    ///     connection is made (most exchanges take a pooled one).
    ///   - policy: the addresses a new connection may go to (``OriginAddressPolicy``); pooled
    ///     connections made under a policy are kept apart from those made without one.
    ///   - interim: called with each interim response before the final one, other than `100`
    ///     and `101` (a proxy forwards them, RFC 9110 section 15.2); it must not block.
    /// - Throws: ``HTTPError``: `.unresolved`, `.connectFailed` or `.connectionLost` when the
    ///   origin cannot be reached or cuts the connection, `.timedOut` when it stalls for
    ///   `timeout`, `.malformed` for a response that is not HTTP/1.x or is malformed,
    ///   `.notAllowed` for an origin the policy refuses; whatever `body.next` throws, as it is.
    package static func start(
        host: String, port: Int, request: [UInt8], body: RequestBody? = nil, idempotent: Bool = true, name: String, timeout: Duration,
        resolver: @escaping @Sendable () -> BlockingExecutor, pool: OriginConnectionPool?, policy: OriginAddressPolicy? = nil,
        interim: InterimSink? = nil
    ) async throws -> HTTPExchange {
        let origin = TCPConnection.address(host: host, port: port) + (policy == nil ? "" : " (checked)")
        if body != nil || !idempotent {
            return try await startOnce(
                host: host, port: port, request: request, body: body, name: name, timeout: timeout, resolver: resolver, pool: pool,
                policy: policy, interim: interim)
        }
        // One limit for the whole: a stalled reused connection, a new connection, the head.
        let deadline = ContinuousClock.now + timeout
        do {
            if let pool, let idle = pool.take(origin) {
                do {
                    return try await Self.exchange(
                        on: idle, request: request, name: name, pool: pool, origin: origin, interim: interim, timeout: timeout,
                        deadline: deadline)
                } catch is NoAnswer {
                    // The origin closed the idle connection as the request went out: once
                    // more, on a new connection.
                    idle.close()
                } catch {
                    // Neither pooled nor an exchange's: closed here (a cancelled caller, a
                    // malformed head), or its descriptor would stay open.
                    idle.close()
                    throw error
                }
            }
            let connection = try await withDeadline(deadline - .now, of: timeout, name: name, late: { $0.close() }) {
                try await TCPConnection.connect(host: host, port: port, resolver: resolver(), policy: policy)
            }
            do {
                return try await Self.exchange(
                    on: connection, request: request, name: name, pool: pool, origin: origin, interim: interim, timeout: timeout,
                    deadline: deadline)
            } catch let failure as NoAnswer {
                connection.close()
                throw failure.error
            } catch {
                connection.close()
                throw error
            }
        } catch {
            throw mapped(error, name: name)
        }
    }

    /// One attempt on a new connection: head, body, response head, each step within `timeout`.
    private static func startOnce(
        host: String, port: Int, request: [UInt8], body: RequestBody?, name: String, timeout: Duration,
        resolver: @escaping @Sendable () -> BlockingExecutor, pool: OriginConnectionPool?, policy: OriginAddressPolicy?, interim: InterimSink?
    ) async throws -> HTTPExchange {
        let origin = TCPConnection.address(host: host, port: port) + (policy == nil ? "" : " (checked)")
        let connection: TCPConnection
        do {
            connection = try await withDeadline(timeout, name: name, late: { $0.close() }) {
                try await TCPConnection.connect(host: host, port: port, resolver: resolver(), policy: policy)
            }
        } catch {
            throw mapped(error, name: name)
        }
        do {
            try await withDeadline(timeout, name: name) { try await connection.send(request) }
            if let body {
                do {
                    try await send(body, on: connection, name: name, timeout: timeout)
                } catch let failure as SendFailure {
                    // The origin may have answered before taking the whole body (a 413, a 401)
                    // and then stopped reading or closed: that answer is the answer. The
                    // connection is not reused (pool nil): the request never ended on it.
                    let early = try? await Self.exchange(
                        on: connection, request: nil, name: name, pool: nil, origin: origin, interim: interim, timeout: timeout,
                        deadline: .now + min(timeout, .seconds(5)))
                    guard let early else { throw failure.error }
                    return early
                }
            }
            do {
                return try await Self.exchange(
                    on: connection, request: nil, name: name, pool: pool, origin: origin, interim: interim, timeout: timeout,
                    deadline: .now + timeout)
            } catch let failure as NoAnswer {
                throw failure.error
            }
        } catch {
            connection.close()
            throw mapped(error, name: name)
        }
    }

    /// Sending on the connection failed (as opposed to the body's source).
    private struct SendFailure: Error {
        var error: Error
    }

    /// Sends a request body: as it comes for a known length (which it must match), else chunked.
    /// What `body.next` throws comes through as it is; a failure to send as ``SendFailure``.
    private static func send(_ body: RequestBody, on connection: TCPConnection, name: String, timeout: Duration) async throws {
        var sent: Int64 = 0
        while let piece = try await body.next() {
            sent += Int64(piece.count)
            if let length = body.length, sent > length {
                throw HTTPError(
                    .invalidArgument, operation: "send", peer: name, detail: "the request body is longer than its length \(length)")
            }
            let framed = body.length == nil ? ChunkedEncoder.chunk(piece) : piece
            if framed.isEmpty { continue }
            try await sending(timeout, name: name) { try await connection.send(framed) }
        }
        if let length = body.length, sent != length {
            throw HTTPError(
                .invalidArgument, operation: "send", peer: name, detail: "the request body ended after \(sent) of \(length) bytes")
        }
        if body.length == nil { try await sending(timeout, name: name) { try await connection.send(ChunkedEncoder.end()) } }
    }

    private static func sending(_ limit: Duration, name: String, _ operation: @escaping @Sendable () async throws -> Void) async throws {
        do {
            try await withDeadline(limit, name: name, operation)
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            throw SendFailure(error: error)
        }
    }

    /// The request went out (or not) and not one byte of an answer came back: on a reused
    /// connection, the origin may have closed it meanwhile.
    private struct NoAnswer: Error {
        var error: Error
    }

    /// Sends `request` (unless nil: already sent) and reads the response head, by `deadline`
    /// (else the connection is closed and the call fails as a timeout of `timeout`).
    private static func exchange(
        on connection: TCPConnection, request: [UInt8]?, name: String, pool: OriginConnectionPool?, origin: String,
        interim: InterimSink?, timeout: Duration, deadline: ContinuousClock.Instant
    ) async throws -> HTTPExchange {
        do {
            let answer = try await OriginDeadlines.shared.within(connection, until: deadline, reason: headTimedOut) {
                try await exchange(on: connection, request: request, name: name, pool: pool, origin: origin, interim: interim, timeout: timeout)
            }
            // A body that came with the head ends the exchange here, once the head's deadline
            // is disarmed: no late close of that wait can reach the connection in the pool.
            if answer.arrivedBody != nil { answer.handBack() }
            return answer
        } catch let error as HTTPError where error.kind == .timedOut {
            throw HTTPError(.timedOut, operation: "fetch", peer: name, detail: "timed out: no answer from the origin within \(timeout)")
        }
    }

    /// ``exchange(on:request:name:pool:origin:interim:timeout:deadline:)`` without its limit.
    private static func exchange(
        on connection: TCPConnection, request: [UInt8]?, name: String, pool: OriginConnectionPool?, origin: String,
        interim: InterimSink?, timeout: Duration
    ) async throws -> HTTPExchange {
        do {
            if let request { try await connection.send(request) }
        } catch let error as HTTPError where error.kind == .io {
            throw NoAnswer(error: error)
        }
        var received: [UInt8] = []
        var interims = 0
        while true {
            switch HTTPResponseParser.parse(received) {
            case .incomplete:
                let more: [UInt8]
                do {
                    more = try await connection.receive(maximum: 64 << 10)
                } catch let error as HTTPError where error.kind == .io && received.isEmpty {
                    throw NoAnswer(error: error)
                }
                if more.isEmpty {
                    let closed = HTTPError(
                        .connectionLost, operation: "fetch", peer: name,
                        detail: "the origin closed the connection "
                            + (received.isEmpty ? "without answering" : "in the middle of the response head"))
                    throw received.isEmpty ? NoAnswer(error: closed) : closed
                }
                // The first read is taken as it is, not copied into an empty array.
                if received.isEmpty { received = more } else { received += more }
            case .invalid(let reason):
                throw HTTPError(.malformed, operation: "fetch", peer: name, detail: "malformed response: \(reason)")
            case .response(let head, let consumed):
                received.removeSubrange(0..<consumed)
                if (100...199).contains(head.status) {
                    interims += 1
                    guard interims <= Self.maximumInterims else {
                        throw HTTPError(
                            .malformed, operation: "fetch", peer: name,
                            detail: "more than \(Self.maximumInterims) interim (1xx) responses before the final one")
                    }
                    // An interim response (RFC 9110, section 15.2) goes to whoever asked; the
                    // final one follows on the same connection. 100 Continue answers an
                    // `Expect` this client never sends, and a 101 switches to nothing it asked
                    // for: neither is handed on.
                    if let interim, head.status != 100, head.status != 101 { interim(head) }
                    continue
                }
                return HTTPExchange(
                    connection: connection, name: name, head: head, buffered: received, pool: pool, origin: origin, timeout: timeout)
            }
        }
    }

    /// Runs `operation`, cancelling it once it has taken `limit` (what is left of `timeout`, by
    /// default all of it), which then fails as a timeout of `timeout`. A result the cancelled
    /// operation produced anyway goes to `late` (a connection is closed, not dropped open).
    private static func withDeadline<T: Sendable>(
        _ limit: Duration, of timeout: Duration? = nil, name: String, late: @escaping @Sendable (T) -> Void = { _ in },
        _ operation: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        let timedOut = HTTPError(
            .timedOut, operation: "fetch", peer: name, detail: "timed out: no answer from the origin within \(timeout ?? limit)")
        guard limit > .zero else { throw timedOut }
        return try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { try await operation() }
            group.addTask {
                try await Task.sleep(for: limit)
                return nil
            }
            if let first = try await group.next(), let value = first {
                group.cancelAll()
                return value
            }
            group.cancelAll()
            while let result = try? await group.next() {
                if let value = result { late(value) }
            }
            throw timedOut
        }
    }

    /// The next piece of the body, or nil at its end.
    ///
    /// - Throws: ``HTTPError``: `.connectionLost` when the connection is cut before the body's
    ///   end, `.timedOut` when it stalls; `.malformed` for malformed chunked framing.
    package func nextChunk() async throws -> [UInt8]? {
        do {
            while true {
                switch framing {
                case .done:
                    complete(leftover: false)
                    return nil
                case .arrived:
                    framing = .done
                    return arrivedBody
                case .length(let remaining):
                    let bytes = try await take(maximum: Int(min(remaining, Int64(Self.chunkSize))))
                    guard !bytes.isEmpty else {
                        throw HTTPError(
                            .connectionLost, operation: "fetch", peer: name,
                            detail: "the connection was cut \(remaining) bytes before the end of the body")
                    }
                    if remaining == Int64(bytes.count) {
                        // The last bytes: the connection is free now, whether or not the
                        // caller asks for the (empty) rest.
                        complete(leftover: false)
                    } else {
                        framing = .length(remaining: remaining - Int64(bytes.count))
                    }
                    return bytes
                case .untilClose:
                    let bytes = try await take(maximum: Self.chunkSize)
                    if bytes.isEmpty {
                        framing = .done
                        continue
                    }
                    return bytes
                case .chunked(var decoder):
                    let input = try await take(maximum: Self.chunkSize)
                    if input.isEmpty {
                        throw HTTPError(
                            .connectionLost, operation: "fetch", peer: name, detail: "the connection was cut inside a chunked body")
                    }
                    let (pieces, consumed) = try Self.decode(input, with: &decoder, name: name)
                    let body = Self.gather(pieces, of: input)
                    if decoder.isFinished {
                        // Bytes past the last chunk answer no request of ours: such a
                        // connection is not reused.
                        complete(leftover: consumed < input.count)
                        return body.isEmpty ? nil : body
                    }
                    framing = .chunked(decoder)
                    if !body.isEmpty { return body }
                }
            }
        } catch {
            framing = .done
            end(closing: "the response failed")
            throw Self.mapped(error, name: name, cancelled: lifecycle.withLock { $0.cancelled }, inBody: true)
        }
    }

    /// Closes the connection at once (unless it is already back in the pool), from any thread:
    /// a wait in progress fails with `CancellationError`, and the body ends.
    package nonisolated func cancel() {
        end(closing: Self.cancelled, cancelled: true)
    }

    private static let cancelled = "cancelled"
    private static let timedOut = "timed out"
    private static let headTimedOut = "timed out waiting for the response head"

    // MARK: Receiving

    /// Bytes left over from the head first, then what the socket has (empty at its end).
    private func take(maximum: Int) async throws -> [UInt8] {
        if !buffered.isEmpty {
            let count = min(maximum, buffered.count)
            let bytes = Array(buffered.prefix(count))
            buffered.removeSubrange(0..<count)
            return bytes
        }
        let limit = OriginDeadlines.shared.arm(connection, until: .now + timeout, reason: Self.timedOut)
        defer { OriginDeadlines.shared.disarm(limit) }
        return try await connection.receive(maximum: maximum, gathering: min(maximum, Self.gatherSize))
    }

    private static func decode(_ input: [UInt8], with decoder: inout ChunkedDecoder, name: String) throws -> ([Range<Int>], Int) {
        do {
            return try input.withUnsafeBytes { try decoder.feed($0) }
        } catch let failure as ChunkedDecoder.Failure {
            throw HTTPError(.malformed, operation: "fetch", peer: name, detail: "malformed chunked body: \(failure.reason)")
        }
    }

    private static func gather(_ pieces: [Range<Int>], of input: [UInt8]) -> [UInt8] {
        if pieces.count == 1, pieces[0] == input.indices { return input }
        var body: [UInt8] = []
        body.reserveCapacity(pieces.reduce(0) { $0 + $1.count })
        for piece in pieces { body += input[piece] }
        return body
    }

    /// Socket errors as fetch errors: a connection closed by ``cancel()`` is a cancellation,
    /// one closed at its deadline while the body was awaited (`inBody`) a timeout, any other
    /// socket failure a cut connection. What is already a fetch error (a refused connect, a
    /// malformed answer, a timeout of the head) goes through as it is.
    private static func mapped(_ error: Error, name: String, cancelled: Bool = false, inBody: Bool = false) -> Error {
        guard let error = error as? HTTPError else { return error }
        switch error.kind {
        case .closed where cancelled, .timedOut where cancelled && inBody: return CancellationError()
        case .timedOut where inBody:
            return HTTPError(.timedOut, operation: "fetch", peer: name, detail: "timed out: the origin sent nothing for too long")
        case .timedOut, .connectFailed, .unresolved, .notAllowed, .connectionLost, .malformed: return error
        case .closed, .io, .invalidArgument:
            return HTTPError(.connectionLost, operation: "fetch", peer: name, errno: error.errno, detail: "the connection was cut")
        }
    }
}
