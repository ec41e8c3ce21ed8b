import Foundation
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
    private let resolver = BlockingExecutor(label: "sparsecache.resolve")
    /// Idle connections to reuse; every source shares one unless given its own.
    let pool: OriginConnectionPool
    private let session = Mutex<(URLSession, SessionDelegate)?>(nil)

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

    /// The URLSession, made on first use (an `http://` source never needs one).
    private func urlSession() -> (URLSession, SessionDelegate) {
        session.withLock { session in
            if let session { return session }
            let configuration = URLSessionConfiguration.ephemeral
            configuration.timeoutIntervalForRequest = Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18
            configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
            configuration.urlCache = nil
            configuration.httpMaximumConnectionsPerHost = 64
            let delegate = SessionDelegate()
            let queue = OperationQueue()
            queue.maxConcurrentOperationCount = 1
            let made = (URLSession(configuration: configuration, delegate: delegate, delegateQueue: queue), delegate)
            session = made
            return made
        }
    }

    /// Connections per origin (scheme, host and port) for sources made without a limiter.
    public static let connectionsPerOrigin = 6

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

    /// Over ``HTTPExchange``, following redirects (to `https://` through URLSession).
    private func fetchDirect(_ range: Range<Int64>?, validator: ContentValidator?, release: FinishAction) async throws -> RangeResponse {
        var current = url
        for _ in 0...Self.maximumRedirects {
            guard let host = current.host else { break }
            let request = try Self.request(for: current, range: range, validator: validator, key: key)
            let exchange = try await HTTPExchange.start(
                host: host.hasPrefix("[") ? String(host.dropFirst().dropLast()) : host, port: current.port ?? 80, request: request,
                name: key, timeout: timeout, resolver: resolver, pool: pool)
            let head = exchange.head
            if [301, 302, 303, 307, 308].contains(head.status), let location = head.header("location") {
                exchange.cancel()
                guard let next = URL(string: location, relativeTo: current)?.absoluteURL, let scheme = next.scheme?.lowercased(),
                    scheme == "http" || scheme == "https"
                else {
                    throw SparseCacheError(.origin, operation: "fetch", path: key, detail: "HTTP \(head.status) to an unusable location '\(location)'")
                }
                if scheme == "https" { return try await fetchThroughSession(next, range, validator: validator, release: release) }
                current = next
                continue
            }
            do {
                var length: Int64?
                if case .length(let count) = head.framing { length = count }
                let (info, offset) = try Self.interpret(status: head.status, headers: Headers(head), contentLength: length, requested: range, key: key)
                exchange.onFinish(release)
                let body = AsyncThrowingStream<[UInt8], Error>(unfolding: { try await exchange.nextChunk() })
                return RangeResponse(info: info, offset: offset, body: body, cancel: { exchange.cancel() })
            } catch {
                exchange.cancel()
                throw error
            }
        }
        throw SparseCacheError(.origin, operation: "fetch", path: key, detail: "more than \(Self.maximumRedirects) redirects")
    }

    /// Through URLSession, which follows redirects itself.
    private func fetchThroughSession(
        _ url: URL, _ range: Range<Int64>?, validator: ContentValidator?, release: FinishAction
    ) async throws -> RangeResponse {
        var request = URLRequest(url: url)
        request.httpMethod = "GET"
        // Bytes as they are stored: a compressed transfer would make ranges mean something else.
        request.setValue("identity", forHTTPHeaderField: "Accept-Encoding")
        if let range {
            request.setValue("bytes=\(range.lowerBound)-\(range.upperBound - 1)", forHTTPHeaderField: "Range")
            if let validator, let ifRange = Self.ifRange(validator) { request.setValue(ifRange, forHTTPHeaderField: "If-Range") }
        }
        let (session, delegate) = urlSession()
        let stream = ResponseStream()
        let task = session.dataTask(with: request)
        delegate.register(task, stream: stream)
        stream.onFinish { release.run() }
        task.resume()
        let response: HTTPURLResponse
        do {
            response = try await withTaskCancellationHandler {
                try await stream.response()
            } onCancel: {
                task.cancel()
            }
        } catch {
            task.cancel()
            throw error
        }
        do {
            let length = response.expectedContentLength >= 0 ? response.expectedContentLength : nil
            let (info, offset) = try Self.interpret(
                status: response.statusCode, headers: Headers(response), contentLength: length, requested: range, key: key)
            return RangeResponse(info: info, offset: offset, body: stream.body, cancel: { task.cancel() })
        } catch {
            task.cancel()
            throw error
        }
    }

    /// The request head of a GET of `url`: the same headers URLSession is given, plus `Host`.
    /// HTTP/1.1 keeps the connection open unless the origin says otherwise.
    static func request(for url: URL, range: Range<Int64>?, validator: ContentValidator?, key: String) throws -> [UInt8] {
        let components = URLComponents(url: url, resolvingAgainstBaseURL: true)
        var target = components?.percentEncodedPath ?? "/"
        if target.isEmpty { target = "/" }
        if let query = components?.percentEncodedQuery { target += "?" + query }
        guard let host = url.host, target.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw SparseCacheError(.invalidArgument, operation: "fetch", path: key, detail: "the URL cannot be sent as a request target")
        }
        let bracketed = host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
        var lines = [
            "GET \(target) HTTP/1.1", "Host: \(bracketed)" + (url.port.map { $0 == 80 ? "" : ":\($0)" } ?? ""), "User-Agent: sparsecache",
            "Accept: */*", "Accept-Encoding: identity",
        ]
        if let range {
            lines.append("Range: bytes=\(range.lowerBound)-\(range.upperBound - 1)")
            if let validator, let ifRange = ifRange(validator) { lines.append("If-Range: \(ifRange)") }
        }
        if let user = url.user {
            let credentials = (user.removingPercentEncoding ?? user) + ":" + ((url.password?.removingPercentEncoding ?? url.password) ?? "")
            lines.append("Authorization: Basic \(Data(credentials.utf8).base64EncodedString())")
        }
        return Array((lines.joined(separator: "\r\n") + "\r\n\r\n").utf8)
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
        status: Int, headers: Headers, contentLength: Int64?, requested: Range<Int64>?, key: String
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
            return (ContentInfo(length: contentRange.total, contentType: contentType, validator: validator, acceptsRanges: true), first.lowerBound)
        case 200:
            let length = contentLength
            let ranges = headers["accept-ranges"].map { $0.lowercased().contains("bytes") } ?? false
            return (ContentInfo(length: length, contentType: contentType, validator: validator, acceptsRanges: ranges && requested == nil), 0)
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

