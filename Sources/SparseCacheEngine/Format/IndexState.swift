/// The logical content of an index: what a checkpoint stores and what journal records change.
struct IndexState: Sendable, Equatable {
    /// log2 of the segment size.
    var segmentShift: Int
    /// The resource's length in bytes, once known.
    var length: Int64?
    var metadata: ResourceMetadata
    /// Segments that are present: durable on disk with their CRC32C below.
    var present: SegmentBitmap
    var checksums: SegmentChecksums

    init(segmentShift: Int, length: Int64?, metadata: ResourceMetadata = ResourceMetadata()) {
        self.segmentShift = segmentShift
        self.length = length
        self.metadata = metadata
        self.present = SegmentBitmap(count: length.map { Self.segmentCount(length: $0, shift: segmentShift) } ?? 0)
        self.checksums = SegmentChecksums()
    }

    var segmentSize: Int { 1 << segmentShift }

    /// Bytes in present segments; a present short last segment counts only up to the length.
    var presentBytes: Int64 {
        var total = Int64(present.setCount) << Int64(segmentShift)
        if let length, length > 0 {
            let last = Int((length - 1) >> Int64(segmentShift))
            if present[last] { total -= (Int64(last + 1) << Int64(segmentShift)) - length }
        }
        return total
    }

    static func segmentCount(length: Int64, shift: Int) -> Int {
        Int((length + (Int64(1) << shift) - 1) >> Int64(shift))
    }

    /// The largest length the format supports at a segment shift: `maximumSegmentCount`
    /// segments. Larger lengths would overflow `segmentCount` or the bitmap.
    static func maximumLength(shift: Int) -> Int64 {
        Int64(IndexFormat.maximumSegmentCount) << Int64(shift)
    }

    /// Applies one commit's change in the order the format defines: length, metadata, drops, adds.
    mutating func apply(_ change: IndexChange) {
        if let newLength = change.length {
            length = newLength
            let count = Self.segmentCount(length: newLength, shift: segmentShift)
            if present.count > count {
                // Segments past the new end were dropped before the length was learned (or are
                // dropped by this change): the bitmap must cover exactly the resource, or a
                // checkpoint of this state would not decode.
                var trimmed = SegmentBitmap(count: count)
                for run in present.setRuns(in: 0..<count) {
                    for segment in run { trimmed.insert(segment) }
                }
                present = trimmed
            } else {
                present.grow(to: count)
            }
        }
        if let newMetadata = change.metadata { metadata = newMetadata }
        for segment in change.dropped { present.remove(segment) }
        if !change.dropped.isEmpty {
            present.releaseEmptyPages()
            checksums.releasePages(notIn: present)
        }
        for (segment, checksum) in change.added {
            present.insert(segment)
            checksums[segment] = checksum
        }
    }
}

/// What one commit changes. Encoded as one journal record.
struct IndexChange: Sendable, Equatable {
    var length: Int64?
    var metadata: ResourceMetadata?
    /// Segment numbers no longer present, ascending.
    var dropped: [Int] = []
    /// Segments made present with their CRC32C, ascending by segment.
    var added: [(segment: Int, checksum: UInt32)] = []

    var isEmpty: Bool { length == nil && metadata == nil && dropped.isEmpty && added.isEmpty }

    static func == (a: IndexChange, b: IndexChange) -> Bool {
        a.length == b.length && a.metadata == b.metadata && a.dropped == b.dropped
            && a.added.map(\.segment) == b.added.map(\.segment)
            && a.added.map(\.checksum) == b.added.map(\.checksum)
    }
}
