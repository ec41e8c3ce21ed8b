@_spi(Locking) import SparseCacheEngine
import SparseHTTP

/// Counters of a running proxy, kept from what it logs: every request once, by status and
/// what the cache made of it, and the body bytes it sent by where they came from. Fed by the
/// server's log callback, so a request counts exactly when it has a log line.
public final class ProxyMetrics: Sendable {
    /// Requests to origins (fills, revalidations, requests passed on), over the whole process.
    public static let originRequests = Counter()
    /// Origin requests that got no answer (connection refused or cut, timeout).
    public static let originFailures = Counter()

    public struct RequestKey: Hashable, Sendable, Comparable {
        public var status: Int
        /// The cache outcome (``HTTPLogEntry/cacheOutcome``), `none` for requests the cache did
        /// not look at (a malformed request, a purge).
        public var cache: String

        public static func < (a: Self, b: Self) -> Bool { (a.status, a.cache) < (b.status, b.cache) }
    }

    public struct Snapshot: Sendable, Equatable {
        public var requests: [RequestKey: Int] = [:]
        public var bytesFromCache: Int64 = 0
        public var bytesFromOrigin: Int64 = 0
        /// Responses cut short (the client went away, or the origin did).
        public var incomplete = 0

        public var totalRequests: Int { requests.values.reduce(0, +) }
    }

    private let state = Lock(Snapshot())
    /// Hits by request target (path and query), for the status page: at most ``hitTargets``
    /// targets, so memory stays bounded with a million resources (a full table starts over).
    private let hitsByTarget = Lock(BoundedTable<Int>(capacity: hitTargets))
    static let hitTargets = 65_536

    public init() {}

    public func record(_ entry: HTTPLogEntry) {
        state.withLock { state in
            state.requests[RequestKey(status: entry.status, cache: entry.cacheOutcome ?? "none"), default: 0] += 1
            state.bytesFromCache += entry.cacheHitBytes
            state.bytesFromOrigin += entry.cacheMissBytes
            if !entry.complete { state.incomplete += 1 }
        }
        if entry.cacheOutcome == "hit" {
            hitsByTarget.withLock { table in table.set((table[entry.target] ?? 0) + 1, for: entry.target) }
        }
    }

    /// Hits of requests for `target` recorded (nil: none, or forgotten).
    public func hits(target: String) -> Int? { hitsByTarget.withLock { $0[target] } }

    public var snapshot: Snapshot { state.withLock { $0 } }
}
