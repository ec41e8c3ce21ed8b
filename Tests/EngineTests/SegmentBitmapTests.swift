import SeededRandom
import Testing

@_spi(Locking) @testable import SparseCacheEngine
import TestSupport

/// The reference model: one Bool per segment; segments past `count` are clear.
private struct BitmapModel {
    var bits: [Bool]

    init(count: Int) { bits = Array(repeating: false, count: count) }

    var count: Int { bits.count }

    subscript(segment: Int) -> Bool { segment >= 0 && segment < bits.count ? bits[segment] : false }

    mutating func insert(_ segment: Int) -> Bool {
        if segment >= bits.count { bits.append(contentsOf: repeatElement(false, count: segment + 1 - bits.count)) }
        defer { bits[segment] = true }
        return !bits[segment]
    }

    mutating func remove(_ segment: Int) -> Bool {
        guard segment >= 0, segment < bits.count, bits[segment] else { return false }
        bits[segment] = false
        return true
    }

    mutating func grow(to newCount: Int) {
        if newCount > bits.count { bits.append(contentsOf: repeatElement(false, count: newCount - bits.count)) }
    }

    var setCount: Int { bits.filter { $0 }.count }

    func firstSet(in range: Range<Int>) -> Int? {
        range.first { self[$0] }
    }

    func firstClear(in range: Range<Int>) -> Int? {
        // Every segment past `count` is clear, so a search reaching past it ends there at once.
        let lower = max(range.lowerBound, 0)
        guard lower < range.upperBound else { return nil }
        var segment = lower
        while segment < range.upperBound {
            if !self[segment] { return segment }
            segment += 1
        }
        return nil
    }

    func runs(in range: Range<Int>, set: Bool) -> [Range<Int>] {
        var result: [Range<Int>] = []
        var start: Int?
        for segment in range {
            if self[segment] == set {
                if start == nil { start = segment }
            } else if let begun = start {
                result.append(begun..<segment)
                start = nil
            }
        }
        if let start { result.append(start..<range.upperBound) }
        return result
    }

    func containsAll(_ range: Range<Int>) -> Bool {
        if range.isEmpty { return true }
        guard range.lowerBound >= 0, range.upperBound <= count else { return false }
        return range.allSatisfy { self[$0] }
    }
}

/// The invariants, checked with expectations so a violation is reported (not a trap), then
/// through the type's own `_checkInvariants()`.
private func checkInvariants(_ bitmap: SegmentBitmap, _ context: @autoclosure () -> String) {
    let words = SegmentBitmap.pageCount(for: bitmap.count) * SegmentBitmap.wordsPerPage
    #expect(words * 64 >= bitmap.count && words * 64 - bitmap.count < 1 << SegmentBitmap.pageShift, "page count. \(context())")
    let lastWord = (bitmap.count + 63) >> 6
    if bitmap.count & 63 != 0 {
        #expect(bitmap.word(lastWord - 1) >> UInt64(bitmap.count & 63) == 0, "bits set past count. \(context())")
    }
    #expect((lastWord..<words).allSatisfy { bitmap.word($0) == 0 }, "bits set past count. \(context())")
    #expect((0..<lastWord).reduce(0) { $0 + bitmap.word($1).nonzeroBitCount } == bitmap.setCount, "setCount. \(context())")
    bitmap._checkInvariants()
}

private func compare(_ bitmap: SegmentBitmap, _ model: BitmapModel, _ context: @autoclosure () -> String) {
    #expect(bitmap.count == model.count, "count. \(context())")
    #expect(bitmap.setCount == model.setCount, "setCount. \(context())")
    let mismatches = (-2..<(model.count + 70)).filter { bitmap[$0] != model[$0] }
    #expect(mismatches.isEmpty, "subscript differs at \(mismatches.prefix(10)). \(context())")
    #expect(bitmap.setRuns == model.runs(in: 0..<model.count, set: true), "setRuns. \(context())")
}

/// Sizes on and around word boundaries.
private let boundarySizes = [0, 1, 2, 63, 64, 65, 127, 128, 129, 191, 192, 193, 255, 256, 257, 511, 512, 513, 1000, 1024, 1025]

/// Sizes on and around page boundaries (``SegmentBitmap/pageShift``).
private let pageSizes = [32_767, 32_768, 32_769, 65_537]

@Suite("SegmentBitmap")
struct SegmentBitmapTests {
    @Test("a new bitmap is clear and covers its count", arguments: boundarySizes)
    func newBitmap(size: Int) {
        let bitmap = SegmentBitmap(count: size)
        compare(bitmap, BitmapModel(count: size), "size \(size)")
        checkInvariants(bitmap, "size \(size)")
        #expect(bitmap.firstSet(in: 0..<size) == nil)
        #expect(bitmap.firstClear(in: 0..<size) == (size == 0 ? nil : 0))
        #expect(bitmap.clearRuns(in: 0..<size) == (size == 0 ? [] : [0..<size]))
        #expect(bitmap.contains(allOf: 0..<size) == (size == 0))
    }

