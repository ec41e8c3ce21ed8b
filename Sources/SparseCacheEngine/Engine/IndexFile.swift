import SparseCacheBase

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

    init(
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
