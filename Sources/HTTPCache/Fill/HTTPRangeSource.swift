import Foundation
@_spi(Locking) import SparseCacheEngine
import SparseCacheStore
import SparseHTTP

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// A resource on an HTTP or HTTPS origin, fetched by `Range` requests.
///
/// - Sends `Range: bytes=a-b` and, once the cache holds a version, `If-Range` with its ETag
///   (or its Last-Modified date when the ETag is weak or missing), so a changed resource comes
///   back whole (200) instead of as a range of the new version.
/// - Follows redirects, except for a proxy (``Forwarding``), which hands them to its client;
///   times out a request that stalls for ``timeout``.
/// - Limits connections to one origin (``ConnectionLimiter``): callers over the limit wait.
/// - `http://` goes over the project's own HTTP/1.1 client (``HTTPExchange``): the body is
///   received straight into the chunks handed out, and only as fast as the caller takes them.
///   `https://` (and a redirect to it) goes through URLSession, which streams the body as it
///   arrives (its data delegate; `bytes(for:)` does not exist on Linux) and cannot be paused.
public final class HTTPRangeSource: RangeSource {
    public var url: URL {
        // A source made on another for a plain target has a key that parses (isPlainTarget).
        parsedURL ?? URL(string: key)!
    }
    public let key: String
    /// The URL as given; nil for a source made on another (``init(endpoint:on:key:)``), whose
    /// URL is made only when something asks for it.
    private let parsedURL: URL?
    /// Where `http://` requests go (``Endpoint``).
    let endpoint: Endpoint
    /// Whether requests go over the project's own client (`http://`, transport `.automatic`)
    /// rather than URLSession.
    let isDirect: Bool

    /// HTTP caches combine parts only under a strong validator (RFC 9111 section 3.4).
    public var partsNeedStrongValidator: Bool { true }
    /// Longest wait for any progress on a request before it fails as ``OriginError`` `.timedOut`.
    public let timeout: Duration
    public let transport: Transport
    let limiter: ConnectionLimiter
    /// Where this source's name lookups block: a queue of its own (shared with the sources made
    /// on it), so a name whose DNS hangs holds up no other origin. Made on the first lookup: a
    /// proxy makes a source for every URL it serves, and most never connect (hits, pooled
    /// connections).
    var resolver: BlockingExecutor {
        shared.resolverQueue.withLock { queue in
            if let queue { return queue }
            let made = BlockingExecutor(label: "sparsecache.resolve")
            queue = made
            return made
        }
    }
    /// Idle connections to reuse; every source shares one unless given its own.
    let pool: OriginConnectionPool
    /// What a source made on another shares with it: its resolver and its URLSession.
    let shared: Shared

    final class Shared: Sendable {
        let resolverQueue = Lock<BlockingExecutor?>(nil)
        /// Made on first use (``urlSession()``).
        let session = Lock<(URLSession, SessionDelegate)?>(nil)

        deinit {
            session.withLock { $0?.0.finishTasksAndInvalidate() }
        }
    }
    /// The origins a proxy in URL mode may reach (no server-side request forgery); nil: any.
    package let addressPolicy: OriginAddressPolicy?

    /// How requests travel.
    public enum Transport: Sendable {
        /// `http://` over sparsecache's own HTTP/1.1 client, `https://` through URLSession.
        case automatic
        /// Everything through URLSession (FoundationNetworking, libcurl underneath).
        case urlSession
    }

    /// Redirects followed before a fetch fails.
    package static let maximumRedirects = 10

    /// A source for `url` (`http://` or `https://`); every source of one host and port shares
    /// one limit of connections (6, as browsers keep per host).
    ///
    /// - Parameters:
    ///   - timeout: how long a fetch waits for the origin's answer, and between its bytes.
    ///   - transport: which HTTP client fetches (`.automatic`: the own client for `http://`).
    /// - Throws: `.invalidArgument` when `url` is not an http(s) URL.
    public convenience init(url: URL, timeout: Duration = .seconds(30), transport: Transport = .automatic) throws {
        try self.init(url: url, timeout: timeout, limiter: nil, transport: transport, pool: .shared)
    }

