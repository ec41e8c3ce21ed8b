/// A sorted list of disjoint, non-adjacent half-open ranges: the byte coverage of an incomplete
/// segment, or a list of missing ranges to report.
struct ByteRanges: Sendable, Equatable {
    private(set) var ranges: [Range<Int64>] = []

    init() {}

    init(_ ranges: [Range<Int64>]) {
        for range in ranges { insert(range) }
    }

    var isEmpty: Bool { ranges.isEmpty }

    /// Total bytes covered.
    var byteCount: Int64 { ranges.reduce(0) { $0 + ($1.upperBound - $1.lowerBound) } }

    /// Adds `range`, merging with overlapping and adjacent ranges.
    mutating func insert(_ range: Range<Int64>) {
        guard !range.isEmpty else { return }
        var lower = range.lowerBound
        var upper = range.upperBound
        // First range that could touch: its upper bound reaches `lower`.
        var first = ranges.partitioningIndex { $0.upperBound >= lower }
        var last = first
        while last < ranges.count, ranges[last].lowerBound <= upper {
            lower = min(lower, ranges[last].lowerBound)
            upper = max(upper, ranges[last].upperBound)
            last += 1
        }
        if first > ranges.count { first = ranges.count }
        ranges.replaceSubrange(first..<last, with: [lower..<upper])
    }

    /// Whether `range` lies entirely inside one covered range.
    func contains(_ range: Range<Int64>) -> Bool {
        if range.isEmpty { return true }
        let index = ranges.partitioningIndex { $0.upperBound >= range.upperBound }
        return index < ranges.count && ranges[index].lowerBound <= range.lowerBound
    }

    /// "[0, 65536), [131072, 140000)": ranges as half-open pairs.
    static func describe(_ ranges: [Range<Int64>]) -> String {
        ranges.map { "[\($0.lowerBound), \($0.upperBound))" }.joined(separator: ", ")
    }
}

extension Array {
    /// The first index whose element satisfies `belongsInSecondPartition`, assuming the array is
    /// partitioned by it (binary search).
    func partitioningIndex(where belongsInSecondPartition: (Element) -> Bool) -> Int {
        var low = 0
        var high = count
        while low < high {
            let middle = (low + high) / 2
            if belongsInSecondPartition(self[middle]) { high = middle } else { low = middle + 1 }
        }
        return low
    }
}
