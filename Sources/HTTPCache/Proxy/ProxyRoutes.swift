import Foundation
import Synchronization

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
        var url: URL
        /// ``CachingProxy/cacheKey(_:)`` of `url`.
        var key: String
        /// `url.path`.
        var path: String
    }

    static let capacity = 4096
    private let routes = Mutex(BoundedTable<Route>(capacity: capacity))

    /// The route of `target`, from the table or made by `make` (and kept when `target` does
    /// not depend on anything but itself).
    func route(for target: String, make: () -> Result<URL, CachingProxy.TargetProblem>) -> Result<Route, CachingProxy.TargetProblem> {
        if let known = routes.withLock({ $0[target] }) { return .success(known) }
        switch make() {
        case .failure(let problem): return .failure(problem)
        case .success(let url):
            let route = Route(url: url, key: CachingProxy.cacheKey(url), path: url.path)
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
