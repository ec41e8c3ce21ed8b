/// The commit protocol over one index file: recovery on open, a journal record per commit,
/// and checkpoints that fold the journal into a fresh full state.
///
/// Not thread-safe by itself: the owning ``SparseFile`` runs at most one commit at a time and
/// calls these blocking methods only from its two ``BlockingExecutor``s, never from both at
/// once: its commit line's (appends, checkpoints, the directory sync) while open, its I/O
/// queue's (create, open, ``publish()`` and the release at close) before the first commit and
/// after the last.
final class IndexFile: @unchecked Sendable {
    private(set) var fd: FileDescriptor
    /// The index's name: a new one keeps its temporary name until ``publish()``.
    var path: String { pendingName ?? fd.path }
    /// The name a new index takes once synced (``publish()``); nil once it has it.
    private var pendingName: String?
    /// Whether the index has its own name (``publish()`` has nothing to do).
    var isNamed: Bool { pendingName == nil }
    private(set) var superblock: Superblock
    /// Where the next journal record goes.
    private(set) var journalEnd: Int64
    private(set) var nextSequence: UInt64
    /// Whether this file's directory entry (and its data file's, beside it) is known to be
    /// durable. True after ``create(path:state:)``; false for an existing index opened for
    /// writing, which may be one whose creation failed at the directory fsync: a commit made
    /// durable in a file whose name can vanish in a power cut is lost with it.
    private var entryIsDurable: Bool
    /// Where the other copy's checkpoint starts when it lies past the live one (after a
    /// checkpoint went to the front): the live journal must never grow into it, or that copy
    /// would be gone while it is still the fallback.
    private(set) var fallbackStart: Int64?
    /// Where the blocks this session reserved for the journal end (0: none known). Past the
    /// end of the file, so neither the size nor any byte changes (fallocate KEEP_SIZE).
    private var reservedEnd: Int64 = 0

    /// Journal room kept reserved ahead of the next record, so that on a full disk a commit
    /// whose data already reached the data file still has blocks for its record: a commit of
    /// a few segments writes one 4 KiB record, so at least four commits fit in the half that
    /// is always left. Released at close (``releaseReservation()``).
    static let journalReserve: Int64 = 32 << 10

    /// Journal bytes since the last checkpoint.
    var journalBytes: Int64 { journalEnd - superblock.journalOffset }

    /// A checkpoint folds the journal once it outgrows both 1 MiB and the checkpoint itself,
    /// which keeps the cost of commits proportional to what they change.
    var wantsCheckpoint: Bool { journalBytes >= max(1 << 20, superblock.checkpointLength) }

    /// A resource closing folds its journal when replaying it would cost the next open more
    /// than the close's two syncs cost: at least 128 KiB of records (32 commits or more, each
    /// record a 4 KiB sector; a 64 MiB fill left 64) and more than the checkpoint itself.
    var wantsCheckpointOnClose: Bool { journalBytes >= max(128 << 10, superblock.checkpointLength) }

    /// The live checkpoint is the first region of the file (nothing but dead space can follow
    /// the journal, and the next checkpoint will be written after it).
    var checkpointIsAtFront: Bool { superblock.checkpointOffset == IndexFormat.firstRegionOffset }

    private init(
        fd: FileDescriptor, superblock: Superblock, journalEnd: Int64, nextSequence: UInt64, entryIsDurable: Bool,
        fallbackStart: Int64? = nil, pendingName: String? = nil
    ) {
        self.fd = fd
        self.pendingName = pendingName
        self.superblock = superblock
        self.journalEnd = journalEnd
        self.nextSequence = nextSequence
        self.entryIsDurable = entryIsDurable
        self.fallbackStart = fallbackStart
    }

    func close() { fd.close() }

    // MARK: Create

