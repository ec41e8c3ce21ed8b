import Foundation
import SparseCacheEngine
import SparseCacheStore
import SparseHTTP
import Synchronization

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// A resource on an HTTP or HTTPS origin, fetched by `Range` requests.
///
/// - Sends `Range: bytes=a-b` and, once the cache holds a version, `If-Range` with its ETag
///   (or its Last-Modified date when the ETag is weak or missing), so a changed resource comes
///   back whole (200) instead of as a range of the new version.
/// - Follows redirects; times out a request that stalls for ``timeout``.
/// - Limits connections to one origin (``ConnectionLimiter``): callers over the limit wait.
/// - `http://` goes over the project's own HTTP/1.1 client (``HTTPExchange``): the body is
///   received straight into the chunks handed out, and only as fast as the caller takes them.
///   `https://` (and a redirect to it) goes through URLSession, which streams the body as it
///   arrives (its data delegate; `bytes(for:)` does not exist on Linux) and cannot be paused.
public final class HTTPRangeSource: RangeSource {
    public let url: URL
    public var key: String { url.absoluteString }
    /// Longest wait for any progress on a request before it fails as `.originUnavailable`.
    public let timeout: Duration
    public let transport: Transport
    let limiter: ConnectionLimiter
    let resolver = BlockingExecutor(label: "sparsecache.resolve")
    /// Idle connections to reuse; every source shares one unless given its own.
    let pool: OriginConnectionPool
    /// Made on first use (``urlSession()``).
    let session = Mutex<(URLSession, SessionDelegate)?>(nil)

    /// How requests travel.
    public enum Transport: Sendable {
        /// `http://` over sparsecache's own HTTP/1.1 client, `https://` through URLSession.
        case automatic
        /// Everything through URLSession (FoundationNetworking, libcurl underneath).
        case urlSession
    }

    /// Redirects followed before a fetch fails.
    public static let maximumRedirects = 10

    /// - Parameters:
    ///   - limiter: shared by every source of one origin; `HTTPRangeSource.limiter(for:)` keeps
    ///     one per host and port.
    public convenience init(
        url: URL, timeout: Duration = .seconds(30), limiter: ConnectionLimiter? = nil, transport: Transport = .automatic
    ) throws {
        try self.init(url: url, timeout: timeout, limiter: limiter, transport: transport, pool: .shared)
    }

    init(url: URL, timeout: Duration, limiter: ConnectionLimiter?, transport: Transport, pool: OriginConnectionPool) throws {
        self.pool = pool
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https", url.host != nil else {
            throw SparseCacheError(.invalidArgument, operation: "fetch", path: url.absoluteString, detail: "not an http(s) URL")
        }
        self.url = url
        self.timeout = timeout
        self.transport = transport
        self.limiter = limiter ?? Self.limiter(for: url)
    }

    deinit {
        session.withLock { $0?.0.finishTasksAndInvalidate() }
    }

    /// Connections per origin (scheme, host and port) for sources made without a limiter.
    public static let connectionsPerOrigin = OriginConnectionPool.connectionsPerOrigin

    private static let limiters = Mutex<[String: ConnectionLimiter]>([:])

    /// The limiter shared by every source of `url`'s origin.
    public static func limiter(for url: URL) -> ConnectionLimiter {
        let origin = "\(url.scheme ?? "")://\(url.host ?? ""):\(url.port ?? -1)"
        return limiters.withLock { limiters in
            if let existing = limiters[origin] { return existing }
            let made = ConnectionLimiter(limit: connectionsPerOrigin)
            limiters[origin] = made
            return made
        }
    }

    public func fetch(_ range: Range<Int64>?, validator: ContentValidator?) async throws -> RangeResponse {
        if let range, range.isEmpty || range.lowerBound < 0 {
            throw SparseCacheError(.invalidArgument, operation: "fetch", path: key, detail: "empty or negative range \(range)")
        }
        try await limiter.acquire()
        let limiter = self.limiter
        let release = FinishAction { Task { await limiter.release() } }
        do {
            if transport == .automatic, url.scheme?.lowercased() == "http" {
                return try await fetchDirect(range, validator: validator, release: release)
            }
            return try await fetchThroughSession(url, range, validator: validator, release: release)
        } catch {
            release.run()
            throw error
        }
    }

    /// The `If-Range` value: a strong ETag, else the Last-Modified date (a weak ETag may not
    /// be used there).
    static func ifRange(_ validator: ContentValidator) -> String? {
        if let etag = validator.etag, !etag.hasPrefix("W/") { return etag }
        return validator.lastModified
    }

    /// What a response means for a request of `requested`.
    ///
    /// - Parameter contentLength: the body's length when the response gave one.
    static func interpret(
        status: Int, headers: HTTPHeaders, contentLength: Int64?, requested: Range<Int64>?, key: String
    ) throws -> (ContentInfo, Int64) {
        let validator = ContentValidator(etag: headers["etag"], lastModified: headers["last-modified"])
        let contentType = headers["content-type"]
        switch status {
        case 206:
            guard let value = headers["content-range"], let contentRange = ContentRange(value), let first = contentRange.range else {
                throw SparseCacheError(
                    .origin, operation: "fetch", path: key,
                    detail: "206 with a missing or malformed Content-Range '\(headers["content-range"] ?? "")'")
            }
            if let requested, first.lowerBound != requested.lowerBound {
                throw SparseCacheError(
                    .origin, operation: "fetch", path: key,
                    detail: "asked for bytes from \(requested.lowerBound), the origin sent \(value)")
            }
            return (ContentInfo(length: contentRange.total, contentType: contentType, validator: validator), first.lowerBound)
        case 200:
            return (ContentInfo(length: contentLength, contentType: contentType, validator: validator), 0)
        case 416:
            let total = headers["content-range"].flatMap(ContentRange.init)?.total
            throw SparseCacheError(
                .origin, operation: "fetch", path: key,
                detail: "416 range not satisfiable" + (total.map { " (the resource is \($0) bytes)" } ?? ""), httpStatus: 416)
        case 500...599:
            throw SparseCacheError(
                .originUnavailable, operation: "fetch", path: key, detail: "HTTP \(status) from the origin", httpStatus: status)
        default:
            throw SparseCacheError(
                .origin, operation: "fetch", path: key,
                detail: "HTTP \(status) \(HTTPURLResponse.localizedString(forStatusCode: status))", httpStatus: status)
        }
    }
}
