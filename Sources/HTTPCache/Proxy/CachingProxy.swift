import Foundation
import SparseCacheEngine
import SparseCacheStore
import SparseHTTP
import Synchronization

/// Answers HTTP requests from a ``ProgressiveCache``: cached bytes come from disk, missing ones
/// are fetched from the origin (once, shared with every other client), written, committed and
/// sent as they become durable. The ``HTTPServer`` handler behind `sparsecache serve`.
///
/// Which origin URL a request means:
/// - with an origin (reverse-proxy mode), `GET /path?query` is `<origin>/path?query`;
/// - without one (URL mode), `GET /any-name.mp4?url=<percent-encoded URL>` is that URL (the
///   name is only there so players can guess the type from it), and `GET http://host/path`
///   (from a client told to use this server as its HTTP proxy) is `http://host/path`.
///
/// Responses: GET and HEAD; `200` for no range; `206` with `Content-Range` for one range in
/// any form (`a-b`, `a-`, `-n`); `416` with `Content-Range: bytes */length` when no range
/// overlaps. A request for several ranges gets the whole resource (`200`): RFC 9110 lets a
/// server ignore Range, and players never ask for several. `If-Range` that does not match the
/// cached version also gets the whole resource. `Content-Type`, `ETag` and `Last-Modified` are
/// the origin's. Origin errors pass through: its 404 is a 404, its 5xx and unreachable origins
/// are `502`.
public final class CachingProxy: Sendable {
    public let cache: ProgressiveCache
    /// The origin in reverse-proxy mode; nil for URL mode.
    public let origin: URL?
    private let sources = Mutex(SourceTable())

    public init(cache: ProgressiveCache, origin: URL? = nil) {
        self.cache = cache
        self.origin = origin
    }

    /// The ``HTTPServer`` handler.
    public func handle(_ request: HTTPRequestHead, _ response: HTTPResponseWriter) async throws {
        guard request.method == "GET" || request.method == "HEAD" else {
            try await response.respond(
                status: 405, message: "method \(request.method) not allowed: GET and HEAD only", headers: [("Allow", "GET, HEAD")])
            return
        }
        let url: URL
        switch originURL(for: request.target) {
        case .success(let found): url = found
        case .failure(let problem):
            try await response.respond(status: 400, message: problem.message)
            return
        }
        let reader: CacheReader
        do {
            reader = try await cache.open(try source(for: url))
        } catch {
            let (status, message) = Self.status(for: error)
            try await response.respond(status: status, message: message)
            return
        }
        do {
            try await send(reader, for: request, to: response)
        } catch {
            await reader.close()
            throw error
        }
        await reader.close()
    }

    private func send(_ reader: CacheReader, for request: HTTPRequestHead, to response: HTTPResponseWriter) async throws {
        let info = reader.info
        let length = reader.length
        var headers: [(String, String)] = [("Content-Type", info.contentType ?? "application/octet-stream"), ("Accept-Ranges", "bytes")]
        if let etag = info.validator.etag { headers.append(("ETag", etag)) }
        if let lastModified = info.validator.lastModified { headers.append(("Last-Modified", lastModified)) }
        var rangeHeader = request.header("range")
        if let ifRange = request.header("if-range"), !Self.matches(ifRange: ifRange, info.validator) { rangeHeader = nil }
        let status: Int
        let range: Range<Int64>
        switch RangeRequest.parse(rangeHeader, length: length) {
        case .whole, .multiple:
            status = 200
            range = 0..<length
        case .single(let single):
            status = 206
            range = single
            headers.append(("Content-Range", "bytes \(single.lowerBound)-\(single.upperBound - 1)/\(length)"))
        case .unsatisfiable:
            try await response.respond(
                status: 416, message: "range \(rangeHeader ?? "") not satisfiable: the resource is \(length) bytes",
                headers: [("Content-Range", "bytes */\(length)")])
            return
        }
        // For the log: bytes sent that were cached when the request came, and the rest.
        let missing = request.method == "HEAD" ? [] : try await reader.missingRanges(in: range)
        // A cached range follows its head at once: both go out in one send.
        try await response.writeHead(status: status, headers: headers, contentLength: Int64(range.count), withFirstBody: missing.isEmpty)
        if request.method == "HEAD" { return }
        let start = range.lowerBound
        try await reader.read(range) { bytes in
            let offset = start + response.bodyBytes
            let chunk = offset..<(offset + Int64(bytes.count))
            let fetched = missing.reduce(Int64(0)) {
                $0 + max(0, min($1.upperBound, chunk.upperBound) - max($1.lowerBound, chunk.lowerBound))
            }
            response.countCacheBytes(hit: Int64(bytes.count) - fetched, miss: fetched)
            try await response.writeBody(bytes)
        }
    }

