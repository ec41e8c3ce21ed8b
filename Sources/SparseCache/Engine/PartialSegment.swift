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
