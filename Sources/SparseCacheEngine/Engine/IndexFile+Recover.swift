// Recovery on open: the newest valid superblock and checkpoint, the journal replayed over it,
// and what was lost, for verify and info.
extension IndexFile {
    /// What opening found, for `verify` and `info`.
    struct RecoveryReport: Sendable, Equatable {
        /// For each slot, nil when valid, else why it was rejected.
        var slotProblems: [String?] = [nil, nil]
        /// The slot whose checkpoint was used.
        var usedSlot = 0
        var generation: UInt64 = 0
        /// Journal records replayed on top of the checkpoint.
        var recordsReplayed = 0
        /// Why replay stopped when it was not the clean end of the journal (a torn last record
        /// after a crash is normal and named here, not treated as damage).
        var journalTail: String?
        /// Damage found in the index: a record that validated but cannot be applied, or
        /// journal records damaged in the middle (``journalDamage``).
        var damage: [String] = []
        /// The newest slot could not be used and an older state was taken.
        var fellBack = false
        /// Slots that had one flipped bit, put right in memory (a checkpoint rewrites them).
        var correctedSlots: [Int] = []
        /// The newest checkpoint was damaged and its state rebuilt from the older checkpoint and
        /// both journals: nothing was lost. Names the damage.
        var rebuiltCheckpoint: String?
        /// The newest checkpoint was damaged and could not be rebuilt: the state in use is
        /// older. Names what happened.
        var newestLost: String?
        /// Committed state missing from the state in use: for a damaged newest checkpoint, at
        /// least what its journal added and the further present segments its damaged header
        /// lists; for a journal damaged in the middle, the segments dropped by the settlement
        /// and those holding data that no intact record names.
        var lost: Loss?

        struct Loss: Sendable, Equatable {
            var segments: Int
            var bytes: Int64
        }

        /// Journal records that did not validate while intact records of the same journal with
        /// later sequence numbers follow them: media damage, not a torn tail (the next commit
        /// starts only once a record is synced, so a record followed by a later one was
        /// committed). Replay went on past them; what they named cannot be read.
        var journalDamage: JournalDamage?

        struct JournalDamage: Sendable, Equatable {
            /// Sequence numbers of the records that could not be read.
            var unreadable: [UInt64] = []
            /// Intact records replayed after the first unreadable one.
            var intactAfter = 0
            /// Present segments whose state depended on an unreadable record: named before it
            /// and by no intact record after it (the unreadable record may have dropped them
            /// or given them a new checksum).
            var inDoubt = 0
            /// Whether the data file was read: every present segment of the rebuilt state was
            /// checked against its bytes. Without it the segments in doubt are dropped unchecked.
            var settled = false
            /// Present segments checked against the data file.
            var checked = 0
            /// Segments dropped: their bytes do not match the CRC32C a record gives (or, not
            /// settled, they were in doubt).
            var dropped = 0
            var droppedBytes: Int64 = 0
            /// Segments with data in the data file that no intact record names: most likely
            /// named by an unreadable record (or written and never committed). Not claimable.
            var unnamed = 0
            var unnamedBytes: Int64 = 0
            /// The length is unknown and an unreadable record may have set it.
            var lengthInDoubt = false
            /// No intact record after the damage sets the metadata: an unreadable record may
            /// have set newer metadata than the state in use holds.
            var metadataInDoubt = false

            var description: String {
                let records = unreadable.count == 1 ? "record \(unreadable[0]) does not" : "records \(unreadable.map(String.init).joined(separator: ", ")) do not"
                var text = "journal: \(records) validate while \(intactAfter) intact later record(s) follow (media damage, not a torn write); "
                    + "the state was rebuilt from every intact record"
                if settled {
                    text += "; \(checked) present segment(s) checked against the data, \(dropped) dropped (\(droppedBytes) bytes: their data "
                        + "does not match the checksum a record gives)"
                    text += "; \(unnamed) segment(s) (\(unnamedBytes) bytes) hold data that no intact record names (the unreadable record's, "
                        + "or written and never committed): not claimable"
                } else {
                    text += "; \(dropped) segment(s) (\(droppedBytes) bytes) in doubt dropped unchecked (no data file)"
                }
                if lengthInDoubt { text += "; the length is unknown (an unreadable record may have set it)" }
                if metadataInDoubt { text += "; the metadata may be older than the unreadable record's" }
                return text
            }
        }

