import SparseHTTP

/// Cross-origin access for web players (`serve --cors`), by the Fetch standard's CORS protocol
/// (fetch.spec.whatwg.org, "CORS protocol"): which origins' pages may read the proxy's answers,
/// the fields that say so on every answer, and the answers to preflights.
///
/// The fields are added per answer and never stored: the stored response is the origin's, and
/// one stored entry serves every page, whatever its origin. The origin's own `Access-Control-*`
/// fields are replaced by the proxy's (as nginx's `proxy_hide_header` with `add_header` does):
/// a page from an origin that is not listed gets none, whatever the origin sent.
///
/// - With `*` listed, every answer carries `Access-Control-Allow-Origin: *`, with or without an
///   `Origin` in the request, and no `Vary: Origin`: the answer is the same for every page (the
///   standard's advice for a static value). A page that sends credentials (`withCredentials`,
///   `credentials: "include"`) is refused by the browser, as the standard says for `*`.
/// - With origins listed, a request whose `Origin` is one of them gets that origin back; every
///   answer carries `Vary: Origin`, those without the field too, so that no cache downstream
///   (the browser's own) gives one page the answer meant for another.
/// - `Access-Control-Allow-Credentials` is never sent: the proxy is a shared cache and does not
///   let pages read answers made with a user's cookies or authorization.
///
/// Example: `CORSPolicy(origins: ["https://player.example.com"])`.
public struct CORSPolicy: Sendable {
    /// How long a browser may reuse a preflight's answer, in seconds, by default (one day;
    /// browsers cap it lower: Chromium at two hours, Firefox at one day).
    public static let defaultMaxAge = 86400

    /// The response fields a page may read besides the CORS-safelisted ones: what a player needs
    /// to place a range and tell a cached answer.
    static let exposed = "Content-Range, Content-Length, Accept-Ranges, Age, Cache-Status, ETag"

    /// The methods the proxy serves (GET and HEAD from the cache, the others forwarded;
    /// CachingProxy+Methods). CONNECT is refused and PURGE is for loopback only.
    static let methods = "GET, HEAD, POST, PUT, DELETE, PATCH, OPTIONS"

    /// Every origin may read the answers.
    package let anyOrigin: Bool
    /// The origins listed, as ``normalizedOrigin(_:)`` writes them.
    package let origins: Set<String>
    /// `Access-Control-Max-Age` of preflight answers.
    package let maxAge: Int

    /// - Parameters:
    ///   - origins: `*`, or origins as a browser sends them (`https://host`, `http://host:8080`);
    ///     values ``normalizedOrigin(_:)`` refuses are ignored (validate them first).
    ///   - maxAge: seconds a browser may reuse a preflight answer.
    public init(origins: [String], maxAge: Int = CORSPolicy.defaultMaxAge) {
        anyOrigin = origins.contains("*")
        self.origins = Set(origins.compactMap(Self.normalizedOrigin))
        self.maxAge = maxAge
    }

