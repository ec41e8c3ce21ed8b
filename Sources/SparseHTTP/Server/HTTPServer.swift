import Foundation
import Dispatch
@_spi(Locking) import SparseCacheBase
import Synchronization

/// A small HTTP/1.1 server: an accept loop on every event loop, one task per connection reading request heads
/// (``HTTPRequestParser``) and handing each to a handler with its ``HTTPRequestBody`` and an
/// ``HTTPResponseWriter``, and a watchdog that closes connections past their deadline.
///
/// Keep-alive and pipelining, with request bodies in both framings (read as the handler asks,
/// at most ``Options/maximumBodySize``; what the handler leaves unread is drained, up to
/// ``Options/bodyDrainLimit``, or the connection closes). A slow or hostile client cannot hold
/// it: the first head must arrive whole within ``Options/headTimeout`` of the accept (a later
/// one within that time of its first byte), a kept-alive connection with no request closes
/// after ``Options/idleTimeout``, a client that stops taking bytes is dropped after
/// ``Options/sendTimeout``, a body must keep up with ``Options/bodyTimeout`` and
/// ``Options/bodyMinimumRate``. When ``Options/maximumConnections`` (or one address's
/// ``Options/maximumConnectionsPerAddress``) are open, a newcomer takes the slot of the
/// connection that has waited longest without a request (``ConnectionSlots``); only when every
/// slot is busy with a request is it answered 503.
public final class HTTPServer: Sendable {
    public struct Options: Sendable {
        /// A numeric IPv4 or IPv6 address. Loopback by default: the proxy is for this machine.
        public var host = "127.0.0.1"
        /// 0 picks a free port (see ``HTTPServer/port``).
        public var port = 8080
        public var maximumConnections = 256
        /// Connections one client address may hold (half the slots by default).
        public var maximumConnectionsPerAddress = 128
        /// A connection's first request head must arrive whole within this time of the accept;
        /// a later one within this time of its first byte.
        public var headTimeout: Duration = .seconds(10)
        /// A kept-alive connection with no request in this time is closed.
        public var idleTimeout: Duration = .seconds(60)
        /// A client that takes no response bytes for this long is dropped.
        var sendTimeout: Duration = .seconds(60)
        var parserLimits = HTTPRequestParser.Limits()
        /// The largest request body taken: a longer announced one is answered 413 at once, a
        /// chunked one fails with 413 when it gets there.
        public var maximumBodySize: Int64 = 64 << 20
        /// A request body must arrive within this time of its first read, plus a second for
        /// every ``bodyMinimumRate`` bytes (Apache's `mod_reqtimeout body=20,MinRate=500`).
        package var bodyTimeout: Duration = .seconds(20)
        package var bodyMinimumRate: Int64 = 500
        /// What the server reads and drops of a body the handler left unread, to keep the
        /// connection; a longer rest closes it instead.
        var bodyDrainLimit: Int64 = 1 << 20
        /// Whether request fields whose name holds `_` reach the handler. Off by default: they
        /// are dropped, as nginx does (`underscores_in_headers off`), since gateways that read
        /// `_` as `-` would take `Transfer_Encoding` for the framing. On, they are kept, except
        /// those that would name the framing or a hop-by-hop field
        /// (``HTTPHeaders/droppingUnderscoreNames(keepingOthers:)``).
        public var underscoresInFieldNames = false

        public init() {}
    }

    /// Answers one request. `body` is the request's body, read as the handler asks (empty for
    /// a request without one).
    public typealias Handler = @Sendable (
        _ request: HTTPRequestHead, _ body: HTTPRequestBody, _ response: HTTPResponseWriter
    ) async throws -> Void

    /// The port the server listens on.
    public let port: Int
    public let options: Options
    private let listener: TCPListener
    private let handler: Handler
    private let quick: QuickHandler?
    private let log: @Sendable (HTTPLogEntry) -> Void
    private let registry: Lock<Registry>
    private let requestCount = Atomic<Int>(0)
    private let watchdog: Watchdog

    private struct Registry {
        var nextID = 0
        var clients: [Int: Client] = [:]
        var tasks: [Int: Task<Void, Never>] = [:]
        var acceptLoops: [Task<Void, Never>] = []
        var shuttingDown = false
        var rejected = 0
        var evicted = 0
        var slots: ConnectionSlots
    }

