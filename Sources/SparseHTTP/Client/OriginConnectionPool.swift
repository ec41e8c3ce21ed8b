import SparseCacheEngine
import Synchronization

/// Idle keep-alive connections to `http://` origins, by host and port, for ``HTTPExchange`` to
/// reuse: a player's next range (a seek) then costs one round trip instead of a TCP handshake
/// and one.
///
/// A connection comes back only after a response whose body ended exactly where its framing
/// said (a length or a last chunk) and whose origin keeps the connection open. One that was
/// closed by its origin or has unread bytes is dropped when it is taken; those idle for
/// ``idleLimit`` are closed at the next take or put for any origin. An origin may still close
/// one just as a request goes out; the exchange then retries once on a new connection.
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

    private let idle = Mutex<[String: [Idle]]>([:])

    init(perOrigin: Int = connectionsPerOrigin, idleLimit: Duration = .seconds(4)) {
        self.perOrigin = perOrigin
        self.idleLimit = idleLimit
    }

    /// The most recently used idle connection to `origin` that can still carry a request.
    func take(_ origin: String) -> TCPConnection? {
        let now = ContinuousClock.now
        var stale: [TCPConnection] = []
        defer { for connection in stale { connection.close("idle too long, or closed by the origin") } }
        return idle.withLock { idle -> TCPConnection? in
            stale = pruned(&idle, now: now)
            while let candidate = idle[origin]?.popLast() {
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
        idle.withLock { idle in
            closing = pruned(&idle, now: now)
            var list = idle[origin, default: []]
            guard list.count < perOrigin else {
                closing.append(connection)
                return
            }
            list.append(Idle(connection: connection, since: now))
            idle[origin] = list
        }
        for connection in closing { connection.close("idle too long, or enough idle connections to this origin") }
    }

    /// Takes out every connection idle for ``idleLimit`` or longer, of every origin: a proxy
    /// that talks to many origins once each must not keep their connections (and descriptors)
    /// until it exits.
    private func pruned(_ idle: inout [String: [Idle]], now: ContinuousClock.Instant) -> [TCPConnection] {
        var old: [TCPConnection] = []
        for (origin, list) in idle {
            var kept: [Idle] = []
            for entry in list {
                if now - entry.since < idleLimit { kept.append(entry) } else { old.append(entry.connection) }
            }
            if kept.count < list.count { idle[origin] = kept.isEmpty ? nil : kept }
        }
        return old
    }

    /// Idle connections kept for `origin` now (for tests).
    func count(_ origin: String) -> Int {
        idle.withLock { $0[origin]?.count ?? 0 }
    }
}
