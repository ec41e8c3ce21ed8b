// Reading what the CLI prints: segment arithmetic, ranges and JSON fields, for the CLI suites
// of every layer.
import Foundation
import Testing

/// The segments of a resource, for predicting what `write` reports.
package struct CLILayout {
    package let length: Int64
    package let segmentSize: Int64

    package init(length: Int64, segmentSize: Int64) {
        self.length = length
        self.segmentSize = segmentSize
    }

    package var segmentCount: Int { Int((length + segmentSize - 1) / segmentSize) }

    package func bytes(of segment: Int) -> Range<Int64> {
        let start = Int64(segment) * segmentSize
        return start..<min(start + segmentSize, length)
    }

    package struct WritePrediction {
        package var completed: [Range<Int64>] = []
        package var notKept: [Range<Int64>] = []
        package var skipped: Int64 = 0
    }

    /// What one `write` invocation of `chunk` does: segments it covers whole become present,
    /// bytes of segments already present are skipped, the rest is not kept.
    package func predictWrite(_ chunk: Range<Int64>, present: inout Set<Int>) -> WritePrediction {
        var prediction = WritePrediction()
        guard !chunk.isEmpty else { return prediction }
        for segment in Int(chunk.lowerBound / segmentSize)...Int((chunk.upperBound - 1) / segmentSize) {
            let whole = bytes(of: segment)
            let overlap = max(whole.lowerBound, chunk.lowerBound)..<min(whole.upperBound, chunk.upperBound)
            if present.contains(segment) {
                prediction.skipped += Int64(overlap.count)
            } else if overlap == whole {
                present.insert(segment)
                prediction.completed.append(whole)
            } else {
                prediction.notKept.append(overlap)
            }
        }
        prediction.completed = CLIRanges.merge(prediction.completed)
        prediction.notKept = CLIRanges.merge(prediction.notKept)
        return prediction
    }

    package func ranges(of segments: Set<Int>) -> [Range<Int64>] {
        CLIRanges.merge(segments.sorted().map { bytes(of: $0) })
    }
}

/// Byte-range helpers in the CLI's half-open notation.
package enum CLIRanges {
    /// Sorted, with touching and overlapping ranges joined.
    package static func merge(_ ranges: [Range<Int64>]) -> [Range<Int64>] {
        var result: [Range<Int64>] = []
        for range in ranges.filter({ !$0.isEmpty }).sorted(by: { $0.lowerBound < $1.lowerBound }) {
            if let last = result.last, range.lowerBound <= last.upperBound {
                result[result.count - 1] = last.lowerBound..<max(last.upperBound, range.upperBound)
            } else {
                result.append(range)
            }
        }
        return result
    }

    /// The parts of `whole` that `ranges` (sorted, disjoint) do not cover.
    package static func complement(of ranges: [Range<Int64>], in whole: Range<Int64>) -> [Range<Int64>] {
        var gaps: [Range<Int64>] = []
        var position = whole.lowerBound
        for range in ranges {
            if range.lowerBound > position { gaps.append(position..<range.lowerBound) }
            position = max(position, range.upperBound)
        }
        if position < whole.upperBound { gaps.append(position..<whole.upperBound) }
        return gaps
    }

    /// "[a, b), [c, d)", the CLI's notation.
    package static func describe(_ ranges: [Range<Int64>]) -> String {
        ranges.map { "[\($0.lowerBound), \($0.upperBound))" }.joined(separator: ", ")
    }
}

/// Typed access to JSONSerialization's values.
package enum CLIJSON {
    package static func int(_ value: Any?) -> Int64? {
        guard let number = value as? NSNumber else { return nil }
        return number.int64Value
    }

    package static func bool(_ value: Any?) -> Bool? {
        (value as? NSNumber)?.boolValue ?? (value as? Bool)
    }

    /// `[[start, end], ...]` as half-open ranges.
    package static func ranges(_ value: Any?) throws -> [Range<Int64>] {
        guard let pairs = value as? [Any] else { throw CLIFailure("not an array: \(String(describing: value))") }
        return try pairs.map { pair in
            guard let bounds = pair as? [Any], bounds.count == 2, let start = int(bounds[0]), let end = int(bounds[1]), start <= end else {
                throw CLIFailure("not a [start, end) pair: \(pair)")
            }
            return start..<end
        }
    }
}