    /// Starts listening on `options.host`:`options.port` and serves every request with
    /// `handler`. `log` gets one entry per request.
    ///
    /// - Throws: the socket error when the address cannot be bound.
    public static func start(
        options: Options = Options(), log: @escaping @Sendable (HTTPLogEntry) -> Void = { _ in }, handler: @escaping Handler
    ) throws -> HTTPServer {
        try start(options: options, log: log, quick: nil, handler: handler)
    }

    /// Starts listening and serving. `log` gets one entry per request.
    ///
    /// - Parameter quick: tried first for every request without a body, on the connection's
    ///   event loop thread, before `handler`: what it answers costs no task and no await.
    package static func start(
        options: Options = Options(), log: @escaping @Sendable (HTTPLogEntry) -> Void = { _ in }, quick: QuickHandler?,
        handler: @escaping Handler
    ) throws -> HTTPServer {
        let server = try HTTPServer(options: options, log: log, quick: quick, handler: handler)
        // One accept loop on each event loop: a new client wakes one loop's thread, which takes
        // it and (unless another loop serves fewer clients) serves it.
        let loops = (0..<server.listener.loopCount).map { index in
            Task(executorPreference: server.listener.loop(index)) { await server.acceptLoop(index) }
        }
        server.registry.withLock { $0.acceptLoops = loops }
        server.watchdog.start { server.expireClients() }
        return server
    }

    private init(
        options: Options, log: @escaping @Sendable (HTTPLogEntry) -> Void, quick: QuickHandler?, handler: @escaping Handler
    ) throws {
        listener = try TCPListener(host: options.host, port: options.port)
        port = listener.port
        self.options = options
        self.log = log
        self.quick = quick
        self.handler = handler
        registry = Lock(Registry(slots: ConnectionSlots(limit: options.maximumConnections, perAddress: options.maximumConnectionsPerAddress)))
        let shortest = min(options.headTimeout, options.idleTimeout, options.sendTimeout)
        watchdog = Watchdog(interval: max(.milliseconds(10), min(.seconds(1), shortest / 4)))
    }

    /// Connections open now.
    package var connectionCount: Int { registry.withLock { $0.clients.count } }
    /// Connections refused with 503 because every slot they could take was busy with a request.
    package var rejectedConnections: Int { registry.withLock { $0.rejected } }
    /// Waiting connections closed to make room for a newcomer.
    package var evictedConnections: Int { registry.withLock { $0.evicted } }

    /// Stops accepting, closes idle connections, lets requests in progress finish for up to
    /// `grace` (their connections close after the response), then cancels the rest: a cancelled
    /// handler stops its reads, and the fetches nobody else needs stop and commit what arrived.
    public func shutdown(grace: Duration = .seconds(5)) async {
        let acceptLoops = registry.withLock { registry -> [Task<Void, Never>] in
            registry.shuttingDown = true
            return registry.acceptLoops
        }
        listener.close()
        for loop in acceptLoops { await loop.value }
        let deadline = ContinuousClock.now + grace
        while true {
            let idle = registry.withLock { $0.clients.values.filter { $0.isIdle } }
            for client in idle { client.connection.close("the server is shutting down") }
            if registry.withLock({ $0.clients.isEmpty }) || ContinuousClock.now >= deadline { break }
            try? await Task.sleep(for: .milliseconds(10))
        }
        let (clients, tasks) = registry.withLock { (Array($0.clients.values), Array($0.tasks.values)) }
        for task in tasks { task.cancel() }
        for client in clients { client.connection.close("the server is shutting down") }
        for task in tasks { await task.value }
        watchdog.stop()
    }

    // MARK: Connections

    /// Takes the clients the listener's `index`th loop is woken for.
    private func acceptLoop(_ index: Int) async {
        while true {
            let connection: TCPConnection
            do {
                connection = try await listener.accept(on: index)
            } catch {
                return
            }
            let now = DispatchTime.now().uptimeNanoseconds
            let address = ConnectionSlots.address(ofPeer: connection.peer)
            let (admitted, evicted) = registry.withLock { registry -> (Client?, Client?) in
                guard !registry.shuttingDown else { return (nil, nil) }
                let id = registry.nextID + 1
                var evicted: Client?
                switch registry.slots.admit(id: id, address: address, now: now) {
                case .refuse:
                    registry.rejected += 1
                    return (nil, nil)
                case .evict(let victim):
                    registry.evicted += 1
                    evicted = registry.clients[victim]
                case .admit:
                    break
                }
                registry.nextID = id
                let client = Client(id: id, connection: connection)
                registry.clients[client.id] = client
                return (client, evicted)
            }
            evicted?.connection.close("closed for a newcomer: every connection slot was taken and this one had waited longest")
            guard let client = admitted else {
                Task { await Self.refuse(connection) }
                continue
            }
            // On the socket's loop, and named as the loop of the work it starts.
            let loop = connection.loop
            let task = Task(executorPreference: loop) { await LoopExecutor.$current.withValue(loop) { await self.serve(client) } }
            registry.withLock { registry in
                // The task may have finished (and unregistered) already.
                if registry.clients[client.id] != nil { registry.tasks[client.id] = task }
            }
        }
    }

