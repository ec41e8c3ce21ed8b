import Foundation
import Dispatch
import SparseCacheEngine
import Synchronization

/// A small HTTP/1.1 server: an accept loop, one task per connection reading request heads
/// (``HTTPRequestParser``) and handing each to a handler with an ``HTTPResponseWriter``, and a
/// watchdog that closes connections past their deadline.
///
/// Keep-alive and pipelining; no request bodies. A slow or hostile client cannot hold it: a
/// head must arrive whole within ``Options/headTimeout``, a kept-alive connection with no
/// request closes after ``Options/idleTimeout``, a client that stops taking bytes is dropped
/// after ``Options/sendTimeout``, and connections beyond ``Options/maximumConnections`` are
/// answered 503 and closed.
public final class HTTPServer: Sendable {
    public struct Options: Sendable {
        /// A numeric IPv4 or IPv6 address. Loopback by default: the proxy is for this machine.
        public var host = "127.0.0.1"
        /// 0 picks a free port (see ``HTTPServer/port``).
        public var port = 8080
        public var maximumConnections = 256
        /// A request head must arrive whole within this time of its first byte.
        public var headTimeout: Duration = .seconds(10)
        /// A kept-alive connection with no request in this time is closed.
        public var idleTimeout: Duration = .seconds(60)
        /// A client that takes no response bytes for this long is dropped.
        public var sendTimeout: Duration = .seconds(60)
        public var parserLimits = HTTPRequestParser.Limits()

        public init() {}
    }

    public typealias Handler = @Sendable (_ request: HTTPRequestHead, _ response: HTTPResponseWriter) async throws -> Void

    /// The port the server listens on.
    public let port: Int
    public let options: Options
    private let listener: TCPListener
    private let handler: Handler
    private let log: @Sendable (HTTPLogEntry) -> Void
    private let registry = Mutex(Registry())
    private let requestCount = Atomic<Int>(0)
    private let watchdog: Watchdog

    private struct Registry {
        var nextID = 0
        var clients: [Int: Client] = [:]
        var tasks: [Int: Task<Void, Never>] = [:]
        var acceptLoop: Task<Void, Never>?
        var shuttingDown = false
        var rejected = 0
    }

    /// Starts listening and serving. `log` gets one entry per request.
    public static func start(
        options: Options = Options(), log: @escaping @Sendable (HTTPLogEntry) -> Void = { _ in }, handler: @escaping Handler
    ) throws -> HTTPServer {
        let server = try HTTPServer(options: options, log: log, handler: handler)
        let loop = Task { await server.acceptLoop() }
        server.registry.withLock { $0.acceptLoop = loop }
        server.watchdog.start { server.expireClients() }
        return server
    }

    private init(options: Options, log: @escaping @Sendable (HTTPLogEntry) -> Void, handler: @escaping Handler) throws {
        listener = try TCPListener(host: options.host, port: options.port)
        port = listener.port
        self.options = options
        self.log = log
        self.handler = handler
        let shortest = min(options.headTimeout, options.idleTimeout, options.sendTimeout)
        watchdog = Watchdog(interval: max(.milliseconds(10), min(.seconds(1), shortest / 4)))
    }

    /// Connections open now.
    public var connectionCount: Int { registry.withLock { $0.clients.count } }
    /// Connections refused with 503 because ``Options/maximumConnections`` were open.
    public var rejectedConnections: Int { registry.withLock { $0.rejected } }

    /// Stops accepting, closes idle connections, lets requests in progress finish for up to
    /// `grace` (their connections close after the response), then cancels the rest: a cancelled
    /// handler stops its reads, and the fetches nobody else needs stop and commit what arrived.
    public func shutdown(grace: Duration = .seconds(5)) async {
        let acceptLoop = registry.withLock { registry -> Task<Void, Never>? in
            registry.shuttingDown = true
            return registry.acceptLoop
        }
        listener.close()
        await acceptLoop?.value
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

    private func acceptLoop() async {
        while true {
            let connection: TCPConnection
            do {
                connection = try await listener.accept()
            } catch {
                return
            }
            let admitted = registry.withLock { registry -> Client? in
                guard !registry.shuttingDown, registry.clients.count < options.maximumConnections else {
                    registry.rejected += 1
                    return nil
                }
                registry.nextID += 1
                let client = Client(id: registry.nextID, connection: connection)
                registry.clients[client.id] = client
                return client
            }
            guard let client = admitted else {
                Task { await Self.refuse(connection) }
                continue
            }
            let task = Task { await self.serve(client) }
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
            }
        }
        var buffer: [UInt8] = []
        while !Task.isCancelled {
            // Between requests the connection is idle: shutdown closes it at once.
            client.setDeadline(
                buffer.isEmpty ? options.idleTimeout : options.headTimeout, reason: buffer.isEmpty ? "idle" : "request head timeout")
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
                    client.setDeadline(options.headTimeout, reason: "request head timeout")
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
            case .request(let request, let consumed):
                buffer.removeFirst(consumed)
                let closing = registry.withLock { $0.shuttingDown }
                let writer = makeWriter(request, client: client, closes: closing)
                do {
                    try await handler(request, writer)
                    if !writer.headSent { try? await writer.respond(status: 500, message: "internal error: the handler sent no response") }
                    try await writer.flush()
                } catch {
                    if !writer.headSent {
                        try? await writer.respond(status: 500, message: "internal error: \(error)")
                    } else {
                        writer.setNote("stopped: \(error)")
                    }
                }
                logRequest(writer, client: client, started: started, time: wallClock)
                // A response cut short ends the connection at once: the client must not take
                // what follows for a complete body.
                if !writer.isComplete { return }
                if writer.closesConnection || registry.withLock({ $0.shuttingDown }) {
                    await lingeringClose(client)
                    return
                }
            }
        }
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
    private let deadline = Mutex<(at: UInt64, reason: String)>((0, ""))
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
