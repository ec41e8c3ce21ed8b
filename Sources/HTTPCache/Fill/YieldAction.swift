@_spi(Locking) import SparseCacheEngine

/// What a background fetch does when its connection is wanted for a waited-on request: stop
/// its transfer. Asked for possibly before the transfer exists, in which case the transfer is
/// stopped as soon as it is set.
final class YieldAction: Sendable {
    private let state = Lock<(fired: Bool, action: (@Sendable () -> Void)?)>((false, nil))

    func fire() {
        let action = state.withLock { state in
            state.fired = true
            return state.action
        }
        action?()
    }

    func set(_ action: @escaping @Sendable () -> Void) {
        let fired = state.withLock { state in
            state.action = action
            return state.fired
        }
        if fired { action() }
    }

    var fired: Bool { state.withLock { $0.fired } }

    /// `body`, whose end after a yield is ``ConnectionYielded`` rather than the cancellation or
    /// cut the stopped transfer reports: the fill then asks again from its last byte, instead
    /// of taking the stop for a reader's leaving (and fetching the segment again from its start).
    func guarding(_ body: AsyncThrowingStream<[UInt8], Error>) -> AsyncThrowingStream<[UInt8], Error> {
        let chunks = SharedIterator(body)
        return AsyncThrowingStream(unfolding: { [self] in
            do {
                return try await chunks.next()
            } catch {
                if fired { throw ConnectionYielded() }
                throw error
            }
        })
    }

    /// The iterator of a body with one consumer, usable from the unfolding closure.
    private final class SharedIterator: @unchecked Sendable {
        // @unchecked: the body has a single consumer, which calls `next` one call at a time.
        private var iterator: AsyncThrowingStream<[UInt8], Error>.Iterator

        init(_ body: AsyncThrowingStream<[UInt8], Error>) {
            iterator = body.makeAsyncIterator()
        }

        func next() async throws -> [UInt8]? {
            try await iterator.next()
        }
    }
}

/// A background transfer gave its connection to a request a client waits on (see
/// ``ConnectionLimiter``): what arrived stays, and the fill asks again from there, queued behind
/// the waited-on requests.
struct ConnectionYielded: Error, CustomStringConvertible {
    var description: String { "the transfer gave its connection to a request a client waits on" }
}
