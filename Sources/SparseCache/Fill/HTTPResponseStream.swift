import Foundation
import Synchronization

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Routes one URLSession's delegate callbacks to the stream of each task. URLSession calls it
/// on its delegate queue; all state is behind a mutex.
final class SessionDelegate: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    // @unchecked: NSObject is not Sendable; the only stored state is the Mutex.
    private let streams = Mutex<[Int: ResponseStream]>([:])

    func register(_ task: URLSessionTask, stream: ResponseStream) {
        stream.attach(task)
        streams.withLock { $0[task.taskIdentifier] = stream }
    }

    private func stream(for task: URLSessionTask) -> ResponseStream? {
        streams.withLock { $0[task.taskIdentifier] }
    }

    func urlSession(
        _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
        completionHandler: @escaping (URLSession.ResponseDisposition) -> Void
    ) {
        stream(for: dataTask)?.received(response: response)
        completionHandler(.allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        stream(for: dataTask)?.received(data: data)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: Error?) {
        let stream = streams.withLock { $0.removeValue(forKey: task.taskIdentifier) }
        stream?.finished(error: error, key: task.originalRequest?.url?.absoluteString ?? "")
    }
}

/// One request's response: the headers once they arrive, then the body as a ``ByteStream``.
/// Pauses the transfer (URLSessionTask.suspend) while more than `bufferLimit` bytes wait
/// unconsumed, and resumes it below half of that.
final class ResponseStream: Sendable {
    private struct State {
        var task: URLSessionTask?
        var response: HTTPURLResponse?
        var failure: Error?
        var responseWaiter: CheckedContinuation<HTTPURLResponse, Error>?
        var buffered = 0
        var paused = false
        var finished = false
        var onFinish: [@Sendable () -> Void] = []
    }

    private let state = Mutex(State())
    private let bufferLimit: Int
    private let continuation: AsyncThrowingStream<[UInt8], Error>.Continuation
    let body: ByteStream

    init(bufferLimit: Int) {
        self.bufferLimit = max(1 << 16, bufferLimit)
        let (chunks, continuation) = AsyncThrowingStream<[UInt8], Error>.makeStream()
        self.continuation = continuation
        let consumedBox = ConsumedHook()
        body = ByteStream(chunks) { consumedBox.call($0) }
        consumedBox.target = self
    }

    func attach(_ task: URLSessionTask) {
        state.withLock { $0.task = task }
    }

    /// Runs `action` once the transfer is over (at once if it already is).
    func onFinish(_ action: @escaping @Sendable () -> Void) {
        let runNow = state.withLock { state -> Bool in
            if state.finished { return true }
            state.onFinish.append(action)
            return false
        }
        if runNow { action() }
    }

    /// Waits for the response headers.
    func response() async throws -> HTTPURLResponse {
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
        let bytes = [UInt8](data)
        let pause = state.withLock { state -> URLSessionTask? in
            state.buffered += bytes.count
            guard !state.paused, state.buffered > bufferLimit else { return nil }
            state.paused = true
            return state.task
        }
        continuation.yield(bytes)
        pause?.suspend()
    }

    /// The consumer took `count` bytes.
    func consumed(_ count: Int) {
        let resume = state.withLock { state -> URLSessionTask? in
            state.buffered -= count
            guard state.paused, state.buffered <= bufferLimit / 2 else { return nil }
            state.paused = false
            return state.task
        }
        resume?.resume()
    }

    func finished(error: Error?, key: String) {
        let mapped = error.map { Self.map($0, key: key) }
        let (waiter, actions) = state.withLock { state -> (CheckedContinuation<HTTPURLResponse, Error>?, [@Sendable () -> Void]) in
            state.finished = true
            state.failure = mapped ?? (state.response == nil ? SparseCacheError(.originUnavailable, operation: "fetch", path: key, detail: "no response") : nil)
            let waiter = state.responseWaiter
            state.responseWaiter = nil
            let actions = state.onFinish
            state.onFinish = []
            state.task = nil
            return (waiter, actions)
        }
        if let waiter {
            waiter.resume(throwing: mapped ?? SparseCacheError(.originUnavailable, operation: "fetch", path: key, detail: "no response"))
        }
        if let mapped { continuation.finish(throwing: mapped) } else { continuation.finish() }
        for action in actions { action() }
    }

    /// URLSession's errors as sparsecache errors: cut connections and timeouts may pass;
    /// a URL that cannot work will not.
    static func map(_ error: Error, key: String) -> SparseCacheError {
        if let error = error as? SparseCacheError { return error }
        let nsError = error as NSError
        if nsError.domain == NSURLErrorDomain {
            switch nsError.code {
            case NSURLErrorCancelled:
                return SparseCacheError(.originUnavailable, operation: "fetch", path: key, detail: "cancelled")
            case NSURLErrorBadURL, NSURLErrorUnsupportedURL, NSURLErrorHTTPTooManyRedirects, NSURLErrorRedirectToNonExistentLocation,
                NSURLErrorCannotDecodeContentData, NSURLErrorCannotParseResponse, NSURLErrorBadServerResponse:
                return SparseCacheError(.origin, operation: "fetch", path: key, detail: nsError.localizedDescription)
            default:
                break
            }
        }
        return SparseCacheError(.originUnavailable, operation: "fetch", path: key, detail: nsError.localizedDescription)
    }
}

/// Lets the body's consumption hook reach the stream that owns the body without a cycle at
/// init time.
private final class ConsumedHook: @unchecked Sendable {
    // @unchecked: `target` is set once, in ResponseStream.init, before the body is shared.
    weak var target: ResponseStream?

    func call(_ count: Int) { target?.consumed(count) }
}
