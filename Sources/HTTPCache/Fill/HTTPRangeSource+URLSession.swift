import Foundation
import SparseCacheEngine
import SparseCacheStore
import SparseHTTP

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Requests through URLSession: `https://`, redirects to it, and `transport: .urlSession`.
extension HTTPRangeSource {
    /// The URLSession, made on first use (an `http://` source never needs one).
    func urlSession() -> (URLSession, SessionDelegate) {
        session.withLock { session in
            if let session { return session }
            let configuration = URLSessionConfiguration.ephemeral
            configuration.timeoutIntervalForRequest = Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18
            configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
            configuration.urlCache = nil
            configuration.httpMaximumConnectionsPerHost = 64
            let delegate = SessionDelegate()
            let queue = OperationQueue()
            queue.maxConcurrentOperationCount = 1
            let made = (URLSession(configuration: configuration, delegate: delegate, delegateQueue: queue), delegate)
            session = made
            return made
        }
    }

    /// Through URLSession, which follows redirects itself.
    /// A proxy client's fields go with the request, but for `Accept-Encoding` (URLSession
    /// would decode the body, and the cache stores bytes as the origin sends them), and
    /// redirects are followed by URLSession itself.
    func fetchThroughSession(
        _ url: URL, _ range: Range<Int64>?, validator: ContentValidator?, forwarding: Forwarding?, release: FinishAction
    ) async throws -> RangeResponse {
        var request = URLRequest(url: url)
        request.httpMethod = "GET"
        for field in forwarding?.headers ?? [] where !field.hasName("accept-encoding") {
            request.addValue(field.value, forHTTPHeaderField: field.name)
        }
        // Bytes as they are stored: a compressed transfer would make ranges mean something else.
        request.setValue("identity", forHTTPHeaderField: "Accept-Encoding")
        if let range {
            request.setValue("bytes=\(range.lowerBound)-\(range.upperBound - 1)", forHTTPHeaderField: "Range")
            if let validator, let ifRange = Self.ifRange(validator) { request.setValue(ifRange, forHTTPHeaderField: "If-Range") }
        }
        let (session, delegate) = urlSession()
        let stream = ResponseStream()
        let requestTime = Int64(time(nil))
        let task = session.dataTask(with: request)
        delegate.register(task, stream: stream)
        stream.onFinish { release.run() }
        task.resume()
        let response: HTTPURLResponse
        do {
            response = try await withTaskCancellationHandler {
                try await stream.response()
            } onCancel: {
                task.cancel()
            }
        } catch {
            task.cancel()
            throw error
        }
        let headers = HTTPHeaders(response)
        let contentLength = response.expectedContentLength >= 0 ? response.expectedContentLength : nil
        if let reason = Self.uncached(
            status: response.statusCode, headers: headers, contentLength: contentLength, forwarding: forwarding, target: url.path)
        {
            let head = HTTPResponseHead(status: response.statusCode, headers: headers)
            throw OriginAnswer(head: head, body: stream.body, cancel: { task.cancel() }, reason: reason)
        }
        do {
            let length = response.expectedContentLength >= 0 ? response.expectedContentLength : nil
            let (info, offset) = try Self.interpret(
                status: response.statusCode, headers: headers, contentLength: length, requested: range, key: key,
                times: (requestTime, Int64(time(nil))), forwarding: forwarding)
            return RangeResponse(info: info, offset: offset, body: stream.body, cancel: { task.cancel() })
        } catch {
            task.cancel()
            throw error
        }
    }
}

extension HTTPHeaders {
    /// The fields URLSession reports for a response (it has already joined repeated ones).
    init(_ response: HTTPURLResponse) {
        self.init(
            response.allHeaderFields.compactMap { name, value in
                guard let name = name as? String, let value = value as? String else { return nil }
                return HTTPHeaderField(name: name, value: value)
            })
    }
}
