import SparseHTTP

/// The conditional request fields of RFC 9110, section 13, evaluated against a stored
/// response, in the order of section 13.2.2.
enum Precondition: Sendable, Equatable {
    /// No condition stops the request: answer it (Range and If-Range next).
    case proceed
    /// `304 Not Modified` (If-None-Match or If-Modified-Since on GET/HEAD).
    case notModified
    /// `412 Precondition Failed` (If-Match or If-Unmodified-Since).
    case failed

    /// - Parameter date: the stored response's `Date`: a cache evaluates If-Modified-Since
    ///   against it when the response has no Last-Modified (RFC 9111 section 4.3.2).
    static func evaluate(_ request: HTTPRequestHead, etag: String?, lastModified: String?, date: String? = nil) -> Precondition {
        // Parsed only for a date conditional: most requests carry none.
        var modified: Int64? { lastModified.flatMap(HTTPDate.parse) }
        // 1. If-Match: a strong comparison against the current entity tag (13.1.1).
        if request.headers.contains("if-match") {
            let tags = request.headers.listElements("if-match")
            let matches = tags.contains("*") ? etag != nil : tags.contains { strongMatch($0, etag) }
            if !matches { return .failed }
        } else if let since = request.header("if-unmodified-since").flatMap(HTTPDate.parse) {
            // 2. If-Unmodified-Since, only without If-Match; an invalid date is ignored (13.1.4).
            guard let modified, modified <= since else { return .failed }
        }
        // 3. If-None-Match: a weak comparison (13.1.2); for GET and HEAD a match is a 304.
        if request.headers.contains("if-none-match") {
            let tags = request.headers.listElements("if-none-match")
            let matches = tags.contains("*") ? etag != nil : tags.contains { weakMatch($0, etag) }
            if matches { return request.method.isGetOrHead ? .notModified : .failed }
        } else if request.method.isGetOrHead,
            let since = request.header("if-modified-since").flatMap(HTTPDate.parse),
            let modified = modified ?? date.flatMap(HTTPDate.parse)
        {
            // 4. If-Modified-Since, only without If-None-Match.
            if modified <= since { return .notModified }
        }
        return .proceed
    }

    static func strongMatch(_ tag: String, _ etag: String?) -> Bool {
        guard let etag, !tag.hasPrefix("W/"), !etag.hasPrefix("W/") else { return false }
        return tag == etag
    }

    static func weakMatch(_ tag: String, _ etag: String?) -> Bool {
        guard let etag else { return false }
        return CachePolicy.opaque(tag) == CachePolicy.opaque(etag)
    }

    /// Whether an `If-Range` value names the stored version (13.1.5): a strong entity tag equal
    /// to the stored one, or the stored `Last-Modified` exactly when it is a strong validator:
    /// at least a second older than the response's `Date`.
    static func ifRangeMatches(_ value: String, etag: String?, lastModified: String?, date: String?) -> Bool {
        if value.hasPrefix("\"") || value.hasPrefix("W/") { return strongMatch(value, etag) }
        guard let lastModified, value == lastModified, let modified = HTTPDate.parse(lastModified),
            let sent = date.flatMap(HTTPDate.parse)
        else { return false }
        return modified + 1 <= sent
    }
}
