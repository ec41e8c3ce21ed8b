import CShim
@_spi(Locking) import SparseCacheBase
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Non-blocking TCP sockets whose waits go through the ``SocketReactor``: a task that would
/// block is suspended until the descriptor is ready, so no thread (least of all the
/// cooperative pool) ever sleeps in a socket call.
enum Sockets {}

/// A descriptor shared by its reactor registration and the calls in progress on it.
///
/// Its number goes back to the kernel only once the registration has ended *and* no call uses
/// it. Closed earlier, the kernel hands the number to the next socket or file opened, and a call
/// still running on the old connection (a `recv` loop gathering bytes, a `send`, an `accept`)
/// would take or write that other connection's bytes: a cancel comes from any thread (a
/// fetch yielding its place, a client leaving) while the connection's own task is in a call.
/// The reactor must not watch a reused number either, hence the registration.
final class SocketDescriptor: Sendable {
    private struct State {
        var sourcesLeft: Int
        var users = 0
        var released = false
    }

    private let fd: Int32
    private let state: Lock<State>

    init(fd: Int32, sources: Int) {
        self.fd = fd
        state = Lock(State(sourcesLeft: sources))
    }

    /// Runs `call` with the descriptor, which stays open until it returns; nil when the
    /// descriptor was already given back (the connection is closed).
    func use<T>(_ call: (Int32) throws -> T) rethrows -> T? {
        let open = state.withLock { state -> Bool in
            guard !state.released else { return false }
            state.users += 1
            return true
        }
        guard open else { return nil }
        defer { leave() }
        return try call(fd)
    }

    /// Whether the reactor registration has ended (for tests).
    var sourcesCancelled: Bool { state.withLock { $0.sourcesLeft == 0 } }

    func sourceCancelled() {
        let close = state.withLock { state -> Bool in
            state.sourcesLeft -= 1
            return Self.releasing(&state)
        }
        if close { _ = sc_close(fd) }
    }

    private func leave() {
        let close = state.withLock { state -> Bool in
            state.users -= 1
            return Self.releasing(&state)
        }
        if close { _ = sc_close(fd) }
    }

    /// Whether the number is to be closed now: the last source is gone and nobody uses it.
    private static func releasing(_ state: inout State) -> Bool {
        guard state.sourcesLeft == 0, state.users == 0, !state.released else { return false }
        state.released = true
        return true
    }
}

/// A listening TCP socket, watched by every event loop: a new client wakes one loop waiting for
/// events (EPOLLEXCLUSIVE, as nginx's workers share a listening socket), which accepts it and
/// serves it, so no other thread is involved in taking a client (``SocketReactor/forAccepted(by:)``).
/// One socket rather than one per loop with `SO_REUSEPORT`: a second server started on the same
/// port by mistake fails with "address in use" instead of silently taking half the clients.
final class TCPListener: Sendable {
    let port: Int
    private let descriptor: SocketDescriptor
    /// One per event loop, in the order of ``SocketReactor/loops``.
    private let watches: [SocketWatch]

    /// Listens on a numeric address (`127.0.0.1`, `::1`, `0.0.0.0`); port 0 picks a free one.
    init(host: String, port: Int, backlog: Int = 511) throws {
        let fd = sc_tcp_listen(host, Int32(port), Int32(backlog))
        guard fd >= 0 else {
            let number = errno
            let detail = number == EINVAL ? "not a numeric IPv4 or IPv6 address" : nil
            throw HTTPError(.io, operation: "listen", peer: "\(host):\(port)", errno: detail == nil ? number : nil, detail: detail)
        }
        let bound = Int(sc_tcp_local_port(fd))
        let loops = SocketReactor.loops
        let descriptor = SocketDescriptor(fd: fd, sources: loops.count)
        self.descriptor = descriptor
        self.port = bound
        watches = loops.map { loop in
            SocketWatch(fd: fd, on: loop, listener: true, cancelled: { @Sendable in descriptor.sourceCancelled() })
        }
    }

