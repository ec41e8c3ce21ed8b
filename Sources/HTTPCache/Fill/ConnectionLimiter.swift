import SparseCacheEngine
import SparseCacheStore
import SparseHTTP

/// A counting semaphore for async code: at most `limit` holders at once; the others wait,
/// suspended (never polling), and are let in first come, first served.
public actor ConnectionLimiter {
    public let limit: Int
    private var holders = 0
    private var waiters: [(id: UInt64, continuation: CheckedContinuation<Void, Error>)] = []
    private var nextID: UInt64 = 0

    public init(limit: Int) {
        precondition(limit > 0, "a limiter needs room for one holder")
        self.limit = limit
    }

    /// Waits for a place. Throws `CancellationError` when the waiting task is cancelled.
    public func acquire() async throws {
        if holders < limit {
            holders += 1
            return
        }
        let id = nextID
        nextID += 1
        // The waiter is added in an actor method: the operation closure does not keep the
        // actor's isolation (swiftlang/swift#85518).
        try await withTaskCancellationHandler {
            try await self.wait(id)
        } onCancel: {
            Task { await self.cancelWaiter(id) }
        }
    }

    private func wait(_ id: UInt64) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
            if Task.isCancelled {
                continuation.resume(throwing: CancellationError())
            } else {
                waiters.append((id, continuation))
            }
        }
    }

    /// Gives the place to the first waiter, or frees it.
    public func release() {
        if waiters.isEmpty {
            holders -= 1
        } else {
            waiters.removeFirst().continuation.resume()
        }
    }

    private func cancelWaiter(_ id: UInt64) {
        guard let index = waiters.firstIndex(where: { $0.id == id }) else { return }
        waiters.remove(at: index).continuation.resume(throwing: CancellationError())
    }

    /// Holders right now (for tests).
    public var inUse: Int { holders }
}