    /// Creates an index for `state` under a temporary name (``temporaryPath(for:)``), synced and
    /// renamed to `path` (``publish()``): under its name an index is whole or absent. With
    /// `namedNow` false that waits for the first commit through it, or its close: a new
    /// resource's first bytes then wait for no sync, and until then other processes find no
    /// resource at `path`. The directory is synced before the first commit
    /// (``makeEntryDurable()``). Until then nothing is claimed: a power cut loses only an
    /// empty resource (its data file, without an index, is an orphan the store removes).
    static func create(path: String, state: IndexState, namedNow: Bool = true) throws -> IndexFile {
        let temporary = temporaryPath(for: path)
        if try FileSystem.exists(temporary) { try FileSystem.unlink(temporary) }
        let fd = try FileDescriptor.open(temporary, access: .readWrite, create: true, exclusive: true)
        do {
            // Two checkpoints, generations 0 and 1, so both slots are valid from the start.
            var offset = IndexFormat.firstRegionOffset
            var last: Superblock?
            for generation: UInt64 in [0, 1] {
                let blob = Checkpoint.encode(state, generation: generation)
                let block = Superblock(
                    segmentShift: state.segmentShift, generation: generation, checkpointOffset: offset,
                    checkpointLength: Int64(blob.count), checkpointChecksum: crc32c(blob),
                    journalSalt: UInt32.random(in: .min ... .max), journalOffset: offset + Int64(blob.count))
                try fd.write(toAbsoluteOffset: offset, blob)
                try fd.write(toAbsoluteOffset: IndexFormat.superblockOffsets[block.slot], block.encoded())
                offset += Int64(blob.count)
                last = block
            }
            let index = IndexFile(fd: fd, superblock: last!, journalEnd: offset, nextSequence: 0, entryIsDurable: false, pendingName: path)
            if namedNow { try index.publish() }
            return index
        } catch {
            fd.close()
            try? FileSystem.unlink(temporary)
            throw error
        }
    }

    /// Where a new index at `path` is written before it takes its name.
    static func temporaryPath(for path: String) -> String { path + ".tmp" }

    /// A new index takes its name: synced first, then renamed, so an index is whole under its
    /// name or absent. Before the first commit through it, and when it closes.
    func publish() throws {
        guard let name = pendingName else { return }
        try fd.dataSync()
        try FileSystem.rename(fd.path, to: name)
        fd = FileDescriptor(rawValue: fd.rawValue, path: name)
        pendingName = nil
    }

    // MARK: Recover

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

    // MARK: Commit

    /// Appends one record for `change` and syncs it: when this returns, the change survives
    /// any crash. The caller must have synced the data the change names. `committed` is the
    /// state before the change: when the record would run into the other copy's checkpoint,
    /// it is folded into a new checkpoint first, and the record starts the new journal.
    func append(_ change: IndexChange, committed: IndexState) throws {
        try makeEntryDurable()
        var record = JournalRecord.encode(
            change, sequence: nextSequence, salt: superblock.journalSalt, generation: superblock.generation)
        if let fallbackStart, journalEnd + Int64(record.count) > fallbackStart {
            try checkpoint(committed)
            record = JournalRecord.encode(change, sequence: nextSequence, salt: superblock.journalSalt, generation: superblock.generation)
        }
        reserveJournalRoom(past: journalEnd + Int64(record.count))
        try fd.write(toAbsoluteOffset: journalEnd, record)
        try fd.dataSync()
        journalEnd += Int64(record.count)
        nextSequence += 1
    }

    /// Tops up the reserved journal room when less than half of ``journalReserve`` would be
    /// left past `end` (one fallocate every few commits). A failure is not the commit's: on a
    /// full disk the room reserved earlier, while there was space, is what the journal writes
    /// into, and a record that needs more fails on its own write with the error that names
    /// the full disk. A file system without fallocate (EOPNOTSUPP) behaves as before.
    private func reserveJournalRoom(past end: Int64) {
        guard reservedEnd < end + Self.journalReserve / 2 else { return }
        let reserveEnd = end + Self.journalReserve
        if (try? fd.reserve(offset: journalEnd, length: reserveEnd - journalEnd)) != nil {
            reservedEnd = reserveEnd
        }
    }

    /// Gives back the journal room reserved past the end of the file (a truncate to the file's
    /// own size frees the blocks beyond it on ext4, XFS and tmpfs), so a closed resource takes
    /// only the space its index uses. Called when a writable resource closes. Best effort: a
    /// failure leaves at most ``journalReserve`` bytes allocated, and the next writable open
    /// that commits reuses them.
    func releaseReservation() {
        guard reservedEnd > 0 else { return }
        reservedEnd = 0
        if let size = try? fd.status().size { try? fd.truncate(to: size) }
    }

