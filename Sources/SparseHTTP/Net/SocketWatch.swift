import CShim
import SparseCacheBase
import Synchronization

/// One descriptor registered with the ``SocketReactor``: the waits of its two directions and
/// the registration, which ends (and `cancelled` runs, so the number may be closed) at
/// ``close(_:)``.
final class SocketWatch: Sendable {
    let readable = Readiness()
    let writable = Readiness()
    /// The event loop the descriptor is registered with: the executor its connection's task
    /// should prefer.
    let reactor: SocketReactor
    private let fd: Int32
    /// The reactor's token; 0 when the registration was refused.
    private let token = Atomic<UInt64>(0)
    private let closed = Atomic<Bool>(false)
    private let cancelled: @Sendable () -> Void

    /// Registers `fd` with `reactor` (as one of the loops that watch a listening socket, when
    /// `listener`). A refused registration fails every wait with the reason (the connection
    /// then closes as if reset).
    init(fd: Int32, on reactor: SocketReactor = .forNewSocket(), listener: Bool = false, cancelled: @escaping @Sendable () -> Void) {
        self.reactor = reactor
        self.fd = fd
        self.cancelled = cancelled
        switch reactor.add(self, fd: fd, listener: listener) {
        case .success(let registered): token.store(registered, ordering: .releasing)
        case .failure(let error):
            readable.close(error)
            writable.close(error)
        }
    }

    /// The peer closed its side, or the connection failed: seen before the readable edge that
    /// carried it is signalled, and never cleared.
    var hungUp: Bool { hangup.load(ordering: .acquiring) }
    private let hangup = Atomic<Bool>(false)

    /// Called by the reactor's thread with `SC_EPOLL_*` bits.
    func signal(_ direction: UInt32) {
        if direction & UInt32(SC_EPOLL_HANGUP) != 0 { hangup.store(true, ordering: .releasing) }
        if direction & UInt32(SC_EPOLL_READABLE) != 0 { readable.signal() }
        if direction & UInt32(SC_EPOLL_WRITABLE) != 0 { writable.signal() }
    }

    /// Fails every wait with `reason`, leaves the reactor, then runs `cancelled` (once).
    func close(_ reason: HTTPError) {
        readable.close(reason)
        writable.close(reason)
        guard closed.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else { return }
        let registered = token.load(ordering: .acquiring)
        if registered != 0 { reactor.remove(token: registered, fd: fd) }
        cancelled()
    }
}
