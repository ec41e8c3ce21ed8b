import Foundation
@_spi(Locking) import SparseCacheEngine
import SparseCacheStore
import SparseHTTP

/// An HTTP cache in front of origins, as a shared cache (RFC 9111): the ``HTTPServer`` handler
/// behind `sparsecache serve`. Stored responses come from a ``ProgressiveCache``: cached bytes
/// from disk, missing ones fetched from the origin (once, shared with every other client) and
/// sent as they arrive, while they are written and committed behind the client.
///
/// Which origin URL a request means:
/// - with an origin (reverse-proxy mode), `GET /path?query` is `<origin>/path?query`;
/// - without one (URL mode), `GET /any-name.mp4?url=<percent-encoded URL>` is that URL (the
///   name is only there so players can guess the type from it), and `GET http://host/path`
///   (from a client told to use this server as its HTTP proxy) is `http://host/path`.
///
/// What it does with a GET or HEAD, in order (docs/HTTP-CACHING.md has the rules by section):
/// look up the stored response (its `Vary` variant), then by ``CachePolicy`` use it fresh,
/// revalidate it (one conditional request shared by concurrent clients), or forward; a response
/// the rules do not let it store is passed on as it came. Every answer from storage carries the
/// stored end-to-end fields with `Age`, and every answer `Via` and `Cache-Status`. Client
/// conditionals are answered from storage (304, 412); one range in any form gets `206`, several
/// get the whole resource (`200`; RFC 9110 lets a server ignore Range). `PURGE` from loopback
/// drops a URL and its variants. Other methods go to the origin with their body, and the answer
/// comes back unstored (an unsafe method's success invalidates its target); CONNECT gets 405.
public final class CachingProxy: Sendable {
    public let cache: ProgressiveCache
    /// The origin in reverse-proxy mode; nil for URL mode.
    public let origin: URL?
    /// One source per URL, kept for the next request (bounded: a forgotten one is made again).
    private let sources = Lock(BoundedTable<HTTPRangeSource>(capacity: 4096))
    /// Origin URLs and cache keys of recent targets (``ProxyRoutes``).
    private let routes = ProxyRoutes()
    /// The origin's URL without its trailing slashes, which a target is appended to (nil
    /// exactly when `origin` is).
    private let originBase: String?
    /// The configured origin's source, which the sources of its plain targets are made on
    /// (``route(for:)``); nil in URL mode and for an origin with a query or credentials.
    private let originSource: HTTPRangeSource?
    /// Revalidations in flight, by cache key: concurrent clients of one stale response share one.
    let revalidations = RevalidationTable()
    /// In URL mode, the origins clients may have fetched (``OriginAddressPolicy``); nil in
    /// reverse-proxy mode, where the operator chose the origin.
    let addressPolicy: OriginAddressPolicy?
    /// Longer resources are passed on unstored (``HTTPRangeSource/Forwarding/maximumLength``).
    package let maximumResourceLength: Int64?
    /// This proxy's name in `Via`, and its loop detection.
    package let via = ProxyVia()
    /// Playlists and segment prefetch (CachingProxy+Playlists, docs/STREAMING.md).
    let streaming: StreamingState
    /// Cross-origin access added to every answer, and preflights answered here (`--cors`);
    /// nil: the origin's fields pass as they are and `OPTIONS` goes to the origin.
    package let cors: CORSPolicy?

    /// The default ``maximumResourceLength``: 256 GiB (the largest disk images and model files),
    /// whose index costs at most 512 KiB of memory with 64 KiB segments.
    public static let defaultMaximumResourceLength: Int64 = 256 << 30

