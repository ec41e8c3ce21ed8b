@_spi(Locking) import SparseCacheEngine
import Synchronization
import SparseCacheStore
import SparseHTTP

/// A counting semaphore for async code: at most `limit` holders at once; the others wait,
/// suspended (never polling).
///
/// Waiters are let in by priority, first come, first served within one: a request a client
/// waits on (``Priority/waited``, the default) goes before prefetch and read-ahead
/// (``Priority/background``). And when a waited-on request finds every place taken while a
/// background holder has one, that holder is asked to yield it (its `onYield` runs: a fetch
/// stops its transfer, keeps what arrived, and queues again behind the waited-on requests).
///
/// A lock, not an actor: every request to an origin takes a place and gives it back, and a
/// place that is free is taken without a suspension; giving it back needs no task of its own.
/// Continuations are resumed and `onYield` called after the lock is let go.
package final class ConnectionLimiter: Sendable {
    /// How much a client waits on a request.
    package enum Priority: Int, Sendable, Comparable {
        /// Prefetch and read-ahead: nobody waits on it yet.
        case background = 0
        /// A client is waiting for these bytes.
        case waited = 1

        package static func < (lhs: Priority, rhs: Priority) -> Bool { lhs.rawValue < rhs.rawValue }
    }

    /// The priority of the current task's requests: fetches started inside
    /// `ConnectionLimiter.$priority.withValue(.background) { ... }` (and the tasks they start)
    /// are background ones.
    @TaskLocal package static var priority: Priority = .waited

    /// The promotion of the current task's background requests, when they can be promoted: a
    /// fetch started in the background (read-ahead, prefetch) that a client then waits on
    /// counts as waited-on from then on (``Promotion/promote()``): it is no longer asked to yield,
    /// and its next request queues with the waited-on ones.
    @TaskLocal package static var promotion: Promotion?

    /// Whether a background fetch has become one a client waits on.
    package final class Promotion: Sendable {
        private let promoted = Atomic<Bool>(false)

        package init() {}

        package func promote() { promoted.store(true, ordering: .releasing) }

        var isPromoted: Bool { promoted.load(ordering: .acquiring) }
    }

    /// The priority a request of the current task takes now.
    package static var effectivePriority: Priority { promotion?.isPromoted == true ? .waited : priority }

    /// A promotion for requests about to be made in the background (nil when the current task
    /// is waited on): set it as ``promotion`` around them.
    static func newPromotion() -> Promotion? { effectivePriority == .background ? Promotion() : nil }

    package let limit: Int

    private struct Waiter {
        let id: UInt64
        let priority: Priority
        let promotion: Promotion?
        let onYield: (@Sendable () -> Void)?
        let continuation: CheckedContinuation<Void, Error>
    }

    /// A background holder that can be asked to give its place up. An entry may hold the last
    /// reference to its fetch (through `yield`), whose end gives a place back here: entries are
    /// dropped only after the lock is let go.
    private typealias Yielder = (ticket: UInt64, promotion: Promotion?, yield: @Sendable () -> Void)

    private struct State {
        var holders = 0
        var waiters: [Waiter] = []
        /// Background holders that can be asked to give their place up, oldest first.
        var yielders: [Yielder] = []
        var nextID: UInt64 = 0

        /// `ticket` has just been given a place: a background holder that can yield is listed
        /// in the same step, so a waited-on request that comes next finds it.
        mutating func listYielder(_ ticket: UInt64, priority: Priority, promotion: Promotion?, onYield: (@Sendable () -> Void)?) {
            if priority == .background, promotion?.isPromoted != true, let onYield { yielders.append((ticket, promotion, onYield)) }
        }

        /// `waiter` found every place taken (or one came free since it looked). Returns how to
        /// resume it now (nil: it is queued), the background holder it asks to yield, and the
        /// entries taken off the list on the way (for the caller to drop after the lock).
        mutating func register(_ waiter: Waiter, limit: Int) -> (resume: Result<Void, Error>?, ask: Yielder?, dropped: [Yielder]) {
            // Checked under the lock that `cancelWaiter` takes: a cancellation is either seen
            // here or finds the waiter queued.
            if Task.isCancelled { return (.failure(CancellationError()), nil, []) }
            if holders < limit {
                holders += 1
                listYielder(waiter.id, priority: waiter.priority, promotion: waiter.promotion, onYield: waiter.onYield)
                return (.success(()), nil, [])
            }
            // Queued before any holder is asked to yield: the place given up comes to the first
            // waiter (this one, or another waited-on one), never to the yielding fetch asking
            // again.
            waiters.append(waiter)
            // Each waited-on waiter asks one background holder; the newest has the least to
            // lose. One a client has come to wait on meanwhile keeps its place (and is no longer
            // listed).
            guard waiter.priority == .waited else { return (nil, nil, []) }
            var promoted: [Yielder] = []
            while let yielder = yielders.popLast() {
                guard yielder.promotion?.isPromoted == true else { return (nil, yielder, promoted) }
                promoted.append(yielder)
            }
            return (nil, nil, promoted)
        }

        /// A place given back: to the first waiter of the highest priority (returned, for the
        /// caller to resume once the lock is let go), else freed.
        mutating func giveBack() -> CheckedContinuation<Void, Error>? {
            guard !waiters.isEmpty else {
                holders -= 1
                return nil
            }
            let index = waiters.firstIndex { $0.priority == .waited || $0.promotion?.isPromoted == true } ?? 0
            let waiter = waiters.remove(at: index)
            listYielder(waiter.id, priority: waiter.priority, promotion: waiter.promotion, onYield: waiter.onYield)
            return waiter.continuation
        }
    }

    private let state = Lock(State())

    package init(limit: Int) {
        precondition(limit > 0, "a limiter needs room for one holder")
        self.limit = limit
    }

    /// Waits for a place at the current task's ``priority``. Throws `CancellationError` when
    /// the waiting task is cancelled. Give the place back with ``release()``.
    package func acquire() async throws {
        _ = try await acquire(priority: Self.priority, onYield: nil)
    }

    /// Waits for a place at `priority` and returns a ticket for ``release(ticket:)``. A
    /// background holder with `onYield` may be asked to give its place up for a waited-on
    /// request: `onYield` then runs once (from the limiter; it must not block), and the holder
    /// still releases its place as usual when it stops.
    package func acquire(priority: Priority, onYield: (@Sendable () -> Void)?) async throws -> UInt64 {
        let promotion = priority == .background ? Self.promotion : nil
        let (ticket, placed) = state.withLock { state -> (UInt64, Bool) in
            let ticket = state.nextID
            state.nextID += 1
            guard state.holders < limit else { return (ticket, false) }
            state.holders += 1
            state.listYielder(ticket, priority: priority, promotion: promotion, onYield: onYield)
            return (ticket, true)
        }
        if placed { return ticket }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
                let waiter = Waiter(id: ticket, priority: priority, promotion: promotion, onYield: onYield, continuation: continuation)
                // The entries taken off the list come out of the lock to be dropped (`Yielder`).
                let (resume, ask, _) = state.withLock { $0.register(waiter, limit: limit) }
                if let resume { continuation.resume(with: resume) }
                ask?.yield()
            }
        } onCancel: {
            cancelWaiter(ticket)
        }
        return ticket
    }

    /// Gives the place to the first waiter of the highest priority, or frees it.
    package func release() {
        state.withLock { $0.giveBack() }?.resume()
    }

    /// Gives back the place of `ticket` (from ``acquire(priority:onYield:)``): in one step with
    /// taking it off the yielders, so no waiter asks another holder to yield meanwhile.
    package func release(ticket: UInt64) {
        // The entry taken off comes out of the lock to be dropped (`Yielder`).
        let (next, _) = state.withLock { state -> (CheckedContinuation<Void, Error>?, [Yielder]) in
            var dropped: [Yielder] = []
            state.yielders.removeAll { yielder in
                guard yielder.ticket == ticket else { return false }
                dropped.append(yielder)
                return true
            }
            return (state.giveBack(), dropped)
        }
        next?.resume()
    }

    /// A waiter's task was cancelled: it leaves the queue with `CancellationError`. (One not
    /// queued yet sees the cancellation as it registers; one given a place keeps it.)
    private func cancelWaiter(_ id: UInt64) {
        let waiter = state.withLock { state -> Waiter? in
            guard let index = state.waiters.firstIndex(where: { $0.id == id }) else { return nil }
            return state.waiters.remove(at: index)
        }
        waiter?.continuation.resume(throwing: CancellationError())
    }

    /// Waiters right now (for tests).
    package var queued: Int { state.withLock { $0.waiters.count } }

    /// Holders right now (for tests).
    package var inUse: Int { state.withLock { $0.holders } }
}