/// Response headers with case-insensitive names.
struct Headers {
    private var values: [String: String] = [:]

    init(_ response: HTTPURLResponse) {
        for (name, value) in response.allHeaderFields {
            if let name = name as? String, let value = value as? String { values[name.lowercased()] = value }
        }
    }

    /// The first value of each name.
    init(_ head: HTTPResponseHead) {
        for field in head.headers where values[field.name.lowercased()] == nil { values[field.name.lowercased()] = field.value }
    }

    subscript(name: String) -> String? { values[name] }
}

/// `Content-Range: bytes a-b/total`, `bytes a-b/*` or `bytes */total`.
struct ContentRange: Equatable {
    /// The bytes sent, half-open (nil for `*`).
    var range: Range<Int64>?
    var total: Int64?

    init?(_ text: String) {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        guard trimmed.lowercased().hasPrefix("bytes ") else { return nil }
        let spec = trimmed.dropFirst(6).trimmingCharacters(in: .whitespaces)
        let parts = spec.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2 else { return nil }
        if parts[1] == "*" {
            total = nil
        } else {
            guard let value = Int64(parts[1]), value >= 0 else { return nil }
            total = value
        }
        if parts[0] == "*" {
            guard total != nil else { return nil }
            range = nil
        } else {
            let bounds = parts[0].split(separator: "-", omittingEmptySubsequences: false)
            guard bounds.count == 2, let first = Int64(bounds[0]), let last = Int64(bounds[1]), first >= 0, last >= first,
                last < Int64.max
            else { return nil }
            if let total, last >= total { return nil }
            range = first..<(last + 1)
        }
    }
}
