import CShim
import Foundation
import SparseCacheEngine
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The sockets' event loop: one epoll instance and one thread of its own that waits in
/// `epoll_wait` and resumes the task waiting on a descriptor that became ready.
///
/// It replaces a pair of dispatch sources per connection. Those cost a wake-up of
/// libdispatch's event thread, then of the sources' queue, then of the cooperative pool, and a
/// resume and a suspend of a source (a re-arm of the descriptor) around every wait; a client
/// asking for a small cached range waits once per request, so that was most of the request's
/// thread switches. Here an event wakes this thread, which resumes the waiting task directly.
/// Descriptors are registered once, edge-triggered for both directions (see ``Readiness`` for
/// why no edge is lost).
final class SocketReactor: Sendable {
    static let shared = SocketReactor()

    private let epoll: Int32
    /// Registered watches by token. Tokens are never reused, so an event that raced a removal
    /// finds nothing rather than another descriptor's watch.
    private let watches = Mutex<[UInt64: SocketWatch]>([:])
    private let nextToken = Atomic<UInt64>(1)

    private init() {
        epoll = sc_epoll_create()
        precondition(epoll >= 0, "epoll_create1 failed: errno \(errno)")
        let thread = Thread { [self] in run() }
        thread.name = "sparsecache.sockets"
        thread.start()
    }

    /// Registers `watch` for `fd`; returns its token, or the errno of a refusal.
    func add(_ watch: SocketWatch, fd: Int32) -> Result<UInt64, SparseCacheError> {
        let token = nextToken.add(1, ordering: .relaxed).oldValue
        watches.withLock { $0[token] = watch }
        guard sc_epoll_watch(epoll, fd, token) == 0 else {
            let number = errno
            watches.withLock { $0[token] = nil }
            return .failure(SparseCacheError(.io, operation: "epoll_ctl", path: "descriptor \(fd)", errno: number))
        }
        return .success(token)
    }

    /// Stops watching `fd`. When this returns, epoll no longer holds the descriptor, so the
    /// caller may close it.
    func remove(token: UInt64, fd: Int32) {
        _ = sc_epoll_unwatch(epoll, fd)
        watches.withLock { $0[token] = nil }
    }

    /// The loop of the reactor's thread: never on the cooperative pool.
    private func run() {
        let capacity = 64
        var tokens = [UInt64](repeating: 0, count: capacity)
        var directions = [UInt32](repeating: 0, count: capacity)
        while true {
            let count = sc_epoll_wait(epoll, &tokens, &directions, Int32(capacity), -1)
            guard count > 0 else { continue }
            let ready = watches.withLock { watches in
                (0..<Int(count)).compactMap { index in watches[tokens[index]].map { ($0, directions[index]) } }
            }
            for (watch, direction) in ready { watch.signal(direction) }
        }
    }
}