    /// Before the first commit through an index (created or opened): a new one takes its name
    /// (``publish()``), then fsync of its directory, so no commit is acknowledged in a file whose
    /// name (or whose data file's name, in the same directory) a power cut can take away
    /// (DURABILITY.md, rule 6). Once per open; a failure is a sync failure like any other.
    func makeEntryDurable() throws {
        guard !entryIsDurable else { return }
        try publish()
        try FileSystem.syncParentDirectory(of: path)
        entryIsDurable = true
    }

    /// Writes `state` as a new checkpoint in space the live one does not use, syncs it, then
    /// flips to it by writing the other superblock slot and syncing again. A torn write at any
    /// point leaves the previous superblock, checkpoint and journal in charge.
    ///
    /// It goes to the front of the region when it fits there with room for the journal that
    /// follows it (the journal size at which the next checkpoint is due), so that journal does
    /// not run into the other copy; otherwise right after the live journal. `compacting` takes
    /// the front whenever the checkpoint alone fits: the caller checkpoints again at once.
    func checkpoint(_ state: IndexState, compacting: Bool = false) throws {
        try makeEntryDurable()
        // The live region now becomes the other copy's: kept whole (checkpoint and journal) until
        // the next checkpoint, so a damaged new checkpoint can be rebuilt from it.
        let folded = (start: superblock.checkpointOffset, end: journalEnd)
        let generation = superblock.generation + 1
        let blob = Checkpoint.encode(state, generation: generation)
        let size = Int64(blob.count)
        let front = IndexFormat.firstRegionOffset
        let journalRoom = compacting ? 0 : max(1 << 20, size)
        let atFront = front + size + journalRoom <= superblock.checkpointOffset
        let offset = atFront ? front : journalEnd
        try fd.write(toAbsoluteOffset: offset, blob)
        try fd.dataSync()
        let block = Superblock(
            segmentShift: superblock.segmentShift, generation: generation, checkpointOffset: offset,
            checkpointLength: size, checkpointChecksum: crc32c(blob),
            journalSalt: UInt32.random(in: .min ... .max), journalOffset: offset + size)
        try fd.write(toAbsoluteOffset: IndexFormat.superblockOffsets[block.slot], block.encoded())
        try fd.dataSync()
        superblock = block
        journalEnd = block.journalOffset
        nextSequence = 0
        fallbackStart = atFront ? folded.start : nil
        // Past both the new journal start and the folded region everything is dead; dropping it
        // keeps the file small. Not synced: leftover bytes there can never validate as records
        // of this generation. (Truncating at the new journal start, as before, cut away the
        // other copy's checkpoint: one damaged checkpoint then lost every committed segment.)
        let keep = max(journalEnd, folded.end)
        if let size = try? fd.status().size, size > keep { try? fd.truncate(to: keep) }
        // The truncate may have freed the reserved journal room: the next append reserves again
        // (a no-op where blocks are still there).
        if reservedEnd > 0 { reservedEnd = journalEnd }
    }
}

extension IndexState {
    /// Why `change` cannot apply to this state, or nil when it can.
    func problem(applying change: IndexChange) -> String? {
        var length = self.length
        // `dropped` is sorted: a binary search tells whether the change drops a segment.
        func drops(_ segment: Int) -> Bool {
            let index = change.dropped.partitioningIndex { $0 >= segment }
            return index < change.dropped.count && change.dropped[index] == segment
        }
        if let newLength = change.length {
            if let length, length != newLength { return "sets length \(newLength) but it is already \(length)" }
            let largest = Self.maximumLength(shift: segmentShift)
            guard newLength >= 0, newLength <= largest else { return "length \(newLength) is outside 0...\(largest)" }
            // A segment made present while the length was unknown was stored at full size: a
            // length ending inside it would leave some of its bytes, and its CRC, outside.
            if self.length == nil, newLength % Int64(segmentSize) != 0 {
                let last = Int(newLength >> Int64(segmentShift))
                if present[last], !drops(last) {
                    return "length \(newLength) ends inside present segment \(last), which was stored at full size"
                }
            }
            length = newLength
        }
        if let length {
            let count = Self.segmentCount(length: length, shift: segmentShift)
            if let last = change.added.last?.segment, last >= count {
                return "adds segment \(last) past the end (\(count) segments)"
            }
            // Present segments past the end are allowed only when this change drops them.
            var position = count
            while let beyond = present.firstSet(in: position..<Swift.max(count, present.count)) {
                if !drops(beyond) { return "length \(length) leaves present segment \(beyond) outside the resource" }
                position = beyond + 1
            }
        }
        return nil
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