    // MARK: Requests to origin URLs

    struct TargetProblem: Error {
        var message: String
    }

    /// The origin URL a request target names.
    func originURL(for target: String) -> Result<URL, TargetProblem> {
        // Absolute form (`GET http://host/path`): a client that uses this server as its HTTP
        // proxy. Without an origin the URL is the origin URL (forward proxying); with one, its
        // path and query are looked up there, as for any request.
        var target = target
        if HTTPRequestParser.isAbsoluteHTTP(target.utf8) {
            guard let absolute = URL(string: target), absolute.host != nil else {
                return .failure(TargetProblem(message: "malformed absolute URL '\(target)'"))
            }
            guard origin != nil else { return .success(absolute) }
            let afterAuthority = target.dropFirst("http://".count).drop { $0 != "/" && $0 != "?" }
            target = afterAuthority.hasPrefix("/") ? String(afterAuthority) : "/" + afterAuthority
        }
        if let origin {
            var base = origin.absoluteString
            while base.hasSuffix("/") { base.removeLast() }
            guard target.hasPrefix("/"), let url = URL(string: base + target) else {
                return .failure(TargetProblem(message: "cannot map '\(target)' onto the origin \(origin.absoluteString)"))
            }
            return .success(url)
        }
        let query = target.split(separator: "?", maxSplits: 1).dropFirst().first ?? ""
        let parameter = query.split(separator: "&").first { $0.hasPrefix("url=") }
        guard let parameter else {
            return .failure(
                TargetProblem(message: "no origin: ask for /<name>?url=<percent-encoded http(s) URL>, or start the proxy with --origin"))
        }
        guard let text = String(parameter.dropFirst(4)).removingPercentEncoding, let url = URL(string: text),
            let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https", url.host != nil
        else {
            return .failure(TargetProblem(message: "the url parameter is not a percent-encoded http:// or https:// URL"))
        }
        return .success(url)
    }

    /// One source per URL, kept for the next request (each holds a URLSession).
    private func source(for url: URL) throws -> HTTPRangeSource {
        if let known = sources.withLock({ $0.sources[url.absoluteString] }) { return known }
        let made = try HTTPRangeSource(url: url)
        return sources.withLock { $0.insert(made) }
    }

    private struct SourceTable {
        static let capacity = 256
        var sources: [String: HTTPRangeSource] = [:]
        var order: [String] = []

        mutating func insert(_ source: HTTPRangeSource) -> HTTPRangeSource {
            if let existing = sources[source.key] { return existing }
            if order.count >= Self.capacity { sources[order.removeFirst()] = nil }
            sources[source.key] = source
            order.append(source.key)
            return source
        }
    }

    // MARK: Answers

    /// The status and message for a request that failed before its head was sent.
    static func status(for error: Error) -> (Int, String) {
        guard let error = error as? SparseCacheError else { return (500, "internal error: \(error)") }
        switch error.code {
        case .origin:
            if let status = error.httpStatus, (400..<500).contains(status), status != 416 {
                return (status, "the origin answered \(status): \(error)")
            }
            return (502, "bad answer from the origin: \(error)")
        case .originUnavailable:
            return (502, "origin unavailable: \(error)")
        case .originChanged:
            return (503, "the resource changed on the origin; try again: \(error)")
        case .invalidArgument:
            return (400, "\(error)")
        default:
            return (500, "cache error: \(error)")
        }
    }

    /// Whether an `If-Range` value names the cached version: a strong ETag equal to ours, or
    /// our Last-Modified date exactly (RFC 9110, section 13.1.5).
    static func matches(ifRange: String, _ validator: ContentValidator) -> Bool {
        if ifRange.hasPrefix("W/") { return false }
        if ifRange.hasPrefix("\"") {
            guard let etag = validator.etag, !etag.hasPrefix("W/") else { return false }
            return etag == ifRange
        }
        return validator.lastModified == ifRange
    }
}
