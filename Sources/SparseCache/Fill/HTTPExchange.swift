import Synchronization

/// One HTTP/1.1 GET on a connection of its own, over the project's non-blocking sockets: the
/// transport ``HTTPRangeSource`` uses for `http://` origins.
///
/// The body is pulled: a chunk is received only when the caller asks for the next one, so a
/// slow disk holds back the origin through TCP instead of filling memory (URLSession cannot be
/// paused on Linux). Chunks are received straight into the arrays handed out, and as many
/// bytes as have already arrived are taken at once (up to ``chunkSize``).
///
/// A watchdog closes the connection when a wait on the socket (connect, head or body) makes
/// no progress for `timeout`; it also closes a connection whose caller walked away.
actor HTTPExchange {
    /// The most a body chunk holds.
    static let chunkSize = 1 << 20
    /// What one receive gathers before handing bytes over when more have already arrived.
    static let gatherSize = 256 << 10

    let head: HTTPResponseHead
    private let connection: TCPConnection
    private let name: String
    private var buffered: [UInt8]
    private var framing: Framing
    private var waitingSince: ContinuousClock.Instant?
    private var watchdog: Task<Void, Never>?
    /// Run once the exchange is over, however it ends.
    private let finishers = Mutex<(ended: Bool, actions: [FinishAction])>((false, []))

    private enum Framing {
        case length(remaining: Int64)
        case chunked(ChunkedDecoder)
        case untilClose
        case done
    }

    private init(connection: TCPConnection, name: String, head: HTTPResponseHead, buffered: [UInt8]) {
        self.connection = connection
        self.name = name
        self.head = head
        self.buffered = buffered
        switch head.framing {
        case .none: framing = .done
        case .length(let length): framing = length == 0 ? .done : .length(remaining: length)
        case .chunked: framing = .chunked(ChunkedDecoder())
        case .untilClose: framing = .untilClose
        }
    }

    deinit {
        watchdog?.cancel()
        connection.close("the exchange was dropped")
        runFinishers()
    }

    /// Runs `action` once the exchange is over: its body read to the end, failed, cancelled or
    /// dropped (at once if it already is).
    nonisolated func onFinish(_ action: FinishAction) {
        let ended = finishers.withLock { state in
            if !state.ended { state.actions.append(action) }
            return state.ended
        }
        if ended { action.run() }
    }

    private nonisolated func runFinishers() {
        let actions = finishers.withLock { state in
            state.ended = true
            defer { state.actions = [] }
            return state.actions
        }
        for action in actions { action.run() }
    }

    /// Connects, sends `request` (a complete head), and waits for the response head, skipping
    /// interim (1xx) responses; all of it within `timeout`.
    ///
    /// - Parameter name: the URL, for error messages.
    /// - Throws: `.originUnavailable` when the origin cannot be reached, cuts the connection or
    ///   stalls for `timeout`; `.origin` for a response that is not HTTP/1.x or is malformed.
    static func start(
        host: String, port: Int, request: [UInt8], name: String, timeout: Duration, resolver: BlockingExecutor
    ) async throws -> HTTPExchange {
        do {
            let started = try await withDeadline(timeout, name: name) {
                let connection = try await TCPConnection.connect(host: host, port: port, resolver: resolver)
                do {
                    return try await Self.exchange(on: connection, request: request, name: name)
                } catch {
                    connection.close()
                    throw error
                }
            }
            await started.startWatchdog(timeout: timeout)
            return started
        } catch {
            throw mapped(error, name: name)
        }
    }

    private static func exchange(on connection: TCPConnection, request: [UInt8], name: String) async throws -> HTTPExchange {
        try await connection.send(request)
        var received: [UInt8] = []
        while true {
            switch HTTPResponseParser.parse(received) {
            case .incomplete:
                let more = try await connection.receive(maximum: 64 << 10)
                if more.isEmpty {
                    let detail = received.isEmpty ? "without answering" : "in the middle of the response head"
                    throw SparseCacheError(.originUnavailable, operation: "fetch", path: name, detail: "the origin closed the connection \(detail)")
                }
                received += more
            case .invalid(let reason):
                throw SparseCacheError(.origin, operation: "fetch", path: name, detail: "malformed response: \(reason)")
            case .response(let head, let consumed):
                received.removeSubrange(0..<consumed)
                if (100...199).contains(head.status) { continue }
                return HTTPExchange(connection: connection, name: name, head: head, buffered: received)
            }
        }
    }

    /// Runs `operation`, cancelling it once it has taken `limit`, which then fails as a timeout.
    private static func withDeadline<T: Sendable>(
        _ limit: Duration, name: String, _ operation: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { try await operation() }
            group.addTask {
                try await Task.sleep(for: limit)
                return nil
            }
            defer { group.cancelAll() }
            if let first = try await group.next(), let value = first { return value }
            throw SparseCacheError(.originUnavailable, operation: "fetch", path: name, detail: "timed out: no answer from the origin within \(limit)")
        }
    }

    /// The next piece of the body, or nil at its end.
    ///
    /// - Throws: `.originUnavailable` when the connection is cut or stalls before the body's
    ///   end; `.origin` for malformed chunked framing.
    func nextChunk() async throws -> [UInt8]? {
        do {
            while true {
                switch framing {
                case .done:
                    finish()
                    return nil
                case .length(let remaining):
                    let bytes = try await take(maximum: Int(min(remaining, Int64(Self.chunkSize))))
                    guard !bytes.isEmpty else {
                        throw SparseCacheError(.originUnavailable, operation: "fetch", path: name, detail: "the connection was cut \(remaining) bytes before the end of the body")
                    }
                    framing = remaining == Int64(bytes.count) ? .done : .length(remaining: remaining - Int64(bytes.count))
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
                        throw SparseCacheError(.originUnavailable, operation: "fetch", path: name, detail: "the connection was cut inside a chunked body")
                    }
                    let (pieces, consumed) = try Self.decode(input, with: &decoder, name: name)
                    // Bytes past the final chunk belong to no request of ours: dropped with the connection.
                    _ = consumed
                    framing = decoder.isFinished ? .done : .chunked(decoder)
                    let body = Self.gather(pieces, of: input)
                    if !body.isEmpty { return body }
                }
            }
        } catch {
            finish()
            throw Self.mapped(error, name: name)
        }
    }

    /// Closes the connection at once, from any thread: a wait in progress fails with
    /// `CancellationError`, and the body ends.
    nonisolated func cancel() {
        connection.close(Self.cancelled)
        runFinishers()
    }

    private static let cancelled = "cancelled"
    private static let timedOut = "timed out"

    // MARK: Receiving

    /// Bytes left over from the head first, then what the socket has (empty at its end).
    private func take(maximum: Int) async throws -> [UInt8] {
        if !buffered.isEmpty {
            let count = min(maximum, buffered.count)
            let bytes = Array(buffered.prefix(count))
            buffered.removeSubrange(0..<count)
            return bytes
        }
        waitingSince = .now
        defer { waitingSince = nil }
        return try await connection.receive(maximum: maximum, gathering: min(maximum, Self.gatherSize))
    }

    private static func decode(_ input: [UInt8], with decoder: inout ChunkedDecoder, name: String) throws -> ([Range<Int>], Int) {
        do {
            return try input.withUnsafeBytes { try decoder.feed($0) }
        } catch let failure as ChunkedDecoder.Failure {
            throw SparseCacheError(.origin, operation: "fetch", path: name, detail: "malformed chunked body: \(failure.reason)")
        }
    }

    private static func gather(_ pieces: [Range<Int>], of input: [UInt8]) -> [UInt8] {
        if pieces.count == 1, pieces[0] == input.indices { return input }
        var body: [UInt8] = []
        body.reserveCapacity(pieces.reduce(0) { $0 + $1.count })
        for piece in pieces { body += input[piece] }
        return body
    }

    private func finish() {
        watchdog?.cancel()
        watchdog = nil
        framing = .done
        connection.close("the response ended")
        runFinishers()
    }

    // MARK: Stalls

    func startWatchdog(timeout: Duration) {
        let period = max(min(timeout / 4, .seconds(1)), .milliseconds(10))
        watchdog = Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: period)
                guard let self, await self.closeIfStalled(timeout: timeout) == false else { return }
            }
        }
    }

    /// Closes the connection when a wait has lasted `timeout`; returns whether it did.
    private func closeIfStalled(timeout: Duration) -> Bool {
        guard let since = waitingSince, ContinuousClock.now - since >= timeout else { return false }
        connection.close(Self.timedOut)
        return true
    }

    /// Socket errors as fetch errors: a connection closed by the watchdog is a timeout, one
    /// closed by ``cancel()`` a cancellation, any other socket failure a cut connection.
    private static func mapped(_ error: Error, name: String) -> Error {
        guard let error = error as? SparseCacheError else { return error }
        switch error.code {
        case .origin, .originUnavailable: return error
        case .closed where error.detail == cancelled: return CancellationError()
        case .closed where error.detail == timedOut:
            return SparseCacheError(.originUnavailable, operation: "fetch", path: name, detail: "timed out: the origin sent nothing for too long")
        default:
            return SparseCacheError(.originUnavailable, operation: "fetch", path: name, errno: error.errno, detail: "the connection was cut")
        }
    }
}