        /// Whether the state in use came through damage that a checkpoint (two, for a slot)
        /// should fold away on the next writable open.
        var wantsHealing: Bool { !correctedSlots.isEmpty || rebuiltCheckpoint != nil }
    }

    /// Opens and recovers an existing index: the valid slot with the highest generation, its
    /// checkpoint, then every journal record that validates, in sequence. `evidence` (the data
    /// file) settles the segments a journal damaged in the middle leaves in doubt; without it
    /// they are not claimed.
    static func open(path: String, access: FileDescriptor.Access, evidence: DataEvidence? = nil) throws -> (IndexFile, IndexState, RecoveryReport) {
        let fd = try FileDescriptor.open(path, access: access)
        do {
            let (index, state, report) = try recover(fd, evidence: evidence)
            return (index, state, report)
        } catch {
            fd.close()
            throw error
        }
    }

    private static func recover(_ fd: FileDescriptor, evidence: DataEvidence?) throws -> (IndexFile, IndexState, RecoveryReport) {
        let found = try recoverState(from: fd, evidence: evidence)
        let index = IndexFile(
            fd: fd, superblock: found.superblock, journalEnd: found.journalEnd, nextSequence: found.nextSequence, entryIsDurable: false,
            fallbackStart: found.fallbackStart)
        return (index, found.state, found.report)
    }

    /// Recovery from index bytes held in memory: the same code path as ``open(path:access:)``,
    /// without a file (the index fuzz tests feed it mutated indexes).
    static func recover(bytes: [UInt8], evidence: DataEvidence? = nil) throws -> (IndexState, RecoveryReport) {
        try recover(source: MemoryIndexSource(bytes: bytes), evidence: evidence)
    }

    /// Recovery from any source of index bytes (tests: one whose bytes change between reads,
    /// as a file being appended to by a writer does).
    static func recover(source: some IndexByteSource, evidence: DataEvidence? = nil) throws -> (IndexState, RecoveryReport) {
        let found = try recoverState(from: source, evidence: evidence)
        return (found.state, found.report)
    }

    private struct Recovered {
        var superblock: Superblock
        var journalEnd: Int64
        var nextSequence: UInt64
        var state: IndexState
        var report: RecoveryReport
        /// The other valid copy's checkpoint offset, when it lies past the one in use.
        var fallbackStart: Int64?
    }