    /// - Parameters:
    ///   - allowedOrigins: in URL mode, the loopback, private and local origins that may be
    ///     fetched (`host`, `host:port`, `*.domain`; see ``OriginAddressPolicy``); public ones
    ///     always may. Ignored in reverse-proxy mode.
    ///   - maximumResourceLength: longer resources are passed on unstored; nil for no limit.
    ///   - streaming: HLS and DASH playlist rewriting and segment prefetch.
    ///   - cors: the pages that may read answers across origins (``CORSPolicy``); nil for none
    ///     added by the proxy.
    public init(
        cache: ProgressiveCache, origin: URL? = nil, allowedOrigins: [String] = [],
        maximumResourceLength: Int64? = CachingProxy.defaultMaximumResourceLength, streaming: StreamingOptions = StreamingOptions(),
        cors: CORSPolicy? = nil) {
        self.cache = cache
        self.origin = origin
        var base = origin?.absoluteString
        while base?.hasSuffix("/") == true { base?.removeLast() }
        originBase = base
        if let origin, origin.query == nil, origin.fragment == nil, origin.user == nil, origin.password == nil {
            originSource = try? HTTPRangeSource(url: origin, timeout: .seconds(30), limiter: nil, transport: .automatic, pool: .shared)
        } else {
            originSource = nil
        }
        self.maximumResourceLength = maximumResourceLength
        addressPolicy = origin == nil ? OriginAddressPolicy(allowing: allowedOrigins.compactMap(OriginAddressPolicy.Pattern.init)) : nil
        self.streaming = StreamingState(options: streaming)
        self.cors = cors
    }

    /// The ``HTTPServer`` handler. A body is read only for methods forwarded to the origin;
    /// the server drains (or closes on) a body sent with a GET or HEAD.
    public func handle(_ request: HTTPRequestHead, _ body: HTTPRequestBody, _ response: HTTPResponseWriter) async throws {
        if let cors {
            // Answered here, so a player's preflight works with the origin down.
            if cors.isPreflight(request) {
                try await answerPreflight(request, response, cors)
                return
            }
            // Every answer from here on, whoever writes it (errors, passed-on answers too).
            response.rewriteHeads { cors.apply($0, for: request) }
        }
        // A request that already passed through this proxy would come back for ever: refused
        // at once, 400 as Traffic Server answers a detected cycle (RFC 9110, section 7.6.3).
        if via.isLoop(request.headers) {
            try await response.respond(
                status: 400, message: "loop detected: this request already passed through this proxy (its Via names us)",
                headers: [("Via", via.element), ("Cache-Status", CacheStatus(detail: "loop detected").value)])
            return
        }
        if request.method == .connect {
            try await refuseConnect(response)
            return
        }
        let found: ProxyRoutes.Route
        switch route(for: request.target) {
        case .success(let route): found = route
        case .failure(let problem):
            try await response.respond(status: 400, message: problem.message)
            return
        }
        let key = found.key
        if request.method == .purge {
            try await purge(key, request, response)
            return
        }
        guard request.method.isGetOrHead else {
            try await forward(request, body, response, url: found.url)
            return
        }
        let base: HTTPRangeSource
        do {
            base = try found.sourceOnOrigin() ?? source(for: found.url)
        } catch {
            let (status, message) = status(for: error, url: found.url)
            try await response.respond(status: status, message: message)
            return
        }
        var forwarding = HTTPRangeSource.Forwarding(client: request, via: via.element)
        forwarding.maximumLength = maximumResourceLength
        // The origin's interim responses (103 Early Hints, ...) reach this client before its
        // answer (RFC 9110, section 15.2); never stored (RFC 9111, section 3).
        forwarding.interim = { [response] head in response.sendInterim(head) }
        let exchange = Exchange(
            request: request, response: response, base: base, key: key, target: found.path, now: Int64(time(nil)), forwarding: forwarding)
        defer { response.setCacheOutcome(exchange.status.outcome) }
        do {
            try await answer(exchange, key: key)
        } catch let error where !response.headSent {
            exchange.status.failed = true
            let (status, message) = status(for: error, url: found.url)
            try await response.respond(status: status, message: message, headers: [("Cache-Status", exchange.status.value)])
        }
    }