    /// An origin as a browser serializes it in `Origin`: `scheme://host` or
    /// `scheme://host:port`, lowercase, without the scheme's default port; nil for anything
    /// else (a path, a query, credentials, no host).
    package static func normalizedOrigin(_ text: String) -> String? {
        let lowered = text.lowercased()
        guard let separator = lowered.range(of: "://") else { return nil }
        let scheme = lowered[..<separator.lowerBound]
        var authority = lowered[separator.upperBound...]
        guard let first = scheme.first, first.isLetter,
            scheme.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "+-.".contains($0)) }), !authority.isEmpty,
            !authority.contains(where: { "/?#@ \t".contains($0) })
        else { return nil }
        for (name, port) in [("http", ":80"), ("https", ":443")] where scheme == name && authority.hasSuffix(port) {
            authority = authority.dropLast(port.count)
        }
        // An IPv6 host is bracketed: its colons are not the port's.
        let hostCount =
            authority.hasPrefix("[")
            ? (authority.firstIndex(of: "]").map { authority[...$0].count } ?? 0) : authority.prefix { $0 != ":" }.count
        let port = authority.dropFirst(hostCount)
        guard hostCount > (authority.hasPrefix("[") ? 2 : 0), port.isEmpty || (port.hasPrefix(":") && UInt16(port.dropFirst()) != nil)
        else {
            return nil
        }
        return scheme + "://" + authority
    }

    /// `Access-Control-Allow-Origin` for `request`: `*`, its own `Origin` when listed, or nil.
    func allowedOrigin(for request: HTTPRequestHead) -> String? {
        if anyOrigin { return "*" }
        guard let origin = request.header("origin"), origins.contains(origin.lowercased()) else { return nil }
        return origin
    }

    /// Whether the browser that sent `request` lets its page read the answer (the Fetch
    /// standard's CORS check), given the answer's own `Access-Control-Allow-Origin`
    /// (`allowOrigin`) and the proxy's policy, which replaces the origin's when there is one.
    /// A request without `Origin`, or from a page of the proxy's own origin (its `Host`), is
    /// not a cross-origin read: true.
    static func pageMayRead(_ request: HTTPRequestHead, allowOrigin: String?, policy: CORSPolicy?) -> Bool {
        guard let origin = request.header("origin") else { return true }
        if let host = request.header("host"), let separator = origin.range(of: "://"),
            origin[separator.upperBound...].lowercased() == host.lowercased()
        {
            return true
        }
        if let policy { return policy.allowedOrigin(for: request) != nil }
        guard let allowed = allowOrigin else { return false }
        return allowed == "*" || (normalizedOrigin(allowed).map { $0 == normalizedOrigin(origin) } ?? false)
    }

    /// The fields of an answer to `request`: `headers` without the `Access-Control-*` ones,
    /// then the proxy's (`Access-Control-Allow-Origin` and `Access-Control-Expose-Headers` for
    /// an allowed origin; `Vary: Origin` when origins are listed and `headers` vary on less).
    /// Both the event loop's answers and the handler's go through here.
    package func apply(_ headers: [(String, String)], for request: HTTPRequestHead) -> [(String, String)] {
        var fields = headers.filter { !Self.isCORSField($0.0) }
        if let allowed = allowedOrigin(for: request) {
            fields.append(("Access-Control-Allow-Origin", allowed))
            fields.append(("Access-Control-Expose-Headers", Self.exposed))
        }
        if !anyOrigin {
            let vary = HTTPSyntax.listElements(fields.filter { HTTPHeaderField(name: $0.0, value: "").hasName("vary") }.map(\.1))
            if !vary.contains(where: { $0 == "*" || $0.lowercased() == "origin" }) { fields.append(("Vary", "Origin")) }
        }
        return fields
    }

    /// A CORS preflight (an `OPTIONS` request with `Origin` and `Access-Control-Request-Method`):
    /// answered by the proxy, never sent to the origin.
    func isPreflight(_ request: HTTPRequestHead) -> Bool {
        request.method == .options && request.headers.contains("origin") && request.headers.contains("access-control-request-method")
    }

    /// The fields of a preflight's answer (a 204): for an allowed origin, the origin, the
    /// methods served, the request fields it asked for, and how long to keep the answer; for
    /// another, none of them (the browser then refuses the request it was going to make).
    func preflightFields(for request: HTTPRequestHead) -> [(String, String)] {
        var fields: [(String, String)] = []
        if let allowed = allowedOrigin(for: request) {
            fields.append(("Access-Control-Allow-Origin", allowed))
            fields.append(("Access-Control-Allow-Methods", Self.methods))
            let asked = HTTPSyntax.listElements(request.headers.values("access-control-request-headers"))
            if !asked.isEmpty { fields.append(("Access-Control-Allow-Headers", asked.joined(separator: ", "))) }
            fields.append(("Access-Control-Max-Age", String(maxAge)))
        }
        fields.append(("Vary", anyOrigin ? "Access-Control-Request-Headers" : "Origin, Access-Control-Request-Headers"))
        return fields
    }

    static func isCORSField(_ name: String) -> Bool {
        name.utf8.count > 15 && HTTPHeaderField(name: String(name.prefix(15)), value: "").hasName("access-control-")
    }
}
