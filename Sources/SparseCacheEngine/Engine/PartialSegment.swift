/// The bytes received so far for a segment that is not complete, held in memory.
struct PartialSegment: Sendable {
    /// The segment's bytes; only `covered` ranges are meaningful.
    var buffer: [UInt8]
    /// Covered byte ranges, relative to the segment start.
    var covered = ByteRanges()
    /// Last time a write touched it (a logical clock), for dropping the coldest first.
    var lastTouch: UInt64

    init(size: Int, clock: UInt64) {
        buffer = [UInt8](repeating: 0, count: size)
        lastTouch = clock
    }

    /// Whether bytes `0..<length` are all covered.
    func isComplete(length: Int) -> Bool { covered.contains(0..<Int64(length)) }
}

/// The incomplete segments of a resource, by segment number, with the bytes they hold kept as
/// a running total: the budget check runs on every write, and summing thousands of buffers
/// each time (a seek-heavy fill keeps about half its segments incomplete) cost more than the
/// writes themselves.
struct PartialSegments: Sequence, Sendable {
    private var segments: [Int: PartialSegment] = [:]
    /// Bytes of every buffer held.
    private(set) var bytes = 0

    subscript(segment: Int) -> PartialSegment? {
        get { segments[segment] }
        set {
            bytes -= segments[segment]?.buffer.count ?? 0
            bytes += newValue?.buffer.count ?? 0
            segments[segment] = newValue
        }
    }

    /// Takes a segment out (so its buffer is uniquely referenced while it is changed).
    mutating func removeValue(forKey segment: Int) -> PartialSegment? {
        let removed = segments.removeValue(forKey: segment)
        bytes -= removed?.buffer.count ?? 0
        return removed
    }

    mutating func removeAll() {
        segments.removeAll()
        bytes = 0
    }

    /// Segment numbers, least recently touched first.
    func coldestFirst() -> [Int] {
        segments.sorted { $0.value.lastTouch < $1.value.lastTouch }.map(\.key)
    }

    func makeIterator() -> Dictionary<Int, PartialSegment>.Iterator {
        segments.makeIterator()
    }
}