    /// A CORS preflight: 204 with the proxy's fields (``CORSPolicy/preflightFields(for:)``),
    /// no origin request.
    private func answerPreflight(_ request: HTTPRequestHead, _ response: HTTPResponseWriter, _ cors: CORSPolicy) async throws {
        let status = CacheStatus(detail: "CORS preflight")
        try await response.writeHead(
            status: 204, headers: cors.preflightFields(for: request) + [("Cache-Status", status.value)], contentLength: 0)
    }

    /// One client request on its way through the cache.
    final class Exchange: @unchecked Sendable {
        // @unchecked: used by one request's task only, in order.
        let request: HTTPRequestHead
        let response: HTTPResponseWriter
        let base: HTTPRangeSource
        /// The target's cache key (a variant's is another: ``CachingProxy/variantKey(_:of:for:)``).
        let key: String
        let target: String
        let now: Int64
        let forwarding: HTTPRangeSource.Forwarding
        var status = CacheStatus()
        /// The stored playlist, once read (its freshness and its rewriting share one read).
        var playlist: StoredPlaylist?

        init(
            request: HTTPRequestHead, response: HTTPResponseWriter, base: HTTPRangeSource, key: String, target: String, now: Int64,
            forwarding: HTTPRangeSource.Forwarding
        ) {
            self.request = request
            self.response = response
            self.base = base
            self.key = key
            self.target = target
            self.now = now
            self.forwarding = forwarding
        }

        func source(key: String) -> ProxiedSource { ProxiedSource(base: base, key: key, forwarding: forwarding) }

        var onlyIfCached: Bool { CacheControl(request.headers).contains("only-if-cached") }
    }

    /// Looks up, decides, answers (RFC 9111, section 4).
    private func answer(_ exchange: Exchange, key: String) async throws {
        var source = exchange.source(key: key)
        // Looked up, and on a miss fetched, in one call into the cache (a request that may be
        // answered from storage only is looked up alone). A miss of a small whole answer from
        // an `http://` origin is the proxy's to fetch (CachingProxy+FirstContact).
        let found: ProgressiveCache.Lookup?
        do {
            found = try await cache.openStoredOrFirst(
                source, first: exchange.onlyIfCached ? nil : Self.firstRequest(for: exchange.request), claiming: exchange.base.isDirect)
        } catch let answer as OriginAnswer {
            exchange.status.forward = exchange.status.forward ?? "uri-miss"
            try await passOn(answer, exchange)
            return
        }
        let stored: CacheReader?
        switch found {
        case .fetched(let reader):
            exchange.status.forward = exchange.status.forward ?? "uri-miss"
            try await answerFetched(reader, exchange)
            return
        case .claimed(let claim):
            exchange.status.forward = exchange.status.forward ?? "uri-miss"
            try await answerClaimed(claim, source: source, exchange)
            return
        case .stored(let reader):
            stored = reader
        case nil:
            stored = nil
        }
        var reader = try await checkedStored(stored, source)
        // Vary (section 4.1): the stored response names the request fields it varies on; a
        // request that differs in them is another variant, stored under a key of its own.
        if let found = reader, let head = found.info.stored, head.headers.contains("vary"),
            !head.policy.varyMatches(exchange.request)
        {
            await found.close()
            source = exchange.source(key: Self.variantKey(key, of: head, for: exchange.request))
            reader = try await checkedStored(try await cache.openIfStored(source), source)
            if let variant = reader, let stored = variant.info.stored, !stored.policy.varyMatches(exchange.request) {
                // The variant's own Vary names other fields now: it is replaced.
                await variant.close()
                try await cache.invalidate(key: source.key)
                reader = nil
            }
            if reader == nil { exchange.status.forward = "vary-miss" }
        }
        if let reader {
            do {
                try await answerStored(reader, source: source, exchange)
                await reader.close()
                return
            } catch let error as OriginError where error.kind == .changed && !exchange.response.headSent {
                // The stored answer was invalidated or replaced under its reader (an unsafe
                // request or a purge beside this one) before a byte of it went out: this request
                // is a miss now (`fwd=miss`, RFC 9211 section 2.2).
                await reader.close()
                exchange.status = CacheStatus()
                exchange.status.forward = "miss"
            } catch {
                await reader.close()
                throw error
            }
        }
        if exchange.onlyIfCached {
            try await gatewayTimeout(exchange)
            return
        }
        exchange.status.forward = exchange.status.forward ?? "uri-miss"
        try await fetchAndAnswer(source, exchange)
    }

