extension IndexFile {
    /// What can still be read of an index whose two superblock copies are both unusable.
    ///
    /// The superblocks hold what validates the rest: the live checkpoint's place, length and
    /// CRC32C, and the journal's salt. Without them the region is scanned at every 4 KiB
    /// boundary for checkpoints; the newest one that decodes is the base. Its bytes cannot be
    /// proven by their CRC32C unless a damaged slot still names it (that slot's fields are used
    /// as hints only, never trusted). The journal after it is replayed only with a salt a
    /// damaged slot of the same generation still holds: its records then validate by their own
    /// CRC32C. Every segment the result would claim is settled against the data file and kept
    /// only when the bytes match its CRC32C, so nothing is claimed that is not on disk.
    struct Salvage: Sendable {
        var state: IndexState
        var generation: UInt64
        var checkpointOffset: Int64
        /// Present segments the checkpoint lists.
        var checkpointSegments: Int
        /// Whether a damaged slot names this checkpoint's offset and CRC32C.
        var checkpointProven: Bool
        /// Journal records replayed on top of the checkpoint.
        var journalRecords: Int
        /// Why the journal gave what it gave.
        var journalNote: String
        /// Segments dropped because the data file's bytes did not match their CRC32C.
        var mismatched: Int

        /// One sentence: what the index still holds and how it was checked.
        var summary: String {
            "the checkpoint of generation \(generation) at offset \(checkpointOffset) (\(checkpointSegments) present segment(s)"
                + (checkpointProven ? ", its CRC32C as a damaged slot still names it" : ", unproven: no slot names its CRC32C")
                + ") and \(journalRecords) journal record(s) (\(journalNote)); checked against the data file, "
                + "\(state.present.setCount) segment(s) (\(state.presentBytes) bytes) match their CRC32C"
                + (mismatched > 0 ? " and \(mismatched) do not (dropped)" : "")
        }
    }

    /// The salvage of the index at `path` when neither superblock copy is usable; nil when one
    /// is (recovery proper applies then). Throws `.corruptIndex` naming what cannot be
    /// recovered when no checkpoint decodes.
    static func salvage(path: String, evidence: DataEvidence) throws -> Salvage? {
        let fd = try FileDescriptor.open(path, access: .readOnly)
        defer { fd.close() }
        let fileSize = try fd.status().size
        let head = try fd.read(fromAbsoluteOffset: 0, count: Int(IndexFormat.firstRegionOffset))
        var hints: [Superblock] = []
        for slot in 0..<2 {
            let start = slot * IndexFormat.sectorSize
            guard head.count >= start + IndexFormat.sectorSize else { continue }
            let bytes = head[start..<(start + IndexFormat.sectorSize)]
            if case .success = Superblock.decode(bytes) { return nil }
            if Superblock.correctingOneBit(bytes) != nil { return nil }
            if let hint = rawFields(bytes) { hints.append(hint) }
        }
        let hintShifts = hints.map(\.segmentShift).filter { IndexFormat.segmentShifts.contains($0) }
        let shifts = hintShifts + IndexFormat.segmentShifts.filter { !hintShifts.contains($0) }

        // Every checkpoint that decodes, newest last.
        var found: [(offset: Int64, generation: UInt64, state: IndexState, blob: [UInt8])] = []
        var offset = IndexFormat.firstRegionOffset
        while offset + Int64(Checkpoint.Header.size) <= fileSize {
            defer { offset += Int64(IndexFormat.sectorSize) }
            let first = try fd.read(fromAbsoluteOffset: offset, count: Checkpoint.Header.size)
            guard let header = Checkpoint.Header(first) else { continue }
            let needed =
                UInt64(Checkpoint.Header.size) + UInt64(header.metadataCount) + 16 * UInt64(header.runCount)
                + 4 * header.presentCount
            guard needed <= UInt64(fileSize - offset) else { continue }
            let blob = try fd.read(fromAbsoluteOffset: offset, count: Int(IndexFormat.alignUp(Int64(needed))))
            // The segment size is in the superblocks only: a damaged slot's, else the one under
            // which the most of the first listed segments match the data.
            var best: (state: IndexState, matches: Int)?
            for shift in shifts {
                guard let state = try? Checkpoint.decode(blob, generation: header.generation, segmentShift: shift) else { continue }
                let matches = try sample(state, evidence: evidence)
                if best == nil || matches > best!.matches { best = (state, matches) }
                if hintShifts.contains(shift) { break }
            }
            if let best { found.append((offset, header.generation, best.state, blob)) }
        }
        guard let base = found.max(by: { ($0.generation, $0.offset) < ($1.generation, $1.offset) }) else {
            throw IndexFormat.corrupt(
                "no usable superblock, and no checkpoint in the index decodes: nothing of the index can be recovered, and "
                    + "the data file's bytes cannot be claimed without their checksums (fetch or write the resource again)",
                path: path)
        }
        let checksum = crc32c(base.blob)
        let proven = hints.contains { $0.checkpointOffset == base.offset && $0.checkpointChecksum == checksum }
        var state = base.state
        var records = 0
        var note = "no damaged slot of generation \(base.generation) still holds the journal's salt, without which no record validates"
        for hint in hints where hint.generation == base.generation {
            let block = Superblock(
                segmentShift: state.segmentShift, generation: base.generation, checkpointOffset: base.offset,
                checkpointLength: Int64(base.blob.count), checkpointChecksum: checksum, journalSalt: hint.journalSalt,
                journalOffset: base.offset + Int64(base.blob.count))
            var candidate = base.state
            var report = RecoveryReport()
            let next = found.map(\.offset).filter { $0 > block.journalOffset }.min() ?? fileSize
            guard
                (try? replayJournal(
                    fd, block: block, fileSize: fileSize, scanLimit: next, evidence: evidence, state: &candidate, report: &report)) != nil
            else { continue }
            if report.recordsReplayed > 0 || records == 0 {
                state = candidate
                records = report.recordsReplayed
                note =
                    "validated with the salt slot \(block.slot) still holds"
                    + (report.journalTail.map { "; replay ended at \($0)" } ?? "")
            }
        }
        var mismatched = 0
        for segment in state.present.setRuns.flatMap({ $0 }) where try !matches(segment, in: state, evidence: evidence) {
            _ = state.present.remove(segment)
            mismatched += 1
        }
        return Salvage(
            state: state, generation: base.generation, checkpointOffset: base.offset, checkpointSegments: base.state.present.setCount,
            checkpointProven: proven, journalRecords: records, journalNote: note, mismatched: mismatched)
    }