    /// Answers 503 to a connection over the limit, without reading its request.
    private static func refuse(_ connection: TCPConnection) async {
        let body = Array("too many connections; try again later\n".utf8)
        let head = HTTPResponseHead(
            status: 503,
            headers: HTTPHeaders([
                ("Server", "sparsecache"), ("Date", HTTPDate.now()), ("Retry-After", "1"), ("Content-Type", "text/plain; charset=utf-8"),
                ("Content-Length", String(body.count)), ("Connection", "close"),
            ]))
        // A fresh socket's send buffer is empty: this never waits. Then a short lingering
        // close (see lingeringClose), bounded by the sleep rather than the watchdog: this
        // connection is not registered.
        try? await connection.send(head.encoded() + body)
        connection.shutdownWrite()
        let drain = Task { while let bytes = try? await connection.receive(maximum: 16 * 1024), !bytes.isEmpty {} }
        try? await Task.sleep(for: .milliseconds(200))
        connection.close()
        await drain.value
    }

    private func serve(_ client: Client) async {
        defer {
            client.connection.close()
            registry.withLock { registry in
                registry.clients[client.id] = nil
                registry.tasks[client.id] = nil
                registry.slots.release(client.id)
            }
        }
        var buffer: [UInt8] = []
        // The first head must arrive whole within the head timeout of the accept: a connection
        // that sends nothing, or a byte now and then, does not hold its slot for longer.
        var first = true
        while !Task.isCancelled {
            // Between requests the connection is idle: shutdown closes it at once.
            if first {
                client.setDeadline(options.headTimeout, reason: "request head timeout")
            } else {
                client.setDeadline(
                    buffer.isEmpty ? options.idleTimeout : options.headTimeout, reason: buffer.isEmpty ? "idle" : "request head timeout")
                setWaiting(client, true)
            }
            client.isIdle = buffer.isEmpty
            var result = HTTPRequestParser.parse(buffer, limits: options.parserLimits)
            while result == .incomplete {
                let bytes: [UInt8]
                do {
                    bytes = try await client.connection.receive(maximum: 16 * 1024)
                } catch {
                    return
                }
                if bytes.isEmpty { return }
                if buffer.isEmpty {
                    client.isIdle = false
                    if !first { client.setDeadline(options.headTimeout, reason: "request head timeout") }
                }
                buffer += bytes
                // Only a line break (or a head past a limit) can change the answer: parsing
                // again after every byte of a trickled head would cost quadratic time.
                if bytes.contains(10) || bytes.contains(13) || buffer.count > options.parserLimits.requestLine {
                    result = HTTPRequestParser.parse(buffer, limits: options.parserLimits)
                }
            }
            client.isIdle = false
            client.clearDeadline()
            // A head that completed just as its slot went to a newcomer is not served.
            guard setWaiting(client, false) else { return }
            first = false
            let started = ContinuousClock.now
            let wallClock = Date().timeIntervalSince1970
            switch result {
            case .incomplete:
                return
            case .invalid(let status, let reason):
                let request = HTTPRequestHead(method: "-", target: "-", minorVersion: 1, headers: [])
                let writer = makeWriter(request, client: client, closes: true)
                try? await writer.respond(status: status, message: reason)
                logRequest(writer, client: client, started: started, time: wallClock)
                await lingeringClose(client)
                return
            case .request(var request, let consumed, let framing):
                request.headers = request.headers.droppingUnderscoreNames(keepingOthers: options.underscoresInFieldNames)
                buffer.removeFirst(consumed)
                let closing = registry.withLock { $0.shuttingDown }
                if let quick, framing == .none, !request.headers.contains("expect") {
                    var reply = QuickReply(request: request, connection: client.connection, closes: closing)
                    if quick(request, &reply) {
                        guard await finish(reply, client: client, started: started, time: wallClock) else { return }
                        continue
                    }
                }
                let refusal = bodyRefusal(request, framing)
                let writer = makeWriter(request, client: client, closes: closing || refusal != nil)
                if let (status, reason) = refusal {
                    // The body is not read: the connection closes after the answer.
                    try? await writer.respond(status: status, message: reason)
                    logRequest(writer, client: client, started: started, time: wallClock)
                    await lingeringClose(client)
                    return
                }
                let body = makeBody(request, framing: framing, buffered: buffer, writer: writer)
                buffer = []
                do {
                    try await handler(request, body, writer)
                    if !writer.headSent { try? await writer.respond(status: 500, message: "internal error: the handler sent no response") }
                    try await writer.flush()
                } catch {
                    if !writer.headSent {
                        // A body that failed answers for itself (413, 400, 408).
                        if let failure = body.failure {
                            try? await writer.respond(status: failure.status, message: failure.reason)
                        } else {
                            try? await writer.respond(status: 500, message: "internal error: \(error)")
                        }
                    } else {
                        writer.setNote("stopped: \(error)")
                    }
                }
                logRequest(writer, client: client, started: started, time: wallClock)
                // A response cut short ends the connection at once: the client must not take
                // what follows for a complete body.
                if !writer.isComplete { return }
                // The next request starts after this one's body: what the handler left of it
                // is read and dropped, or the connection closes.
                guard !writer.closesConnection, !registry.withLock({ $0.shuttingDown }),
                    let rest = await body.finish(drainLimit: options.bodyDrainLimit)
                else {
                    await lingeringClose(client)
                    return
                }
                buffer = rest
            }
        }
    }