    /// `reader` of a stored response, or nil when there is none or the proxy cannot read its
    /// head (then it is dropped).
    private func checkedStored(_ reader: CacheReader?, _ source: ProxiedSource) async throws -> CacheReader? {
        guard let reader else { return nil }
        if reader.info.stored == nil {
            await reader.close()
            try await cache.invalidate(key: source.key)
            return nil
        }
        return reader
    }

    /// A miss: first contact asks the origin for what the client asked (its range, or the
    /// whole), stores the response, and the client gets the bytes as they arrive; an answer
    /// not to store is passed on.
    func fetchAndAnswer(_ source: ProxiedSource, _ exchange: Exchange) async throws {
        let reader: CacheReader
        do {
            // The lookup just found nothing: the store is not asked again.
            reader = try await cache.open(source, first: Self.firstRequest(for: exchange.request), lookedUp: true)
        } catch let answer as OriginAnswer {
            try await passOn(answer, exchange)
            return
        }
        try await answerFetched(reader, exchange)
    }

    /// A miss's reader, from its first contact: the stored response is sent as it arrives.
    func answerFetched(_ reader: CacheReader, _ exchange: Exchange) async throws {
        exchange.status.stored = true
        exchange.status.forwardStatus = exchange.status.forwardStatus ?? reader.info.stored?.status ?? 200
        let head = reader.info.stored ?? StoredHead(headers: [], requestTime: exchange.now, responseTime: exchange.now)
        do {
            try await send(reader, head: head, age: head.policy.currentAge(now: exchange.now), exchange)
        } catch {
            await reader.close()
            throw error
        }
        await reader.close()
    }

    /// A stored response for this request: fresh, allowed stale, or revalidated first.
    private func answerStored(_ reader: CacheReader, source: ProxiedSource, _ exchange: Exchange) async throws {
        guard let head = reader.info.stored else { return }
        if !reader.isLengthKnown {
            // An answer without a length still arriving from the origin: this client joins it
            // (collapsed forwarding, RFC 9211 section 2.6) instead of asking again, whatever its
            // freshness: it is the origin's answer of now. Varnish's waiting list does the same.
            exchange.status.forward = "uri-miss"
            exchange.status.collapsed = true
            exchange.status.forwardStatus = head.status
            try await send(reader, head: head, age: head.policy.currentAge(now: exchange.now), exchange)
            return
        }
        let policy = try await streamingPolicy(head.policy, reader, head: head, exchange)
        switch policy.use(for: exchange.request, now: exchange.now) {
        case .fresh(let age), .staleAllowed(let age):
            exchange.status.hit = true
            exchange.status.ttl = policy.freshnessLifetime - age
            try await send(reader, head: head, age: age, exchange)
            // The next hits of it may be answered on the event loop.
            // (Not a variant's: the event loop looks up the target's own key.)
            if cache.options.quickHits, source.key == exchange.key, cache.quickHits[source.key]?.isWhole != true,
                !reader.isSmallObject || cache.quickHits.isRepeat(source.key)
            {
                await cache.rememberQuickHit(reader)
            }
        case .staleWhileRevalidate(let age):
            exchange.status.hit = true
            exchange.status.ttl = policy.freshnessLifetime - age
            exchange.status.detail = "stale-while-revalidate"
            exchange.status.stale = true
            _ = startRevalidation(key: source.key, policy: policy, length: reader.length, source: source.inBackground, first: nil)
            try await send(reader, head: head, age: age, exchange)
        case .revalidate, .mismatch:
            if exchange.onlyIfCached {
                try await gatewayTimeout(exchange)
                return
            }
            // Fresh, yet to be revalidated, and not by the response's own `no-cache`: the
            // client's directives asked for it.
            let clientAsked = policy.isFresh(now: exchange.now) && !policy.alwaysRevalidates
            exchange.status.forward = clientAsked ? "request" : "stale"
            try await revalidateAndAnswer(reader, policy: policy, source: source, exchange)
        }
    }

