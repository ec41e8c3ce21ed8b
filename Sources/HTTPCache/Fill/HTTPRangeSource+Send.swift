import Foundation
import SparseCacheEngine
import SparseCacheStore
import SparseHTTP

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Requests a proxy forwards as they are, any method and a body: nothing of them is cached.
extension HTTPRangeSource {
    /// A request body to send: its chunks in order from `next` (nil at the end), and its
    /// length when known (sent as `Content-Length`; else the body goes chunked).
    package struct RequestBody: Sendable {
        package var length: Int64?
        package var next: @Sendable () async throws -> [UInt8]?

        package init(length: Int64?, next: @escaping @Sendable () async throws -> [UInt8]?) {
            self.length = length
            self.next = next
        }
    }

    /// Methods whose requests normally carry content: sent with `Content-Length: 0` without one.
    static let bodyMethods: Set<HTTPMethod> = [.post, .put, .patch]

    /// Sends `method` to the source's URL with `forwarding`'s fields (sent as they are: the
    /// client's conditionals and Range included) and `body`, and returns the origin's answer
    /// (head and body as it streams), never following a redirect.
    ///
    /// `http://` goes over ``HTTPExchange``: the body streams with back-pressure, on a new
    /// connection when there is a body or the method is not idempotent (never retried then;
    /// RFC 9112, section 9.3.1). `https://` goes through URLSession, which takes a body only
    /// whole: it is collected first, at most `maximumBody` bytes.
    ///
    /// - Throws: ``OriginError`` when the origin cannot be reached; what `body.next`
    ///   throws, as it is; `HTTPRequestBodyError` (413) for an https body over `maximumBody`.
    ///
    /// Not counted against the per-origin ``limiter`` of the fills: each such request is one
    /// client's (the server's connection limit bounds them), and a proxy that invalidates after
    /// the answer must not hold a fill slot meanwhile: the invalidation waits for a fill of the
    /// same key in flight, which may be waiting for that very slot.
    package func send(_ method: HTTPMethod, forwarding: Forwarding, body: RequestBody?, maximumBody: Int64) async throws -> OriginAnswer {
        ProxyMetrics.originRequests.add()
        return try await OriginError.translating {
            if isDirect {
                return try await sendDirect(method, forwarding: forwarding, body: body)
            }
            return try await sendThroughSession(method, forwarding: forwarding, body: body, maximumBody: maximumBody)
        }
    }

    private func sendDirect(_ method: HTTPMethod, forwarding: Forwarding, body: RequestBody?) async throws -> OriginAnswer {
        var framing: [(String, String)] = []
        if let body {
            framing.append(body.length.map { ("Content-Length", String($0)) } ?? ("Transfer-Encoding", "chunked"))
        } else if Self.bodyMethods.contains(method) {
            // RFC 9110, section 8.6: a POST or PUT without content says so.
            framing.append(("Content-Length", "0"))
        }
        let request = try Self.request(to: endpoint, range: nil, validator: nil, key: key, forwarding: forwarding, method: method, extra: framing)
        let exchange = try await HTTPExchange.start(
            host: endpoint.host, port: endpoint.port, request: request,
            body: body.map { HTTPExchange.RequestBody(length: $0.length, next: $0.next) },
            idempotent: method.isIdempotent, name: key, timeout: timeout, resolver: { self.resolver }, pool: pool,
            policy: addressPolicy, interim: forwarding.interim)
        let stream = AsyncThrowingStream<[UInt8], Error>(unfolding: { try await OriginError.translating { try await exchange.nextChunk() } })
        return OriginAnswer(head: exchange.head, body: stream, cancel: { exchange.cancel() }, reason: "method \(method) is forwarded")
    }

    /// Through URLSession, with the body collected first (URLSession cannot stream a body from
    /// an async source on Linux).
    private func sendThroughSession(
        _ method: HTTPMethod, forwarding: Forwarding, body: RequestBody?, maximumBody: Int64
    ) async throws -> OriginAnswer {
        try await checkAddressPolicy()
        var request = URLRequest(url: url)
        request.httpMethod = method.rawValue
        for field in forwarding.headers where !field.hasName("accept-encoding") {
            request.addValue(field.value, forHTTPHeaderField: field.name)
        }
        // As for a GET: URLSession would decode a compressed answer and keep its Content-Encoding.
        request.setValue("identity", forHTTPHeaderField: "Accept-Encoding")
        request.setValue(forwarding.via ?? "1.1 sparsecache", forHTTPHeaderField: "Via")
        if let body {
            if let length = body.length, length > maximumBody { throw HTTPRequestBody.tooLarge(maximumBody) }
            var bytes: [UInt8] = []
            while let piece = try await body.next() {
                guard Int64(bytes.count + piece.count) <= maximumBody else { throw HTTPRequestBody.tooLarge(maximumBody) }
                bytes += piece
            }
            request.httpBody = Data(bytes)
        }
        // A redirect is the client's to follow, as for a GET.
        let (response, stream, task) = try await startSessionTask(request, followRedirects: false)
        let head = HTTPResponseHead(status: response.statusCode, headers: HTTPHeaders(response))
        return OriginAnswer(head: head, body: Self.originBody(stream), cancel: { task.cancel() }, reason: "method \(method) is forwarded")
    }
}