    /// Sends what a quick reply's client did not take at once, and logs the request; false when
    /// the connection closes after it.
    private func finish(_ reply: borrowing QuickReply, client: Client, started: ContinuousClock.Instant, time: Double) async -> Bool {
        var complete = reply.isComplete
        if !reply.failed, !reply.rest.isEmpty {
            client.setDeadline(options.sendTimeout, reason: "send timeout")
            do {
                try await client.connection.send(reply.rest) { client.setDeadline(self.options.sendTimeout, reason: "send timeout") }
            } catch {
                complete = false
            }
            client.clearDeadline()
        }
        if reply.cut { complete = false }
        let id = requestCount.add(1, ordering: .relaxed).newValue
        let request = reply.request
        log(
            HTTPLogEntry(
                peer: client.connection.peer, method: request.method, target: request.target, range: request.header("range"),
                status: reply.status, bytes: complete ? reply.bodyBytes : 0, cacheHitBytes: complete ? reply.cacheHitBytes : 0,
                cacheMissBytes: 0, duration: ContinuousClock.now - started, complete: complete,
                note: complete ? nil : "stopped: the answer was cut short",
                cacheOutcome: reply.cacheOutcome, id: id, time: time))
        // A response cut short ends the connection at once.
        guard complete else { return false }
        if reply.closes || registry.withLock({ $0.shuttingDown }) {
            await lingeringClose(client)
            return false
        }
        return true
    }

    /// Marks `client` as waiting for a request (its slot may go to a newcomer) or busy with one.
    @discardableResult
    private func setWaiting(_ client: Client, _ waiting: Bool) -> Bool {
        let now = waiting ? DispatchTime.now().uptimeNanoseconds : nil
        return registry.withLock { $0.slots.setWaiting(client.id, since: now) }
    }

    /// Why a request's body is refused before the handler sees it: an announced length past
    /// ``Options/maximumBodySize`` (413), an `Expect` other than `100-continue` (417, RFC 9110,
    /// section 10.1.1).
    private func bodyRefusal(_ request: HTTPRequestHead, _ framing: HTTPBodyFraming) -> (Int, String)? {
        if case .length(let length) = framing, length > options.maximumBodySize {
            return (413, "request body of \(length) bytes is larger than the limit of \(options.maximumBodySize) bytes")
        }
        let expectations = request.headers.listElements("expect").map { $0.lowercased() }
        if request.minorVersion >= 1, expectations.contains(where: { $0 != "100-continue" }) {
            return (417, "expectation not supported: only 100-continue")
        }
        return nil
    }

