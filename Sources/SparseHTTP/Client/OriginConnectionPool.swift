import Dispatch
@_spi(Locking) import SparseCacheBase

/// Idle keep-alive connections to `http://` origins, by host and port, for ``HTTPExchange`` to
/// reuse: a player's next range (a seek) then costs one round trip instead of a TCP handshake
/// and one.
///
/// A connection comes back only after a response whose body ended exactly where its framing
/// said (a length or a last chunk) and whose origin keeps the connection open. One that was
/// closed by its origin or has unread bytes is dropped when it is taken; those idle for
/// ``idleLimit`` are closed then, at the latest by a sweep that runs while any are kept (as
/// nginx's upstream `keepalive_timeout` closes them by a timer), so a proxy that goes quiet does
/// not hold descriptors or half-closed sockets. An origin may still close one just as a request
/// goes out; the exchange then retries once on a new connection.
package final class OriginConnectionPool: Sendable {
    /// The pool every origin client of the process shares.
    package static let shared = OriginConnectionPool()

    /// Connections a client should open to one origin at most, as browsers do (6): the cache's
    /// per-origin limit, and the idle connections this pool keeps for each origin.
    package static let connectionsPerOrigin = 6

    /// Idle connections kept per origin.
    let perOrigin: Int
    /// Older idle connections are closed rather than reused: origins close theirs after 5 s
    /// (Apache) to 75 s (nginx), and a request on a connection closed meanwhile costs a retry.
    let idleLimit: Duration

    private struct Idle {
        var connection: TCPConnection
        var since: ContinuousClock.Instant
    }

    private struct State {
        var idle: [String: [Idle]] = [:]
        /// A sweep is due: one at a time, armed while any connection is kept.
        var sweepArmed = false
    }

    private let state = Lock(State())

    init(perOrigin: Int = connectionsPerOrigin, idleLimit: Duration = .seconds(4)) {
        self.perOrigin = perOrigin
        self.idleLimit = idleLimit
    }

    /// The most recently used idle connection to `origin` that can still carry a request; one
    /// on the calling thread's event loop first, whose wake-ups then need no other thread.
    func take(_ origin: String) -> TCPConnection? {
        let now = ContinuousClock.now
        let loop = LoopExecutor.current as? SocketReactor
        var stale: [TCPConnection] = []
        defer { for connection in stale { connection.close("idle too long, or closed by the origin") } }
        // The lists are changed in place and an emptied one is kept until the sweep: taking the
        // one connection of an origin and putting it back then allocates nothing.
        return state.withLock { state -> TCPConnection? in
            stale = pruned(&state.idle, now: now)
            if let loop, let mine = state.idle[origin]?.lastIndex(where: { $0.connection.loop === loop }),
                let candidate = state.idle[origin]?.remove(at: mine)
            {
                if candidate.connection.isIdleUsable { return candidate.connection }
                stale.append(candidate.connection)
            }
            while let candidate = state.idle[origin]?.popLast() {
                if candidate.connection.isIdleUsable { return candidate.connection }
                stale.append(candidate.connection)
            }
            return nil
        }
    }

    /// Keeps `connection` for the next request to `origin`, or closes it when enough are kept.
    func put(_ connection: TCPConnection, origin: String) {
        let now = ContinuousClock.now
        var closing: [TCPConnection] = []
        let arm = state.withLock { state -> Bool in
            closing = pruned(&state.idle, now: now)
            guard state.idle[origin]?.count ?? 0 < perOrigin else {
                closing.append(connection)
                return false
            }
            state.idle[origin, default: []].append(Idle(connection: connection, since: now))
            defer { state.sweepArmed = true }
            return !state.sweepArmed
        }
        for connection in closing { connection.close("idle too long, or enough idle connections to this origin") }
        if arm { armSweep(after: idleLimit) }
    }

    /// Closes the connections that have been idle too long, and comes back for the rest when
    /// the oldest of them will be.
    private func sweep() {
        let now = ContinuousClock.now
        var closing: [TCPConnection] = []
        let next = state.withLock { state -> Duration? in
            closing = pruned(&state.idle, now: now, dropEmpty: true)
            let oldest = state.idle.values.lazy.flatMap { $0 }.map(\.since).min()
            state.sweepArmed = oldest != nil
            // A millisecond late rather than early: the dispatch clock and this one may differ.
            return oldest.map { $0 + idleLimit - now + .milliseconds(1) }
        }
        for connection in closing { connection.close("idle too long") }
        if let next { armSweep(after: next) }
    }

    private func armSweep(after delay: Duration) {
        let nanoseconds = max(0, delay.components.seconds * 1_000_000_000 + delay.components.attoseconds / 1_000_000_000)
        DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(Int(nanoseconds)), execute: Self.sweeper(for: self))
    }

    /// The sweep as a `@Sendable` closure made in a nonisolated function; it holds the pool
    /// weakly (the shared one lives for the process, a test's goes when the test ends).
    private static func sweeper(for pool: OriginConnectionPool) -> @Sendable () -> Void {
        { [weak pool] in pool?.sweep() }
    }

    /// Takes out every connection idle for ``idleLimit`` or longer, of every origin: a proxy
    /// that talks to many origins once each must not keep their connections (and descriptors)
    /// until it exits.
    ///
    /// A list is rebuilt only when it holds such a connection, and emptied lists go only when
    /// `dropEmpty` (the sweep): taking and putting back, which prune on the way, allocate
    /// nothing for an origin whose connections are all fresh.
    private func pruned(_ idle: inout [String: [Idle]], now: ContinuousClock.Instant, dropEmpty: Bool = false) -> [TCPConnection] {
        var old: [TCPConnection] = []
        for (origin, list) in idle {
            if list.isEmpty {
                if dropEmpty { idle[origin] = nil }
                continue
            }
            guard list.contains(where: { now - $0.since >= idleLimit }) else { continue }
            var kept: [Idle] = []
            for entry in list {
                if now - entry.since < idleLimit { kept.append(entry) } else { old.append(entry.connection) }
            }
            idle[origin] = kept.isEmpty && dropEmpty ? nil : kept
        }
        return old
    }

    /// Idle connections kept for `origin` now (for tests).
    func count(_ origin: String) -> Int {
        state.withLock { $0.idle[origin]?.count ?? 0 }
    }
}
