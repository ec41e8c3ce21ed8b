/// An HTTP/1.x request head: what ``HTTPRequestParser`` reads from a client, and what the
/// origin client sends (``encoded()``).
public struct HTTPRequestHead: Sendable, Equatable {
    public var method: HTTPMethod
    /// The request-target exactly as sent: a path (`/movie.mp4?url=...`), `*`, or an
    /// absolute `http://` URL (from a client that uses this server as its HTTP proxy).
    public var target: String
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    public var minorVersion: Int
    /// Header fields in order, names as sent.
    public var headers: HTTPHeaders

    public init(method: HTTPMethod, target: String, minorVersion: Int = 1, headers: HTTPHeaders = []) {
        self.method = method
        self.target = target
        self.minorVersion = minorVersion
        self.headers = headers
    }

    /// The first value of a header, by case-insensitive name.
    public func header(_ name: String) -> String? { headers[name] }

    /// Whether the connection stays open after the response (HTTP/1.1 unless `Connection:
    /// close`; HTTP/1.0 only with `Connection: keep-alive`), RFC 9112, section 9.3.
    package var keepAlive: Bool {
        minorVersion >= 1
            ? !headers.containsListElement(of: "connection", "close") : headers.containsListElement(of: "connection", "keep-alive")
    }
}
