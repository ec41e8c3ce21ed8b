import Foundation
@_spi(Locking) import SparseCacheBase
import Synchronization

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Routes one URLSession's delegate callbacks to the stream of each task. URLSession calls it
/// on its delegate queue; all state is behind a mutex.
package final class SessionDelegate: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    // @unchecked: NSObject is not Sendable; the only stored state is the Lock.
    private let streams = Lock<[Int: ResponseStream]>([:])
    /// Tasks whose redirects are answers to hand on, not to follow (a proxy's requests).
    private let keepsRedirects = Lock<Set<Int>>([])

    /// Routes `task`'s callbacks to `stream`. With `followRedirects` false a 3xx ends the
    /// task as its response (the delegate refuses the new request).
    package func register(_ task: URLSessionTask, stream: ResponseStream, followRedirects: Bool = true) {
        stream.attach(task)
        streams.withLock { $0[task.taskIdentifier] = stream }
        if !followRedirects { _ = keepsRedirects.withLock { $0.insert(task.taskIdentifier) } }
    }

    package func urlSession(
        _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse, newRequest request: URLRequest,
        completionHandler: @escaping (URLRequest?) -> Void
    ) {
        let keep = keepsRedirects.withLock { $0.contains(task.taskIdentifier) }
        completionHandler(keep ? nil : request)
    }

    private func stream(for task: URLSessionTask) -> ResponseStream? {
        streams.withLock { $0[task.taskIdentifier] }
    }

    package func urlSession(
        _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
        completionHandler: @escaping (URLSession.ResponseDisposition) -> Void
    ) {
        stream(for: dataTask)?.received(response: response)
        completionHandler(.allow)
    }

    package func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        stream(for: dataTask)?.received(data: data)
    }

    package func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: Error?) {
        let stream = streams.withLock { $0.removeValue(forKey: task.taskIdentifier) }
        _ = keepsRedirects.withLock { $0.remove(task.taskIdentifier) }
        stream?.finished(error: error, key: task.originalRequest?.url?.absoluteString ?? "")
    }
}