    private static func recoverState(from fd: some IndexByteSource, evidence: DataEvidence?) throws -> Recovered {
        let fileSize = try fd.status().size
        if fileSize == 0 { throw IndexFormat.corrupt("index is empty (0 bytes)", path: fd.path) }
        let head = try fd.read(fromAbsoluteOffset: 0, count: Int(IndexFormat.firstRegionOffset))
        var report = RecoveryReport()
        var candidates: [Superblock] = []
        var futureVersion: UInt32?
        for slot in 0..<2 {
            let start = slot * IndexFormat.sectorSize
            let bytes = head[min(start, head.count)..<min(start + IndexFormat.sectorSize, head.count)]
            switch Superblock.decode(bytes) {
            case .success(let block) where block.slot == slot:
                candidates.append(block)
            case .success(let block):
                report.slotProblems[slot] = "generation \(block.generation) stored in the wrong slot"
            case .failure(let rejection):
                // Even a "newer version" may be one flipped bit in the version field: a slot that
                // really is of a newer version has a checksum that matches, and is not corrected.
                if let (block, byte) = Superblock.correctingOneBit(bytes), block.slot == slot {
                    candidates.append(block)
                    report.correctedSlots.append(slot)
                    report.slotProblems[slot] = "\(rejection.description): one flipped bit at byte \(byte), corrected"
                    continue
                }
                if case .futureVersion(let version) = rejection { futureVersion = version }
                report.slotProblems[slot] = rejection.description
            }
        }
        candidates.sort { $0.generation > $1.generation }
        if candidates.count == 2, candidates[0].segmentShift != candidates[1].segmentShift {
            report.damage.append("superblock slots disagree on the segment size")
        }
        var checkpointProblems: [String] = []
        /// The newest slot, valid, whose checkpoint is not: its journal may still apply on top
        /// of the state the older checkpoint and journal give.
        var damagedNewest: (block: Superblock, blob: [UInt8])?
        for (rank, block) in candidates.enumerated() {
            let state: IndexState
            var blob: [UInt8] = []
            do {
                guard block.checkpointOffset + block.checkpointLength <= fileSize else {
                    throw IndexFormat.corrupt("checkpoint at \(block.checkpointOffset) runs past the end of the file (\(fileSize) bytes)")
                }
                blob = try fd.read(fromAbsoluteOffset: block.checkpointOffset, count: Int(block.checkpointLength))
                guard crc32c(blob) == block.checkpointChecksum else {
                    throw IndexFormat.corrupt("checkpoint checksum mismatch")
                }
                state = try Checkpoint.decode(blob, generation: block.generation, segmentShift: block.segmentShift)
            } catch let error as SparseCacheError where error.code == .corruptIndex {
                checkpointProblems.append("slot \(block.slot) (generation \(block.generation)): \(error.detail ?? "invalid")")
                if rank == 0 { damagedNewest = (block, blob) }
                continue
            }
            report.usedSlot = block.slot
            report.generation = block.generation
            report.fellBack = rank > 0
            var recovered = state
            // A journal never grows into the other copy's checkpoint: the search for intact
            // records past a damaged one stops there.
            func scanLimit(_ journal: Superblock) -> Int64 {
                candidates.map(\.checkpointOffset).filter { $0 > journal.journalOffset }.min().map { min($0, fileSize) } ?? fileSize
            }
            var (end, sequence) = try replayJournal(
                fd, block: block, fileSize: fileSize, scanLimit: scanLimit(block), evidence: evidence, state: &recovered, report: &report)
            var inUse = block
            if let newest = damagedNewest {
                let replayedBefore = report.recordsReplayed
                if newest.block.generation == block.generation + 1,
                    Checkpoint.encodes(
                        recovered, generation: newest.block.generation, length: newest.block.checkpointLength,
                        checksum: newest.block.checkpointChecksum)
                {
                    // The newest checkpoint was folded from exactly this state: encoded as that
                    // generation's checkpoint, it has the length and CRC32C its (intact) superblock
                    // names. Its journal applies on top, and nothing is lost. The damaged blob's
                    // own header is no evidence: the damage can be in it (a header agreeing with a
                    // prefix of the older journal took that journal's state, minus a commit, as
                    // the base and invented a state the index never held).
                    (end, sequence) = try replayJournal(
                        fd, block: newest.block, fileSize: fileSize, scanLimit: scanLimit(newest.block), evidence: evidence,
                        state: &recovered, report: &report)
                    report.recordsReplayed += replayedBefore
                    report.usedSlot = newest.block.slot
                    report.generation = newest.block.generation
                    report.fellBack = false
                    report.rebuiltCheckpoint =
                        "the checkpoint of generation \(newest.block.generation) is damaged (\(checkpointProblems[0])); its state was "
                        + "rebuilt from generation \(block.generation) and both journals"
                    inUse = newest.block
                } else {
                    report.damage.append(contentsOf: checkpointProblems)
                    Self.accountLoss(newest: newest, fd: fd, fileSize: fileSize, recovered: recovered, report: &report)
                }
            } else if rank > 0 {
                report.damage.append(contentsOf: checkpointProblems)
            }
            let fallbackStart = candidates.filter { $0.slot != inUse.slot && $0.checkpointOffset > inUse.checkpointOffset }
                .map(\.checkpointOffset).min()
            return Recovered(
                superblock: inUse, journalEnd: end, nextSequence: sequence, state: recovered, report: report, fallbackStart: fallbackStart)
        }
        if candidates.isEmpty, let futureVersion {
            throw SparseCacheError(
                .unsupportedVersion, operation: "open index", path: fd.path,
                detail: "format version \(futureVersion) is newer than this build reads (\(IndexFormat.version))")
        }
        let problems = report.slotProblems.enumerated().compactMap { slot, problem in
            problem.map { "slot \(slot): \($0)" }
        } + checkpointProblems
        throw IndexFormat.corrupt("no usable superblock (" + problems.joined(separator: "; ") + ")", path: fd.path)
    }

