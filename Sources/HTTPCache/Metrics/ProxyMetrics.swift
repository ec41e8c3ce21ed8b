@_spi(Locking) import SparseCacheEngine
import SparseHTTP

/// Counters of a running proxy, kept from what it logs: every request once, by status and
/// what the cache made of it, and the body bytes it sent by where they came from. Fed by the
/// server's log callback, so a request counts exactly when it has a log line.
package final class ProxyMetrics: Sendable {
    /// Requests to origins (fills, revalidations, requests passed on), over the whole process.
    package static let originRequests = Counter()
    /// Origin requests that got no answer (connection refused or cut, timeout).
    static let originFailures = Counter()

    package struct RequestKey: Hashable, Sendable, Comparable {
        package var status: Int
        /// The cache outcome (``HTTPLogEntry/cacheOutcome``), `none` for requests the cache did
        /// not look at (a malformed request, a purge).
        package var cache: String

        package static func < (a: Self, b: Self) -> Bool { (a.status, a.cache) < (b.status, b.cache) }
    }

    package struct Snapshot: Sendable, Equatable {
        package var requests: [RequestKey: Int] = [:]
        package var bytesFromCache: Int64 = 0
        package var bytesFromOrigin: Int64 = 0
        /// Responses cut short (the client went away, or the origin did).
        package var incomplete = 0

        var totalRequests: Int { requests.values.reduce(0, +) }
    }

    private let state = Lock(Snapshot())
    /// Hits by request target (path and query), for the status page: at most ``hitTargets``
    /// targets, so memory stays bounded with a million resources (a full table starts over).
    private let hitsByTarget = Lock(BoundedTable<Int>(capacity: hitTargets))
    static let hitTargets = 65_536

    package init() {}

    package func record(_ entry: HTTPLogEntry) {
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
    package func hits(target: String) -> Int? { hitsByTarget.withLock { $0[target] } }

    package var snapshot: Snapshot { state.withLock { $0 } }
}
