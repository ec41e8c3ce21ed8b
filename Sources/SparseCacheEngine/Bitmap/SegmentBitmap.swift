/// A growable set of segment numbers stored one bit per segment, in pages allocated on first
/// use: a resource that claims a huge length (an origin saying 8 TiB) costs memory in
/// proportion to the segments present, not to the length (one pointer per 32,768 segments,
/// 4 KiB per page that holds a present segment).
///
/// Bit `i` of word `i / 64` is segment `i`; word `w` lives in page `w / wordsPerPage`. A page
/// that was never written reads as all clear. Bits past `count` are always zero, and
/// `setCount` always equals the number of one bits; `_checkInvariants()` asserts both in debug
/// builds. Equality compares the sets, not the pages allocated.
struct SegmentBitmap: Sendable {
    /// log2 of the segments per page.
    static let pageShift = 15
    static let wordsPerPage = (1 << pageShift) >> 6

    private var pages: [[UInt64]?]
    /// The number of segments the bitmap covers.
    private(set) var count: Int
    /// The number of segments that are set.
    private(set) var setCount: Int

    init(count: Int = 0) {
        precondition(count >= 0)
        self.count = count
        self.pages = Array(repeating: nil, count: Self.pageCount(for: count))
        self.setCount = 0
    }

    static func pageCount(for count: Int) -> Int { (count + (1 << pageShift) - 1) >> pageShift }

    /// Word `index` (zero when its page was never written or lies past the end).
    func word(_ index: Int) -> UInt64 {
        let page = index / Self.wordsPerPage
        guard page < pages.count, let words = pages[page] else { return 0 }
        return words[index % Self.wordsPerPage]
    }

    /// Whether the page holding word `index` was never written (all its bits clear).
    func isUnwrittenPage(ofWord index: Int) -> Bool {
        let page = index / Self.wordsPerPage
        return page >= pages.count || pages[page] == nil
    }

    subscript(segment: Int) -> Bool {
        guard segment >= 0, segment < count else { return false }
        return word(segment >> 6) & (1 << UInt64(segment & 63)) != 0
    }

    /// Sets `segment`, growing the bitmap if needed. Returns true when the bit was clear.
    @discardableResult
    mutating func insert(_ segment: Int) -> Bool {
        precondition(segment >= 0)
        if segment >= count { grow(to: segment + 1) }
        let page = segment >> Self.pageShift
        let index = (segment >> 6) % Self.wordsPerPage
        let mask: UInt64 = 1 << UInt64(segment & 63)
        if pages[page] == nil { pages[page] = Array(repeating: 0, count: Self.wordsPerPage) }
        if pages[page]![index] & mask != 0 { return false }
        pages[page]![index] |= mask
        setCount += 1
        return true
    }

    /// Clears `segment`. Returns true when the bit was set. Pages left empty stay allocated
    /// until ``releaseEmptyPages()``.
    @discardableResult
    mutating func remove(_ segment: Int) -> Bool {
        guard segment >= 0, segment < count else { return false }
        let page = segment >> Self.pageShift
        guard pages[page] != nil else { return false }
        let index = (segment >> 6) % Self.wordsPerPage
        let mask: UInt64 = 1 << UInt64(segment & 63)
        if pages[page]![index] & mask == 0 { return false }
        pages[page]![index] &= ~mask
        setCount -= 1
        return true
    }

    /// Frees the pages that hold no set segment, after segments were dropped.
    mutating func releaseEmptyPages() {
        for page in pages.indices where pages[page]?.allSatisfy({ $0 == 0 }) == true { pages[page] = nil }
    }

    /// Extends the bitmap to cover `newCount` segments; new segments are clear.
    mutating func grow(to newCount: Int) {
        guard newCount > count else { return }
        let needed = Self.pageCount(for: newCount)
        if needed > pages.count { pages.append(contentsOf: repeatElement(nil, count: needed - pages.count)) }
        count = newCount
    }

    /// Whether every segment in `range` is set.
    func contains(allOf range: Range<Int>) -> Bool {
        if range.isEmpty { return true }
        guard range.lowerBound >= 0, range.upperBound <= count else { return false }
        return firstClear(in: range) == nil
    }

    /// Bytes of bit storage allocated.
    var allocatedBytes: Int { pages.reduce(0) { $0 + ($1 == nil ? 0 : Self.wordsPerPage * 8) } + pages.count * 8 }

    func _checkInvariants() {
        #if DEBUG
        precondition(pages.count == Self.pageCount(for: count), "page count does not match count")
        let words = pages.count * Self.wordsPerPage
        let lastWord = (count + 63) >> 6
        for index in lastWord..<words where !isUnwrittenPage(ofWord: index) {
            precondition(word(index) == 0, "bits set past count")
        }
        if count & 63 != 0 {
            precondition(word(lastWord - 1) >> UInt64(count & 63) == 0, "bits set past count")
        }
        precondition(pages.reduce(0) { $0 + ($1?.reduce(0) { $0 + $1.nonzeroBitCount } ?? 0) } == setCount, "setCount is stale")
        #endif
    }
}

extension SegmentBitmap: Equatable {
    static func == (lhs: SegmentBitmap, rhs: SegmentBitmap) -> Bool {
        guard lhs.count == rhs.count, lhs.setCount == rhs.setCount else { return false }
        for page in 0..<lhs.pages.count where lhs.pages[page] != nil || rhs.pages[page] != nil {
            let first = page * wordsPerPage
            for index in first..<(first + wordsPerPage) where lhs.word(index) != rhs.word(index) { return false }
        }
        return true
    }
}
