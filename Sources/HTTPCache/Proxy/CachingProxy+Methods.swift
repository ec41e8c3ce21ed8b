import Foundation
import SparseCacheEngine
import SparseHTTP

/// Methods other than GET, HEAD and PURGE: forwarded to the origin as they are, body streamed,
/// answer streamed back, nothing stored; an unsafe method's success invalidates what is stored
/// for its target (RFC 9111, section 4.4). CONNECT is refused.
extension CachingProxy {
    /// `CONNECT` asks for a tunnel: the bytes inside (TLS) cannot be seen, let alone cached.
    func refuseConnect(_ response: HTTPResponseWriter) async throws {
        try await response.respond(
            status: 405,
            message: "CONNECT not supported: an https tunnel cannot be cached; ask for http:// URLs, "
                + "/<name>?url=<https URL>, or use --origin",
            headers: [("Allow", "GET, HEAD, POST, PUT, DELETE, PATCH, OPTIONS"), ("Cache-Status", CacheStatus(forward: "method").value)])
    }

    /// Sends the client's request to `url` (its end-to-end fields, its body as it arrives) and
    /// streams the answer back in the framing that fits the client. After a 2xx or 3xx to an
    /// unsafe method, the stored responses for `url`, and for a same-origin `Location` or
    /// `Content-Location`, are dropped before the answer goes on.
    ///
    /// - Throws: the body's ``HTTPRequestBodyError`` (too large, malformed, cut short), for the
    ///   server to answer; errors writing to the client.
    func forward(_ request: HTTPRequestHead, _ body: HTTPRequestBody, _ response: HTTPResponseWriter, url: URL) async throws {
        var status = CacheStatus(forward: "method")
        defer { response.setCacheOutcome(status.outcome) }
        let source: HTTPRangeSource
        do {
            source = try self.source(for: url)
        } catch {
            status.failed = true
            let (code, message) = self.status(for: error, url: url)
            try await response.respond(status: code, message: message, headers: [("Cache-Status", status.value)])
            return
        }
        // Everything end-to-end, the conditionals and Range too: they are the client's request
        // to the origin, not the cache's.
        var headers = request.headers.removingHopByHop()
        for name in ["host", "content-length", "expect"] { headers.remove(name) }
        var forwarding = HTTPRangeSource.Forwarding(headers: headers, passOn: true)
        forwarding.via = via.element
        forwarding.interim = { [response] head in response.sendInterim(head) }
        let sent = body.isEmpty ? nil : HTTPRangeSource.RequestBody(length: body.length, next: { try await body.next() })
        let answer: OriginAnswer
        do {
            answer = try await source.send(request.method, forwarding: forwarding, body: sent, maximumBody: body.maximum)
        } catch {
            if let failure = body.failure { throw failure }
            if error is HTTPRequestBodyError { throw error }
            status.failed = true
            let (code, message) = self.status(for: error, url: url)
            try await response.respond(status: code, message: message, headers: [("Cache-Status", status.value)])
            return
        }
        status.forwardStatus = answer.head.status
        // An unsafe method's non-error answer (2xx or 3xx) invalidates (RFC 9111, section 4.4).
        if !request.method.isSafe, HTTPStatus(answer.head.status).isSuccessful || HTTPStatus(answer.head.status).isRedirection {
            for target in Self.invalidated(by: answer.head, of: url) { await invalidateAll(Self.cacheKey(target)) }
        }
        let exchange = Exchange(
            request: request, response: response, base: source, key: Self.cacheKey(url), target: url.path, now: Int64(time(nil)),
            forwarding: forwarding)
        exchange.status = status
        try await stream(answer, exchange)
    }

    /// The URIs an unsafe method's success invalidates (RFC 9111, section 4.4): the target, and
    /// the `Location` and `Content-Location` URIs when they are on the same origin (scheme, host
    /// and port: another origin's entries must not be dropped by this one's answers).
    static func invalidated(by head: HTTPResponseHead, of url: URL) -> [URL] {
        var targets = [url]
        for name in ["location", "content-location"] {
            guard let value = head.headers[name], let other = URL(string: value, relativeTo: url)?.absoluteURL else { continue }
            if sameOrigin(other, url), !targets.contains(other) { targets.append(other) }
        }
        return targets
    }

    static func sameOrigin(_ a: URL, _ b: URL) -> Bool {
        func port(_ url: URL) -> Int? { url.port ?? (url.scheme?.lowercased() == "https" ? 443 : 80) }
        return a.scheme?.lowercased() == b.scheme?.lowercased() && a.host?.lowercased() == b.host?.lowercased() && port(a) == port(b)
    }

    /// Drops `key` and every `Vary` variant stored under it; how many were stored.
    @discardableResult
    func invalidateAll(_ key: String) async -> Int {
        // By prefix, never a summary of every resource: this runs for every unsafe request.
        let keys = await cache.store.keys(withPrefix: key).filter { $0 == key || $0.hasPrefix(key + "#vary=") }
        var dropped = 0
        for stored in Set(keys + [key]).sorted() where (try? await cache.invalidate(key: stored)) == true { dropped += 1 }
        return dropped
    }
}