/// One request's response: the headers once they arrive, then the body as a stream of chunks.
///
/// There is no flow control here: suspending a URLSessionTask mid-transfer traps inside
/// FoundationNetworking on Linux (NativeProtocol.swift). Callers bound the memory a fast
/// origin can fill by asking for bounded ranges (``FillOptions/maximumFetch``), and the stream
/// bounds what waits unread: past ``maximumBuffered`` bytes it cancels the transfer and ends
/// the body, after what was received, with `.connectionLost`, from which a fill resumes at
/// its last byte (one more request instead of unbounded memory).
package final class ResponseStream: Sendable {
    /// Bytes received and not yet taken by the consumer, at most.
    package static let maximumBuffered = 32 << 20

    private struct State {
        var task: URLSessionTask?
        var response: HTTPURLResponse?
        var failure: Error?
        var responseWaiter: CheckedContinuation<HTTPURLResponse, Error>?
        var finished = false
        var onFinish: [@Sendable () -> Void] = []
    }

    private let state = Lock(State())
    private let continuation: AsyncThrowingStream<[UInt8], Error>.Continuation
    package let body: AsyncThrowingStream<[UInt8], Error>
    private let buffered: BufferedBytes
    private let limit: Int

    package init(maximumBuffered: Int = ResponseStream.maximumBuffered) {
        let (raw, continuation) = AsyncThrowingStream<[UInt8], Error>.makeStream()
        let buffered = BufferedBytes(raw)
        self.continuation = continuation
        self.buffered = buffered
        limit = maximumBuffered
        body = AsyncThrowingStream(unfolding: { try await buffered.next() })
    }

    /// The next chunk of the body, or nil at its end: what ``body`` gives, for a caller that
    /// makes a stream of its own (one consumer at a time, as for ``body``).
    package func nextChunk() async throws -> [UInt8]? {
        try await buffered.next()
    }

    /// Bytes waiting unread now (for tests).
    package var bufferedBytes: Int { buffered.count.load(ordering: .relaxed) }

    func attach(_ task: URLSessionTask) {
        state.withLock { $0.task = task }
    }

    /// Runs `action` once the transfer is over (at once if it already is).
    package func onFinish(_ action: @escaping @Sendable () -> Void) {
        let runNow = state.withLock { state -> Bool in
            if state.finished { return true }
            state.onFinish.append(action)
            return false
        }
        if runNow { action() }
    }

    /// Waits for the response headers.
    package func response() async throws -> HTTPURLResponse {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<HTTPURLResponse, Error>) in
            let ready: Result<HTTPURLResponse, Error>? = state.withLock { state in
                if let response = state.response { return .success(response) }
                if let failure = state.failure { return .failure(failure) }
                state.responseWaiter = continuation
                return nil
            }
            if let ready { continuation.resume(with: ready) }
        }
    }

    func received(response: URLResponse) {
        let waiter = state.withLock { state -> CheckedContinuation<HTTPURLResponse, Error>? in
            guard let http = response as? HTTPURLResponse else { return nil }
            state.response = http
            defer { state.responseWaiter = nil }
            return state.responseWaiter
        }
        if let http = response as? HTTPURLResponse { waiter?.resume(returning: http) }
    }

    func received(data: Data) {
        // Counted only when the stream took it (not after the end); the consumer may take it
        // before the count goes up, which only makes the count low for a moment.
        guard case .enqueued = continuation.yield([UInt8](data)) else { return }
        let waiting = buffered.count.add(data.count, ordering: .relaxed).newValue
        if waiting > limit {
            let task = state.withLock { $0.task }
            let key = task?.originalRequest?.url?.absoluteString ?? ""
            // The chunks already yielded are delivered first; then the consumer sees a cut it
            // resumes from.
            continuation.finish(
                throwing: HTTPError(
                    .connectionLost, operation: "fetch", peer: key,
                    detail: "more than \(limit) bytes arrived ahead of the reader; stopped, to resume from the last byte"))
            task?.cancel()
        }
    }

    func finished(error: Error?, key: String) {
        let mapped = error.map { Self.map($0, key: key) }
        let (waiter, failure, actions) = state.withLock { state in
            state.finished = true
            // Ended before any headers, without an error of its own: still a failure to report.
            state.failure = mapped ?? (state.response == nil ? HTTPError(.connectionLost, operation: "fetch", peer: key, detail: "no response") : nil)
            defer {
                state.responseWaiter = nil
                state.onFinish = []
                state.task = nil
            }
            return (state.responseWaiter, state.failure, state.onFinish)
        }
        // A waiter exists only while no response has come, so `failure` is set then.
        if let waiter, let failure { waiter.resume(throwing: failure) }
        if let mapped { continuation.finish(throwing: mapped) } else { continuation.finish() }
        for action in actions { action() }
    }

    /// The raw stream's consumer side, counting what it takes. One consumer at a time, as for
    /// any AsyncThrowingStream.
    private final class BufferedBytes: @unchecked Sendable {
        // @unchecked: `iterator` is used by the body's single consumer only; `count` is atomic.
        let count = Atomic<Int>(0)
        private var iterator: AsyncThrowingStream<[UInt8], Error>.Iterator

        init(_ raw: AsyncThrowingStream<[UInt8], Error>) {
            iterator = raw.makeAsyncIterator()
        }

        func next() async throws -> [UInt8]? {
            let chunk = try await iterator.next()
            if let chunk { count.subtract(chunk.count, ordering: .relaxed) }
            return chunk
        }
    }

    /// URLSession's errors as SparseHTTP's: cut connections and timeouts may pass; a URL or an
    /// answer that cannot work (`.malformed`) will not.
    static func map(_ error: Error, key: String) -> HTTPError {
        if let error = error as? HTTPError { return error }
        let nsError = error as NSError
        if nsError.domain == NSURLErrorDomain {
            switch nsError.code {
            case NSURLErrorCancelled:
                return HTTPError(.connectionLost, operation: "fetch", peer: key, detail: "cancelled")
            case NSURLErrorBadURL, NSURLErrorUnsupportedURL, NSURLErrorHTTPTooManyRedirects, NSURLErrorRedirectToNonExistentLocation,
                NSURLErrorCannotDecodeContentData, NSURLErrorCannotParseResponse, NSURLErrorBadServerResponse:
                return HTTPError(.malformed, operation: "fetch", peer: key, detail: nsError.localizedDescription)
            case NSURLErrorTimedOut:
                return HTTPError(.timedOut, operation: "fetch", peer: key, detail: "timed out waiting for the origin")
            case NSURLErrorCannotConnectToHost:
                return HTTPError(.connectFailed, operation: "fetch", peer: key, detail: "connection refused")
            case NSURLErrorNetworkConnectionLost:
                return HTTPError(.connectionLost, operation: "fetch", peer: key, detail: "the connection was cut")
            case NSURLErrorCannotFindHost, NSURLErrorDNSLookupFailed:
                return HTTPError(.unresolved, operation: "fetch", peer: key, detail: "host not found")
            default:
                break
            }
        }
        return HTTPError(.connectionLost, operation: "fetch", peer: key, detail: nsError.localizedDescription)
    }
}
