import Foundation
@_spi(Locking) import SparseCacheEngine
import SparseCacheStore
import SparseHTTP

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Requests through URLSession: `https://`, redirects to it, and `transport: .urlSession`.
extension HTTPRangeSource {
    /// The URLSession, made on first use (an `http://` source never needs one).
    func urlSession() -> (URLSession, SessionDelegate) {
        shared.session.withLock { session in
            if let session { return session }
            let configuration = URLSessionConfiguration.ephemeral
            configuration.timeoutIntervalForRequest = Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18
            configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
            configuration.urlCache = nil
            configuration.httpMaximumConnectionsPerHost = 64
            // A shared cache keeps no cookies of its own: an ephemeral session still has a jar,
            // and would send one client's Set-Cookie with every later request of every client
            // (a client's own Cookie field is forwarded as it came).
            configuration.httpShouldSetCookies = false
            configuration.httpCookieAcceptPolicy = .never
            configuration.httpCookieStorage = nil
            let delegate = SessionDelegate()
            let queue = OperationQueue()
            queue.maxConcurrentOperationCount = 1
            let made = (URLSession(configuration: configuration, delegate: delegate, delegateQueue: queue), delegate)
            session = made
            return made
        }
    }

    /// Starts `request` on the source's URLSession and waits for the response head; the body
    /// follows on the returned stream. A cancelled wait cancels the task. `release` runs when
    /// the body ends; a proxy's requests keep their redirects (`followRedirects` false).
    func startSessionTask(
        _ request: URLRequest, followRedirects: Bool, release: FinishAction? = nil
    ) async throws -> (HTTPURLResponse, ResponseStream, URLSessionDataTask) {
        let (session, delegate) = urlSession()
        let stream = ResponseStream()
        let task = session.dataTask(with: request)
        delegate.register(task, stream: stream, followRedirects: followRedirects)
        if let release { stream.onFinish { release.run() } }
        task.resume()
        do {
            let response = try await withTaskCancellationHandler {
                try await stream.response()
            } onCancel: {
                task.cancel()
            }
            return (response, stream, task)
        } catch {
            task.cancel()
            throw error
        }
    }

    /// Through URLSession. A source of its own lets URLSession follow redirects; a proxy's
    /// request (`forwarding`) does not: the delegate refuses them and the 3xx is the answer.
    ///
    /// A proxy client's fields go with the request, but for `Accept-Encoding`: always
    /// `identity`. FoundationNetworking turns libcurl's automatic decoding on for every task
    /// (its HTTP protocol calls `EasyHandle.set(automaticBodyDecompression: true)`, which sets
    /// `CURLOPT_ACCEPT_ENCODING` to "" and `CURLOPT_HTTP_CONTENT_DECODING` to 1) and has no API
    /// to turn it off, so an encoded answer would arrive decoded under the origin's
    /// `Content-Encoding`. An origin that encodes anyway is caught here: see ``decoded(_:)``.
    func fetchThroughSession(
        _ url: URL, _ range: Range<Int64>?, validator: ContentValidator?, forwarding: Forwarding?, release: FinishAction
    ) async throws -> RangeResponse {
        var request = URLRequest(url: url)
        request.httpMethod = HTTPMethod.get.rawValue
        for field in forwarding?.headers ?? [] where !field.hasName("accept-encoding") {
            request.addValue(field.value, forHTTPHeaderField: field.name)
        }
        if let via = forwarding?.via { request.addValue(via, forHTTPHeaderField: "Via") }
        // Bytes as they are stored: a compressed transfer would make ranges mean something else.
        request.setValue("identity", forHTTPHeaderField: "Accept-Encoding")
        if let range {
            request.setValue("bytes=\(range.lowerBound)-\(range.upperBound - 1)", forHTTPHeaderField: "Range")
            if let validator, let ifRange = Self.ifRange(validator) { request.setValue(ifRange, forHTTPHeaderField: "If-Range") }
        }
        let clock = ExchangeTimes()
        let (response, stream, task) = try await startSessionTask(request, followRedirects: forwarding == nil, release: release)
        let times = clock.finished()
        let (headers, wasDecoded) = Self.decoded(HTTPHeaders(response))
        let contentLength = response.expectedContentLength >= 0 && !wasDecoded ? response.expectedContentLength : nil
        let stored = Self.storedHead(status: response.statusCode, headers: headers, times: times, forwarding: forwarding)
        if let reason = Self.uncached(
            status: response.statusCode, headers: headers, contentLength: contentLength, forwarding: forwarding,
            stored: { stored })
        {
            let head = HTTPResponseHead(status: response.statusCode, headers: headers)
            throw OriginAnswer(head: head, body: Self.originBody(stream), cancel: { task.cancel() }, reason: reason)
        }
        do {
            if wasDecoded, range != nil, response.statusCode == 206 {
                // Ranges of the encoded bytes, delivered decoded: nothing to place anywhere.
                throw OriginError(
                    .badAnswer, operation: "fetch", key: key, detail: "a range of an encoded representation, decoded by the transport")
            }
            let (info, offset) = try Self.interpret(
                status: response.statusCode, headers: headers, contentLength: contentLength, requested: range, key: key,
                times: times, forwarding: forwarding, stored: stored)
            return RangeResponse(
                info: info, offset: offset, body: Self.originBody(stream), cancel: { task.cancel() }, isPartial: response.statusCode == 206)
        } catch {
            task.cancel()
            throw error
        }
    }
}

extension HTTPRangeSource {
    /// `stream`'s body as the cache reads it: the transport's errors as ``OriginError``.
    static func originBody(_ stream: ResponseStream) -> AsyncThrowingStream<[UInt8], Error> {
        AsyncThrowingStream(unfolding: { try await OriginError.translating { try await stream.nextChunk() } })
    }

    /// The fields of an answer URLSession decoded: libcurl has undone the origin's
    /// `Content-Encoding` (see ``fetchThroughSession(_:_:validator:forwarding:release:)``), so
    /// the bytes are the identity representation. The fields are made to say so: no
    /// `Content-Encoding`, no `Content-Length` (it counted the encoded bytes), and a strong
    /// `ETag` made weak (it named the encoded bytes, RFC 9110, section 8.8.3). Returns the
    /// fields and whether the body was decoded.
    static func decoded(_ headers: HTTPHeaders) -> (HTTPHeaders, Bool) {
        let codings = headers.listElements("content-encoding").map { $0.lowercased() }.filter { $0 != "identity" }
        guard !codings.isEmpty else { return (headers, false) }
        var fields = headers
        fields.remove("content-encoding")
        fields.remove("content-length")
        if let etag = fields["etag"], !etag.hasPrefix("W/") {
            fields.remove("etag")
            fields.append(name: "ETag", value: "W/" + etag)
        }
        return (fields, true)
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