    /// What the newest state held beyond the one in use, as a lower bound: the segments its
    /// journal adds on top of the state in use (replayed on a copy, never kept), plus how many
    /// more present segments the damaged checkpoint's header lists (only when that count is
    /// consistent with the blob).
    private static func accountLoss(
        newest: (block: Superblock, blob: [UInt8]), fd: some IndexByteSource, fileSize: Int64, recovered: IndexState,
        report: inout RecoveryReport
    ) {
        var claimed = recovered
        var scratch = RecoveryReport()
        _ = try? replayJournal(fd, block: newest.block, fileSize: fileSize, scanLimit: fileSize, evidence: nil, state: &claimed, report: &scratch)
        let added = claimed.present.setRuns.reduce(0) { count, run in count + run.filter { !recovered.present[$0] }.count }
        let listed = Checkpoint.listedPresentCount(newest.blob, generation: newest.block.generation) ?? 0
        let segments = added + max(0, listed - recovered.present.setCount)
        report.newestLost =
            "the checkpoint of generation \(newest.block.generation) is damaged and the older copy is not the state it was "
            + "folded from: the state in use is generation \(report.generation)"
        if segments > 0 {
            report.lost = RecoveryReport.Loss(segments: segments, bytes: Int64(segments) << Int64(newest.block.segmentShift))
        }
    }

    /// How much of the journal replay reads first, and the most it reads at once: each read
    /// doubles the one before, so a short journal (or none, after a checkpoint) costs one small
    /// read rather than a copy of whatever dead space follows it, and a long one a few reads.
    private static let replayWindows = (first: 16 << 10, largest: 1 << 20)

