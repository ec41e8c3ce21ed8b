extension SparseFile {
    /// Writes `bytes` at `offset`. Any offset and size: network chunks are unaligned.
    ///
    /// Segments the bytes complete are written to the data file at once and become present at
    /// the next commit; bytes of incomplete segments are held in memory (bounded by
    /// ``SparseFileOptions/partialSegmentBudget``) and never reported present. Bytes of
    /// segments already present are skipped: a present segment never changes.
    ///
    /// - Throws: `.invalidArgument` for a negative offset or a write past the known length;
    ///   `.io` when the data file cannot be written (the affected segments stay absent, nothing
    ///   committed changes); `.closed`, `.needsReopen`.
    @discardableResult
    public func write(_ bytes: [UInt8], at offset: Int64) async throws -> WriteResult {
        try await write(bytes, at: offset, applyingCommitPolicy: true)
    }

    /// Writes any contiguous bytes: `Data`, an `UnsafeRawBufferPointer`, an `ArraySlice`, a
    /// `ContiguousArray` (the `[UInt8]` ``write(_:at:)`` says what a write does). A `[UInt8]`
    /// goes through as it is, without a copy; other bytes are copied once, into the array the
    /// write hands to the resource's queue (it outlives this call, and a caller's buffer may not).
    /// The copy is made on the caller's side, before the call enters the actor, so bytes that
    /// are not `Sendable` (a raw buffer) can be passed.
    @discardableResult
    nonisolated(nonsending) public func write<Bytes: Collection<UInt8>>(_ bytes: Bytes, at offset: Int64) async throws -> WriteResult {
        if let array = bytes as? [UInt8] { return try await write(array, at: offset, applyingCommitPolicy: true) }
        let array = bytes.withContiguousStorageIfAvailable { Array($0) } ?? Array(bytes)
        return try await write(array, at: offset, applyingCommitPolicy: true)
    }

    /// ``write(_:at:)``, without the commit policy when `applyingCommitPolicy` is false: for a
    /// writer that commits on its own and bounds what it leaves uncommitted (the HTTP fill's
    /// write-back, which commits beside its writes rather than inside them).
    @discardableResult
    package func write(_ bytes: [UInt8], at offset: Int64, applyingCommitPolicy: Bool) async throws -> WriteResult {
        try checkWritable("write")
        let end = try checkedEnd(offset: offset, count: bytes.count, operation: "write")
        if let length = currentLength, end > length {
            throw SparseCacheError(
                .invalidArgument, operation: "write", path: path, offset: offset, length: Int64(bytes.count),
                detail: "runs past the resource length \(length)")
        }
        var result = WriteResult()
        if bytes.isEmpty { return result }
        beginOperation()
        defer { endOperation() }

        var pieces: [WritePiece] = []
        partialClock += 1
        for segment in segmentRange(offset..<end) {
            let start = Int64(segment) << Int64(segmentShift)
            let overlap = max(offset, start)..<min(end, start + Int64(segmentSize))
            if hasSegment(segment) {
                result.alreadyPresentBytes += Int(overlap.count)
                continue
            }
            let segmentLength = self.segmentLength(segment)
            let sourceStart = Int(overlap.lowerBound - offset)
            if overlap.lowerBound == start, overlap.count == Int64(segmentLength) {
                partials[segment] = nil
                let checksum = bytes.withUnsafeBytes { raw in
                    crc32c(UnsafeRawBufferPointer(rebasing: raw[sourceStart..<(sourceStart + segmentLength)]))
                }
                pieces.append(WritePiece(segment: segment, fileOffset: start, source: .caller(sourceStart..<(sourceStart + segmentLength)), checksum: checksum))
                continue
            }
            // Taken out of the dictionary so its buffer is uniquely referenced: mutating a copy
            // that the dictionary still shares would copy the whole segment on every write.
            var partial = partials.removeValue(forKey: segment) ?? PartialSegment(size: segmentLength, clock: partialClock)
            let relative = Int(overlap.lowerBound - start)
            partial.buffer.withUnsafeMutableBytes { target in
                bytes.withUnsafeBytes { source in
                    UnsafeMutableRawBufferPointer(rebasing: target[relative..<(relative + Int(overlap.count))])
                        .copyMemory(from: UnsafeRawBufferPointer(rebasing: source[sourceStart..<(sourceStart + Int(overlap.count))]))
                }
            }
            partial.covered.insert(Int64(relative)..<(Int64(relative) + Int64(overlap.count)))
            partial.lastTouch = partialClock
            if segmentLength > 0, partial.isComplete(length: segmentLength) {
                let buffer = partial.buffer.count == segmentLength ? partial.buffer : Array(partial.buffer.prefix(segmentLength))
                pieces.append(WritePiece(segment: segment, fileOffset: start, source: .buffer(buffer), checksum: crc32c(buffer)))
            } else {
                partials[segment] = partial
                result.bufferedBytes += Int(overlap.count)
            }
        }
        enforcePartialBudget()
        result.dropped = droppedSinceLastReport
        droppedSinceLastReport.removeAll()
        if pieces.isEmpty { return result }

        for piece in pieces { busy.insert(piece.segment) }
        let dataFile = self.dataFile
        let preallocate = options.preallocate
        let planned = pieces
        do {
            try await io.run { try Self.writePieces(planned, from: bytes, to: dataFile, preallocate: preallocate) }
        } catch {
            for piece in pieces { busy.remove(piece.segment) }
            throw error
        }
        for piece in pieces {
            busy.remove(piece.segment)
            // A failed sync while this write was in flight poisoned the resource: claim nothing.
            guard failure == nil else { break }
            unsynced[piece.segment] = piece.checksum
            uncommittedBytes += Int64(piece.length)
            changeCounter += 1
            let range = piece.fileOffset..<(piece.fileOffset + Int64(piece.length))
            if let last = result.completed.last, last.upperBound == range.lowerBound {
                result.completed[result.completed.count - 1] = last.lowerBound..<range.upperBound
            } else {
                result.completed.append(range)
            }
        }
        try checkUsable("write")
        if applyingCommitPolicy { try await applyCommitPolicy() }
        return result
    }

    /// Bytes of incomplete segments held in memory, as absolute byte ranges. They are dropped
    /// when the resource closes.
    package func incompleteRanges() -> [Range<Int64>] {
        var ranges = ByteRanges()
        for (segment, partial) in partials {
            let start = Int64(segment) << Int64(segmentShift)
            for range in partial.covered.ranges { ranges.insert((start + range.lowerBound)..<(start + range.upperBound)) }
        }
        return ranges.ranges
    }

    /// Sets the resource length once it is learned (for example from a Content-Range header).
    /// Takes effect at once for writes and is committed with the next commit, which first
    /// extends the data file to it (no I/O here: a new resource's first bytes wait for none).
    ///
    /// - Throws: `.invalidArgument` when a different length is already set, or when present
    ///   data lies past the new length.
    public func setLength(_ length: Int64) async throws {
        try checkWritable("set length")
        if currentLength == length { return }
        var probe = committed
        if let committingChange { probe.apply(committingChange) }
        probe.apply(pendingChange)
        let inFlight = Set(unsynced.keys).union(committing.keys).union(busy)
        // The probe checks the range first, so the segment count below cannot overflow.
        var problem = probe.problem(applying: IndexChange(length: length))
        if problem == nil {
            let count = IndexState.segmentCount(length: length, shift: segmentShift)
            // No length was set before, so segments in flight were written at full size: an
            // unaligned length must not end inside one. Buffered bytes must end by the length.
            let firstCut = length % Int64(segmentSize) == 0 ? count : count - 1
            let lastBytes = length - (Int64(count - 1) << Int64(segmentShift))
            if inFlight.contains(where: { $0 >= firstCut }) {
                problem = "data was written past length \(length)"
            } else if partials.contains(where: { segment, partial in
                segment >= count || (segment == count - 1 && (partial.covered.ranges.last?.upperBound ?? 0) > lastBytes)
            }) {
                problem = "buffered bytes lie past length \(length)"
            }
        }
        if let problem {
            throw SparseCacheError(.invalidArgument, operation: "set length", path: path, length: length, detail: problem)
        }
        pendingChange.length = length
        changeCounter += 1
        // The last segment may have been waiting only for its length.
        let last = IndexState.segmentCount(length: length, shift: segmentShift) - 1
        if last >= 0, let partial = partials[last], partial.isComplete(length: segmentLength(last)) {
            let bytes = Array(partial.buffer.prefix(segmentLength(last)))
            partials[last] = nil
            try await write(bytes, at: Int64(last) << Int64(segmentShift))
        }
    }

    // MARK: Helpers

    /// The length writes are checked against: pending, being committed, or committed.
    var currentLength: Int64? { pendingChange.length ?? committingChange?.length ?? committed.length }

    /// Bytes in `segment`: the segment size, less for the last segment of a known length.
    /// While the length is unknown every segment is full size.
    func segmentLength(_ segment: Int) -> Int {
        let start = Int64(segment) << Int64(segmentShift)
        guard let length = currentLength else { return segmentSize }
        return Int(max(0, min(Int64(segmentSize), length - start)))
    }

    /// Whether the segment is present, being committed, written, or being written.
    func hasSegment(_ segment: Int) -> Bool {
        committed.present[segment] || unsynced[segment] != nil || committing[segment] != nil || busy.contains(segment)
    }

    func segmentRange(_ bytes: Range<Int64>) -> Range<Int> {
        guard !bytes.isEmpty else { return 0..<0 }
        return Int(bytes.lowerBound >> Int64(segmentShift))..<Int(((bytes.upperBound - 1) >> Int64(segmentShift)) + 1)
    }

    func checkedEnd(offset: Int64, count: Int, operation: String) throws -> Int64 {
        let limit = Int64(IndexFormat.maximumSegmentCount) << Int64(segmentShift)
        guard offset >= 0, count >= 0 else {
            throw SparseCacheError(
                .invalidArgument, operation: operation, path: path, offset: offset, length: Int64(count),
                detail: "negative offset or length")
        }
        let (end, overflow) = offset.addingReportingOverflow(Int64(count))
        guard !overflow, end <= limit else {
            throw SparseCacheError(
                .invalidArgument, operation: operation, path: path, offset: offset, length: Int64(count),
                detail: "range ends past the largest supported offset \(limit)")
        }
        return end
    }

    private func enforcePartialBudget() {
        guard partials.bytes > options.partialSegmentBudget else { return }
        for segment in partials.coldestFirst() where partials.bytes > options.partialSegmentBudget {
            guard let partial = partials.removeValue(forKey: segment) else { continue }
            let start = Int64(segment) << Int64(segmentShift)
            for range in partial.covered.ranges {
                droppedSinceLastReport.append((start + range.lowerBound)..<(start + range.upperBound))
            }
        }
    }

    private static func writePieces(_ pieces: [WritePiece], from bytes: [UInt8], to file: FileDescriptor, preallocate: Bool) throws {
        var index = 0
        while index < pieces.count {
            // Consecutive segments straight from the caller's buffer go out as one pwrite.
            var end = index + 1
            if case .caller(let first) = pieces[index].source {
                var sourceEnd = first.upperBound
                while end < pieces.count, case .caller(let next) = pieces[end].source, next.lowerBound == sourceEnd,
                    pieces[end].fileOffset == pieces[index].fileOffset + Int64(sourceEnd - first.lowerBound)
                {
                    sourceEnd = next.upperBound
                    end += 1
                }
                if preallocate { try file.allocate(offset: pieces[index].fileOffset, length: Int64(sourceEnd - first.lowerBound)) }
                try bytes.withUnsafeBytes { raw in
                    try file.write(toAbsoluteOffset: pieces[index].fileOffset, UnsafeRawBufferPointer(rebasing: raw[first.lowerBound..<sourceEnd]))
                }
            } else if case .buffer(let buffer) = pieces[index].source {
                if preallocate { try file.allocate(offset: pieces[index].fileOffset, length: Int64(buffer.count)) }
                try file.write(toAbsoluteOffset: pieces[index].fileOffset, buffer)
            }
            index = end
        }
    }
}

/// One complete segment on its way to the data file.
struct WritePiece: Sendable {
    enum Source: Sendable {
        /// A range of the caller's buffer.
        case caller(Range<Int>)
        /// A completed in-memory segment.
        case buffer([UInt8])
    }

    var segment: Int
    var fileOffset: Int64
    var source: Source
    var checksum: UInt32

    var length: Int {
        switch source {
        case .caller(let range): range.count
        case .buffer(let buffer): buffer.count
        }
    }
}
