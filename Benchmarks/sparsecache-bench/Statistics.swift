/// Summaries of repeated measurements.
enum Statistics {
    /// The median of `values` (mean of the middle two for an even count); 0 when empty.
    static func median(_ values: [Double]) -> Double {
        guard !values.isEmpty else { return 0 }
        let sorted = values.sorted()
        let middle = sorted.count / 2
        return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
    }

    /// The nearest-rank percentile `p` (0...100) of already sorted values; 0 when empty.
    static func percentile(sorted: [Double], _ p: Double) -> Double {
        guard !sorted.isEmpty else { return 0 }
        let rank = Int((p / 100 * Double(sorted.count)).rounded(.up))
        return sorted[min(max(rank, 1), sorted.count) - 1]
    }

    static func mean(_ values: [Double]) -> Double {
        values.isEmpty ? 0 : values.reduce(0, +) / Double(values.count)
    }
}

/// One repetition of one contender: its value (throughput, time, bytes...) and, for latency
/// workloads, the latency of every operation in nanoseconds.
struct Sample: Sendable {
    var value: Double
    var latencies: [UInt64] = []
}

/// Runs every contender once per repetition, rotating which goes first each time so that
/// no contender always runs on a cold (or warm) machine. Returns the samples per contender.
func interleaved(
    contenders count: Int, repetitions: Int, _ body: (_ contender: Int, _ repetition: Int) async throws -> Sample
) async throws -> [[Sample]] {
    var samples = Array(repeating: [Sample](), count: count)
    for repetition in 0..<repetitions {
        for step in 0..<count {
            let contender = (step + repetition) % count
            samples[contender].append(try await body(contender, repetition))
        }
    }
    return samples
}