    /// How many accept loops the listener takes: one per event loop, each calling
    /// ``accept(on:)`` with its number on that loop.
    var loopCount: Int { watches.count }

    /// The event loop of accept loop `index`: the executor it prefers.
    func loop(_ index: Int) -> SocketReactor { watches[index].reactor }

    /// The next client. Throws `.closed` once the listener is closed.
    func accept(on index: Int = 0) async throws -> TCPConnection {
        let watch = watches[index]
        while true {
            // Errno is taken inside the call: giving the descriptor back may change it. The
            // peer's name is written on the stack (`[::ffff:255.255.255.255]:65535` fits).
            let accepted = descriptor.use { fd -> (fd: Int32, errno: Int32, peer: String) in
                withUnsafeTemporaryAllocation(of: CChar.self, capacity: 80) { peer in
                    let accepted = sc_tcp_accept(fd, peer.baseAddress!, peer.count)
                    return (accepted, accepted < 0 ? errno : 0, accepted >= 0 ? String(cString: peer.baseAddress!) : "")
                }
            }
            guard let accepted else {
                // Closed meanwhile: the readiness throws the reason.
                try await watch.readable.wait()
                throw HTTPError(.closed, operation: "accept", peer: "port \(port)", detail: "the listener is closed")
            }
            if accepted.fd >= 0 {
                return TCPConnection(fd: accepted.fd, peer: accepted.peer, acceptedBy: watch.reactor)
            }
            switch accepted.errno {
            case EAGAIN, EWOULDBLOCK: try await watch.readable.wait()
            case EINTR, ECONNABORTED, EPROTO: continue
            case EMFILE, ENFILE, ENOBUFS, ENOMEM:
                // Out of descriptors or memory: let connections finish before taking more.
                try await Task.sleep(for: .milliseconds(50))
            case let number:
                throw HTTPError(.io, operation: "accept", peer: "port \(port)", errno: number)
            }
        }
    }

    func close() {
        for watch in watches { watch.close(HTTPError(.closed, operation: "accept", peer: "port \(port)", detail: "the listener is closed")) }
    }
}

/// A connected TCP socket.
final class TCPConnection: Sendable {
    /// The client's address, `host:port`.
    let peer: String
    let descriptor: SocketDescriptor
    private let watch: SocketWatch
    private var readable: Readiness { watch.readable }
    private var writable: Readiness { watch.writable }
    /// The last receive left the socket empty (see ``receive(maximum:gathering:)``).
    private let drained = Atomic<Bool>(false)
    /// The event loop whose thread wakes this connection's waits: the executor a task serving
    /// it prefers, so a wake-up runs the task on the thread that saw the event.
    var loop: SocketReactor { watch.reactor }

    /// Registers `fd`: a client accepted by a listener on loop `acceptedBy` with the loop
    /// ``SocketReactor/forAccepted(by:)`` picks, any other socket with
    /// ``SocketReactor/forNewSocket()``'s.
    init(fd: Int32, peer: String, acceptedBy accepting: SocketReactor? = nil) {
        self.peer = peer
        let descriptor = SocketDescriptor(fd: fd, sources: 1)
        self.descriptor = descriptor
        // Counted among its loop's clients while registered.
        let clientOf = accepting.map(SocketReactor.forAccepted(by:))
        clientOf?.clients.add(1, ordering: .relaxed)
        watch = SocketWatch(fd: fd, on: clientOf ?? .forNewSocket()) { @Sendable in
            clientOf?.clients.subtract(1, ordering: .relaxed)
            descriptor.sourceCancelled()
        }
    }

