import Foundation
import Synchronization

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A resource on an HTTP or HTTPS origin, fetched by `Range` requests through URLSession.
///
/// - Sends `Range: bytes=a-b` and, once the cache holds a version, `If-Range` with its ETag
///   (or its Last-Modified date when the ETag is weak or missing), so a changed resource comes
///   back whole (200) instead of as a range of the new version.
/// - Follows redirects; times out a request that stalls for ``timeout``.
/// - Limits connections to one origin (``ConnectionLimiter``): callers over the limit wait.
/// - Streams the body as it arrives (URLSession's data delegate; `bytes(for:)` does not exist on
///   Linux).
public final class HTTPRangeSource: RangeSource {
    public let url: URL
    public var key: String { url.absoluteString }
    /// Longest wait for any progress on a request before it fails as `.originUnavailable`.
    public let timeout: Duration
    let limiter: ConnectionLimiter
    private let session: URLSession
    private let delegate: SessionDelegate

    /// - Parameters:
    ///   - limiter: shared by every source of one origin; `HTTPRangeSource.limiter(for:)` keeps
    ///     one per host and port.
    public init(
        url: URL, timeout: Duration = .seconds(30), limiter: ConnectionLimiter? = nil
    ) throws {
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https", url.host != nil else {
            throw SparseCacheError(.invalidArgument, operation: "fetch", path: url.absoluteString, detail: "not an http(s) URL")
        }
        self.url = url
        self.timeout = timeout
        self.limiter = limiter ?? Self.limiter(for: url)
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.urlCache = nil
        configuration.httpMaximumConnectionsPerHost = 64
        delegate = SessionDelegate()
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        session = URLSession(configuration: configuration, delegate: delegate, delegateQueue: queue)
    }

    deinit {
        session.finishTasksAndInvalidate()
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
        var request = URLRequest(url: url)
        request.httpMethod = "GET"
        // Bytes as they are stored: a compressed transfer would make ranges mean something else.
        request.setValue("identity", forHTTPHeaderField: "Accept-Encoding")
        if let range {
            request.setValue("bytes=\(range.lowerBound)-\(range.upperBound - 1)", forHTTPHeaderField: "Range")
            if let validator, let ifRange = Self.ifRange(validator) { request.setValue(ifRange, forHTTPHeaderField: "If-Range") }
        }
        try await limiter.acquire()
        let stream = ResponseStream()
        let task = session.dataTask(with: request)
        delegate.register(task, stream: stream)
        let limiter = self.limiter
        stream.onFinish { Task { await limiter.release() } }
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
            let (info, offset) = try Self.interpret(response, requested: range, key: key)
            return RangeResponse(info: info, offset: offset, body: stream.body, cancel: { task.cancel() })
        } catch {
            task.cancel()
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
    static func interpret(_ response: HTTPURLResponse, requested: Range<Int64>?, key: String) throws -> (ContentInfo, Int64) {
        let headers = Headers(response)
        let validator = ContentValidator(etag: headers["etag"], lastModified: headers["last-modified"])
        let contentType = headers["content-type"]
        switch response.statusCode {
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
            let length = response.expectedContentLength >= 0 ? response.expectedContentLength : nil
            let ranges = headers["accept-ranges"].map { $0.lowercased().contains("bytes") } ?? false
            return (ContentInfo(length: length, contentType: contentType, validator: validator, acceptsRanges: ranges && requested == nil), 0)
        case 416:
            let total = headers["content-range"].flatMap(ContentRange.init)?.total
            throw SparseCacheError(
                .origin, operation: "fetch", path: key,
                detail: "416 range not satisfiable" + (total.map { " (the resource is \($0) bytes)" } ?? ""), httpStatus: 416)
        case 500...599:
            throw SparseCacheError(
                .originUnavailable, operation: "fetch", path: key, detail: "HTTP \(response.statusCode) from the origin",
                httpStatus: response.statusCode)
        default:
            throw SparseCacheError(
                .origin, operation: "fetch", path: key,
                detail: "HTTP \(response.statusCode) \(HTTPURLResponse.localizedString(forStatusCode: response.statusCode))",
                httpStatus: response.statusCode)
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