    /// `only-if-cached` and nothing usable stored (RFC 9111, section 5.2.1.7).
    private func gatewayTimeout(_ exchange: Exchange) async throws {
        exchange.status.failed = true
        try await exchange.response.respond(
            status: 504, message: "only-if-cached: no stored response can answer this request",
            headers: [("Cache-Status", exchange.status.value)])
    }

    /// What a miss asks the origin for: the client's own request, so that one answer teaches
    /// the length and validators and brings the client's bytes. A single range as asked (the
    /// cache aligns and bounds it); several ranges or none, the whole (this proxy answers those
    /// with the whole representation). A suffix range (`-n`) cannot be placed before the length
    /// is known, so it asks for the first segment; so does a HEAD, which reads no body.
    static func firstRequest(for request: HTTPRequestHead) -> FirstRequest {
        if request.method == .head { return .range(0..<1) }
        guard let header = request.header("range") else { return .whole }
        // Parsed against an unknown (unbounded) length: `a-` runs to Int64.max, and a suffix
        // lands at its very end.
        switch RangeRequest.parse(header, length: .max) {
        case .single(let range) where range.lowerBound < Int64.max / 2:
            return .range(range)
        case .whole, .multiple:
            return .whole
        case .single, .unsatisfiable:
            return .range(0..<1)
        }
    }

    /// The cache key of a URL: the URL without credentials (a key is a catalog entry and a log
    /// line; a password must be neither).
    static func cacheKey(_ url: URL) -> String {
        guard url.user != nil || url.password != nil, var components = URLComponents(url: url, resolvingAgainstBaseURL: true) else {
            return url.absoluteString
        }
        components.user = nil
        components.password = nil
        return components.url?.absoluteString ?? url.absoluteString
    }

    /// The key of the variant of `key` that `request` selects, by the fields `head`'s `Vary`
    /// names (values normalised as ``CachePolicy/varyMatches(_:)`` compares them). The values
    /// are hashed, not written out: a key is a catalog entry, and a `Vary: Cookie` must not put
    /// cookies there. A collision only makes a miss: the variant's stored request is compared.
    static func variantKey(_ key: String, of head: StoredHead, for request: HTTPRequestHead) -> String {
        let names = head.headers.listElements("vary").map { $0.lowercased() }.sorted()
        var text = ""
        for name in names {
            text += name + ":" + HTTPSyntax.listElements(request.headers.values(name)).joined(separator: ",") + "\n"
        }
        let bytes = Array(text.utf8)
        let low = crc32c(bytes), high = crc32c(Array(bytes.reversed()), seed: 0x5bd1_e995)
        return key + "#vary=" + String(UInt64(high) << 32 | UInt64(low), radix: 16)
    }

    /// `PURGE` from loopback: drops the URL and every stored variant of it (or, for a URL
    /// ending in `*`, every key with that prefix), as `sparsecache evict` does, while the server
    /// runs.
    private func purge(_ key: String, _ request: HTTPRequestHead, _ response: HTTPResponseWriter) async throws {
        let host = response.peer.split(separator: ":").dropLast().joined(separator: ":")
        guard ["127.0.0.1", "::1", "[::1]", "localhost"].contains(host) || host.hasPrefix("127.") || host.hasPrefix("::ffff:127.") else {
            try await response.respond(status: 403, message: "PURGE is allowed from loopback only")
            return
        }
        let dropped = try await purge(key: key)
        if dropped == 0 {
            try await response.respond(status: 404, message: "not cached: \(key)")
        } else {
            try await response.respond(status: 200, message: "purged \(key) (\(dropped) stored response\(dropped == 1 ? "" : "s"))")
        }
    }

