import SparseHTTP

/// The `Cache-Status` field of one answer (RFC 9211): whether it came from storage, why the
/// request went to the origin and what came back, and whether the answer was stored.
struct CacheStatus: Sendable, Equatable {
    /// Served from storage without asking the origin.
    var hit = false
    /// Why the request went to the origin: `uri-miss`, `vary-miss`, `stale`, `request`
    /// (the client asked for it), `method`, `bypass` (RFC 9211, section 2.2).
    var forward: String?
    /// The status the origin answered with.
    var forwardStatus: Int?
    /// The answer was stored.
    var stored = false
    /// This request joined another one's request to the origin (RFC 9211, section 2.6).
    var collapsed = false
    /// Freshness left in seconds; negative when served stale.
    var ttl: Int64?
    /// Anything else worth knowing (why not stored, stale-if-error).
    var detail: String?
    /// The answer came from storage (after a revalidation, or as the first contact stored it).
    var fromStorage = false
    /// The proxy answered with an error of its own (the origin unreachable, a bad request).
    var failed = false
    /// Served stale: while revalidating in the background, on an origin error, or with the
    /// origin away (RFC 5861; RFC 9111, section 4.2.4). ``detail`` says which.
    var stale = false

    /// What the cache made of the request, in one word for the log and the metrics, as nginx's
    /// `$upstream_cache_status` and Varnish's hit/miss/pass counters put it: `hit` (fresh from
    /// storage), `stale` (served stale: while revalidating, on an origin error, or with the
    /// origin away), `revalidated` (stored, confirmed by the origin), `miss` (fetched and
    /// stored), `pass` (the origin's answer passed on, not stored), `error` (the proxy's own).
    var outcome: String {
        if failed { return "error" }
        if stale { return "stale" }
        guard fromStorage else { return "pass" }
        if hit { return "hit" }
        return stored ? "miss" : "revalidated"
    }

    /// The field's value: the cache's name, then its parameters (RFC 9211, section 2). Built in
    /// one string: every answer carries one.
    var value: String {
        var text = "sparsecache"
        text.reserveCapacity(64)
        func add(_ parameter: String) {
            text.append("; ")
            text.append(parameter)
        }
        if hit { add("hit") }
        if let forward { add("fwd=" + forward) }
        if let forwardStatus { add("fwd-status=" + String(forwardStatus)) }
        if let ttl { add("ttl=" + String(ttl)) }
        if stored { add("stored") }
        if collapsed { add("collapsed") }
        if let detail {
            let escaped = detail.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
            add("detail=\"" + escaped + "\"")
        }
        return text
    }
}

/// The fields a proxy adds to every answer it gives: its `Via` element after the origin's
/// (RFC 9110, section 7.6.3) and the `Cache-Status`.
func proxyFields(_ headers: HTTPHeaders, status: CacheStatus, via element: String) -> [(String, String)] {
    var fields = fieldsWithVia(headers, via: element, room: 1)
    fields.append(("Cache-Status", status.value))
    return fields
}

/// `headers` without their `Via` fields, then one `Via` of theirs and `element`, in one pass
/// (every answer from the cache makes these); `room` more fields reserved.
func fieldsWithVia(_ headers: HTTPHeaders, via element: String, room: Int = 0) -> [(String, String)] {
    var fields: [(String, String)] = []
    fields.reserveCapacity(headers.count + 1 + room)
    var via = ""
    for field in headers {
        if field.hasName("via") {
            via += field.value + ", "
        } else {
            fields.append((field.name, field.value))
        }
    }
    fields.append(("Via", via + element))
    return fields
}