    @Test("random operations match the model", arguments: boundarySizes)
    func randomOperations(size: Int) {
        randomOperations(size: size, steps: 400, compareEvery: 10)
    }

    @Test("random operations across page boundaries match the model", arguments: pageSizes)
    func randomOperationsOnPages(size: Int) {
        randomOperations(size: size, steps: 120, compareEvery: 40)
    }

    private func randomOperations(size: Int, steps: Int, compareEvery: Int) {
        let seed = testSeed(0xB17_0000) &+ UInt64(size)
        var generator = SplitMix64(seed: seed)
        var bitmap = SegmentBitmap(count: size)
        var model = BitmapModel(count: size)
        for step in 0..<steps {
            let context = "seed \(seed), size \(size), step \(step)"
            let span = max(model.count, 1) + 70
            switch Int.random(in: 0..<100, using: &generator) {
            case 0..<45:
                // Mostly inside, sometimes past the end (which grows the bitmap).
                let segment = Int.random(in: 0..<(Int.random(in: 0..<20, using: &generator) == 0 ? span : max(model.count, 1)), using: &generator)
                let inserted = bitmap.insert(segment)
                let modelInserted = model.insert(segment)
                #expect(inserted == modelInserted, "insert \(segment). \(context)")
            case 45..<80:
                let segment = Int.random(in: -3..<span, using: &generator)
                let removed = bitmap.remove(segment)
                let modelRemoved = model.remove(segment)
                #expect(removed == modelRemoved, "remove \(segment). \(context)")
            case 80..<83:
                let newCount = Int.random(in: 0..<(model.count + 130), using: &generator)
                bitmap.grow(to: newCount)
                model.grow(to: newCount)
            case 83..<90:
                // Set a whole run, so runs and contains(allOf:) see long stretches.
                let start = Int.random(in: 0..<max(model.count, 1), using: &generator)
                let length = Int.random(in: 1...130, using: &generator)
                for segment in start..<(start + length) {
                    bitmap.insert(segment)
                    _ = model.insert(segment)
                }
            default:
                let start = Int.random(in: 0..<max(model.count, 1), using: &generator)
                let length = Int.random(in: 1...130, using: &generator)
                for segment in start..<(start + length) {
                    bitmap.remove(segment)
                    _ = model.remove(segment)
                }
            }
            checkInvariants(bitmap, context)
            if step % compareEvery == 0 || step == steps - 1 {
                compare(bitmap, model, context)
                queries(bitmap, model, generator: &generator, context)
            }
        }
    }

    /// Queries over random ranges, including empty ones, ranges past `count` and ranges that
    /// start before 0.
    private func queries(_ bitmap: SegmentBitmap, _ model: BitmapModel, generator: inout SplitMix64, _ context: String) {
        var ranges: [Range<Int>] = [0..<model.count, 0..<0, model.count..<(model.count + 65)]
        for _ in 0..<12 {
            let lower = Int.random(in: 0...(model.count + 70), using: &generator)
            let upper = Int.random(in: lower...(model.count + 140), using: &generator)
            ranges.append(lower..<upper)
        }
        for _ in 0..<4 {
            // Word-aligned edges.
            let lower = Int.random(in: 0...((model.count + 64) / 64), using: &generator) * 64
            let upper = lower + Int.random(in: 0...3, using: &generator) * 64
            ranges.append(lower..<upper)
        }
        for range in ranges {
            let where_ = "range \(range). \(context)"
            #expect(bitmap.firstSet(in: range) == model.firstSet(in: range), "firstSet \(where_)")
            #expect(bitmap.firstClear(in: range) == model.firstClear(in: range), "firstClear \(where_)")
            #expect(bitmap.setRuns(in: range) == model.runs(in: range, set: true), "setRuns \(where_)")
            #expect(bitmap.clearRuns(in: range) == model.runs(in: range, set: false), "clearRuns \(where_)")
            #expect(bitmap.contains(allOf: range) == model.containsAll(range), "contains(allOf:) \(where_)")
        }
        // A range starting before zero is clipped to zero.
        let clipped = -5..<min(model.count, 10)
        #expect(bitmap.firstSet(in: clipped) == model.firstSet(in: 0..<clipped.upperBound), "firstSet \(clipped). \(context)")
        #expect(bitmap.contains(allOf: clipped) == false, "contains(allOf:) \(clipped). \(context)")
    }

    @Test("insert past the end grows the bitmap by exactly what is needed", arguments: boundarySizes)
    func insertGrows(size: Int) {
        var bitmap = SegmentBitmap(count: size)
        let first = bitmap.insert(size + 64)
        #expect(first)
        #expect(bitmap.count == size + 65)
        #expect(bitmap[size + 64])
        #expect(!bitmap[size + 63])
        #expect(bitmap.setRuns == [(size + 64)..<(size + 65)])
        let second = bitmap.insert(size + 64)
        #expect(!second, "inserting twice reports the bit was already set")
        checkInvariants(bitmap, "size \(size)")
    }

