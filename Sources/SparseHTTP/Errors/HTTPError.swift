import SparseCacheBase

/// The error of SparseHTTP: a socket, a connection or an HTTP message that went wrong, with a
/// stable kind plus the context an operator needs to act (as swift-nio's `IOError` and
/// `HTTPParserError` are NIO's).
///
/// Its description reads like
/// `connect failed for '127.0.0.1:8000': connection refused; Connection refused (errno 111)`.
/// Callers match ``kind``, never the text. The cache above turns the errors of its origin
/// requests into its own `OriginError` (docs/ARCHITECTURE.md, "Errors").
public struct HTTPError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What went wrong, stable across releases.
    public enum Kind: String, Sendable, Equatable, CaseIterable {
        /// A deadline passed: no answer (or no more of it) within the time allowed, or the
        /// connection was closed by its deadline.
        case timedOut
        /// No address of the peer accepted the connection; `errno` says why when it is known
        /// (`ECONNREFUSED`: connection refused).
        case connectFailed
        /// The peer's host name did not resolve to an address.
        case unresolved
        /// The origin address policy refuses the peer (a local or private address that was
        /// not allowed).
        case notAllowed
        /// The connection ended before the message did: closed or reset by the peer, cut by
        /// the transport, or stopped by this side before its end; `errno` when a system call
        /// said so.
        case connectionLost
        /// The peer's message is not HTTP/1.x, or its framing is broken (a bad head, a bad
        /// chunk size, too many interim responses); `detail` names what.
        case malformed
        /// The connection or the listener was closed on this side (by ``close``, a shutdown),
        /// and the call cannot go on.
        case closed
        /// A system call on a socket failed (listen, accept, send, receive, epoll_ctl, the
        /// signal pipe); `errno` holds its error number.
        case io
        /// The caller asked for what cannot be done: a body longer than its length, a second
        /// reader of one body, a response head sent twice.
        case invalidArgument
    }

    public var kind: Kind
    /// The operation that failed, e.g. "connect", "fetch", "receive", "listen".
    public var operation: String
    /// What the operation was about: `host:port`, a URL, a listener's `port N`, a request target.
    public var peer: String?
    /// The system error number, when a system call failed.
    public var errno: Int32?
    /// Free text naming the problem (which part of the message was malformed, how long the
    /// deadline was).
    public var detail: String?

    public init(_ kind: Kind, operation: String, peer: String? = nil, errno: Int32? = nil, detail: String? = nil) {
        self.kind = kind
        self.operation = operation
        self.peer = peer
        self.errno = errno
        self.detail = detail
    }

    public var description: String {
        var text = "\(operation) failed"
        if let peer { text += " for '\(peer)'" }
        var reasons: [String] = []
        if let detail { reasons.append(detail) }
        if let errno { reasons.append("\(ErrnoText.describe(errno)) (errno \(errno))") }
        if reasons.isEmpty { reasons.append(kind.rawValue) }
        return text + ": " + reasons.joined(separator: "; ")
    }
}