    /// Replaces the index at `path` with a fresh one holding `salvage`'s state (written under a
    /// temporary name, synced and renamed over it, the directory synced), after copying the
    /// damaged one to `path.damaged` for a closer look.
    static func rebuild(path: String, from salvage: Salvage) throws {
        let damaged = try FileDescriptor.open(path, access: .readOnly)
        let bytes: [UInt8]
        do {
            bytes = try damaged.read(fromAbsoluteOffset: 0, count: Int(try damaged.status().size))
            damaged.close()
        } catch {
            damaged.close()
            throw error
        }
        let copyPath = path + ".damaged"
        if try FileSystem.exists(copyPath) { try FileSystem.unlink(copyPath) }
        let copy = try FileDescriptor.open(copyPath, access: .readWrite, create: true, exclusive: true)
        do {
            try copy.write(toAbsoluteOffset: 0, bytes)
            try copy.dataSync()
            copy.close()
        } catch {
            copy.close()
            throw error
        }
        let index = try create(path: path, state: salvage.state, namedNow: true)
        defer { index.close() }
        try index.makeEntryDurable()
    }

    /// A slot's fields as stored, whatever its magic and checksum say: hints for a salvage.
    private static func rawFields(_ bytes: ArraySlice<UInt8>) -> Superblock? {
        var reader = ByteReader(bytes.dropFirst(12)) { IndexFormat.corrupt($0) }
        guard let shift = try? reader.read(UInt32.self, "shift"), let generation = try? reader.read(UInt64.self, "generation"),
            let checkpointOffset = try? reader.read(UInt64.self, "checkpoint offset"),
            let checkpointLength = try? reader.read(UInt64.self, "checkpoint length"),
            let checkpointChecksum = try? reader.read(UInt32.self, "checkpoint checksum"),
            let salt = try? reader.read(UInt32.self, "salt"), let journalOffset = try? reader.read(UInt64.self, "journal offset")
        else { return nil }
        return Superblock(
            segmentShift: Int(shift), generation: generation, checkpointOffset: Int64(truncatingIfNeeded: checkpointOffset),
            checkpointLength: Int64(truncatingIfNeeded: checkpointLength), checkpointChecksum: checkpointChecksum,
            journalSalt: salt, journalOffset: Int64(truncatingIfNeeded: journalOffset))
    }

    /// How many of the first (at most 8) present segments match the data file.
    private static func sample(_ state: IndexState, evidence: DataEvidence) throws -> Int {
        var checked = 0, matching = 0
        for run in state.present.setRuns {
            for segment in run {
                if checked == 8 { return matching }
                checked += 1
                if try matches(segment, in: state, evidence: evidence) { matching += 1 }
            }
        }
        return matching
    }

    private static func matches(_ segment: Int, in state: IndexState, evidence: DataEvidence) throws -> Bool {
        let start = Int64(segment) << Int64(state.segmentShift)
        let end = min(start + (Int64(1) << Int64(state.segmentShift)), state.length ?? .max)
        return try evidence.checksum(start..<end) == state.checksums[segment]
    }
}