    @Test("grow keeps set bits and never shrinks", arguments: boundarySizes)
    func growKeepsBits(size: Int) {
        var bitmap = SegmentBitmap(count: size)
        for segment in stride(from: 0, to: size, by: 3) { bitmap.insert(segment) }
        let before = bitmap.setRuns
        bitmap.grow(to: size + 1)
        bitmap.grow(to: size / 2)
        #expect(bitmap.count == size + 1)
        #expect(bitmap.setRuns == before)
        #expect(bitmap.firstClear(in: size..<(size + 1)) == size)
        checkInvariants(bitmap, "size \(size)")
    }

    @Test("a full bitmap has one run and no clear segment inside it", arguments: boundarySizes)
    func full(size: Int) {
        var bitmap = SegmentBitmap(count: size)
        for segment in 0..<size { bitmap.insert(segment) }
        #expect(bitmap.setCount == size)
        #expect(bitmap.setRuns == (size == 0 ? [] : [0..<size]))
        #expect(bitmap.firstClear(in: 0..<size) == nil)
        #expect(bitmap.firstClear(in: 0..<(size + 1)) == size, "past count is clear")
        #expect(bitmap.contains(allOf: 0..<size))
        #expect(!bitmap.contains(allOf: 0..<(size + 1)))
        #expect(bitmap.clearRuns(in: 0..<(size + 3)) == [size..<(size + 3)])
        checkInvariants(bitmap, "size \(size)")
    }

    @Test("equal contents compare equal however they were built")
    func equality() {
        var a = SegmentBitmap(count: 130)
        var b = SegmentBitmap(count: 10)
        b.grow(to: 130)
        for segment in [0, 63, 64, 129] {
            a.insert(segment)
            b.insert(segment)
        }
        b.insert(100)
        #expect(a != b)
        b.remove(100)
        #expect(a == b)
    }
}

@Suite("SegmentChecksums")
struct SegmentChecksumsTests {
    @Test("values round trip and unset segments read 0")
    func roundTrip() {
        let seed = testSeed(0xC5C5)
        var generator = SplitMix64(seed: seed)
        var checksums = SegmentChecksums()
        var model: [Int: UInt32] = [:]
        for _ in 0..<500 {
            let segment = Int.random(in: 0..<(SegmentChecksums.pageSize * 8), using: &generator)
            let value = UInt32.random(in: 1 ... .max, using: &generator)
            checksums[segment] = value
            model[segment] = value
        }
        for segment in 0..<(SegmentChecksums.pageSize * 9) {
            #expect(checksums[segment] == model[segment] ?? 0, "seed \(seed): segment \(segment)")
        }
    }

    @Test("a bitmap covering 8 TiB of 64 KiB segments costs memory for its set segments only; scans skip pages never written")
    func hugeAndSparse() {
        let count = 1 << 27
        var bitmap = SegmentBitmap(count: count)
        let pointers = SegmentBitmap.pageCount(for: count) * 8
        #expect(bitmap.allocatedBytes == pointers, "no page before a segment is set")
        for segment in [0, 1, 40_000, count - 1] { bitmap.insert(segment) }
        let page = SegmentBitmap.wordsPerPage * 8
        #expect(bitmap.allocatedBytes == pointers + 3 * page, "three pages for segments in three pages")
        #expect(bitmap.setRuns == [0..<2, 40_000..<40_001, (count - 1)..<count])
        #expect(bitmap.firstClear(in: 0..<count) == 2)
        #expect(bitmap.firstSet(in: 2..<count) == 40_000)
        #expect(bitmap.clearRuns(in: 0..<count) == [2..<40_000, 40_001..<(count - 1)])
        #expect(!bitmap.contains(allOf: 0..<3) && bitmap.contains(allOf: 0..<2))
        bitmap.remove(40_000)
        var rebuilt = SegmentBitmap(count: count)
        for segment in [0, 1, count - 1] { rebuilt.insert(segment) }
        #expect(bitmap == rebuilt, "an emptied page compares equal to one never written")
        bitmap.releaseEmptyPages()
        #expect(bitmap.allocatedBytes == pointers + 2 * page, "the emptied page is released")
        #expect(bitmap == rebuilt && bitmap.setCount == 3)
        checkInvariants(bitmap, "8 TiB")
    }

    @Test("pages are allocated on first use and released when no present segment uses them")
    func pages() {
        var checksums = SegmentChecksums()
        #expect(checksums.allocatedBytes == 0)
        checksums[5_000] = 42
        let page = SegmentChecksums.pageSize * 4
        #expect(checksums.allocatedBytes == page + 5 * 8, "one page allocated, five page slots")
        checksums[5_001] = 43
        checksums[10] = 44
        #expect(checksums.allocatedBytes == 2 * page + 5 * 8)
        var present = SegmentBitmap(count: 6_000)
        present.insert(5_001)
        checksums.releasePages(notIn: present)
        #expect(checksums.allocatedBytes == page + 5 * 8, "the page of segment 10 is released")
        #expect(checksums[5_001] == 43)
        #expect(checksums[10] == 0)
    }
}
