import SparseCacheBase
import SparseHTTP

/// The cache's error about an origin: it answered, but not with the resource; it could not be
/// reached, or took too long; the resource changed on it; or it may not be asked. Carries the
/// origin's HTTP status when it answered one, and the transport's ``HTTPError`` when the
/// connection failed.
///
/// Its description reads like
/// `fetch failed for 'http://origin/movie.mp4': HTTP 404 Not Found` or
/// `connect failed for '127.0.0.1:8000': connection refused; Connection refused (errno 111)`.
/// Callers match ``kind``, never the text. How the kinds become a proxy's answer and the CLI's
/// exit status: docs/ARCHITECTURE.md, "Errors".
public struct OriginError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What went wrong, stable across releases.
    public enum Kind: String, Sendable, Equatable, CaseIterable {
        /// The origin answered, but not with the resource: 404, 403, a range past its end
        /// (416), a malformed response, too many redirects. Asking again will not help;
        /// ``status`` holds the status when it was one.
        case badAnswer
        /// The origin could not be reached or failed in a way that may pass (connection refused
        /// or cut, a name that did not resolve, 5xx), and the retries ran out.
        case unavailable
        /// The origin took too long: no answer, or a body that stopped coming. A proxy answers
        /// it 504, not 502 (RFC 9110, section 15.6.5), and it is not retried: the wait was
        /// already as long as a client should bear.
        case timedOut
        /// The resource changed on the origin while it was being read: the cached bytes of the
        /// old version were dropped, and a reader that had begun on them is stopped here rather
        /// than handed bytes of two versions.
        case changed
        /// The origin address policy refuses the origin (a local or private address that was
        /// not allowed): nothing was sent.
        case notAllowed
    }

    public var kind: Kind
    /// The operation that failed, e.g. "fetch", "read", "prefetch", "connect".
    public var operation: String
    /// The resource's key (its URL), or the origin's `host:port` for a connection failure.
    public var key: String?
    /// The byte of the resource the failure is about, when it is about one.
    public var offset: Int64?
    /// The HTTP status the origin answered, when the error is about its answer (a proxy passes
    /// a 404 on as a 404, a 416 says the range is past the end).
    public var status: Int?
    /// Free text naming the problem.
    public var detail: String?
    /// The connection's error, when the origin could not be reached or the transfer failed.
    public var transport: HTTPError?

    public init(
        _ kind: Kind, operation: String, key: String? = nil, offset: Int64? = nil, detail: String? = nil, status: Int? = nil,
        transport: HTTPError? = nil
    ) {
        self.kind = kind
        self.operation = operation
        self.key = key
        self.offset = offset
        self.status = status
        self.detail = detail
        self.transport = transport
    }

    /// A failed origin request as the cache sees it: a timeout is `.timedOut`, a malformed
    /// answer `.badAnswer`, a refusal of the address policy `.notAllowed`, and every other
    /// connection failure (refused, unresolved, cut) `.unavailable`.
    public init(_ transport: HTTPError) {
        let kind: Kind =
            switch transport.kind {
            case .timedOut: .timedOut
            case .malformed: .badAnswer
            case .notAllowed: .notAllowed
            case .connectFailed, .unresolved, .connectionLost, .closed, .io, .invalidArgument: .unavailable
            }
        self.init(kind, operation: transport.operation, key: transport.peer, detail: transport.detail, transport: transport)
    }

    /// The system error number of the connection's failure, when there was one.
    public var errno: Int32? { transport?.errno }

    /// A failure that may pass: the origin could not be reached, or took too long.
    public var mayPass: Bool { kind == .unavailable || kind == .timedOut }

    public var description: String {
        var text = "\(operation) failed"
        if let key { text += " for '\(key)'" }
        if let offset { text += " at offset \(offset)" }
        var reasons: [String] = []
        if let detail { reasons.append(detail) }
        if let errno { reasons.append("\(ErrnoText.describe(errno)) (errno \(errno))") }
        if reasons.isEmpty { reasons.append(kind.rawValue) }
        return text + ": " + reasons.joined(separator: "; ")
    }

    /// `error` as the cache's: an ``HTTPError`` of an origin request becomes an `OriginError`;
    /// anything else is returned as it is.
    package static func translated(_ error: Error) -> Error {
        if let error = error as? HTTPError { return OriginError(error) }
        return error
    }

    /// Runs `body`, an origin request or a read of its answer, and throws its ``HTTPError`` as
    /// an `OriginError`.
    package static func translating<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch {
            throw translated(error)
        }
    }
}