    /// Applies every record that validates, in sequence, and returns where the next one goes.
    ///
    /// Where a record does not validate, the rest of the journal (up to `scanLimit`) is searched
    /// at every 4 KiB boundary for an intact record of this journal with a later sequence number.
    /// None: the record is the torn tail of a crash (or the clean end) and replay ends there. One:
    /// the records between were committed and damaged since (media damage); replay goes on from
    /// it, and the segments the rebuilt state claims are settled against `evidence`
    /// (``settle(_:state:namedSince:evidence:)``).
    static func replayJournal(
        _ fd: some IndexByteSource, block: Superblock, fileSize: Int64, scanLimit: Int64, evidence: DataEvidence?,
        state: inout IndexState, report: inout RecoveryReport
    ) throws -> (end: Int64, sequence: UInt64) {
        var sequence: UInt64 = 0
        report.recordsReplayed = 0
        guard fileSize > block.journalOffset else { return (block.journalOffset, 0) }
        // Read a window at a time, not to the end of the file: past the journal may lie the other
        // copy's checkpoint and journal (kept whole after a checkpoint went to the front).
        var journal: [UInt8] = []
        var window = Self.replayWindows.first
        func have(_ count: Int) throws -> Bool {
            while journal.count < count {
                let readEnd = block.journalOffset + Int64(journal.count)
                guard readEnd < fileSize else { break }
                let chunk = Int(min(fileSize - readEnd, Int64(max(count - journal.count, window))))
                let bytes = try fd.read(fromAbsoluteOffset: readEnd, count: chunk)
                journal += bytes
                window = min(window * 2, Self.replayWindows.largest)
                // A file cut shorter than its size said: the journal ends here.
                if bytes.count < chunk { break }
            }
            return journal.count >= count
        }
        let sector = IndexFormat.sectorSize
        let limit = Int(scanLimit - block.journalOffset)
        /// The first intact record of this journal past `cursor` with a sequence number after
        /// `expected`: its offset in the journal and its sequence. Its checksum (salted with
        /// this journal's salt and generation) proves it was written into this journal; its
        /// sequence must fit the sectors between (each record takes at least one).
        func laterRecord(after cursor: Int, expected: UInt64) throws -> (at: Int, sequence: UInt64)? {
            var at = cursor + sector
            while at + IndexFormat.recordHeaderSize <= limit, try have(at + IndexFormat.recordHeaderSize) {
                defer { at += sector }
                guard let padded = JournalRecord.paddedLength(ofHeader: journal[at...]), at + padded <= limit, try have(at + padded) else {
                    continue
                }
                var reader = ByteReader(journal[(at + 4)..<(at + 16)]) { IndexFormat.corrupt($0) }
                guard let stored = try? reader.read(UInt32.self, "checksum"), let found = try? reader.read(UInt64.self, "sequence"),
                    found > expected, found - expected <= UInt64((at - cursor) / sector),
                    JournalRecord.checksum(journal[at..<(at + padded)], salt: block.journalSalt, generation: block.generation) == stored
                else { continue }
                return (at, found)
            }
            return nil
        }
        var damage: RecoveryReport.JournalDamage?
        // Segments an intact record named since the last unreadable one.
        var namedSince = SegmentBitmap()
        var cursor = 0
        var replayed = 0
        replay: while true {
            // Why the record at `cursor` ends replay, when it does not validate.
            var tail: String?
            if try have(cursor + IndexFormat.recordHeaderSize) {
                if let padded = JournalRecord.paddedLength(ofHeader: journal[cursor...]) {
                    if try have(cursor + padded) {
                        let change: IndexChange?
                        do {
                            change = try JournalRecord.decode(
                                journal[cursor..<(cursor + padded)], expectedSequence: sequence, salt: block.journalSalt,
                                generation: block.generation, segmentShift: block.segmentShift, segmentLimit: state.present.count)
                        } catch let error as SparseCacheError {
                            report.damage.append(error.detail ?? "journal record \(sequence) is malformed")
                            break replay
                        }
                        if let change {
                            if let problem = state.problem(applying: change) {
                                report.damage.append("journal record \(sequence): \(problem)")
                                break replay
                            }
                            if damage != nil {
                                for segment in change.dropped { namedSince.insert(segment) }
                                for (segment, _) in change.added { namedSince.insert(segment) }
                                if change.length != nil { damage?.lengthInDoubt = false }
                                if change.metadata != nil { damage?.metadataInDoubt = false }
                                damage?.intactAfter += 1
                            }
                            state.apply(change)
                            cursor += padded
                            sequence += 1
                            replayed += 1
                            continue replay
                        }
                        if journal[cursor...].starts(with: IndexFormat.recordMagic) {
                            tail = "record \(sequence) does not validate (torn write or stale record)"
                        }
                    } else {
                        tail = "record \(sequence) is cut short by the end of the file (torn write)"
                    }
                } else if journal[cursor..<(cursor + IndexFormat.recordHeaderSize)].contains(where: { $0 != 0 }),
                    journal[cursor...].starts(with: IndexFormat.recordMagic)
                {
                    tail = "record \(sequence) has an invalid header (torn write)"
                }
            }
            // Not the end when an intact later record of this journal follows: the records
            // before it were committed and are damaged.
            guard let (at, found) = try laterRecord(after: cursor, expected: sequence) else {
                report.journalTail = tail
                break replay
            }
            // A reader racing a writer (verify and read-only opens take no lock) may have read
            // this record while it was being written and the next one after it was synced: the
            // writer appends a record only once the one before is synced, so the record is whole
            // by now. Read it again; only bytes that stay the same are damage.
            let fresh = try fd.read(fromAbsoluteOffset: block.journalOffset + Int64(cursor), count: at - cursor)
            if fresh.count == at - cursor, !fresh.elementsEqual(journal[cursor..<at]) {
                journal.replaceSubrange(cursor..<at, with: fresh)
                continue replay
            }
            var current = damage ?? RecoveryReport.JournalDamage()
            current.unreadable += Array(sequence..<found)
            current.lengthInDoubt = state.length == nil
            current.metadataInDoubt = true
            damage = current
            namedSince = SegmentBitmap()
            cursor = at
            sequence = found
        }
        report.recordsReplayed = replayed
        if var damage {
            try settle(&damage, state: &state, namedSince: namedSince, evidence: evidence)
            report.damage.append(damage.description)
            let segments = damage.dropped + damage.unnamed
            if segments > 0 {
                let lost = report.lost ?? RecoveryReport.Loss(segments: 0, bytes: 0)
                report.lost = RecoveryReport.Loss(
                    segments: lost.segments + segments, bytes: lost.bytes + damage.droppedBytes + damage.unnamedBytes)
            }
            report.journalDamage = damage
        }
        return (block.journalOffset + Int64(cursor), sequence)
    }

