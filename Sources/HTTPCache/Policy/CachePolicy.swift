import SparseHTTP

/// The caching rules of RFC 9111 for one stored response, as a shared cache applies them: a
/// pure value built from the request and the response it answered, asked with the time passed
/// in. No I/O and no clock, so every rule is a table-driven test; the store and the proxy call
/// it, it calls nothing.
///
/// Times are whole seconds since 1970 (HTTP dates have one-second resolution).
///
/// Where the RFC leaves a choice, it does what the shared caches operators run do, and says
/// which beside the rule: heuristic freshness is 10% of the time since Last-Modified, at most a
/// day (Traffic Server's default cap); a response with `Set-Cookie` or `Vary: *` is not stored
/// (nginx and Varnish by default); `private` and `no-cache` with field names are treated as
/// their unqualified forms (Varnish); a response to a request that carried `Cookie` is never
/// given heuristic freshness, and is stored only with explicit freshness or `public` (nginx
/// stores nothing without explicit freshness, Varnish passes requests with `Cookie`).
package struct CachePolicy: Sendable, Equatable {
    /// The request the stored response answered: its fields decide `Vary` matches.
    package private(set) var request: HTTPRequestHead
    /// The response as stored: its hop-by-hop fields removed (section 3.1).
    package let response: HTTPResponseHead
    /// When the request that brought the response was sent (`request_time`, section 4.2.3).
    package let requestTime: Int64
    /// When the response was received (`response_time`).
    package let responseTime: Int64
    /// The response's cache directives, parsed once: its `CDN-Cache-Control` when that is
    /// present and valid (RFC 9213: this cache is one a CDN operator runs), else its
    /// `Cache-Control`.
    let responseDirectives: CacheControl
    /// Whether `responseDirectives` came from `CDN-Cache-Control`: then `Expires` and
    /// `Cache-Control` are ignored for this cache (RFC 9213, section 2.2), and passed on as
    /// they are for the caches after it.
    let targeted: Bool
    /// How long the response is fresh after it was generated (section 4.2.1), in seconds: for a
    /// shared cache `s-maxage`, else `max-age`, else `Expires` minus `Date`, else a heuristic.
    /// An invalid or contradictory value gives 0 (stale).
    package private(set) var freshnessLifetime: Int64
    /// The `Date` of the response, or when it was received when it has none or an invalid one
    /// (section 4.2.3: a cache without a `Date` uses the receipt time).
    let dateValue: Int64
    /// `corrected_initial_age` (section 4.2.3): the age when the response arrived.
    let initialAge: Int64
    /// The request fields the response's `Vary` names, lowercased.
    let varyNames: [String]
    /// Whether the response may be given heuristic freshness (section 4.2.2): not when the
    /// request that brought it carried `Cookie`. A page built for one client's session with
    /// only a `Last-Modified` would otherwise be fresh for the next client (web cache
    /// deception: `/account/x.css` answered with the account page).
    let allowsHeuristicFreshness: Bool

    // Everything a stored response is asked on every hit is worked out here, once: a cached
    // small range is answered thousands of times a second, each time with the same dates.
    package init(request: HTTPRequestHead, response: HTTPResponseHead, requestTime: Int64, responseTime: Int64) {
        var stored = response
        stored.headers = response.headers.removingHopByHop()
        self.init(request: request, endToEnd: stored, requestTime: requestTime, responseTime: responseTime)
    }

    /// ``init(request:response:requestTime:responseTime:)`` for a response whose hop-by-hop
    /// fields are gone already (a ``StoredHead``'s).
    ///
    /// - Parameter heuristic: whether heuristic freshness is allowed; by default when
    ///   `request` has no `Cookie` (a stored head keeps only the `Vary` fields of its request,
    ///   so it passes what was decided when the response came).
    init(request: HTTPRequestHead, endToEnd stored: HTTPResponseHead, requestTime: Int64, responseTime: Int64, heuristic: Bool? = nil) {
        self.request = request
        let heuristic = heuristic ?? !request.headers.contains("cookie")
        allowsHeuristicFreshness = heuristic
        self.response = stored
        self.requestTime = requestTime
        self.responseTime = responseTime
        let cdn = CacheControl.targeted(fieldValues: stored.headers.values("cdn-cache-control"))
        let directives = cdn ?? CacheControl(stored.headers)
        responseDirectives = directives
        targeted = cdn != nil
        let date = stored.headers["date"].flatMap(HTTPDate.parse) ?? responseTime
        dateValue = date
        freshnessLifetime = Self.freshnessLifetime(
            status: stored.status, headers: stored.headers, directives: directives, date: date, expiresCounts: cdn == nil,
            heuristic: heuristic)
        // A list-based Age: its first member counts (RFC 9111 section 5.1), so `7200, 0` is
        // 7200; an invalid one is ignored.
        let ageValue =
            stored.headers["age"].flatMap { value in
                CacheControl.deltaSeconds(
                    String(value.split(separator: ",", omittingEmptySubsequences: false)[0]).trimmingCharacters(in: .whitespaces)
                ).seconds
            } ?? 0
        let apparentAge = max(0, responseTime - date)
        let responseDelay = max(0, responseTime - requestTime)
        initialAge = max(apparentAge, ageValue + responseDelay)
        varyNames = stored.headers.listElements("vary").map { $0.lowercased() }
    }

    /// The same rules for the response as the answer to `request`: what only the request
    /// changes (``storability``, `Vary` matches) is asked anew, nothing of the response is
    /// parsed again.
    package func answering(_ request: HTTPRequestHead) -> CachePolicy {
        var policy = self
        policy.request = request
        return policy
    }

    // MARK: Storing (section 3)

    /// Statuses whose responses may be given heuristic freshness (RFC 9110, section 15.1).
    static let heuristicallyCacheable: Set<Int> = [200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501]

    /// Statuses this cache knows the semantics of (section 3): what `must-understand` asks for.
    /// Other final statuses (a 299, a 599) are stored only with explicit freshness and without
    /// `must-understand`.
    package static let understood: Set<Int> = heuristicallyCacheable.union([302, 303, 307, 400, 403, 500, 502, 503, 504])

    /// Whether a shared cache may store this response (section 3), and if not, why: the reason
    /// goes into the log and `Cache-Status`.
    package var storability: (storable: Bool, reason: String?) {
        let directives = responseDirectives
        let requestDirectives = CacheControl(request.headers)
        guard request.method == .get else { return (false, "method \(request.method)") }
        guard !HTTPStatus(response.status).isInformational else { return (false, "interim status") }
        // must-understand (section 5.2.2.3): stored only with a status this cache understands,
        // and then it overrides no-store. Without it any final status may be stored (section 3).
        let mustUnderstand = directives.contains("must-understand")
        if mustUnderstand, !Self.understood.contains(response.status) {
            return (false, "must-understand: status \(response.status) not understood")
        }
        if directives.contains("no-store"), !mustUnderstand { return (false, "no-store") }
        if requestDirectives.contains("no-store") { return (false, "request no-store") }
        if directives.contains("private") { return (false, "private") }
        if request.headers.contains("authorization"),
            !(directives.contains("public") || directives.contains("s-maxage") || directives.contains("must-revalidate"))
        {
            return (false, "request with Authorization")  // section 3.5
        }
        if response.headers.contains("set-cookie") { return (false, "Set-Cookie") }
        if response.headers.listElements("vary").contains("*") { return (false, "Vary: *") }
        let explicit = directives.contains("public") || directives.contains("max-age") || directives.contains("s-maxage") || hasExpires
        // A request with Cookie: its answer may be built for that session. Stored only when the
        // origin says for how long or that it is public (nginx: nothing without explicit
        // freshness; Varnish's default passes such requests); never heuristically fresh.
        if !explicit, request.headers.contains("cookie") { return (false, "request with Cookie without explicit freshness or public") }
        guard explicit || Self.heuristicallyCacheable.contains(response.status) else {
            return (false, "status \(response.status) without explicit freshness")
        }
        return (true, nil)
    }

    package var isStorable: Bool { storability.storable }

    /// Whether an `Expires` field counts for this cache (not beside a valid `CDN-Cache-Control`).
    var hasExpires: Bool { !targeted && response.headers.contains("expires") }

    // MARK: Freshness (section 4.2)

    /// The freshness lifetime of a response (section 4.2.1) whose `Date` (or receipt time) is
    /// `date`.
    private static func freshnessLifetime(
        status: Int, headers: HTTPHeaders, directives: CacheControl, date: Int64, expiresCounts: Bool, heuristic: Bool
    ) -> Int64 {
        for name in ["s-maxage", "max-age"] {
            switch directives.seconds(name) {
            case .seconds(let seconds): return seconds
            case .invalid: return 0
            case nil: continue
            }
        }
        if expiresCounts, headers.contains("expires") {
            let expires = headers.values("expires")
            // Several Expires fields or an invalid date: already expired (section 5.3).
            guard expires.count == 1, let time = HTTPDate.parse(expires[0]) else { return 0 }
            return max(0, time - date)
        }
        // Heuristic freshness (section 4.2.2): only for heuristically cacheable statuses or
        // `public`, never past an explicit `no-cache`, never for an answer to a request with
        // Cookie.
        guard heuristic, heuristicallyCacheable.contains(status) || directives.contains("public"),
            let lastModified = headers["last-modified"].flatMap(HTTPDate.parse), lastModified <= date
        else { return 0 }
        return min((date - lastModified) / 10, heuristicCap)
    }

    /// This policy with heuristic freshness (section 4.2.2) capped at `seconds`, for a caller
    /// that knows more about the body than its header fields say: a live HLS playlist is fresh
    /// for at most half its target duration (CachingProxy+Playlists). Explicit freshness
    /// (`s-maxage`, `max-age`, `Expires`) is left as it is.
    package func limitingHeuristicFreshness(to seconds: Int64) -> CachePolicy {
        let explicit = responseDirectives.seconds("s-maxage") != nil || responseDirectives.seconds("max-age") != nil || hasExpires
        guard !explicit else { return self }
        var limited = self
        limited.freshnessLifetime = min(freshnessLifetime, max(0, seconds))
        return limited
    }

    /// The longest heuristic lifetime (a day, as Traffic Server's default).
    package static let heuristicCap: Int64 = 86_400

    /// The response's age now (section 4.2.3), in seconds.
    package func currentAge(now: Int64) -> Int64 {
        initialAge + max(0, now - responseTime)
    }

    /// Whether the response is fresh now (section 4.2).
    package func isFresh(now: Int64) -> Bool { freshnessLifetime > currentAge(now: now) }

    // MARK: Using it (section 4)

    /// What the cache may do with this stored response for `newRequest` at `now`.
    package enum Use: Sendable, Equatable {
        /// Send it as it is, with this `Age`.
        case fresh(age: Int64)
        /// Stale, but the request allows it (`max-stale`): send it with this `Age`.
        case staleAllowed(age: Int64)
        /// Stale within `stale-while-revalidate` (RFC 5861): send it, and revalidate in the
        /// background once.
        case staleWhileRevalidate(age: Int64)
        /// Ask the origin first, with ``revalidationHeaders`` (section 4.3.1).
        case revalidate
        /// It does not answer this request (`Vary`, the method): forward the request.
        case mismatch
    }

    package func use(for newRequest: HTTPRequestHead, now: Int64) -> Use {
        guard newRequest.method.isGetOrHead, varyMatches(newRequest) else { return .mismatch }
        let directives = responseDirectives
        let requestDirectives = CacheControl(newRequest.headers)
        let age = currentAge(now: now)
        let lifetime = freshnessLifetime
        // `no-cache` on either side, or `Pragma: no-cache` from a client that sends no
        // Cache-Control (sections 5.2.1.4, 5.2.2.4, 5.4): ask the origin every time.
        let pragmaNoCache =
            !newRequest.headers.contains("cache-control")
            && newRequest.headers.listElements("pragma").contains { $0.lowercased() == "no-cache" }
        if alwaysRevalidates || requestDirectives.contains("no-cache") || pragmaNoCache { return .revalidate }
        // The client's limits on age (5.2.1.1) and remaining freshness (5.2.1.3).
        switch requestDirectives.seconds("max-age") {
        // `max-age=0` asks for revalidation even of a response received this second (ages are
        // whole seconds): what clients mean by it, and what Squid does.
        case .seconds(let limit) where age > limit || limit == 0: return .revalidate
        case .invalid: return .revalidate
        default: break
        }
        if case .seconds(let wanted) = requestDirectives.seconds("min-fresh"), lifetime - age < wanted { return .revalidate }
        if lifetime > age { return .fresh(age: age) }
        // Stale. A shared cache never serves a stale response marked must-revalidate,
        // proxy-revalidate or s-maxage (sections 4.2.4, 5.2.2.2, 5.2.2.8, 5.2.2.10).
        if forbidsStale { return .revalidate }
        if let maxStale = requestDirectives.argument("max-stale") {
            // A bare max-stale accepts any staleness.
            if maxStale.isEmpty { return .staleAllowed(age: age) }
            if case .seconds(let limit) = CacheControl.deltaSeconds(maxStale), age - lifetime <= limit { return .staleAllowed(age: age) }
        }
        if case .seconds(let window) = directives.seconds("stale-while-revalidate"), age - lifetime <= window {
            return .staleWhileRevalidate(age: age)
        }
        return .revalidate
    }

    /// Whether a stale response may be sent when the origin cannot be reached or answers 5xx
    /// (`stale-if-error`, RFC 5861 section 4; never past must-revalidate, section 4.2.4).
    package func mayServeStaleOnError(now: Int64) -> Bool {
        guard !forbidsStale, case .seconds(let window) = responseDirectives.seconds("stale-if-error") else { return false }
        return currentAge(now: now) - freshnessLifetime <= window
    }

    /// A shared cache never serves this response stale: `must-revalidate`, `proxy-revalidate`
    /// or `s-maxage` (sections 4.2.4, 5.2.2.2, 5.2.2.8, 5.2.2.10).
    var forbidsStale: Bool {
        ["must-revalidate", "proxy-revalidate", "s-maxage"].contains { responseDirectives.contains($0) }
    }

    /// The response's own `no-cache`: it is revalidated before every use, fresh or not.
    package var alwaysRevalidates: Bool { responseDirectives.contains("no-cache") }

    /// Whether a stale response may be sent when the origin cannot be reached at all (RFC 9111,
    /// section 4.2.4 allows it to a disconnected cache): not when the response says it must be
    /// revalidated (`must-revalidate`, `proxy-revalidate`, `s-maxage`, `no-cache`). Squid and
    /// Traffic Server serve stale when the origin is down; sparsecache does too, so a cached
    /// video plays on while its origin is away.
    package var mayServeStaleWhenDisconnected: Bool { !forbidsStale && !alwaysRevalidates }

    /// The stored response matches `newRequest` on every field its `Vary` names (section 4.1):
    /// values compared after joining repeated fields and normalising whitespace around commas.
    package func varyMatches(_ newRequest: HTTPRequestHead) -> Bool {
        if varyNames.isEmpty { return true }
        if varyNames.contains("*") { return false }
        return varyNames.allSatisfy { Self.normalized(request.headers, $0) == Self.normalized(newRequest.headers, $0) }
    }

    private static func normalized(_ headers: HTTPHeaders, _ name: String) -> [String]? {
        let values = headers.values(name)
        return values.isEmpty ? nil : HTTPSyntax.listElements(values)
    }

    // MARK: Revalidating (section 4.3)

    /// The conditional fields of a revalidation request (section 4.3.1): `If-None-Match` with
    /// the stored entity tag, `If-Modified-Since` with the stored `Last-Modified`.
    package var revalidationHeaders: HTTPHeaders {
        var fields = HTTPHeaders()
        if let etag = response.headers["etag"] { fields.append(name: "If-None-Match", value: etag) }
        if let lastModified = response.headers["last-modified"] { fields.append(name: "If-Modified-Since", value: lastModified) }
        return fields
    }

    /// The stored response freshened by a 304 answer to a revalidation (sections 3.2 and
    /// 4.3.4), or nil when the 304 does not select it (another strong entity tag or
    /// Last-Modified): the stored response is then not to be used.
    ///
    /// Every field of the 304 replaces the stored one of that name, except hop-by-hop fields
    /// and `Content-Length` (the 304 has no body, the stored response does).
    package func freshened(by notModified: HTTPResponseHead, requestTime: Int64, responseTime: Int64) -> CachePolicy? {
        guard notModified.status == 304 else { return nil }
        let fresh = notModified.headers.removingHopByHop()
        if let etag = fresh["etag"], let stored = response.headers["etag"], Self.opaque(etag) != Self.opaque(stored) { return nil }
        if fresh["etag"] == nil, let modified = fresh["last-modified"], let stored = response.headers["last-modified"], modified != stored {
            return nil
        }
        var updated = response
        for name in Set(fresh.map { $0.name.lowercased() }) where name != "content-length" {
            updated.headers.remove(name)
        }
        for field in fresh where !field.hasName("content-length") { updated.headers.append(name: field.name, value: field.value) }
        return CachePolicy(
            request: request, endToEnd: updated, requestTime: requestTime, responseTime: responseTime, heuristic: allowsHeuristicFreshness)
    }

    /// An entity tag without its weakness marker, for the weak comparison (RFC 9110, 8.8.3.2).
    static func opaque(_ etag: String) -> Substring { etag.hasPrefix("W/") ? etag.dropFirst(2) : Substring(etag) }
}
