#if canImport(Glibc)
import Glibc
#endif

extension SparseFile {
    /// Drops segments: they stop being present at once, the drop is committed, then their disk
    /// blocks are freed by punching holes. Used by repair, and to keep a resource in a budget.
    ///
    /// Durability: the index stops naming the segments before their blocks are freed, so a
    /// crash in between leaves unclaimed data, never a claimed hole.
    ///
    /// - Throws: `.invalidArgument` for a negative segment number; `.io`, `.needsReopen`.
    public func discard(segments: [Int]) async throws {
        try checkWritable("discard")
        if let negative = segments.first(where: { $0 < 0 }) {
            throw SparseCacheError(.invalidArgument, operation: "discard", path: path, detail: "negative segment \(negative)")
        }
        // An operation, so close waits for it: its drop commit and its holes never run beside
        // (or after) the close that releases the descriptors.
        beginOperation()
        defer { endOperation() }
        // Finish commits in flight first so no segment is on its way into the index.
        try await commitPending()
        // Re-check after the await: segments being written again are left alone.
        let targets = Set(segments).subtracting(busy).sorted()
        if targets.isEmpty { return }
        withdrawCommittedView()
        for segment in targets {
            committed.present.remove(segment)
            unsynced[segment] = nil
            partials[segment] = nil
        }
        busy.formUnion(targets)
        defer { busy.subtract(targets) }
        pendingChange.dropped = Array(Set(pendingChange.dropped + targets)).sorted()
        changeCounter += 1
        try await commitPending()
        let holes = targets.reduce(into: [Range<Int>]()) { runs, segment in
            if let last = runs.last, last.upperBound == segment {
                runs[runs.count - 1] = last.lowerBound..<(segment + 1)
            } else {
                runs.append(segment..<(segment + 1))
            }
        }.map { byteRange(ofSegments: $0) }
        let dataFile = self.dataFile
        try await io.run {
            let size = try dataFile.status().size
            for hole in holes where hole.lowerBound < size {
                do {
                    try dataFile.punchHole(offset: hole.lowerBound, length: min(hole.upperBound, size) - hole.lowerBound)
                } catch let error as SparseCacheError where error.errno == EOPNOTSUPP {
                    // A file system without hole punching keeps the (unclaimed) bytes.
                    return
                }
            }
        }
    }

    /// Writes a fresh checkpoint now: folds the journal and rewrites the other superblock slot.
    /// Repair uses it to restore both copies. Runs in the commit line, never beside a commit.
    func forceCheckpoint() async throws {
        try checkWritable("checkpoint")
        beginOperation()
        defer { endOperation() }
        try await commitPending()
        while let running = commitTask {
            try await running.value
        }
        let task = Task { try await self.checkpointInCommitLine(reportingErrors: true) }
        commitTask = task
        try await task.value
    }

    /// A checkpoint run as the commit line's task (``commitTask``), which it clears when done.
    func checkpointInCommitLine(reportingErrors: Bool) async throws {
        defer { commitTask = nil }
        try await checkpoint(reportingErrors: reportingErrors)
    }

    /// Shrinks the index when its journal holds more than `threshold` bytes: folds the journal
    /// into a checkpoint at the front of the file and truncates the dead space after it. The
    /// store calls it so that a resource's index does not eat the budget meant for its data.
    ///
    /// Durability: as ``forceCheckpoint()``; the committed state is unchanged.
    /// - Throws: `.io`, `.needsReopen`, `.closed`, or `.invalidArgument` when opened read-only.
    package func compactIndex(ifJournalExceeds threshold: Int64) async throws {
        try checkWritable("compact index")
        beginOperation()
        defer { endOperation() }
        try await commitPending()
        while let running = commitTask {
            try await running.value
        }
        let task = Task { try await self.compactInCommitLine(threshold: threshold) }
        commitTask = task
        try await task.value
    }

    private func compactInCommitLine(threshold: Int64) async throws {
        defer { commitTask = nil }
        // Safe to read here: the commit line is the only code touching the index.
        guard index.journalBytes > threshold else { return }
        try await checkpoint(reportingErrors: true)
        // The first checkpoint goes past the live state, the second to the front, the third
        // right behind it, and the file is truncated after it: the index is then two
        // checkpoints (the live one and the other copy's) and nothing more.
        if !index.checkpointIsAtFront { try await checkpoint(reportingErrors: true, compacting: true) }
        try await checkpoint(reportingErrors: true)
    }
}