    /// Up to `maximum` bytes, as soon as any arrive; empty at the end of the stream.
    ///
    /// With `gathering`, keeps taking what has already arrived (without waiting) until that
    /// many bytes are in hand: fewer, larger chunks from a fast sender, no added wait for a slow
    /// one. A reset throws even when some bytes came before it, so a cut is never mistaken for
    /// the end of a body that runs until the connection closes.
    ///
    /// A receive that found the socket empty (a read shorter than asked, or EAGAIN) waits for
    /// the next edge before it reads again: what arrives later raises one, so the `recv` that
    /// would only get EAGAIN (one per keep-alive request) is skipped. Not once the peer has
    /// closed its side: the end of the stream may wait behind the data already read, and its
    /// edge may have come before that read.
    func receive(maximum: Int, gathering: Int = 0) async throws -> [UInt8] {
        if drained.exchange(false, ordering: .relaxed), !watch.hungUp { try await readable.wait() }
        while true {
            var failure: Int32 = 0
            var ended = false
            var empty = false
            let received = descriptor.use { fd in
                [UInt8](unsafeUninitializedCapacity: maximum) { buffer, initialized in
                    initialized = 0
                    while initialized < maximum {
                        let asked = maximum - initialized
                        let count = sc_recv(fd, buffer.baseAddress! + initialized, asked)
                        if count > 0 {
                            initialized += count
                            // TCP hands over all it holds, up to what is asked: less means
                            // nothing was left.
                            empty = count < asked
                            if initialized >= gathering { break }
                            continue
                        }
                        if count == 0 { ended = true } else { failure = errno }
                        break
                    }
                }
            }
            guard let bytes = received else { throw try await closed("receive") }
            drained.store(empty || failure == EAGAIN || failure == EWOULDBLOCK, ordering: .relaxed)
            switch failure {
            case 0, EAGAIN, EWOULDBLOCK, EINTR:
                if !bytes.isEmpty || ended { return bytes }
                if failure != EINTR {
                    drained.store(false, ordering: .relaxed)
                    try await readable.wait()
                }
            case let number:
                throw HTTPError(.io, operation: "receive", peer: peer, errno: number)
            }
        }
    }

    /// The error of a call on a connection closed meanwhile: the reason it was closed with.
    private func closed(_ operation: String) async throws -> HTTPError {
        try await readable.wait()
        return HTTPError(.closed, operation: operation, peer: peer, detail: "the connection is closed")
    }

    /// `host:port`, an IPv6 address in brackets: how connections are named in errors and
    /// pooled by origin.
    static func address(host: String, port: Int) -> String {
        host.utf8.contains(UInt8(ascii: ":")) ? "[\(host)]:\(port)" : "\(host):\(port)"
    }

    /// The addresses of `host` (a name or a numeric address), resolved on `resolver` (DNS may wait).
    ///
    /// - Throws: ``HTTPError`` `.unresolved` naming the host when it cannot be resolved.
    static func resolve(host: String, port: Int, resolver: BlockingExecutor) async throws -> [sc_address] {
        // A numeric address needs no name service: parsed here by the resolver's own first
        // step, without a hop to its queue (a thread switch for every new origin connection).
        var numeric = [sc_address](repeating: sc_address(), count: 8)
        let parsed = sc_numeric_address(host, Int32(port), &numeric, Int32(numeric.count))
        if parsed > 0 { return Array(numeric.prefix(Int(parsed))) }
        let name = address(host: host, port: port)
        return try await resolver.run { () throws -> [sc_address] in
            var found = [sc_address](repeating: sc_address(), count: 8)
            let count = sc_resolve(host, Int32(port), &found, Int32(found.count))
            guard count > 0 else {
                let detail = count == 0 ? "no address" : String(cString: gai_strerror(count))
                throw HTTPError(.unresolved, operation: "connect", peer: name, detail: "cannot resolve the host: \(detail)")
            }
            return Array(found.prefix(Int(count)))
        }
    }

