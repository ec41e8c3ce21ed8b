/// CRC32C per segment, stored in pages of 1,024 allocated on first use, so a sparse 1 TiB
/// resource (16 M segments of 64 KiB) costs memory in proportion to what is present.
struct SegmentChecksums: Sendable, Equatable {
    static let pageShift = 10
    static let pageSize = 1 << pageShift

    private var pages: [[UInt32]?] = []

    init() {}

    subscript(segment: Int) -> UInt32 {
        get {
            let page = segment >> Self.pageShift
            guard page < pages.count, let values = pages[page] else { return 0 }
            return values[segment & (Self.pageSize - 1)]
        }
        set {
            let page = segment >> Self.pageShift
            if page >= pages.count { pages.append(contentsOf: repeatElement(nil, count: page + 1 - pages.count)) }
            if pages[page] == nil { pages[page] = Array(repeating: 0, count: Self.pageSize) }
            pages[page]![segment & (Self.pageSize - 1)] = newValue
        }
    }

    /// Frees pages that hold no present segment, after segments were dropped.
    mutating func releasePages(notIn bitmap: SegmentBitmap) {
        for page in pages.indices where pages[page] != nil {
            let first = page << Self.pageShift
            if bitmap.firstSet(in: first..<(first + Self.pageSize)) == nil { pages[page] = nil }
        }
    }

    /// Bytes of checksum storage allocated.
    var allocatedBytes: Int { pages.reduce(0) { $0 + ($1 == nil ? 0 : Self.pageSize * 4) } + pages.count * 8 }
}
