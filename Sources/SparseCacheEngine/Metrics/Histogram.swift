import Synchronization
@_spi(Locking) import SparseCacheBase

/// A count of how often something happened (monotonic, for a `_total` metric).
package final class Counter: Sendable {
    private let count = Atomic<Int>(0)

    package init() {}

    package func add(_ amount: Int = 1) { count.add(amount, ordering: .relaxed) }
    package var value: Int { count.load(ordering: .relaxed) }
}

/// Durations sorted into cumulative buckets, as a Prometheus histogram keeps them: how many
/// observations were at most each bound, their count and their sum.
package final class Histogram: Sendable {
    /// The buckets' upper bounds in seconds, ascending (`+Inf` is implied).
    package let bounds: [Double]
    private let state: Lock<Snapshot>

    package struct Snapshot: Sendable, Equatable {
        /// Observations at most `bounds[i]` (not cumulative here; the exposition sums them).
        package var buckets: [Int]
        package var count = 0
        package var sum = 0.0
    }

    /// Bounds from 100 µs to about 13 s, doubling: fdatasync on an SSD to a stalled disk.
    static let syncBounds: [Double] = (0..<18).map { 0.000_1 * Double(1 << $0) }

    package init(bounds: [Double] = Histogram.syncBounds) {
        self.bounds = bounds
        state = Lock(Snapshot(buckets: Array(repeating: 0, count: bounds.count)))
    }

    func observe(_ seconds: Double) {
        let bucket = bounds.firstIndex { seconds <= $0 }
        state.withLock { state in
            if let bucket { state.buckets[bucket] += 1 }
            state.count += 1
            state.sum += seconds
        }
    }

    /// Runs `work` and observes how long it took, whether it threw or not.
    package func time<T>(_ work: () throws -> T) rethrows -> T {
        let start = ContinuousClock.now
        defer { observe(Self.seconds(ContinuousClock.now - start)) }
        return try work()
    }

    package var snapshot: Snapshot { state.withLock { $0 } }

    package static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}