    /// Brings the whole resource at `url` into the cache, as a client's GET would store it
    /// (the caching rules decide): the first contact now, the rest in the background. Returns
    /// the cache key and the length; throws when the origin's answer is not one to store, or
    /// the origin cannot be reached.
    public func prefetch(_ url: URL) async throws -> (key: String, length: Int64) {
        let key = Self.cacheKey(url)
        let source = ProxiedSource(base: try source(for: url), key: key, forwarding: HTTPRangeSource.Forwarding(headers: []))
        let reader: CacheReader
        do {
            reader = try await cache.open(source)
        } catch let answer as OriginAnswer {
            if answer.claim() { answer.cancel() }
            throw OriginError(
                .badAnswer, operation: "prefetch", key: key, detail: "the origin answered \(answer.head.status): \(answer.reason)",
                status: answer.head.status)
        }
        let cache = self.cache
        Task {
            try? await cache.prefetch(source)
            await reader.close()
        }
        return (key, reader.length)
    }

    /// Drops a stored response and every stored variant of it, or, for a key ending in `*`,
    /// every key with that prefix. Returns how many stored responses went.
    public func purge(key: String) async throws -> Int {
        let prefix = key.hasSuffix("*") ? String(key.dropLast()) : nil
        let dropped: Int
        if let prefix {
            let keys = await cache.store.keys(withPrefix: prefix)
            var count = 0
            for stored in keys.sorted() where try await cache.invalidate(key: stored) { count += 1 }
            dropped = count
        } else {
            dropped = await invalidateAll(key)
        }
        return dropped
    }

    // MARK: Requests to origin URLs

    struct TargetProblem: Error {
        var message: String
    }

    /// The origin URL of a request target with its cache key, remembered for the next request.
    ///
    /// A plain target on the configured origin (the common case of reverse-proxy mode) needs
    /// no URL parse and no table: its key is the origin's URL followed by the target, and its
    /// source is made on the origin's (``HTTPRangeSource/init(endpoint:on:key:)``).
    func route(for target: String) -> Result<ProxyRoutes.Route, TargetProblem> {
        if let originSource, let originBase, HTTPRangeSource.isPlainTarget(target), !ProxyRoutes.mayChange(target) {
            return .success(ProxyRoutes.Route(plain: target, base: originBase, on: originSource))
        }
        return routes.route(for: target) { originURL(for: target) }
    }

    /// The origin URL a request target names.
    func originURL(for target: String) -> Result<URL, TargetProblem> {
        // Absolute form (`GET http://host/path`): a client that uses this server as its HTTP
        // proxy. Without an origin the URL is the origin URL (forward proxying); with one, its
        // path and query are looked up there, as for any request.
        var target = target
        if HTTPRequestParser.isAbsoluteHTTP(target.utf8) {
            guard let absolute = URL(string: target), absolute.host != nil else {
                return .failure(TargetProblem(message: "malformed absolute URL '\(target)'"))
            }
            guard origin != nil else { return .success(absolute) }
            let afterAuthority = target.dropFirst("http://".count).drop { $0 != "/" && $0 != "?" }
            target = afterAuthority.hasPrefix("/") ? String(afterAuthority) : "/" + afterAuthority
        }
        if let originBase {
            if let referenced = referencedURL(target) { return .success(referenced) }
            guard target.hasPrefix("/"), let url = URL(string: originBase + target) else {
                return .failure(TargetProblem(message: "cannot map '\(target)' onto the origin: a path must start with /"))
            }
            return .success(url)
        }
        let query = target.split(separator: "?", maxSplits: 1).dropFirst().first ?? ""
        let parameter = query.split(separator: "&").first { $0.hasPrefix("url=") }
        guard let parameter else {
            return .failure(
                TargetProblem(message: "no origin: ask for /<name>?url=<percent-encoded http(s) URL>, or start the proxy with --origin"))
        }
        guard let text = String(parameter.dropFirst(4)).removingPercentEncoding, let url = URL(string: text),
            let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https", url.host != nil
        else {
            return .failure(TargetProblem(message: "the url parameter is not a percent-encoded http:// or https:// URL"))
        }
        return .success(url)
    }

