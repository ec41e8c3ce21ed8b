/// A growable set of segment numbers stored one bit per segment.
///
/// Bit `i` of word `i / 64` is segment `i`. Bits past `count` are always zero, and `setCount`
/// always equals the number of one bits; `_checkInvariants()` asserts both in debug builds.
struct SegmentBitmap: Sendable, Equatable {
    private(set) var words: [UInt64]
    /// The number of segments the bitmap covers.
    private(set) var count: Int
    /// The number of segments that are set.
    private(set) var setCount: Int

    init(count: Int = 0) {
        precondition(count >= 0)
        self.count = count
        self.words = Array(repeating: 0, count: Self.wordCount(for: count))
        self.setCount = 0
    }

    static func wordCount(for count: Int) -> Int { (count + 63) >> 6 }

    subscript(segment: Int) -> Bool {
        guard segment >= 0, segment < count else { return false }
        return words[segment >> 6] & (1 << UInt64(segment & 63)) != 0
    }

    /// Sets `segment`, growing the bitmap if needed. Returns true when the bit was clear.
    @discardableResult
    mutating func insert(_ segment: Int) -> Bool {
        precondition(segment >= 0)
        if segment >= count { grow(to: segment + 1) }
        let mask: UInt64 = 1 << UInt64(segment & 63)
        if words[segment >> 6] & mask != 0 { return false }
        words[segment >> 6] |= mask
        setCount += 1
        return true
    }

    /// Clears `segment`. Returns true when the bit was set.
    @discardableResult
    mutating func remove(_ segment: Int) -> Bool {
        guard segment >= 0, segment < count else { return false }
        let mask: UInt64 = 1 << UInt64(segment & 63)
        if words[segment >> 6] & mask == 0 { return false }
        words[segment >> 6] &= ~mask
        setCount -= 1
        return true
    }

    /// Extends the bitmap to cover `newCount` segments; new segments are clear.
    mutating func grow(to newCount: Int) {
        guard newCount > count else { return }
        let needed = Self.wordCount(for: newCount)
        if needed > words.count { words.append(contentsOf: repeatElement(0, count: needed - words.count)) }
        count = newCount
    }

    /// Whether every segment in `range` is set.
    func contains(allOf range: Range<Int>) -> Bool {
        if range.isEmpty { return true }
        guard range.lowerBound >= 0, range.upperBound <= count else { return false }
        return firstClear(in: range) == nil
    }

    func _checkInvariants() {
        #if DEBUG
        precondition(words.count == Self.wordCount(for: count), "word count does not match count")
        if count & 63 != 0, let last = words.last {
            precondition(last >> UInt64(count & 63) == 0, "bits set past count")
        }
        precondition(words.reduce(0) { $0 + $1.nonzeroBitCount } == setCount, "setCount is stale")
        #endif
    }
}