    /// Connects to `host` (a name or a numeric address) on `port`, trying each address the
    /// resolver gives in turn. Name resolution may wait for DNS, so it runs on `resolver`.
    /// With a `policy`, every address is checked first and the connection goes to the checked
    /// addresses: the name is not resolved a second time.
    ///
    /// - Throws: ``HTTPError`` naming the host: `.unresolved` when it cannot be resolved,
    ///   `.connectFailed` when no address accepts the connection, `.notAllowed` when the policy
    ///   refuses an address; `CancellationError` when the task is cancelled meanwhile.
    static func connect(
        host: String, port: Int, resolver: BlockingExecutor, policy: OriginAddressPolicy? = nil
    ) async throws -> TCPConnection {
        let name = address(host: host, port: port)
        let addresses = try await resolve(host: host, port: port, resolver: resolver)
        if let policy, !policy.permits(name: host, port: port, addresses: addresses.compactMap(IPAddress.init)) {
            throw OriginAddressPolicy.refusal(name: host, port: port)
        }
        var refusal: Int32 = 0
        for var address in addresses {
            let fd = sc_tcp_connect(&address)
            guard fd >= 0 else {
                refusal = errno
                continue
            }
            let connection = TCPConnection(fd: fd, peer: name)
            do {
                try await connection.writable.wait()
            } catch {
                connection.close()
                throw error
            }
            let status = connection.socketError
            if status == 0 { return connection }
            refusal = status
            connection.close()
        }
        throw HTTPError(
            .connectFailed, operation: "connect", peer: name, errno: refusal == 0 ? nil : refusal,
            detail: refusal == ECONNREFUSED ? "connection refused" : nil)
    }

    /// All of `bytes` from `start` on, waiting while the client's window is full. `progress`
    /// is called after every partial send (the idle watchdog counts it as activity).
    func send(_ bytes: [UInt8], from start: Int = 0, progress: () -> Void = {}) async throws {
        try await sendAll(bytes.count, from: start, progress: progress) { fd, offset in
            bytes.withUnsafeBytes { sc_send(fd, $0.baseAddress! + offset, $0.count - offset) }
        }
    }

    /// `first` then `second`, as ``send(_:from:progress:)`` would send them joined, without
    /// joining them: one `sendmsg` of both while the window takes them.
    func send(_ first: [UInt8], _ second: [UInt8], progress: () -> Void = {}) async throws {
        try await sendAll(first.count + second.count, from: 0, progress: progress) { fd, offset in
            first.withUnsafeBytes { head in
                second.withUnsafeBytes { body in
                    offset < head.count
                        ? sc_send2(fd, head.baseAddress! + offset, head.count - offset, body.baseAddress, body.count)
                        : sc_send(fd, body.baseAddress! + (offset - head.count), body.count - (offset - head.count))
                }
            }
        }
    }

    /// The send loop: `call` sends what is left from an offset and returns what send(2) did;
    /// waits while the window is full.
    private func sendAll(_ total: Int, from start: Int, progress: () -> Void, _ call: (Int32, Int) -> Int) async throws {
        var sent = start
        while sent < total {
            let offset = sent
            let result = descriptor.use { fd -> (count: Int, errno: Int32) in
                let count = call(fd, offset)
                return (count, count > 0 ? 0 : errno)
            }
            guard let result else { throw try await closed("send") }
            if result.count > 0 {
                sent += result.count
                progress()
                continue
            }
            switch result.errno {
            case EAGAIN, EWOULDBLOCK: try await writable.wait()
            case EINTR: continue
            case let number: throw HTTPError(.io, operation: "send", peer: peer, errno: number)
            }
        }
    }

    /// Whether an idle connection can carry another request: open on both sides, nothing
    /// unread. Never waits.
    var isIdleUsable: Bool { descriptor.use { sc_tcp_idle_usable($0) == 1 } ?? false }

    /// Ends our side of the stream (the client reads to the end, then sees EOF).
    func shutdownWrite() {
        _ = descriptor.use { sc_shutdown_write($0) }
    }

    /// The pending error of a connect in progress (0: connected).
    fileprivate var socketError: Int32 { descriptor.use { sc_socket_error($0) } ?? EBADF }

    /// Fails every wait with `reason` and closes the socket once no call uses it.
    /// Closes the connection: a wait in progress, and every later call, fails with `.closed`
    /// and `reason` (`.timedOut` when a deadline closed it).
    func close(_ reason: String = "the connection is closed", timedOut: Bool = false) {
        watch.close(HTTPError(timedOut ? .timedOut : .closed, operation: "connection", peer: peer, detail: reason))
    }
}
