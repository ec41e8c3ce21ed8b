@_spi(Locking) import SparseCacheBase

/// One direction of one descriptor watched by the ``SocketReactor``: a task that got EAGAIN
/// waits here until the descriptor is ready again.
///
/// The reactor's registration is edge-triggered, so an edge that arrives while nobody waits
/// is kept as `ready` and the next wait returns at once. Every caller tries its call first and
/// waits only after EAGAIN, so no edge is lost: one that came after the EAGAIN is either kept
/// or wakes the waiter, and one kept from before it costs one more try of the call, which then
/// gets EAGAIN again and waits for real.
final class Readiness: Sendable {
    private struct State {
        var waiter: CheckedContinuation<Void, Error>?
        var ready = false
        var closed: HTTPError?
    }

    private let state = Lock(State())

    /// Returns when the descriptor is ready; throws when it is closed or the task cancelled.
    /// One waiter at a time per direction (each connection has one task).
    func wait() async throws {
        // The common case of a busy connection: the edge came already, no suspension.
        let immediate = state.withLock { state -> Result<Void, Error>? in
            if let closed = state.closed { return .failure(closed) }
            if state.ready {
                state.ready = false
                return .success(())
            }
            return nil
        }
        if let immediate { return try immediate.get() }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
                let outcome = state.withLock { state -> Result<Void, Error>? in
                    if let closed = state.closed { return .failure(closed) }
                    if Task.isCancelled { return .failure(CancellationError()) }
                    if state.ready {
                        state.ready = false
                        return .success(())
                    }
                    state.waiter = continuation
                    return nil
                }
                if let outcome { continuation.resume(with: outcome) }
            }
        } onCancel: {
            state.withLock { state in
                defer { state.waiter = nil }
                return state.waiter
            }?.resume(throwing: CancellationError())
        }
    }

    /// An edge from the reactor: wakes the waiter, or is kept for the next wait.
    func signal() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Error>? in
            guard state.closed == nil else { return nil }
            guard let waiter = state.waiter else {
                state.ready = true
                return nil
            }
            state.waiter = nil
            return waiter
        }
        waiter?.resume()
    }

    /// Fails the waiter (and every later wait) with `reason`.
    func close(_ reason: HTTPError) {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Error>? in
            guard state.closed == nil else { return nil }
            state.closed = reason
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(throwing: reason)
    }
}
