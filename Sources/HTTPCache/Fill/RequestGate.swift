@_spi(Locking) import SparseCacheEngine

/// Whether a fetch's request may be on its way to the origin. Until it is (the fetch still
/// waits for a connection slot, or sleeps before a retry), a fetch nobody wants any more is
/// cancelled: nothing was asked. From then on the origin sends its answer whatever the cache
/// does, so the fetch is left to take the segment it is receiving (``FillResource/Fetch/unwanted``):
/// cancelled, it would drop that segment and the next reader would ask for it again.
///
/// The fetch and its cancel race; the gate decides who won. A source that waits before it
/// sends (``HTTPRangeSource`` behind its ``ConnectionLimiter``) calls ``send()`` once the wait
/// is over, as the task-local ``current``. A source that never calls it is cancelled as before.
final class RequestGate: Sendable {
    /// The gate of the fetch the current task runs.
    @TaskLocal static var current: RequestGate?

    private enum State {
        /// No request of the fetch is out.
        case idle
        /// A request may be out: it gets its answer.
        case sent
        /// Nobody wants the fetch: no request may go out.
        case withdrawn
    }

    private let state = Lock(State.idle)

    init() {}

    /// Called just before a request goes out: false when the fetch was withdrawn (the request
    /// must not be sent).
    func send() -> Bool {
        state.withLock { state in
            guard state != .withdrawn else { return false }
            state = .sent
            return true
        }
    }

    /// The request's answer has been read (or it failed): no request is out.
    func answered() {
        state.withLock { state in
            if state == .sent { state = .idle }
        }
    }

    /// Withdraws a fetch whose request is not out: true when it was withdrawn (now or
    /// before), false when a request may be out and the fetch must be let take its answer.
    func withdraw() -> Bool {
        state.withLock { state in
            guard state != .sent else { return false }
            state = .withdrawn
            return true
        }
    }
}