    private func makeBody(_ request: HTTPRequestHead, framing: HTTPBodyFraming, buffered: [UInt8], writer: HTTPResponseWriter)
        -> HTTPRequestBody
    {
        // HTTP/1.0 clients never wait for a 100 (RFC 9110, section 10.1.1).
        let expects = request.minorVersion >= 1 && request.headers.listElements("expect").contains { $0.lowercased() == "100-continue" }
        return HTTPRequestBody(
            framing: framing, buffered: buffered, connection: writer.connection, maximum: options.maximumBodySize,
            deadline: .init(timeout: options.bodyTimeout, rate: options.bodyMinimumRate), expectsContinue: expects,
            sendContinue: { try await writer.sendContinue() })
    }

    /// Ends our side and reads (and drops) what the client still sends until it closes, for at
    /// most a second: closing with unread bytes in the socket makes the kernel send a reset,
    /// which can destroy the response still in flight to the client.
    private func lingeringClose(_ client: Client) async {
        client.connection.shutdownWrite()
        client.setDeadline(.seconds(1), reason: "closing")
        var drained = 0
        while drained < 1 << 20, let bytes = try? await client.connection.receive(maximum: 16 * 1024), !bytes.isEmpty {
            drained += bytes.count
        }
    }

    private func makeWriter(_ request: HTTPRequestHead, client: Client, closes: Bool) -> HTTPResponseWriter {
        let timeout = options.sendTimeout
        return HTTPResponseWriter(request: request, connection: client.connection, closes: closes) { sending in
            if sending { client.setDeadline(timeout, reason: "send timeout") } else { client.clearDeadline() }
        }
    }

    private func logRequest(_ writer: HTTPResponseWriter, client: Client, started: ContinuousClock.Instant, time: Double) {
        let cache = writer.cacheBytes
        let id = requestCount.add(1, ordering: .relaxed).newValue
        log(
            HTTPLogEntry(
                peer: client.connection.peer, method: writer.request.method, target: writer.request.target,
                range: writer.request.header("range"), status: writer.status, bytes: writer.bodyBytes,
                cacheHitBytes: cache.hit, cacheMissBytes: cache.miss, duration: ContinuousClock.now - started,
                complete: writer.isComplete, note: writer.note, cacheOutcome: writer.cacheOutcome, id: id, time: time))
    }

    /// Closes every connection past its deadline (the watchdog's tick).
    private func expireClients() {
        let now = DispatchTime.now().uptimeNanoseconds
        let expired = registry.withLock { $0.clients.values.compactMap { client in client.expiry(now: now).map { (client, $0) } } }
        for (client, reason) in expired { client.connection.close(reason) }
    }
}

/// One connection's state that the watchdog and shutdown look at.
private final class Client: Sendable {
    let id: Int
    let connection: TCPConnection
    private let deadline = Lock<(at: UInt64, reason: String)>((0, ""))
    private let idle = Atomic<Bool>(true)

    init(id: Int, connection: TCPConnection) {
        self.id = id
        self.connection = connection
    }

    var isIdle: Bool {
        get { idle.load(ordering: .acquiring) }
        set { idle.store(newValue, ordering: .releasing) }
    }

    func setDeadline(_ timeout: Duration, reason: String) {
        let nanoseconds = UInt64(timeout.components.seconds) * 1_000_000_000 + UInt64(timeout.components.attoseconds / 1_000_000_000)
        let at = DispatchTime.now().uptimeNanoseconds + nanoseconds
        deadline.withLock { $0 = (at, reason) }
    }

    func clearDeadline() {
        deadline.withLock { $0 = (0, "") }
    }

    /// The reason to close, when the deadline has passed.
    func expiry(now: UInt64) -> String? {
        deadline.withLock { $0.at != 0 && now >= $0.at ? $0.reason : nil }
    }
}

/// A repeating timer on a dispatch queue.
private final class Watchdog: Sendable {
    private let interval: Duration
    /// Dispatch sources are thread-safe; Dispatch does not mark them `Sendable`.
    private nonisolated(unsafe) let timer: any DispatchSourceTimer

    init(interval: Duration) {
        self.interval = interval
        timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "sparsecache.http.watchdog"))
    }

    /// Made in a nonisolated method: the handler is a `@Sendable` closure.
    func start(_ tick: @escaping @Sendable () -> Void) {
        let milliseconds = Int(interval.components.seconds * 1000 + interval.components.attoseconds / 1_000_000_000_000_000)
        timer.schedule(deadline: .now() + .milliseconds(milliseconds), repeating: .milliseconds(milliseconds))
        timer.setEventHandler(handler: { @Sendable in tick() })
        timer.resume()
    }

    func stop() {
        timer.cancel()
    }
}
