// Queries answered from memory: none of these touch the disk.
extension SparseFile {
    /// The resource length, once known (committed or set and pending).
    public var length: Int64? { currentLength }

    /// The metadata, including changes not yet committed.
    public var metadata: ResourceMetadata { pendingChange.metadata ?? committingChange?.metadata ?? committed.metadata }

    /// ``length`` and ``metadata`` in one call.
    public var lengthAndMetadata: (length: Int64?, metadata: ResourceMetadata) { (currentLength, metadata) }

    /// Replaces the metadata; it is committed atomically with the next commit.
    ///
    /// - Throws: `.invalidArgument` when it encodes to more than 64 KiB.
    public func setMetadata(_ metadata: ResourceMetadata) throws {
        try checkWritable("set metadata")
        try Self.checkSize(of: metadata, path: path)
        pendingChange.metadata = metadata
        changeCounter += 1
    }

    /// The present byte ranges, half-open and ascending.
    public func presentRanges() -> [Range<Int64>] {
        committed.present.setRuns.map(byteRange(ofSegments:))
    }

    /// The byte ranges within `range` that are not present.
    public func missingRanges(in range: Range<Int64>) -> [Range<Int64>] {
        guard !range.isEmpty, range.lowerBound >= 0 else { return [] }
        return committed.present.clearRuns(in: segmentRange(range)).map { run in
            let bytes = byteRange(ofSegments: run)
            return max(bytes.lowerBound, range.lowerBound)..<min(max(bytes.upperBound, bytes.lowerBound), range.upperBound)
        }.filter { !$0.isEmpty }
    }

    /// Present bytes in total.
    public var presentBytes: Int64 { committed.presentBytes }

    /// The length and present bytes, and whether this open has left the files on disk as it
    /// found them: nothing written, discarded or set since, and an open that created, reclaimed
    /// and healed nothing. A caller that measured the files' blocks before this open knows them
    /// still (a resource only read: the store's close then skips measuring them).
    package var sizes: (length: Int64?, presentBytes: Int64, leftUnchanged: Bool) {
        let unchanged = changeCounter == 0 && !recovery.created && recovery.reclaimedBytes == 0 && recovery.corrected.isEmpty
            && !recovery.metDamage
        return (currentLength, committed.presentBytes, unchanged)
    }

    /// Present bytes as a fraction of the length (0 while the length is unknown; 1 when empty).
    public var fractionPresent: Double {
        guard let length = committed.length else { return 0 }
        return length == 0 ? 1 : Double(presentBytes) / Double(length)
    }

    /// Whether the length is known and every byte is present.
    public var isComplete: Bool {
        guard let length = committed.length else { return false }
        return presentBytes == length
    }

    /// Segments present, as ranges of segment numbers.
    public func presentSegments() -> [Range<Int>] { committed.present.setRuns }

    /// The number of segments the resource has (known length), or covers so far.
    package var segmentCount: Int {
        if let length = currentLength { return IndexState.segmentCount(length: length, shift: segmentShift) }
        return committed.present.count
    }

    /// Bytes of complete segments written but not yet committed.
    package var uncommittedByteCount: Int64 { uncommittedBytes }

    func byteRange(ofSegments run: Range<Int>) -> Range<Int64> {
        let start = Int64(run.lowerBound) << Int64(segmentShift)
        var end = Int64(run.upperBound) << Int64(segmentShift)
        if let length = committed.length { end = min(end, length) }
        return start..<max(start, end)
    }
}
