extension SparseFile {
    /// Returns exactly `length` bytes at `offset` when all of them are present.
    ///
    /// Present means committed: durable and named by the index. Each segment read is checked
    /// against its CRC32C (unless `verifyReads` is off); a mismatch drops the segment so it can
    /// be written again.
    ///
    /// - Throws: `.notPresent` naming the missing ranges; `.invalidArgument` for a negative
    ///   offset or a range past the known length; `.corruptData` naming damaged segments; `.io`.
    public func read(offset: Int64, length: Int) async throws -> [UInt8] {
        try checkUsable("read")
        let end = try checkedEnd(offset: offset, count: length, operation: "read")
        if let resourceLength = committed.length, end > resourceLength {
            throw SparseCacheError(
                .invalidArgument, operation: "read", path: path, offset: offset, length: Int64(length),
                detail: "runs past the resource length \(resourceLength)")
        }
        if length == 0 { return [] }
        let missing = missingRanges(in: offset..<end)
        if !missing.isEmpty {
            throw SparseCacheError(
                .notPresent, operation: "read", path: path, offset: offset, length: Int64(length), missing: missing)
        }
        return try await readPresent(offset..<end)
    }

    /// Returns the present bytes from `offset` up to the first missing byte, at most
    /// `maxLength` of them; empty when the byte at `offset` is missing or past the end. A
    /// player can start on this while the rest arrives.
    public func readAvailable(from offset: Int64, maxLength: Int) async throws -> [UInt8] {
        try checkUsable("read")
        let end = try checkedEnd(offset: offset, count: maxLength, operation: "read")
        let available = contiguousPresentEnd(from: offset)
        let upper = min(end, available)
        if upper <= offset { return [] }
        return try await readPresent(offset..<upper)
    }

    /// Where the run of present bytes starting at `offset` ends (`offset` when none).
    func contiguousPresentEnd(from offset: Int64) -> Int64 {
        let segment = Int(offset >> Int64(segmentShift))
        guard offset >= 0, committed.present[segment] else { return offset }
        let firstMissing = committed.present.firstClear(in: segment..<committed.present.count) ?? committed.present.count
        let end = Int64(firstMissing) << Int64(segmentShift)
        return min(end, committed.length ?? end)
    }

    /// Reads a range whose segments are all present: from the page cache on this task when
    /// it holds the bytes, the rest through the DispatchIO channel.
    private func readPresent(_ range: Range<Int64>) async throws -> [UInt8] {
        beginOperation()
        defer { endOperation() }
        // Whole segments are read when verifying, so each can be checked against its CRC32C.
        let verify = options.verifyReads
        let segments = segmentRange(range)
        let start = verify ? Int64(segments.lowerBound) << Int64(segmentShift) : range.lowerBound
        let end = verify ? min(Int64(segments.upperBound) << Int64(segmentShift), committed.length ?? .max) : range.upperBound
        let fetched = try await Self.fetch(
            start..<end, dataFile: dataFile, reader: reader, pageCacheFirst: options.readsFromPageCacheFirst,
            firstSegment: segments.lowerBound, shift: segmentShift,
            expected: verify ? segments.map { committed.checksums[$0] } : [])
        readStatistics.fromPageCache += Int64(fetched.fromPageCache)
        readStatistics.throughChannel += Int64(fetched.bytes.count - fetched.fromPageCache)
        guard fetched.bytes.count == end - start else { throw shortRead(start..<end, got: fetched.bytes.count) }
        if !fetched.damaged.isEmpty {
            // Re-check after the await: segments dropped while the read was in flight are
            // missing, not damaged.
            let stillPresent = fetched.damaged.filter { committed.present[$0] }
            if stillPresent.isEmpty {
                throw SparseCacheError(
                    .notPresent, operation: "read", path: path, offset: range.lowerBound, length: Int64(range.count),
                    missing: missingRanges(in: range))
            }
            unserve(stillPresent)
            throw SparseCacheError(
                .corruptData, operation: "read", path: path, offset: range.lowerBound, length: Int64(range.count),
                detail: "stored bytes do not match their CRC32C; the segments were dropped", segments: stillPresent)
        }
        if start == range.lowerBound, fetched.bytes.count == range.count { return fetched.bytes }
        let from = Int(range.lowerBound - start)
        return Array(fetched.bytes[from..<(from + Int(range.count))])
    }

    private struct Fetched: Sendable {
        var bytes: [UInt8]
        var fromPageCache: Int
        var damaged: [Int]
    }

    /// Reads `range` and checks it against `expected` (one CRC32C per segment from
    /// `firstSegment`; empty means no check). Runs off the actor, so other calls proceed while
    /// it copies and checksums.
    ///
    /// The page-cache read runs only when cachestat(2) finds every page of the range cached,
    /// and cannot wait even then (RWF_NOWAIT): whatever it does not serve goes through the
    /// DispatchIO channel.
    private nonisolated static func fetch(
        _ range: Range<Int64>, dataFile: FileDescriptor, reader: DispatchReadChannel, pageCacheFirst: Bool,
        firstSegment: Int, shift: Int, expected: [UInt32]
    ) async throws -> Fetched {
        let count = Int(range.count)
        var cached = 0
        var bytes = try [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            // Only when every page is cached: RWF_NOWAIT on uncached pages still starts
            // readahead, whose submission can block this thread.
            if pageCacheFirst, dataFile.isCached(offset: range.lowerBound, length: count) {
                cached = try dataFile.readCached(fromAbsoluteOffset: range.lowerBound, into: UnsafeMutableRawBufferPointer(buffer))
            }
            initialized = cached
        }
        if cached < count {
            bytes += try await reader.read(offset: range.lowerBound + Int64(cached), length: count - cached)
        }
        var damaged: [Int] = []
        let size = 1 << shift
        bytes.withUnsafeBytes { raw in
            for (index, checksum) in expected.enumerated() {
                let lower = index * size
                guard lower < raw.count else { break }
                let upper = min(lower + size, raw.count)
                if crc32c(UnsafeRawBufferPointer(rebasing: raw[lower..<upper])) != checksum { damaged.append(firstSegment + index) }
            }
        }
        return Fetched(bytes: bytes, fromPageCache: cached, damaged: damaged)
    }

    /// Stops serving segments found damaged; in a writable resource the drop is committed with
    /// the next commit so the segments can be fetched again.
    func unserve(_ segments: [Int]) {
        for segment in segments { committed.present.remove(segment) }
        if mode == .readWrite {
            pendingChange.dropped = Array(Set(pendingChange.dropped + segments)).sorted()
            changeCounter += 1
        }
    }

    private func shortRead(_ range: Range<Int64>, got: Int) -> SparseCacheError {
        let endOfFile = range.lowerBound + Int64(got)
        let segment = Int(endOfFile >> Int64(segmentShift))
        return SparseCacheError(
            .corruptData, operation: "read", path: path, offset: range.lowerBound, length: Int64(range.count),
            detail: "data file ends at byte \(endOfFile), inside present segment \(segment)", segments: [segment])
    }
}
