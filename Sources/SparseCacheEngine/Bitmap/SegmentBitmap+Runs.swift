extension SegmentBitmap {
    /// The first set segment in `range`, scanning a word at a time.
    func firstSet(in range: Range<Int>) -> Int? {
        firstMatching(in: range, set: true)
    }

    /// The first clear segment in `range`.
    func firstClear(in range: Range<Int>) -> Int? {
        firstMatching(in: range, set: false)
    }

    private func firstMatching(in range: Range<Int>, set: Bool) -> Int? {
        let lower = max(range.lowerBound, 0)
        let upper = min(range.upperBound, set ? count : Int.max)
        guard lower < upper else { return nil }
        var index = lower
        while index < upper {
            let wordIndex = index >> 6
            if isUnwrittenPage(ofWord: wordIndex) {
                // A page never written is all clear: the first clear segment, or none set.
                if !set { return index }
                index = ((index >> Self.pageShift) + 1) << Self.pageShift
                continue
            }
            var word = self.word(wordIndex)
            if !set { word = ~word }
            word &= ~0 << UInt64(index & 63)
            if word != 0 {
                let found = (wordIndex << 6) + word.trailingZeroBitCount
                return found < upper ? found : nil
            }
            index = (wordIndex + 1) << 6
        }
        return nil
    }

    /// The maximal runs of set segments that intersect `range`, clipped to it.
    func setRuns(in range: Range<Int>) -> [Range<Int>] { runs(in: range, set: true) }

    /// All maximal runs of set segments.
    var setRuns: [Range<Int>] { setRuns(in: 0..<count) }

    /// The maximal runs of clear segments within `range` (segments past `count` are clear).
    func clearRuns(in range: Range<Int>) -> [Range<Int>] { runs(in: range, set: false) }

    private func runs(in range: Range<Int>, set: Bool) -> [Range<Int>] {
        var runs: [Range<Int>] = []
        var position = range.lowerBound
        while let start = firstMatching(in: position..<range.upperBound, set: set) {
            let end = firstMatching(in: start..<range.upperBound, set: !set) ?? range.upperBound
            runs.append(start..<end)
            position = end
        }
        return runs
    }
}
