import SparseCacheEngine
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
public actor ConnectionLimiter {
    /// How much a client waits on a request.
    public enum Priority: Int, Sendable, Comparable {
        /// Prefetch and read-ahead: nobody waits on it yet.
        case background = 0
        /// A client is waiting for these bytes.
        case waited = 1

        public static func < (lhs: Priority, rhs: Priority) -> Bool { lhs.rawValue < rhs.rawValue }
    }

    /// The priority of the current task's requests: fetches started inside
    /// `ConnectionLimiter.$priority.withValue(.background) { ... }` (and the tasks they start)
    /// are background ones.
    @TaskLocal public static var priority: Priority = .waited

    /// The promotion of the current task's background requests, when they can be promoted: a
    /// fetch started in the background (read-ahead, prefetch) that a client then waits on
    /// counts as waited-on from then on (``Promotion/promote()``): it is no longer asked to yield,
    /// and its next request queues with the waited-on ones.
    @TaskLocal public static var promotion: Promotion?

    /// Whether a background fetch has become one a client waits on.
    public final class Promotion: Sendable {
        private let promoted = Atomic<Bool>(false)

        public init() {}

        public func promote() { promoted.store(true, ordering: .releasing) }

        public var isPromoted: Bool { promoted.load(ordering: .acquiring) }
    }

    /// The priority a request of the current task takes now.
    public static var effectivePriority: Priority { promotion?.isPromoted == true ? .waited : priority }

    /// A promotion for requests about to be made in the background (nil when the current task
    /// is waited on): set it as ``promotion`` around them.
    static func newPromotion() -> Promotion? { effectivePriority == .background ? Promotion() : nil }

    public let limit: Int
    private var holders = 0
    private var waiters: [(id: UInt64, priority: Priority, promotion: Promotion?, continuation: CheckedContinuation<Void, Error>)] = []
    /// Background holders that can be asked to give their place up, oldest first.
    private var yielders: [(ticket: UInt64, promotion: Promotion?, yield: @Sendable () -> Void)] = []
    private var nextID: UInt64 = 0

    public init(limit: Int) {
        precondition(limit > 0, "a limiter needs room for one holder")
        self.limit = limit
    }

    /// Waits for a place at the current task's ``priority``. Throws `CancellationError` when
    /// the waiting task is cancelled. Give the place back with ``release()``.
    public func acquire() async throws {
        _ = try await acquire(priority: Self.priority, onYield: nil)
    }

    /// Waits for a place at `priority` and returns a ticket for ``release(ticket:)``. A
    /// background holder with `onYield` may be asked to give its place up for a waited-on
    /// request: `onYield` then runs once (from the limiter; it must not block), and the holder
    /// still releases its place as usual when it stops.
    public func acquire(priority: Priority, onYield: (@Sendable () -> Void)?) async throws -> UInt64 {
        let ticket = nextID
        nextID += 1
        let promotion = priority == .background ? Self.promotion : nil
        if holders < limit {
            holders += 1
        } else {
            if priority == .waited {
                // Each waited-on waiter asks one background holder; the newest has the least
                // to lose. One a client has come to wait on meanwhile keeps its place.
                while let yielder = yielders.popLast() {
                    if yielder.promotion?.isPromoted == true { continue }
                    yielder.yield()
                    break
                }
            }
            // The waiter is added in an actor method: the operation closure does not keep the
            // actor's isolation (swiftlang/swift#85518).
            try await withTaskCancellationHandler {
                try await self.wait(ticket, priority: priority, promotion: promotion)
            } onCancel: {
                Task { await self.cancelWaiter(ticket) }
            }
        }
        if priority == .background, promotion?.isPromoted != true, let onYield { yielders.append((ticket, promotion, onYield)) }
        return ticket
    }

    private func wait(_ id: UInt64, priority: Priority, promotion: Promotion?) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
            if Task.isCancelled {
                continuation.resume(throwing: CancellationError())
            } else if holders < limit {
                // A place came free between the look in `acquire` and this registration (a
                // holder asked to yield released it meanwhile).
                holders += 1
                continuation.resume()
            } else {
                waiters.append((id, priority, promotion, continuation))
            }
        }
    }

    /// Gives the place to the first waiter of the highest priority, or frees it.
    public func release() {
        if waiters.isEmpty {
            holders -= 1
        } else {
            let index = waiters.firstIndex { $0.priority == .waited || $0.promotion?.isPromoted == true } ?? 0
            waiters.remove(at: index).continuation.resume()
        }
    }

    /// Gives back the place of `ticket` (from ``acquire(priority:onYield:)``).
    public func release(ticket: UInt64) {
        yielders.removeAll { $0.ticket == ticket }
        release()
    }

    private func cancelWaiter(_ id: UInt64) {
        guard let index = waiters.firstIndex(where: { $0.id == id }) else { return }
        waiters.remove(at: index).continuation.resume(throwing: CancellationError())
    }

    /// Waiters right now (for tests).
    public var queued: Int { waiters.count }

    /// Holders right now (for tests).
    public var inUse: Int { holders }
}
