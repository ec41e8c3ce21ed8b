import Foundation
import SparseCacheEngine
import SparseCacheStore
import SparseHTTP

/// `http://` requests over sparsecache's own HTTP/1.1 client.
extension HTTPRangeSource {
    /// Over ``HTTPExchange``, following redirects (to `https://` through URLSession) unless
    /// forwarding: a proxy hands redirects to its client.
    func fetchDirect(
        _ range: Range<Int64>?, validator: ContentValidator?, forwarding: Forwarding?, release: FinishAction
    ) async throws -> RangeResponse {
        // A redirect's location is parsed as a URL; the source's own endpoint was parsed once.
        var current: URL?
        var endpoint = self.endpoint
        for _ in 0...Self.maximumRedirects {
            let request = try Self.request(to: endpoint, range: range, validator: validator, key: key, forwarding: forwarding)
            let clock = ExchangeTimes()
            let exchange = try await HTTPExchange.start(
                host: endpoint.host, port: endpoint.port, request: request,
                name: key, timeout: timeout, resolver: { self.resolver }, pool: pool, policy: addressPolicy, interim: forwarding?.interim)
            let head = exchange.head
            let times = clock.finished()
            var length: Int64?
            switch exchange.bodyFraming {
            case .length(let count): length = count
            case .none: length = 0  // a 204 (RFC 9110 section 15.3.5): no content, known to be none
            case .chunked, .untilClose: break
            }
            // The head kept of the answer: made once for both questions below, and only if asked.
            lazy var stored = Self.storedHead(status: head.status, headers: head.headers, times: times, forwarding: forwarding)
            if let reason = Self.uncached(
                status: head.status, headers: head.headers, contentLength: length, forwarding: forwarding,
                stored: { stored })
            {
                exchange.onFinish(release)
                let body = AsyncThrowingStream<[UInt8], Error>(unfolding: { try await OriginError.translating { try await exchange.nextChunk() } })
                throw OriginAnswer(head: head, body: body, cancel: { exchange.cancel() }, reason: reason)
            }
            // A proxy hands redirects on (stored or not); only a source of its own follows them.
            if forwarding == nil, [301, 302, 303, 307, 308].contains(head.status), let location = head.header("location") {
                exchange.cancel()
                guard let next = URL(string: location, relativeTo: current ?? url)?.absoluteURL, let scheme = next.scheme?.lowercased(),
                    scheme == "http" || scheme == "https", let nextEndpoint = Endpoint(next)
                else {
                    throw OriginError(
                        .badAnswer, operation: "fetch", key: key, detail: "HTTP \(head.status) to an unusable location '\(location)'")
                }
                if scheme == "https" {
                    return try await fetchThroughSession(next, range, validator: validator, forwarding: forwarding, release: release)
                }
                current = next
                endpoint = nextEndpoint
                continue
            }
            do {
                let (info, offset) = try Self.interpret(
                    status: head.status, headers: head.headers, contentLength: length, requested: range, key: key, times: times,
                    forwarding: forwarding, stored: stored)
                exchange.onFinish(release)
                let body = AsyncThrowingStream<[UInt8], Error>(unfolding: { try await OriginError.translating { try await exchange.nextChunk() } })
                return RangeResponse(
                    info: info, offset: offset, body: body, cancel: { exchange.cancel() }, isPartial: head.status == 206,
                    arrived: exchange.arrivedBody)
            } catch {
                exchange.cancel()
                throw error
            }
        }
        throw OriginError(.badAnswer, operation: "fetch", key: key, detail: "more than \(Self.maximumRedirects) redirects")
    }

    /// The request head of a GET of `endpoint`'s target: the same headers URLSession is given,
    /// plus `Host`, and a proxy client's fields when forwarding (with its `Accept-Encoding`: the
    /// cache stores the bytes as the origin encodes them, RFC 9110, section 14.1).
    /// HTTP/1.1 keeps the connection open unless the origin says otherwise.
    /// `method` and `extra` (fields after all others) serve ``send(_:forwarding:body:maximumBody:)``.
    static func request(
        to endpoint: Endpoint, range: Range<Int64>?, validator: ContentValidator?, key: String, forwarding: Forwarding? = nil,
        method: HTTPMethod = .get, extra: [(String, String)] = []
    ) throws -> [UInt8] {
        guard let target = endpoint.target else {
            throw SparseCacheError(.invalidArgument, operation: "fetch", path: key, detail: "the URL cannot be sent as a request target")
        }
        let forwarded = forwarding?.headers ?? []
        var fields: [HTTPHeaderField] = []
        fields.reserveCapacity(forwarded.count + 8 + extra.count)
        fields.append(HTTPHeaderField(name: "Host", value: endpoint.hostField))
        fields += forwarded
        var headers = HTTPHeaders(fields)
        func addUnlessForwarded(_ name: String, _ value: String) {
            if !forwarded.contains(name) { headers.append(name: name, value: value) }
        }
        addUnlessForwarded("User-Agent", "sparsecache")
        addUnlessForwarded("Accept", "*/*")
        addUnlessForwarded("Accept-Encoding", "identity")
        if let via = forwarding?.via { headers.append(name: "Via", value: via) }
        if let range {
            headers.append(name: "Range", value: "bytes=\(range.lowerBound)-\(range.upperBound - 1)")
            if let validator, let ifRange = ifRange(validator) { headers.append(name: "If-Range", value: ifRange) }
        }
        if let authorization = endpoint.authorization { headers.append(name: "Authorization", value: authorization) }
        for (name, value) in extra { headers.append(name: name, value: value) }
        return HTTPRequestHead(method: method, target: target, headers: headers).encoded()
    }
}
