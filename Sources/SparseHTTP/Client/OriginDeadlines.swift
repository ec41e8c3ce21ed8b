import Dispatch
@_spi(Locking) import SparseCacheBase

/// The time limits of waits on origin connections, checked by one timer for the whole process.
///
/// A wait is armed with its connection and an instant; when the instant passes before the wait
/// is disarmed, the connection is closed with the given reason, which the waiting call then
/// throws. ``HTTPExchange`` used a sleeping task per request instead (a task group around the
/// head, a watchdog task for the body): measured on a small miss, those tasks and their dispatch
/// timers cost about ten thread wake-ups and half the CPU time of the whole request.
///
/// The timer ticks every ``tick`` while anything is armed and is suspended otherwise, so an
/// idle process is not woken; a limit is kept to within one tick.
final class OriginDeadlines: Sendable {
    /// The deadlines of every origin exchange of the process.
    static let shared = OriginDeadlines(tick: .milliseconds(50))

    let tick: Duration

    private struct Armed {
        var connection: TCPConnection
        var deadline: ContinuousClock.Instant
        var reason: String
    }

    private struct State {
        var armed: [UInt64: Armed] = [:]
        var nextToken: UInt64 = 1
        var ticking = false
    }

    private let state = Lock(State())
    /// Dispatch sources are thread-safe; Dispatch does not mark them `Sendable`.
    private nonisolated(unsafe) let timer: any DispatchSourceTimer

    init(tick: Duration) {
        self.tick = tick
        timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "sparsecache.origin.deadlines"))
        let nanoseconds = Int(tick.components.seconds) * 1_000_000_000 + Int(tick.components.attoseconds / 1_000_000_000)
        timer.schedule(deadline: .now() + .nanoseconds(nanoseconds), repeating: .nanoseconds(nanoseconds))
        timer.setEventHandler(handler: Self.handler(for: self))
        // Activated, then held until the first wait is armed.
        timer.activate()
        timer.suspend()
    }

    deinit {
        // Dispatch traps on releasing a suspended source: resumed, then cancelled.
        timer.cancel()
        if !state.withLock({ $0.ticking }) { timer.resume() }
    }

    /// The tick, made in a nonisolated function: a `@Sendable` closure that holds the registry
    /// weakly (the shared one lives for the process).
    private static func handler(for deadlines: OriginDeadlines) -> @Sendable () -> Void {
        { [weak deadlines] in deadlines?.expire(now: .now) }
    }

    /// Closes `connection` with `reason` if the wait is still armed at `deadline`. Returns the
    /// token that disarms it.
    func arm(_ connection: TCPConnection, until deadline: ContinuousClock.Instant, reason: String) -> UInt64 {
        state.withLock { state in
            let token = state.nextToken
            state.nextToken += 1
            state.armed[token] = Armed(connection: connection, deadline: deadline, reason: reason)
            if !state.ticking {
                state.ticking = true
                timer.resume()
            }
            return token
        }
    }

    /// The wait ended in time (or failed): nothing happens to its connection.
    func disarm(_ token: UInt64) {
        state.withLock { _ = $0.armed.removeValue(forKey: token) }
    }

    /// Runs `operation` with `connection` closed with `reason` once `deadline` passes.
    func within<T>(
        _ connection: TCPConnection, until deadline: ContinuousClock.Instant, reason: String, _ operation: () async throws -> T
    ) async throws -> T {
        let token = arm(connection, until: deadline, reason: reason)
        defer { disarm(token) }
        return try await operation()
    }

    /// Waits armed now, and whether the timer runs (for tests).
    var armedCount: Int { state.withLock { $0.armed.count } }
    var isTicking: Bool { state.withLock { $0.ticking } }

    /// Closes the connections whose deadline has passed; suspends the timer when nothing is
    /// left armed. The closes happen under the lock: once ``disarm(_:)`` has returned, no close
    /// of that wait can still come (else a late one could hit the connection after its
    /// exchange put it back in the pool and another request took it). `close` never calls back.
    private func expire(now: ContinuousClock.Instant) {
        state.withLock { state in
            for (token, armed) in state.armed where armed.deadline <= now {
                state.armed[token] = nil
                armed.connection.close(armed.reason, timedOut: true)
            }
            if state.armed.isEmpty, state.ticking {
                state.ticking = false
                timer.suspend()
            }
        }
    }
}
