extension SparseFile {
    /// Returns exactly `length` bytes at `offset` when all of them are present.
    ///
    /// Present means committed: durable and named by the index. Each segment read is checked
    /// against its CRC32C (unless `verifyReads` is off); a mismatch drops the segment so it can
    /// be written again.
    ///
    /// The actor only plans the read (which segments, which checksums); the copy and the check
    /// run on the caller's task, so concurrent readers of one resource copy in parallel and a
    /// read passes through the actor once.
    ///
    /// - Throws: `.notPresent` naming the missing ranges; `.invalidArgument` for a negative
    ///   offset or a range past the known length; `.corruptData` naming damaged segments; `.io`.
    public nonisolated func read(offset: Int64, length: Int) async throws -> [UInt8] {
        guard let plan = try await planRead(offset: offset, length: length) else { return [] }
        return try await perform(plan)
    }

    /// Returns the present bytes from `offset` up to the first missing byte, at most
    /// `maxLength` of them; empty when the byte at `offset` is missing or past the end. A
    /// player can start on this while the rest arrives.
    public nonisolated func readAvailable(from offset: Int64, maxLength: Int) async throws -> [UInt8] {
        guard let plan = try await planAvailable(from: offset, maxLength: maxLength) else { return [] }
        return try await perform(plan)
    }

    private func planRead(offset: Int64, length: Int) throws -> ReadPlan? {
        try checkUsable("read")
        let end = try checkedEnd(offset: offset, count: length, operation: "read")
        if let resourceLength = committed.length, end > resourceLength {
            throw SparseCacheError(
                .invalidArgument, operation: "read", path: path, offset: offset, length: Int64(length),
                detail: "runs past the resource length \(resourceLength)")
        }
        if length == 0 { return nil }
        let missing = missingRanges(in: offset..<end)
        if !missing.isEmpty {
            throw SparseCacheError(
                .notPresent, operation: "read", path: path, offset: offset, length: Int64(length), missing: missing)
        }
        return plan(offset..<end)
    }

    private func planAvailable(from offset: Int64, maxLength: Int) throws -> ReadPlan? {
        try checkUsable("read")
        let end = try checkedEnd(offset: offset, count: maxLength, operation: "read")
        let upper = min(end, contiguousPresentEnd(from: offset))
        if upper <= offset { return nil }
        return plan(offset..<upper)
    }

    /// Where the run of present bytes starting at `offset` ends (`offset` when none).
    package func contiguousPresentEnd(from offset: Int64) -> Int64 {
        let segment = Int(offset >> Int64(segmentShift))
        guard offset >= 0, committed.present[segment] else { return offset }
        let firstMissing = committed.present.firstClear(in: segment..<committed.present.count) ?? committed.present.count
        let end = Int64(firstMissing) << Int64(segmentShift)
        return min(end, committed.length ?? end)
    }

    /// A read of present segments, planned on the actor: the bytes to fetch (whole segments
    /// when verifying) and their checksums. Counted in flight until ``perform(_:)`` ends it.
    struct ReadPlan: Sendable {
        var range: Range<Int64>
        var fetch: Range<Int64>
        var firstSegment: Int
        var expected: [UInt32]
    }

    private func plan(_ range: Range<Int64>) -> ReadPlan {
        // Whole segments are read when verifying, so each can be checked against its CRC32C.
        let verify = options.verifyReads
        let segments = segmentRange(range)
        let start = verify ? Int64(segments.lowerBound) << Int64(segmentShift) : range.lowerBound
        let end = verify ? min(Int64(segments.upperBound) << Int64(segmentShift), committed.length ?? .max) : range.upperBound
        readCounters.inFlight.add(1, ordering: .sequentiallyConsistent)
        return ReadPlan(
            range: range, fetch: start..<end, firstSegment: segments.lowerBound,
            expected: verify ? segments.map { committed.checksums[$0] } : [])
    }

    /// Fetches and checks a planned read on the caller's task; back on the actor only for
    /// damaged segments.
    private nonisolated func perform(_ plan: ReadPlan) async throws -> [UInt8] {
        defer { endRead() }
        let fetched = try await Self.fetch(
            plan.fetch, dataFile: dataFile, reader: reader, pageCacheFirst: options.readsFromPageCacheFirst,
            firstSegment: plan.firstSegment, shift: segmentShift, expected: plan.expected)
        readCounters.fromPageCache.add(Int64(fetched.fromPageCache), ordering: .relaxed)
        readCounters.throughChannel.add(Int64(fetched.bytes.count - fetched.fromPageCache), ordering: .relaxed)
        guard fetched.bytes.count == plan.fetch.count else { throw shortRead(plan.fetch, got: fetched.bytes.count) }
        if !fetched.damaged.isEmpty { try await failDamaged(fetched.damaged, in: plan.range) }
        let range = plan.range
        if plan.fetch.lowerBound == range.lowerBound, fetched.bytes.count == range.count { return fetched.bytes }
        let from = Int(range.lowerBound - plan.fetch.lowerBound)
        return Array(fetched.bytes[from..<(from + Int(range.count))])
    }

    /// The end of a planned read; the last one to end while close() waits wakes it.
    private nonisolated func endRead() {
        let left = readCounters.inFlight.subtract(1, ordering: .sequentiallyConsistent).newValue
        if left == 0, readCounters.closing.load(ordering: .sequentiallyConsistent) {
            Task { await self.wakeDrain() }
        }
    }

    /// Throws for segments whose bytes did not match their CRC32C, dropping those still
    /// present so they can be written again.
    private func failDamaged(_ damaged: [Int], in range: Range<Int64>) throws {
        // Re-check after the fetch: segments dropped while the read was in flight are
        // missing, not damaged.
        let stillPresent = damaged.filter { committed.present[$0] }
        if stillPresent.isEmpty {
            throw SparseCacheError(
                .notPresent, operation: "read", path: path, offset: range.lowerBound, length: Int64(range.count),
                missing: missingRanges(in: range))
        }
        unserve(stillPresent)
        EngineMetrics.corruptSegments.add(stillPresent.count)
        // Says what was done and nothing more: a read-only open cannot change the index.
        let done =
            mode == .readWrite
            ? "they are no longer served, and the next commit drops them from the index so they can be written again"
            : "they are not served by this open, but the index still names them (opened read-only): a writable open "
                + "that reads them, or a repair (Verifier.verify(path:repair:), 'sparsecache verify --repair'), drops them"
        throw SparseCacheError(
            .corruptData, operation: "read", path: path, offset: range.lowerBound, length: Int64(range.count),
            detail: "stored bytes do not match their CRC32C; \(done)", segments: stillPresent)
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
        withdrawCommittedView()
        for segment in segments { committed.present.remove(segment) }
        if mode == .readWrite {
            pendingChange.dropped = Array(Set(pendingChange.dropped + segments)).sorted()
            changeCounter += 1
        }
    }

    private nonisolated func shortRead(_ range: Range<Int64>, got: Int) -> SparseCacheError {
        let endOfFile = range.lowerBound + Int64(got)
        let segment = Int(endOfFile >> Int64(segmentShift))
        return SparseCacheError(
            .corruptData, operation: "read", path: path, offset: range.lowerBound, length: Int64(range.count),
            detail: "data file ends at byte \(endOfFile), inside present segment \(segment)", segments: [segment])
    }
}
