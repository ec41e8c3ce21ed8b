import SeededRandom
import Testing

@_spi(Locking) @testable import SparseCacheEngine
@testable import SparseHTTP
import TestSupport

/// The runs of `true` in a coverage model, as the ranges ByteRanges must hold.
private func runs(of covered: [Bool]) -> [Range<Int64>] {
    var result: [Range<Int64>] = []
    var start: Int?
    for (index, isCovered) in covered.enumerated() {
        if isCovered, start == nil { start = index }
        if !isCovered, let begun = start {
            result.append(Int64(begun)..<Int64(index))
            start = nil
        }
    }
    if let start { result.append(Int64(start)..<Int64(covered.count)) }
    return result
}

/// Sorted, disjoint, non-adjacent and non-empty.
private func isCanonical(_ ranges: [Range<Int64>]) -> Bool {
    for (index, range) in ranges.enumerated() {
        if range.isEmpty { return false }
        if index > 0, ranges[index - 1].upperBound >= range.lowerBound { return false }
    }
    return true
}

@Suite("ByteRanges")
struct ByteRangesTests {
    @Test("random inserts match a coverage model", arguments: 0..<8)
    func randomInserts(round: Int) {
        let seed = testSeed(0xB7E5_0000) &+ UInt64(round)
        var generator = SplitMix64(seed: seed)
        let universe = [64, 200, 1000][round % 3]
        var ranges = ByteRanges()
        var covered = [Bool](repeating: false, count: universe)
        var inserted: [Range<Int64>] = []
        for step in 0..<300 {
            let lower = Int.random(in: 0..<universe, using: &generator)
            let maxLength = [0, 1, 3, 20, universe][Int.random(in: 0..<5, using: &generator)]
            let upper = min(universe, lower + Int.random(in: 0...maxLength, using: &generator))
            let range = Int64(lower)..<Int64(upper)
            ranges.insert(range)
            inserted.append(range)
            for index in lower..<upper { covered[index] = true }
            let context = "seed \(seed), step \(step), inserted \(range)"
            #expect(isCanonical(ranges.ranges), "not canonical: \(ranges.ranges). \(context)")
            #expect(ranges.ranges == runs(of: covered), "\(context)")
            #expect(ranges.byteCount == Int64(covered.filter { $0 }.count), "\(context)")
            #expect(ranges.isEmpty == !covered.contains(true), "\(context)")
            for _ in 0..<5 {
                let queryLower = Int.random(in: 0..<universe, using: &generator)
                let queryUpper = Int.random(in: queryLower...universe, using: &generator)
                let query = Int64(queryLower)..<Int64(queryUpper)
                let expected = (queryLower..<queryUpper).allSatisfy { covered[$0] }
                #expect(ranges.contains(query) == expected, "contains \(query). \(context)")
            }
        }
        // Building from the list in one go gives the same value.
        #expect(ByteRanges(inserted) == ranges, "seed \(seed)")
        #expect(ByteRanges(inserted.shuffled(using: &generator)) == ranges, "seed \(seed): order must not matter")
    }

    @Test("adjacent ranges merge; a gap of one byte does not")
    func adjacency() {
        var ranges = ByteRanges()
        ranges.insert(10..<20)
        ranges.insert(20..<30)
        #expect(ranges.ranges == [10..<30])
        ranges.insert(31..<40)
        #expect(ranges.ranges == [10..<30, 31..<40])
        #expect(!ranges.contains(29..<32))
        ranges.insert(30..<31)
        #expect(ranges.ranges == [10..<40])
        ranges.insert(0..<10)
        #expect(ranges.ranges == [0..<40])
        #expect(ranges.contains(0..<40))
        #expect(!ranges.contains(0..<41))
    }

    @Test("a range spanning several existing ranges swallows them")
    func spanning() {
        var ranges = ByteRanges([0..<2, 5..<7, 10..<12, 20..<22])
        #expect(ranges.ranges.count == 4)
        ranges.insert(1..<11)
        #expect(ranges.ranges == [0..<12, 20..<22])
        ranges.insert(3..<4)
        #expect(ranges.ranges == [0..<12, 20..<22], "inside an existing range: no change")
        ranges.insert(25..<25)
        #expect(ranges.ranges == [0..<12, 20..<22], "empty range: no change")
        #expect(ranges.byteCount == 14)
    }

    @Test("empty queries are always contained; queries on an empty list are not")
    func emptyCases() {
        let empty = ByteRanges()
        #expect(empty.isEmpty)
        #expect(empty.byteCount == 0)
        #expect(empty.contains(5..<5))
        #expect(!empty.contains(0..<1))
    }

    @Test("describe lists half-open pairs")
    func describe() {
        #expect(ByteRanges.describe([0..<65536, 131_072..<140_000]) == "[0, 65536), [131072, 140000)")
        #expect(ByteRanges.describe([]) == "")
    }

    @Test("partitioningIndex finds the first element of the second partition")
    func partitioningIndex() {
        let values = [1, 3, 5, 7, 9]
        for threshold in 0...10 {
            let expected = values.firstIndex { $0 >= threshold } ?? values.count
            #expect(values.partitioningIndex { $0 >= threshold } == expected, "threshold \(threshold)")
        }
        #expect([Int]().partitioningIndex { _ in true } == 0)
    }
}