    /// - Parameters:
    ///   - limiter: shared by every source of one origin; `HTTPRangeSource.limiter(for:)` keeps
    ///     one per host and port.
    package convenience init(
        url: URL, timeout: Duration = .seconds(30), limiter: ConnectionLimiter?, transport: Transport = .automatic
    ) throws {
        try self.init(url: url, timeout: timeout, limiter: limiter, transport: transport, pool: .shared)
    }

    init(
        url: URL, timeout: Duration, limiter: ConnectionLimiter?, transport: Transport, pool: OriginConnectionPool,
        addressPolicy: OriginAddressPolicy? = nil
    ) throws {
        self.pool = pool
        self.addressPolicy = addressPolicy
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https", let endpoint = Endpoint(url) else {
            throw SparseCacheError(.invalidArgument, operation: "fetch", path: url.absoluteString, detail: "not an http(s) URL")
        }
        parsedURL = url
        key = url.absoluteString
        self.endpoint = endpoint
        isDirect = transport == .automatic && scheme == "http"
        self.timeout = timeout
        self.transport = transport
        self.limiter = limiter ?? Self.limiter(for: url)
        shared = Shared()
    }

    /// The source of a target on `origin`'s host, under its path: what
    /// `HTTPRangeSource(url: URL(string: key))` would be, sharing `origin`'s limiter, pool,
    /// resolver and URLSession, made without parsing a URL (a proxy makes one for every miss
    /// on its configured origin).
    ///
    /// - Parameters:
    ///   - endpoint: `origin.endpoint.appending(target)` for a target of ``isPlainTarget(_:)``;
    ///   - origin: a source whose URL has no query, fragment or credentials;
    ///   - key: `origin`'s URL, without its trailing slashes, followed by the target.
    init(endpoint: Endpoint, on origin: HTTPRangeSource, key: String) {
        parsedURL = nil
        self.key = key
        self.endpoint = endpoint
        isDirect = origin.isDirect
        timeout = origin.timeout
        transport = origin.transport
        limiter = origin.limiter
        pool = origin.pool
        addressPolicy = origin.addressPolicy
        shared = origin.shared
    }

    /// Connections per origin (scheme, host and port) for sources made without a limiter.
    package static let connectionsPerOrigin = OriginConnectionPool.connectionsPerOrigin

    /// Held weakly: a limiter lives as long as a source of its origin does, and the table,
    /// swept as it grows, does not keep an entry for every host a proxy ever fetched from.
    private static let limiters = Lock<(table: [String: WeakLimiter], sweepAt: Int)>(([:], 64))

    private struct WeakLimiter {
        weak var limiter: ConnectionLimiter?
    }

    /// The limiter shared by every source of `url`'s origin.
    package static func limiter(for url: URL) -> ConnectionLimiter {
        let origin = "\(url.scheme ?? "")://\(url.host ?? ""):\(url.port ?? -1)"
        return limiters.withLock { limiters in
            if let existing = limiters.table[origin]?.limiter { return existing }
            let made = ConnectionLimiter(limit: connectionsPerOrigin)
            limiters.table[origin] = WeakLimiter(limiter: made)
            if limiters.table.count >= limiters.sweepAt {
                limiters.table = limiters.table.filter { $0.value.limiter != nil }
                limiters.sweepAt = max(64, limiters.table.count * 2)
            }
            return made
        }
    }

    /// Entries in the per-origin limiter table (for tests).
    static var limiterTableCount: Int { limiters.withLock { $0.table.count } }

    public func fetch(_ range: Range<Int64>?, validator: ContentValidator?) async throws -> RangeResponse {
        try await fetch(range, validator: validator, forwarding: nil)
    }

    /// A request made on behalf of a proxy's client, with the rules of a shared cache.
    package struct Forwarding: Sendable {
        /// The client's request fields to send on: end-to-end ones only, and none of those the
        /// source writes itself (`Host`, `Range`, `If-Range`, the other conditionals).
        package var headers: HTTPHeaders
        /// Every answer is to be passed on, none stored: the request is the client's own.
        package var passOn: Bool
        /// A resource longer than this (its Content-Length, or the total of its Content-Range)
        /// is passed on unstored: an origin claiming 8 TiB must not make the cache hold an
        /// index for 8 TiB. Nil: no limit.
        package var maximumLength: Int64?
        /// The forwarding proxy's `Via` element, added after the client's (RFC 9110, section
        /// 7.6.3): the next proxy, or this one when the request comes back, sees it.
        package var via: String?
        /// Where interim (1xx) responses to these requests go: the client's writer
        /// (``HTTPResponseWriter/sendInterim(_:)``), which a proxy must hand them to (RFC 9110,
        /// section 15.2). Called as each arrives, before the final response; must not block.
        package var interim: (@Sendable (HTTPResponseHead) -> Void)?

        /// The same fields for a request the proxy makes on its own behalf (a background
        /// revalidation, a prefetch): its interim responses go to nobody (RFC 9110, section
        /// 15.2 asks a proxy to forward those of requests it did not generate itself).
        var withoutInterim: Forwarding {
            var copy = self
            copy.interim = nil
            return copy
        }

        package init(headers: HTTPHeaders, passOn: Bool = false, via: String? = nil) {
            self.headers = headers
            self.passOn = passOn
            self.via = via
        }

        /// What of a client's request fields a proxy sends on (RFC 9110, section 7.6.1: never
        /// hop-by-hop ones; the range, the host and the conditionals are the proxy's own).
        package init(client request: HTTPRequestHead, via: String? = nil) {
            // One pass over the fields (every request a proxy forwards or looks up makes one).
            headers = request.headers.removingHopByHop().keeping { field in !Self.written.contains { field.hasName($0) } }
            passOn = false
            self.via = via
        }

        /// Fields the source writes for every request.
        static let written = [
            "host", "range", "if-range", "if-match", "if-none-match", "if-modified-since", "if-unmodified-since", "content-length",
            "expect",
        ]
    }

    /// Like ``fetch(_:validator:)``, forwarding a client's request fields. With `forwarding`,
    /// an answer a shared cache may not store (RFC 9111, section 3), a status other than 200,
    /// 206 and 416, and a redirect (not followed) are thrown as ``OriginAnswer``, for the proxy
    /// to hand on as they are.
    package func fetch(_ range: Range<Int64>?, validator: ContentValidator?, forwarding: Forwarding?) async throws -> RangeResponse {
        if let range, range.isEmpty || range.lowerBound < 0 {
            throw SparseCacheError(.invalidArgument, operation: "fetch", path: key, detail: "empty or negative range \(range)")
        }
        try await checkAddressPolicy()
        // A background fetch (prefetch, read-ahead) gives its connection up to a request a
        // client waits on: its transfer stops, and the fill resumes it later.
        let priority = ConnectionLimiter.effectivePriority
        let yielding = priority == .background ? YieldAction() : nil
        var onYield: (@Sendable () -> Void)?
        if let yielding { onYield = { yielding.fire() } }
        let ticket = try await limiter.acquire(priority: priority, onYield: onYield)
        let limiter = self.limiter
        let release = FinishAction { limiter.release(ticket: ticket) }
        // A fill's fetch nobody wants any more while it waited is not sent at all.
        let gate = RequestGate.current
        guard gate?.send() ?? true else {
            release.run()
            throw CancellationError()
        }
        ProxyMetrics.originRequests.add()
        do {
            var response: RangeResponse
            if isDirect {
                response = try await fetchDirect(range, validator: validator, forwarding: forwarding, release: release)
            } else {
                response = try await fetchThroughSession(url, range, validator: validator, forwarding: forwarding, release: release)
            }
            if let yielding {
                response.body = yielding.guarding(response.body)
                yielding.set(response.cancel)
            }
            return response
        } catch {
            release.run()
            gate?.answered()
            if !(error is OriginAnswer) { ProxyMetrics.originFailures.add() }
            throw OriginError.translated(error)
        }
    }

    /// URLSession resolves names by itself: its origins are checked here, before the request
    /// (a rebinding window remains, docs/SECURITY.md). `http://` ones are checked at connect.
    func checkAddressPolicy() async throws {
        guard let addressPolicy, transport == .urlSession || url.scheme?.lowercased() == "https", let host = url.host else { return }
        let name = host.hasPrefix("[") ? String(host.dropFirst().dropLast()) : host
        try await OriginError.translating {
            try await addressPolicy.check(name: name, port: url.port ?? (url.scheme?.lowercased() == "https" ? 443 : 80), resolver: resolver)
        }
    }

    /// Whether a response to a forwarded request is one to hand on as it is rather than cache
    /// (see ``fetch(_:validator:forwarding:)``), and why. A status other than 200 and 206 is
    /// cached only when a shared cache may store it and its whole body, of a known length of at
    /// most ``StoredHead/maximumOtherBody``, comes in this one answer.
    ///
    /// - Parameter stored: the head the cache would keep (``storedHead(status:headers:times:forwarding:)``),
    ///   made only when the status is one to store.
    static func uncached(
        status: Int, headers: HTTPHeaders, contentLength: Int64?, forwarding: Forwarding?, stored: () -> StoredHead
    ) -> String? {
        guard let forwarding else { return nil }
        if forwarding.passOn { return "passed through" }
        if status == 416 { return nil }
        let length = status == 206 ? headers["content-range"].flatMap(ContentRange.init)?.total : contentLength
        if let limit = forwarding.maximumLength, let length, length > limit {
            return "not stored: the resource (\(length) bytes) is longer than the maximum resource size (\(limit) bytes)"
        }
        if status == 304 || HTTPStatus(status).isInformational { return "status \(status) is passed on" }
        if status != 200, status != 206 {
            guard let contentLength, contentLength <= StoredHead.maximumOtherBody else {
                return "status \(status) with a body of unknown or large size is passed on"
            }
        }
        let stored = stored()
        if stored.isTooLarge { return "header fields too large to store" }
        // The request's target plays no part in the rules (as for the stored head's own policy):
        // no URL path is worked out for it.
        let policy = stored.policy.answering(HTTPRequestHead(method: .get, target: "/", headers: forwarding.headers))
        if let reason = policy.storability.reason { return "not stored: \(reason)" }
        // A page that is stale at once and cannot be revalidated would be fetched again for
        // every request: passed on, as nginx does with what it has no lifetime for.
        // RFC 9111 section 3.4: parts are combined into one stored response only when they share
        // a strong validator. A part without one is handed on, never stored.
        if status == 206, !ContentValidator(etag: headers["etag"], lastModified: headers["last-modified"], date: headers["date"]).isStrong {
            return "not stored: a part without a strong validator cannot be combined with others"
        }
        if stored.status != 200, policy.freshnessLifetime == 0, policy.revalidationHeaders.isEmpty {
            return "not stored: no freshness and no validator"
        }
        return nil
    }

    /// The head a cache keeps of a response (RFC 9111 section 3.1): with the request fields
    /// the response varies on, as they were sent (section 4.1), and without heuristic
    /// freshness when the request carried `Cookie` (``CachePolicy/allowsHeuristicFreshness``).
    static func storedHead(
        status: Int, headers: HTTPHeaders, times: (request: Int64, response: Int64), forwarding: Forwarding?
    ) -> StoredHead {
        let varyNames = headers.listElements("vary").map { $0.lowercased() }
        let varyRequest =
            varyNames.isEmpty ? HTTPHeaders() : (forwarding?.headers ?? []).keeping { field in varyNames.contains { field.hasName($0) } }
        return StoredHead(
            status: status, headers: headers, requestTime: times.request, responseTime: times.response, varyRequest: varyRequest,
            heuristicFreshness: !(forwarding?.headers.contains("cookie") ?? false))
    }

    /// The `If-Range` value (RFC 9110 section 13.1.5): a strong ETag; the Last-Modified date
    /// only when there is no entity tag at all and the date is a strong validator; else none.
    /// Without If-Range the answer's validators and length are still compared with the
    /// stored ones (``ProgressiveCache/isDifferentVersion(_:than:)``).
    static func ifRange(_ validator: ContentValidator) -> String? {
        if let etag = validator.etag { return etag.hasPrefix("W/") ? nil : etag }
        return validator.lastModifiedIsStrong ? validator.lastModified : nil
    }

    /// What a response means for a request of `requested`.
    ///
    /// - Parameter contentLength: the body's length when the response gave one.
    /// - Parameter stored: the head ``storedHead(status:headers:times:forwarding:)`` made of this
    ///   response, when the caller has it already.
    static func interpret(
        status: Int, headers: HTTPHeaders, contentLength: Int64?, requested: Range<Int64>?, key: String,
        times: (request: Int64, response: Int64) = (0, 0), forwarding: Forwarding? = nil, stored: StoredHead? = nil
    ) throws -> (ContentInfo, Int64) {
        let validator = ContentValidator(etag: headers["etag"], lastModified: headers["last-modified"], date: headers["date"])
        let contentType = headers["content-type"]
        let stored = stored ?? storedHead(status: status, headers: headers, times: times, forwarding: forwarding)
        switch status {
        case 206:
            guard let value = headers["content-range"], let contentRange = ContentRange(value), let first = contentRange.range else {
                throw OriginError(
                    .badAnswer, operation: "fetch", key: key,
                    detail: "206 with a missing or malformed Content-Range '\(headers["content-range"] ?? "")'")
            }
            if let requested, first.lowerBound != requested.lowerBound {
                throw OriginError(
                    .badAnswer, operation: "fetch", key: key,
                    detail: "asked for bytes from \(requested.lowerBound), the origin sent \(value)")
            }
            guard let total = contentRange.total else {
                // `bytes a-b/*`: a part of a whole of unknown length cannot be placed; a caller
                // asks for the whole instead (ProgressiveCache's first contact does).
                throw OriginError(
                    .badAnswer, operation: "fetch", key: key, detail: "206 without the total length ('\(value)')", status: 206)
            }
            return (ContentInfo(length: total, contentType: contentType, validator: validator, stored: stored), first.lowerBound)
        case 200:
            return (ContentInfo(length: contentLength, contentType: contentType, validator: validator, stored: stored), 0)
        case _ where forwarding != nil && status != 416 && (200...599).contains(status):
            // A response of another status a proxy stores whole (``uncached(status:...)`` let it
            // through): its body is the resource, from byte 0.
            return (ContentInfo(length: contentLength, contentType: contentType, validator: validator, stored: stored), 0)
        case 416:
            let total = headers["content-range"].flatMap(ContentRange.init)?.total
            throw OriginError(
                .badAnswer, operation: "fetch", key: key,
                detail: "416 range not satisfiable" + (total.map { " (the resource is \($0) bytes)" } ?? ""), status: 416)
        case 500...599:
            throw OriginError(
                .unavailable, operation: "fetch", key: key, detail: "HTTP \(status) from the origin", status: status)
        default:
            throw OriginError(
                .badAnswer, operation: "fetch", key: key,
                detail: "HTTP \(status) \(HTTPURLResponse.localizedString(forStatusCode: status))", status: status)
        }
    }
}