    /// Settles a state rebuilt past unreadable journal records. With the data file, every
    /// present segment is checked against its bytes and kept only when they match the CRC32C a
    /// record gives (the unreadable record may have dropped a segment, or rewritten it with a
    /// checksum nobody can read now; and a record of this journal that validates is evidence of
    /// what was committed, not of what the data file holds now); segments with data that no
    /// intact record names are counted, never claimed. Without it, the segments in doubt (named
    /// by no intact record after the damage) are dropped.
    private static func settle(
        _ damage: inout RecoveryReport.JournalDamage, state: inout IndexState, namedSince: SegmentBitmap, evidence: DataEvidence?
    ) throws {
        let shift = Int64(state.segmentShift)
        let length = state.length
        func bytes(_ segment: Int) -> Range<Int64> {
            let start = Int64(segment) << shift
            return start..<min(start + (Int64(1) << shift), length ?? .max)
        }
        var dropped: [Int] = []
        for run in state.present.setRuns {
            for segment in run {
                let inDoubt = !namedSince[segment]
                if inDoubt { damage.inDoubt += 1 }
                if let evidence {
                    damage.checked += 1
                    if try evidence.checksum(bytes(segment)) != state.checksums[segment] { dropped.append(segment) }
                } else if inDoubt {
                    dropped.append(segment)
                }
            }
        }
        damage.settled = evidence != nil
        damage.dropped = dropped.count
        damage.droppedBytes = dropped.reduce(0) { $0 + Int64(bytes($1).count) }
        if !dropped.isEmpty { state.apply(IndexChange(dropped: dropped)) }
        guard let evidence else { return }
        let droppedSet = Set(dropped)
        let segmentCount = length.map { IndexState.segmentCount(length: $0, shift: state.segmentShift) } ?? Int.max
        var counted = -1
        for extent in try evidence.dataExtents() where !extent.isEmpty {
            let first = max(Int(extent.lowerBound >> shift), counted + 1)
            let end = min(Int((extent.upperBound + (Int64(1) << shift) - 1) >> shift), segmentCount)
            guard first < end else { continue }
            for segment in first..<end where !state.present[segment] && !droppedSet.contains(segment) {
                damage.unnamed += 1
                damage.unnamedBytes += Int64(bytes(segment).count)
            }
            counted = end - 1
        }
    }
}


/// Where recovery reads an index from: its file, or bytes in memory.
protocol IndexByteSource {
    var path: String { get }
    func status() throws -> FileDescriptor.Status
    func read(fromAbsoluteOffset offset: Int64, count: Int) throws -> [UInt8]
}

extension FileDescriptor: IndexByteSource {}

/// An index held in memory, read the way recovery reads a file (short at the end).
struct MemoryIndexSource: IndexByteSource {
    var bytes: [UInt8]
    var path: String { "<memory>" }

    func status() throws -> FileDescriptor.Status {
        FileDescriptor.Status(size: Int64(bytes.count), allocatedBytes: Int64(bytes.count), isRegular: true, isDirectory: false)
    }

    func read(fromAbsoluteOffset offset: Int64, count: Int) throws -> [UInt8] {
        guard offset < bytes.count else { return [] }
        let start = Int(offset)
        return Array(bytes[start..<min(bytes.count, start + count)])
    }
}
