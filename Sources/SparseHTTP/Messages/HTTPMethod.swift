/// An HTTP request method (RFC 9110, section 9): the token as the request line carries it.
///
/// Methods are compared by their exact token: RFC 9110, section 9.1, makes the method token
/// case-sensitive, so `get` is a method of its own and not `GET`. Any token is a method (a
/// server answers one it does not implement with 501 or 405); the constants name the ones
/// RFC 9110 and RFC 5789 define.
///
/// ```swift
/// if request.method.isGetOrHead { ... }
/// let purge = HTTPMethod(rawValue: "PURGE")
/// ```
public struct HTTPMethod: RawRepresentable, Hashable, Sendable, CustomStringConvertible, ExpressibleByStringLiteral {
    /// The token, e.g. `GET`.
    public let rawValue: String

    /// The method whose token is `rawValue`, as it is (no case folding, section 9.1).
    public init(rawValue: String) { self.rawValue = rawValue }

    /// `"GET"` as a method: the literal is the token.
    public init(stringLiteral token: String) { self.rawValue = token }

    /// The token.
    public var description: String { rawValue }

    // The constants are computed: a literal token costs nothing to make, where a stored
    // static would be a lazily initialized global behind an accessor call at every use.

    public static var get: HTTPMethod { HTTPMethod(rawValue: "GET") }
    public static var head: HTTPMethod { HTTPMethod(rawValue: "HEAD") }
    public static var post: HTTPMethod { HTTPMethod(rawValue: "POST") }
    public static var put: HTTPMethod { HTTPMethod(rawValue: "PUT") }
    public static var delete: HTTPMethod { HTTPMethod(rawValue: "DELETE") }
    public static var connect: HTTPMethod { HTTPMethod(rawValue: "CONNECT") }
    public static var options: HTTPMethod { HTTPMethod(rawValue: "OPTIONS") }
    public static var trace: HTTPMethod { HTTPMethod(rawValue: "TRACE") }
    /// RFC 5789.
    public static var patch: HTTPMethod { HTTPMethod(rawValue: "PATCH") }
    /// Not in RFC 9110: the removal request of Varnish, Squid and nginx's cache purge module.
    package static var purge: HTTPMethod { HTTPMethod(rawValue: "PURGE") }

    /// Safe (RFC 9110, section 9.2.1): read-only by definition; GET, HEAD, OPTIONS and TRACE.
    public var isSafe: Bool { self == .get || self == .head || self == .options || self == .trace }

    /// Idempotent (RFC 9110, section 9.2.2): the safe methods, PUT and DELETE; a request with
    /// one may be retried after a lost connection.
    public var isIdempotent: Bool { isSafe || self == .put || self == .delete }

    /// GET or HEAD: the methods a cache answers from what it stored (RFC 9111, section 2).
    package var isGetOrHead: Bool { self == .get || self == .head }
}
