import SparseCacheBase

/// Checks a resource after a crash: every index checksum (done by recovery), every present
/// segment's CRC32C against the bytes on disk, and that the data file agrees with the index
/// (long enough, no hole under a present segment). With `repair`, damaged segments are dropped
/// from the index and their blocks freed, so the resource stays usable.
package enum Verifier {
    /// Progress callback: bytes checked so far and bytes to check.
    package typealias Progress = @Sendable (_ checked: Int64, _ total: Int64) -> Void

    /// Verifies the resource whose data file is at `path`.
    ///
    /// Without `repair` the resource is opened read-only and takes no lock, so it can run while
    /// a writer has it open (it then checks the committed state it read at open).
    ///
    /// - Throws: `.notFound`; `.corruptIndex` / `.unsupportedVersion` when no usable index state
    ///   exists; `.locked` when repairing a resource another process has open; `.io`.
    package static func verify(path: String, repair: Bool = false, progress: Progress? = nil) async throws -> VerifyReport {
        let io = BlockingExecutor(label: "sparsecache.verify")
        let indexPath = SparseFile.indexPath(for: path)
        // Recovery validates the superblocks, the checkpoint and every journal record; the data
        // file settles what a journal damaged in the middle leaves in doubt.
        let openIndex: @Sendable () throws -> (IndexFile, IndexState, IndexFile.RecoveryReport) = {
            if try !FileSystem.exists(indexPath) { throw try SparseFile.noResource(path, operation: "verify") }
            // A data file that cannot be opened fails the data check below, with its own error
            // (after the index's: a path without an index is no resource).
            let data = try? FileDescriptor.open(path, access: .readOnly)
            defer { data?.close() }
            return try IndexFile.open(path: indexPath, access: .readOnly, evidence: data.map(DataEvidence.reading))
        }
        var salvaged: String?
        let opened: (IndexFile, IndexState, IndexFile.RecoveryReport)
        do {
            opened = try await io.run(openIndex)
        } catch let error as SparseCacheError where error.code == .corruptIndex {
            // Both superblock copies unusable: say what a repair can recover, or recover it.
            guard let salvage = try await io.run({ try salvageIndex(path: path, indexPath: indexPath) }) else { throw error }
            guard repair else {
                throw SparseCacheError(
                    .corruptIndex, operation: "verify", path: indexPath,
                    detail: (error.detail ?? "no usable superblock") + ". What --repair can recover: " + salvage.summary
                        + "; it rebuilds the index from that (the damaged one is kept as '\(FileSystem.fileName(of: indexPath)).damaged')")
            }
            try await io.run { try IndexFile.rebuild(path: indexPath, from: salvage) }
            salvaged =
                "both superblock copies were unusable (\(error.detail ?? "")); the index was rebuilt from " + salvage.summary
                + "; the damaged index is kept as '\(FileSystem.fileName(of: indexPath)).damaged'. Whatever the lost state held "
                + "beyond this (a later checkpoint or journal records no slot's salt validates) cannot be known: fetch or write "
                + "it again"
            opened = try await io.run(openIndex)
        }
        let (index, state, recovery) = opened
        index.close()
        var report = try await io.run { try checkData(path: path, state: state, recovery: recovery, progress: progress) }
        if let salvaged {
            report.indexDamage.insert(salvaged, at: 0)
            report.repaired = true
        }
        guard repair else { return report }
        var options = SparseFileOptions()
        options.create = false
        options.commitPolicy = .manual
        options.requireDataFileCoversIndex = false
        // A writable open also frees the blocks of segments written but never committed.
        let file = try await SparseFile.open(path, mode: .readWrite, options: options)
        // After a salvage, the blocks the rebuilt index does not name held committed data
        // nothing can claim any more: freed, not "never committed".
        if salvaged != nil {
            report.freedLostBytes = file.recovery.reclaimedBytes
        } else {
            report.reclaimedBytes = file.recovery.reclaimedBytes
        }
        guard !report.isClean || recovery.slotProblems.contains(where: { $0 != nil }) || recovery.journalTail != nil
            || recovery.rebuiltCheckpoint != nil || recovery.journalDamage != nil
        else {
            try await file.close()
            return report
        }
        do {
            try await file.discard(segments: report.damaged.map(\.segment))
            // A checkpoint folds away a damaged or torn journal tail and rewrites the other
            // superblock slot; a second one rewrites the slot in use, so both copies are valid
            // again whichever one was damaged.
            try await file.forceCheckpoint()
            try await file.forceCheckpoint()
            try await file.close()
        } catch {
            try? await file.close()
            throw error
        }
        report.repaired = true
        if recovery.journalDamage != nil {
            // The damage is folded away: a writable open now frees the blocks no intact record
            // named (the lost segments' data, which nothing can claim), counted as such.
            let reopened = try await SparseFile.open(path, mode: .readWrite, options: options)
            report.freedLostBytes = reopened.recovery.reclaimedBytes
            try await reopened.close()
        }
        return report
    }

    /// ``IndexFile/salvage(path:evidence:)`` with the data file as evidence; nil when a
    /// superblock copy is usable (the error was something else) or the data file cannot be read.
    private static func salvageIndex(path: String, indexPath: String) throws -> IndexFile.Salvage? {
        guard let data = try? FileDescriptor.open(path, access: .readOnly) else { return nil }
        defer { data.close() }
        return try IndexFile.salvage(path: indexPath, evidence: .reading(data))
    }

    private static func checkData(
        path: String, state: IndexState, recovery: IndexFile.RecoveryReport, progress: Progress?
    ) throws -> VerifyReport {
        let data = try FileDescriptor.open(path, access: .readOnly)
        defer { data.close() }
        let size = try data.status().size
        let shift = Int64(state.segmentShift)
        var report = VerifyReport(
            path: path, indexPath: SparseFile.indexPath(for: path), length: state.length, segmentSize: state.segmentSize,
            generation: recovery.generation, journalRecords: recovery.recordsReplayed,
            superblocksValid: recovery.slotProblems.filter { $0 == nil }.count, segmentsChecked: 0, bytesChecked: 0,
            dataFileSize: size, indexDamage: recovery.damage, notes: [], damaged: [], repaired: false, lostSegments: 0, lostBytes: 0)
        for (slot, problem) in recovery.slotProblems.enumerated() {
            guard let problem else { continue }
            if recovery.correctedSlots.contains(slot) {
                report.notes.append("superblock slot \(slot): \(problem); nothing lost (--repair rewrites it)")
            } else {
                report.notes.append("superblock slot \(slot): \(problem) (the other copy is in use)")
            }
        }
        if let tail = recovery.journalTail { report.notes.append("journal: \(tail); the state before it is in use") }
        if let rebuilt = recovery.rebuiltCheckpoint { report.notes.append("\(rebuilt); nothing lost (--repair rewrites it)") }
        if recovery.fellBack { report.notes.append("the newest checkpoint was unusable; an older state is in use") }
        if let lost = recovery.lost {
            report.lostSegments = lost.segments
            report.lostBytes = lost.bytes
        }
        if let newestLost = recovery.newestLost { report.indexDamage.append(newestLost) }

        func segmentBytes(_ segment: Int) -> Range<Int64> {
            let start = Int64(segment) << shift
            return start..<min(start + (Int64(1) << shift), state.length ?? .max)
        }
        func damage(_ segment: Int, _ reason: String) {
            let bytes = segmentBytes(segment)
            report.damaged.append(.init(segment: segment, start: bytes.lowerBound, end: bytes.upperBound, reason: reason))
        }

        let runs = state.present.setRuns
        let total = runs.reduce(Int64(0)) { $0 + (segmentBytes($1.upperBound - 1).upperBound - segmentBytes($1.lowerBound).lowerBound) }
        let holes = try holeRanges(data, size: size)
        // Read in batches of whole segments: big sequential reads, one CRC per segment.
        let batchSegments = max(1, (8 << 20) >> Int(shift))
        var buffer = [UInt8](repeating: 0, count: batchSegments << Int(shift))
        for run in runs {
            var segment = run.lowerBound
            while segment < run.upperBound {
                let batchEnd = min(run.upperBound, segment + batchSegments)
                let start = segmentBytes(segment).lowerBound
                let end = segmentBytes(batchEnd - 1).upperBound
                func read(_ range: Range<Int64>) throws -> Int {
                    try buffer.withUnsafeMutableBytes { raw in
                        let slice = Int(range.lowerBound - start)..<Int(range.upperBound - start)
                        return try data.read(
                            fromAbsoluteOffset: range.lowerBound, into: UnsafeMutableRawBufferPointer(rebasing: raw[slice]))
                    }
                }
                // One big read per batch; when it fails (EIO from a bad sector), segment by
                // segment, so every unreadable segment is named and every readable one checked.
                var unreadable: [Int: String] = [:]
                var short = Set<Int>()
                do {
                    let got = try read(start..<end)
                    for current in segment..<batchEnd where Int(segmentBytes(current).upperBound - start) > got { short.insert(current) }
                } catch let error as SparseCacheError where error.code == .io {
                    for current in segment..<batchEnd {
                        let bytes = segmentBytes(current)
                        do {
                            if try read(bytes) < bytes.count { short.insert(current) }
                        } catch let error as SparseCacheError where error.code == .io {
                            unreadable[current] =
                                "unreadable: " + (error.errno.map { "\(SparseCacheError.errnoText($0)) (errno \($0))" } ?? "read failed")
                        }
                    }
                }
                for current in segment..<batchEnd {
                    let bytes = segmentBytes(current)
                    let lower = Int(bytes.lowerBound - start)
                    let upper = Int(bytes.upperBound - start)
                    if let problem = unreadable[current] {
                        damage(current, problem)
                    } else if short.contains(current) {
                        damage(current, "past the end of the data file (\(size) bytes)")
                    } else {
                        // The checksum decides. A hole reads as zeros, and a segment of zeros is
                        // right as a hole (some file systems make holes of zero blocks): only a
                        // mismatch is damage, and then the hole is named as its likely cause.
                        let actual = buffer.withUnsafeBytes { crc32c(UnsafeRawBufferPointer(rebasing: $0[lower..<upper])) }
                        if actual != state.checksums[current] {
                            let mismatch = "checksum mismatch (stored \(hex8(state.checksums[current])), computed \(hex8(actual)))"
                            if let hole = holes.first(where: { $0.overlaps(bytes) }) {
                                let start = max(hole.lowerBound, bytes.lowerBound), end = min(hole.upperBound, bytes.upperBound)
                                damage(current, "hole under present segment at [\(start), \(end)): \(mismatch)")
                            } else {
                                damage(current, mismatch)
                            }
                        }
                    }
                    report.segmentsChecked += 1
                    report.bytesChecked += bytes.upperBound - bytes.lowerBound
                }
                progress?(report.bytesChecked, total)
                segment = batchEnd
            }
        }
        return report
    }

    /// The holes of the data file, from SEEK_HOLE / SEEK_DATA, up to its size.
    private static func holeRanges(_ data: FileDescriptor, size: Int64) throws -> [Range<Int64>] {
        var holes: [Range<Int64>] = []
        var position: Int64 = 0
        while position < size {
            guard let hole = try data.seekHole(from: position), hole < size else { break }
            let next = try data.seekData(from: hole) ?? size
            holes.append(hole..<next)
            position = next
        }
        return holes
    }
}

/// A 32-bit value as eight hex digits.
func hex8(_ value: UInt32) -> String {
    let digits = String(value, radix: 16)
    return String(repeating: "0", count: 8 - digits.count) + digits
}
