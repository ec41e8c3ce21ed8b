import Foundation
@_spi(Locking) import SparseCacheEngine

/// The origin URL and cache key of request targets seen recently, so a client asking for
/// ranges of one URL again and again does not have Foundation parse the URL and build its key
/// on every request (about a tenth of the CPU time of a cached 64 KiB range).
///
/// Only what depends on the target alone is kept: a target carrying `url=` may name an origin
/// that a playlist made known later (``CachingProxy/referencedURL(_:)``), so it is never
/// kept. The table is bounded; when full it starts over.
final class ProxyRoutes: Sendable {
    /// Where one target goes.
    struct Route: Sendable {
        /// ``CachingProxy/cacheKey(_:)`` of the origin URL.
        var key: String
        /// The origin URL's path, percent-decoded (`URL.path`).
        var path: String
        /// For a plain target on the configured origin (``CachingProxy/route(for:)``): the
        /// origin's source and the target's endpoint, to make this route's source on (no URL
        /// parsed).
        var onOrigin: (source: HTTPRangeSource, endpoint: HTTPRangeSource.Endpoint)?
        private var parsed: URL?

        /// The origin URL; for a route on the origin, made when asked for (its key parses:
        /// see ``HTTPRangeSource/isPlainTarget(_:)``).
        var url: URL { parsed ?? URL(string: key)! }

        init(url: URL) {
            parsed = url
            key = CachingProxy.cacheKey(url)
            path = url.path
        }

        /// The route of `target` (``HTTPRangeSource/isPlainTarget(_:)``) on `origin`, whose URL
        /// is `base` with a path at most (no trailing slash, query, fragment or credentials):
        /// what parsing `base + target` would give, without parsing it.
        init(plain target: String, base: String, on origin: HTTPRangeSource) {
            key = base + target
            let endpoint = origin.endpoint.appending(target)
            onOrigin = (origin, endpoint)
            var path = endpoint.target ?? "/"
            if let query = path.utf8.firstIndex(of: UInt8(ascii: "?")) { path = String(path[..<query]) }
            if path.utf8.contains(UInt8(ascii: "%")) {
                // Percent-decoding is the URL's business (what it makes of invalid UTF-8).
                path = URL(string: key)!.path
            } else {
                while path.utf8.count > 1, path.hasSuffix("/") { path.removeLast() }
            }
            self.path = path
        }

        /// This route's source: made on the origin's for a route on it (nil otherwise).
        func sourceOnOrigin() -> HTTPRangeSource? {
            onOrigin.map { HTTPRangeSource(endpoint: $0.endpoint, on: $0.source, key: key) }
        }
    }

    static let capacity = 4096
    private let routes = Lock(BoundedTable<Route>(capacity: capacity))

    /// The route of `target`, from the table or made by `make` (and kept when `target` does
    /// not depend on anything but itself).
    func route(for target: String, make: () -> Result<URL, CachingProxy.TargetProblem>) -> Result<Route, CachingProxy.TargetProblem> {
        if let known = routes.withLock({ $0[target] }) { return .success(known) }
        switch make() {
        case .failure(let problem): return .failure(problem)
        case .success(let url):
            let route = Route(url: url)
            if !Self.mayChange(target) {
                routes.withLock { $0.set(route, for: target) }
            }
            return .success(route)
        }
    }

    /// Whether the mapping of `target` may change while the proxy runs (it names a URL).
    static func mayChange(_ target: String) -> Bool {
        // A plain scan: the generic `firstRange(of:)` cost a twentieth of a cached hit.
        var previous: (UInt8, UInt8, UInt8) = (0, 0, 0)
        for byte in target.utf8 {
            if byte == UInt8(ascii: "="), previous == (UInt8(ascii: "u"), UInt8(ascii: "r"), UInt8(ascii: "l")) { return true }
            previous = (previous.1, previous.2, byte)
        }
        return false
    }
}