    /// One source per URL, kept for the next request (each holds a URLSession).
    func source(for url: URL) throws -> HTTPRangeSource {
        if let known = sources.withLock({ $0[url.absoluteString] }) { return known }
        let made = try HTTPRangeSource(
            url: url, timeout: .seconds(30), limiter: nil, transport: .automatic, pool: .shared, addressPolicy: addressPolicy)
        return sources.withLock { table in
            if let existing = table[made.key] { return existing }
            table.set(made, for: made.key)
            return made
        }
    }

    // MARK: Answers

    /// ``status(for:)``, and in URL mode nothing about why an origin could not be reached:
    /// "connection refused" against "timed out" would make the proxy a port scanner of
    /// whatever it can reach. A policy refusal says "not allowed" and nothing else.
    func status(for error: Error, url: URL) -> (Int, String) {
        guard origin == nil, let error = Self.originError(error) else { return Self.status(for: error) }
        switch error.kind {
        case .notAllowed: return (403, "origin \(error.key ?? "") not allowed")
        case .unavailable where error.status == nil, .timedOut:
            return (502, "origin unavailable: \(url.host ?? "the origin") could not be fetched")
        default: return Self.status(for: error)
        }
    }

    /// `error` as an ``OriginError`` when it is about the origin: the transport's errors of an
    /// origin request become one (``OriginError/init(_:)``) should any come this far.
    static func originError(_ error: Error) -> OriginError? {
        if let error = error as? OriginError { return error }
        guard let error = error as? HTTPError else { return nil }
        switch error.kind {
        case .closed, .io, .invalidArgument: return nil
        case .timedOut, .connectFailed, .unresolved, .notAllowed, .connectionLost, .malformed: return OriginError(error)
        }
    }

    /// The status and message for a request that failed before its head was sent: the proxy's
    /// own errors only (an origin's answer is passed on as it came). The message names the
    /// problem, never the origin URL or a cache file: in reverse mode the client did not give
    /// the origin's address, and must not learn it from an error page (the request log has it).
    static func status(for error: Error) -> (Int, String) {
        if let answer = error as? OriginAnswer {
            answer.cancel()
            return (502, "bad answer from the origin: HTTP \(answer.head.status) where a part of a stored response was expected")
        }
        if let error = originError(error) {
            let detail = error.detail ?? error.kind.rawValue
            switch error.kind {
            case .badAnswer, .notAllowed:
                return (502, "bad answer from the origin: \(detail)")
            case .timedOut:
                return (504, "the origin did not answer in time: \(detail)")
            case .unavailable:
                var reason = detail
                if let errno = error.errno { reason += " (\(ErrnoText.describe(errno)))" }
                return (502, "the origin cannot be reached: \(reason)")
            case .changed:
                return (503, "the resource changed on the origin; try again")
            }
        }
        if let error = error as? HTTPError {
            return error.kind == .invalidArgument ? (400, error.detail ?? error.kind.rawValue) : (500, "cache error: \(error.kind.rawValue)")
        }
        guard let error = error as? SparseCacheError else { return (500, "internal error") }
        let detail = error.detail ?? error.code.rawValue
        switch error.code {
        case .invalidArgument:
            return (400, detail)
        default:
            return (500, "cache error: \(error.code.rawValue)")
        }
    }
}
