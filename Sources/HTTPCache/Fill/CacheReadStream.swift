@_spi(Locking) import SparseCacheEngine
import SparseCacheStore
import SparseHTTP

/// The bytes of a ``ProgressiveCache/read(_:range:)``, in order, handed over one chunk at a
/// time: the reading starts with the first `next()`, and each chunk is read only after the
/// consumer took the one before. A slow consumer (a pipe, a socket) therefore holds back the
/// reads instead of letting the whole resource pile up in memory, as an `AsyncStream` would.
///
/// Ending the iteration early (a `break`, a cancelled task, the iterator going away) stops the
/// read, and with it the fetches nobody else waits on.
public struct CacheReadStream: AsyncSequence, Sendable {
    public typealias Element = [UInt8]

    let produce: @Sendable (_ send: @escaping @Sendable ([UInt8]) async throws -> Void) async throws -> Void

    public func makeAsyncIterator() -> Iterator {
        let channel = Handoff(produce: produce)
        return Iterator(channel: channel, lifetime: Lifetime(channel))
    }

    public struct Iterator: AsyncIteratorProtocol {
        let channel: Handoff
        let lifetime: Lifetime

        public mutating func next() async throws -> [UInt8]? {
            try await channel.next()
        }
    }

    /// Stops the read when the last copy of the iterator goes away. (The producer task holds
    /// the channel, so the channel itself cannot notice.)
    final class Lifetime: Sendable {
        let channel: Handoff

        init(_ channel: Handoff) {
            self.channel = channel
        }

        deinit {
            channel.cancel()
        }
    }
}

/// One chunk at a time from a producer task to a consumer: `send` returns once the consumer
/// has the chunk (or at once, when the consumer was already waiting).
final class Handoff: Sendable {
    private struct State {
        var started = false
        var producer: Task<Void, Never>?
        var chunk: [UInt8]?
        /// The producer, waiting for its chunk to be taken.
        var sender: CheckedContinuation<Void, Error>?
        /// The consumer, waiting for a chunk.
        var receiver: CheckedContinuation<[UInt8]?, Error>?
        var end: Result<Void, Error>?
    }

    private let state = Lock(State())
    private let produce: @Sendable (_ send: @escaping @Sendable ([UInt8]) async throws -> Void) async throws -> Void

    init(produce: @escaping @Sendable (_ send: @escaping @Sendable ([UInt8]) async throws -> Void) async throws -> Void) {
        self.produce = produce
    }

    func next() async throws -> [UInt8]? {
        startIfNeeded()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<[UInt8]?, Error>) in
                let action = state.withLock { state -> (() -> Void)? in
                    if let chunk = state.chunk {
                        state.chunk = nil
                        let sender = state.sender
                        state.sender = nil
                        return {
                            sender?.resume()
                            continuation.resume(returning: chunk)
                        }
                    }
                    if let end = state.end {
                        // Later calls see the end again (nil), an error only once.
                        state.end = .success(())
                        return { continuation.resume(with: end.map { nil }) }
                    }
                    if Task.isCancelled { return { continuation.resume(throwing: CancellationError()) } }
                    state.receiver = continuation
                    return nil
                }
                action?()
            }
        } onCancel: {
            cancel()
        }
    }

    private func startIfNeeded() {
        let start = state.withLock { state -> Bool in
            defer { state.started = true }
            return !state.started && state.end == nil
        }
        guard start else { return }
        let task = Task { [produce] in
            do {
                try await produce { chunk in try await self.send(chunk) }
                self.finish(.success(()))
            } catch {
                self.finish(.failure(error))
            }
        }
        // A consumer that left meanwhile found no task to cancel: cancel it here.
        let ended = state.withLock { state -> Bool in
            state.producer = task
            return state.end != nil
        }
        if ended { task.cancel() }
    }

    private enum SendAction {
        case deliver(CheckedContinuation<[UInt8]?, Error>)
        case wait
        case refuse
    }

    private func send(_ chunk: [UInt8]) async throws {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
                let action = state.withLock { state -> SendAction in
                    if state.end != nil || Task.isCancelled { return .refuse }
                    if let receiver = state.receiver {
                        state.receiver = nil
                        return .deliver(receiver)
                    }
                    state.chunk = chunk
                    state.sender = continuation
                    return .wait
                }
                switch action {
                case .deliver(let receiver):
                    receiver.resume(returning: chunk)
                    continuation.resume()
                case .refuse:
                    continuation.resume(throwing: CancellationError())
                case .wait:
                    break
                }
            }
        } onCancel: {
            state.withLock { state in
                defer { state.sender = nil }
                return state.sender
            }?.resume(throwing: CancellationError())
        }
    }

    private func finish(_ end: Result<Void, Error>) {
        let (receiver, result) = state.withLock { state -> (CheckedContinuation<[UInt8]?, Error>?, Result<Void, Error>) in
            if state.end == nil { state.end = end }
            guard let receiver = state.receiver, let result = state.end else { return (nil, .success(())) }
            state.receiver = nil
            // An error is reported once; later calls see the end.
            state.end = .success(())
            return (receiver, result)
        }
        receiver?.resume(with: result.map { nil })
    }

    /// The consumer went away: stop the producer and wake whoever waits.
    func cancel() {
        let (producer, sender, receiver) = state.withLock { state in
            defer {
                state.sender = nil
                state.receiver = nil
                state.chunk = nil
                if state.end == nil { state.end = .failure(CancellationError()) }
            }
            return (state.producer, state.sender, state.receiver)
        }
        producer?.cancel()
        sender?.resume(throwing: CancellationError())
        receiver?.resume(throwing: CancellationError())
    }
}
