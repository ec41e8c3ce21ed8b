#if canImport(Glibc)
import Glibc
#endif

import SparseCacheBase
import Synchronization

/// One cached resource: a sparse data file plus its segment index, owned by an actor.
///
/// Bytes arrive by ``write(_:at:)`` at any offset and size. A segment becomes *present* when all
/// its bytes are written, the data file is fdatasync'ed and the index records the segment with
/// its CRC32C (``commit()``). Only present segments are ever read back, and every read is
/// checked against the stored CRC32C.
///
/// Durability: when `commit()` returns, every segment completed by a `write` that returned
/// before `commit()` was called survives any crash. After a failed fsync the resource refuses
/// further work (`.needsReopen`); reopening recovers the last committed state.
///
/// Blocking syscalls run on a per-resource dispatch queue and reads go through a DispatchIO
/// channel, so no call ever blocks the cooperative thread pool.
public actor SparseFile {
    /// The data file's path. The index is at ``indexPath``.
    public nonisolated let path: String
    public nonisolated let indexPath: String
    public nonisolated let mode: AccessMode
    /// The segment size in bytes (a power of two).
    public nonisolated let segmentSize: Int
    package nonisolated let segmentShift: Int
    nonisolated let options: SparseFileOptions

    nonisolated let dataFile: FileDescriptor
    nonisolated let index: IndexFile
    nonisolated let reader: DispatchReadChannel
    /// Writes, hole punching, open and close run here.
    nonisolated let io: BlockingExecutor
    /// The commit line runs here (data fdatasync, index records, checkpoints), beside ``io``:
    /// a write never waits behind its resource's sync. A commit names only segments whose
    /// `pwrite` returned before it began, and fdatasync covers every returned write, whichever
    /// thread made it.
    nonisolated let commitIO: BlockingExecutor
    /// What the index said when the resource was opened.
    package nonisolated let recovery: RecoverySummary

    /// The committed state: only these segments are ever served.
    var committed: IndexState
    /// Length, metadata and drops waiting for the next commit.
    var pendingChange = IndexChange()
    /// The change a commit in flight carries (taken out of ``pendingChange``, not yet in
    /// ``committed``): its length and metadata are the resource's meanwhile. Without it a
    /// length set before that commit was invisible until it landed, and the last (short)
    /// segment, written or completed meanwhile, was taken for a full one and held as an
    /// incomplete segment for ever.
    var committingChange: IndexChange?
    /// Segments written to the data file but not yet synced and committed, with their CRC32C.
    var unsynced: [Int: UInt32] = [:]
    /// Segments taken by a running commit.
    var committing: [Int: UInt32] = [:]
    /// Segments with a pwrite (or hole punch) in flight.
    var busy: Set<Int> = []
    /// Incomplete segments held in memory.
    var partials = PartialSegments()
    var partialClock: UInt64 = 0
    var droppedSinceLastReport: [Range<Int64>] = []

    /// Every change bumps this; a commit covers changes up to the value it started with.
    var changeCounter: UInt64 = 0
    var committedCounter: UInt64 = 0
    var uncommittedBytes: Int64 = 0
    var commitTask: Task<Void, Error>?
    /// The directory entries of the index and data file are known durable (a commit or a sync of
    /// the directory succeeded through this open): a commit with nothing pending may return
    /// without syncing the directory of a resource this open created.
    var entryDurable = false
    var autoCommitTask: Task<Void, Never>?

    /// Bytes served from the page cache on the caller's task, and through the DispatchIO
    /// channel (for tests and benchmarks).
    var readStatistics: ReadStatistics {
        ReadStatistics(
            fromPageCache: readCounters.fromPageCache.load(ordering: .relaxed),
            throughChannel: readCounters.throughChannel.load(ordering: .relaxed))
    }

    struct ReadStatistics: Sendable, Equatable {
        var fromPageCache: Int64 = 0
        var throughChannel: Int64 = 0
    }

    /// What reads touch off the actor: they copy and check bytes on the caller's task and
    /// come back to the actor only when something is wrong, so their bookkeeping is atomic.
    final class ReadCounters: Sendable {
        let fromPageCache = Atomic<Int64>(0)
        let throughChannel = Atomic<Int64>(0)
        /// Reads between their plan (on the actor) and their end; close() waits for them.
        let inFlight = Atomic<Int>(0)
        /// Set when close() starts: the last read to end then wakes it.
        let closing = Atomic<Bool>(false)
    }

    nonisolated let readCounters = ReadCounters()

    /// Set by a failed sync: every later call throws it.
    var failure: SparseCacheError?
    /// The view handed out while the resource is complete (``committedView()``).
    var publishedView: CommittedView?
    var lifecycle = Lifecycle.open
    var closeTask: Task<Void, Error>?
    var activeOperations = 0
    var drainWaiters: [CheckedContinuation<Void, Never>] = []

    enum Lifecycle { case open, closing, closed }

    /// The suffix of the index file beside the data file.
    package static let indexSuffix = ".scidx"

    /// The index path for a data file path.
    package static func indexPath(for path: String) -> String { path + indexSuffix }

    /// The index's paths: under its name, and the temporary name a new resource's index keeps
    /// until the first commit or its close (a resource poisoned before then leaves it there).
    /// Both go when the resource's files are removed.
    package static func indexPaths(for path: String) -> [String] {
        let index = indexPath(for: path)
        return [index, IndexFile.temporaryPath(for: index)]
    }

    init(
        path: String, mode: AccessMode, options: SparseFileOptions, dataFile: FileDescriptor,
        index: IndexFile, state: IndexState, pending: IndexChange, recovery: RecoverySummary,
        reader: DispatchReadChannel, io: BlockingExecutor
    ) {
        self.path = path
        self.indexPath = Self.indexPath(for: path)
        self.mode = mode
        self.options = options
        self.segmentShift = state.segmentShift
        self.segmentSize = 1 << state.segmentShift
        self.dataFile = dataFile
        self.index = index
        self.committed = state
        self.pendingChange = pending
        self.recovery = recovery
        self.reader = reader
        self.io = io
        self.commitIO = BlockingExecutor(label: "sparsecache.commit")
        if !pending.isEmpty { changeCounter = 1 }
    }

    deinit {
        // Without close() nothing pending is committed; the descriptors are still released.
        if lifecycle != .closed {
            reader.close()
            dataFile.unlock()
            dataFile.close()
            index.close()
        }
    }

    // MARK: Open

    /// Opens the resource at `path`, creating it when `options.create` allows.
    ///
    /// - Throws: `.locked` when another process has it open for writing (read-only opens never
    ///   lock); `.notFound` when it does not exist and may not be created; `.invalidArgument`
    ///   for a bad segment size or length, or a segment size or length that differs from the
    ///   stored one; `.corruptIndex` / `.unsupportedVersion` when the index cannot be used;
    ///   `.corruptData` when a writable open finds the data file shorter than the index says.
    public static func open(
        _ path: String, mode: AccessMode = .readWrite, options: SparseFileOptions = SparseFileOptions()
    ) async throws -> SparseFile {
        try validate(path: path, options: options)
        let io = BlockingExecutor(label: "sparsecache.io")
        let opened = try await io.run { try openBlocking(path: path, mode: mode, options: options) }
        return SparseFile(
            path: path, mode: mode, options: options, dataFile: opened.dataFile, index: opened.index,
            state: opened.state, pending: opened.pending, recovery: opened.recovery, reader: opened.reader, io: io)
    }

    private static func validate(path: String, options: SparseFileOptions) throws {
        guard !path.isEmpty else {
            throw SparseCacheError(.invalidArgument, operation: "open", detail: "empty path")
        }
        if let size = options.segmentSize {
            guard SparseFileOptions.segmentSizes.contains(size), size.nonzeroBitCount == 1 else {
                throw SparseCacheError(
                    .invalidArgument, operation: "open", path: path,
                    detail: "segment size \(size) is not a power of two from 4 KiB to 16 MiB")
            }
        }
        if let length = options.length, length < 0 {
            throw SparseCacheError(.invalidArgument, operation: "open", path: path, detail: "negative length \(length)")
        }
        if let metadata = options.metadata { try checkSize(of: metadata, path: path) }
    }

    static func checkSize(of metadata: ResourceMetadata, path: String) throws {
        let size = MetadataCoding.encode(metadata).count
        guard size <= ResourceMetadata.maximumEncodedSize else {
            throw SparseCacheError(
                .invalidArgument, operation: "set metadata", path: path,
                detail: "metadata encodes to \(size) bytes, over the limit of \(ResourceMetadata.maximumEncodedSize)")
        }
    }

    private struct Opened: Sendable {
        var dataFile: FileDescriptor
        var index: IndexFile
        var state: IndexState
        var pending: IndexChange
        var recovery: RecoverySummary
        var reader: DispatchReadChannel
    }

    /// The error for a path whose index does not exist, saying what is there instead: nothing,
    /// a directory, a data file alone, or what a write interrupted before its first commit
    /// leaves (the data file and the unfinished `NAME.scidx.tmp`), which holds nothing to recover.
    package static func noResource(_ path: String, operation: String) throws -> SparseCacheError {
        let indexPath = Self.indexPath(for: path)
        let indexName = FileSystem.fileName(of: indexPath)
        let data = try FileSystem.status(ofPath: path)
        let detail: String
        if try FileSystem.exists(IndexFile.temporaryPath(for: indexPath)) {
            detail = "nothing was ever committed to it: a write was interrupted before its first commit ('\(indexName).tmp' is "
                + "its unfinished index, and no byte is claimed); there is nothing to recover. Write it again (the write "
                + "starts it afresh), or remove '\(FileSystem.fileName(of: path))' and '\(indexName).tmp'"
        } else if data?.isDirectory == true {
            detail = "is a directory, not a resource's data file (no index '\(indexName)' beside it)"
        } else if data != nil {
            detail = "no index '\(indexName)' beside it: not a sparsecache resource"
        } else {
            detail = "no such resource (neither the data file nor its index '\(indexName)' exists)"
        }
        return SparseCacheError(.notFound, operation: operation, path: path, detail: detail)
    }

    private static func openBlocking(path: String, mode: AccessMode, options: SparseFileOptions) throws -> Opened {
        let indexPath = Self.indexPath(for: path)
        let indexExists = try FileSystem.exists(indexPath)
        if options.mustBeNew, indexExists { throw NameTaken(path: path) }
        let create = mode == .readWrite && options.create && !indexExists
        if create, let length = options.length {
            let shift = (options.segmentSize ?? SparseFileOptions.defaultSegmentSize).trailingZeroBitCount
            guard length <= IndexState.maximumLength(shift: shift) else {
                throw SparseCacheError(
                    .invalidArgument, operation: "open", path: path,
                    detail: "length \(length) is over the largest supported length \(IndexState.maximumLength(shift: shift))")
            }
        }
        if !indexExists, !create { throw try noResource(path, operation: "open") }
        let dataFile: FileDescriptor
        do {
            dataFile = try FileDescriptor.open(
                path, access: mode == .readWrite ? .readWrite : .readOnly, create: create, exclusive: create && options.mustBeNew)
        } catch let error as SparseCacheError where options.mustBeNew && error.errno == EEXIST {
            throw NameTaken(path: path)
        }
        do {
            if mode == .readWrite, try !dataFile.tryLock(exclusive: true, patience: FileDescriptor.lockPatience) {
                throw SparseCacheError(
                    .locked, operation: "open", path: path,
                    detail: dataFile.lockIsHeldByThisProcess()
                        ? "already open for writing in this process (one SparseFile per resource: share it, or close "
                            + "the other before opening again)"
                        : "locked by another process (open for writing)")
            }
            var pending = IndexChange()
            let index: IndexFile
            var state: IndexState
            var recovery = RecoverySummary()
            if create {
                let shift = (options.segmentSize ?? SparseFileOptions.defaultSegmentSize).trailingZeroBitCount
                state = IndexState(segmentShift: shift, length: options.length, metadata: options.metadata ?? ResourceMetadata())
                if let length = options.length, try dataFile.status().size < length {
                    try dataFile.truncate(to: length)
                }
                // No sync of the new data file: nothing in it is claimed before a commit, which
                // fdatasyncs it (its size with it) and fsyncs the directory holding both names.
                index = try IndexFile.create(path: indexPath, state: state, namedNow: !options.namesIndexAtFirstCommit)
                recovery.created = true
            } else {
                let access: FileDescriptor.Access = mode == .readWrite ? .readWrite : .readOnly
                let (opened, recovered, report) = try IndexFile.open(path: indexPath, access: access, evidence: .reading(dataFile))
                index = opened
                state = recovered
                recovery = RecoverySummary(report)
                do {
                    try checkReopen(state: state, options: options, path: path, pending: &pending)
                    if mode == .readWrite, options.requireDataFileCoversIndex {
                        try checkDataFileCoversIndex(dataFile, state: state)
                    }
                    if mode == .readWrite, report.journalDamage == nil {
                        // Blocks of segments written but never committed (a crash, a kill, a
                        // failed commit on a full disk) are freed: they are not present and
                        // would otherwise hold disk space for good. Not while the journal is
                        // damaged in the middle: then data no intact record names may be what
                        // an unreadable record committed, and verify counts it as lost until
                        // a repair folds the damage away.
                        recovery.reclaimedBytes = try reclaimUnclaimed(dataFile, state: state)
                    }
                    if mode == .readWrite, report.wantsHealing {
                        // The state in use came through damage recovery put right in memory
                        // (a corrected superblock copy, a rebuilt checkpoint). Two checkpoints
                        // rewrite both slots, so the damage is gone from disk too.
                        try index.checkpoint(state)
                        try index.checkpoint(state)
                    }
                } catch {
                    index.close()
                    throw error
                }
            }
            let reader = DispatchReadChannel(duplicating: dataFile)
            return Opened(dataFile: dataFile, index: index, state: state, pending: pending, recovery: recovery, reader: reader)
        } catch {
            dataFile.close()
            throw error
        }
    }

    /// Punches holes over the data file's blocks that no present segment owns and returns the
    /// bytes freed. Blocking; the caller holds the write lock, so no write is in flight. A file
    /// system without hole punching keeps them (0 freed).
    ///
    /// Costs one fstat on every writable open: the data extents are walked only when the file
    /// holds more blocks than its present segments can account for.
    private static func reclaimUnclaimed(_ dataFile: FileDescriptor, state: IndexState) throws -> Int64 {
        let status = try dataFile.status()
        let shift = Int64(state.segmentShift)
        // A segment's bytes may round up to whole file-system blocks, and the last one may be
        // short: one segment of slack.
        guard status.allocatedBytes > state.presentBytes + (Int64(1) << shift) else { return 0 }
        var unclaimed: [Range<Int64>] = []
        var position: Int64 = 0
        while position < status.size, let data = try dataFile.seekData(from: position), data < status.size {
            let end = min(try dataFile.seekHole(from: data) ?? status.size, status.size)
            let segments = Int(data >> shift)..<Int((end + (Int64(1) << shift) - 1) >> shift)
            for run in state.present.clearRuns(in: segments) {
                unclaimed.append(max(data, Int64(run.lowerBound) << shift)..<min(end, Int64(run.upperBound) << shift))
            }
            position = end
        }
        for range in unclaimed {
            do {
                try dataFile.punchHole(offset: range.lowerBound, length: Int64(range.count))
            } catch let error as SparseCacheError where error.errno == EOPNOTSUPP {
                return 0
            }
        }
        return unclaimed.isEmpty ? 0 : max(0, status.allocatedBytes - (try dataFile.status().allocatedBytes))
    }

    /// What a resource's committed index says, read without opening the resource: no lock,
    /// no data file, no channel. Blocking: for callers on a blocking queue (the store's
    /// start-up scan).
    ///
    /// - Throws: `.corruptIndex` / `.unsupportedVersion` when the index cannot be used; `.io`.
    package static func storedSummary(path: String) throws -> StoredSummary {
        let (index, state, _) = try IndexFile.open(path: indexPath(for: path), access: .readOnly)
        index.close()
        return StoredSummary(metadata: state.metadata, length: state.length, presentBytes: state.presentBytes)
    }

    /// The present byte ranges its committed index names, read as ``storedSummary(path:)`` is
    /// (no lock, no data file). Blocking. A commit running beside it is fine: the index is read
    /// as it validates (the valid slot with the highest generation, then the journal).
    package static func storedPresentRanges(path: String) throws -> (length: Int64?, ranges: [Range<Int64>]) {
        let (index, state, _) = try IndexFile.open(path: indexPath(for: path), access: .readOnly)
        index.close()
        let shift = Int64(state.segmentShift)
        let ranges = state.present.setRuns.map { run -> Range<Int64> in
            let start = Int64(run.lowerBound) << shift
            var end = Int64(run.upperBound) << shift
            if let length = state.length { end = min(end, length) }
            return start..<max(start, end)
        }
        return (state.length, ranges)
    }

    package struct StoredSummary: Sendable {
        package var metadata: ResourceMetadata
        package var length: Int64?
        package var presentBytes: Int64
    }

    private static func checkReopen(state: IndexState, options: SparseFileOptions, path: String, pending: inout IndexChange) throws {
        if let size = options.segmentSize, size != state.segmentSize {
            throw SparseCacheError(
                .invalidArgument, operation: "open", path: path,
                detail: "segment size \(size) differs from the stored segment size \(state.segmentSize)")
        }
        if let length = options.length {
            if let stored = state.length, stored != length {
                throw SparseCacheError(
                    .invalidArgument, operation: "open", path: path,
                    detail: "length \(length) differs from the stored length \(stored)")
            }
            if state.length == nil {
                if let problem = state.problem(applying: IndexChange(length: length)) {
                    throw SparseCacheError(.invalidArgument, operation: "open", path: path, detail: problem)
                }
                pending.length = length
            }
        }
    }

    /// A writable open refuses a data file that ends before the last present segment: writes
    /// would skip those segments forever. `verify --repair` fixes it.
    private static func checkDataFileCoversIndex(_ dataFile: FileDescriptor, state: IndexState) throws {
        guard let last = state.present.setRuns.last?.upperBound else { return }
        let needed = min(Int64(last) << Int64(state.segmentShift), state.length ?? .max)
        let size = try dataFile.status().size
        if size < needed {
            throw SparseCacheError(
                .corruptData, operation: "open", path: dataFile.path,
                detail: "data file is \(size) bytes but the index names data up to byte \(needed); run 'sparsecache verify --repair'",
                segments: Array(Int(size >> Int64(state.segmentShift))..<last).filter { state.present[$0] })
        }
    }

    // MARK: Lifecycle

    /// Commits what is pending, waits for in-flight reads and writes, and releases the files.
    /// Bytes of incomplete segments are discarded. Calling it again is harmless.
    ///
    /// - Throws: the commit's error when the final commit fails (the files are released anyway).
    public func close() async throws {
        if let closeTask { return try await closeTask.value }
        if lifecycle == .closed { return }
        // On the caller's event loop when it has one (a proxy's request): no pool thread wakes
        // up for the close.
        let task = Task(executorPreference: LoopExecutor.current) { try await self.closeNow() }
        closeTask = task
        try await task.value
    }

    private func closeNow() async throws {
        lifecycle = .closing
        withdrawCommittedView()
        readCounters.closing.store(true, ordering: .sequentiallyConsistent)
        autoCommitTask?.cancel()
        autoCommitTask = nil
        await drain()
        var commitError: Error?
        if mode == .readWrite, failure == nil {
            do { try await commitPending() } catch { commitError = error }
        }
        while let running = commitTask { _ = try? await running.value }
        // The next open reads a checkpoint instead of replaying a long journal (a cached
        // resource is opened again far more often than it is written). In the commit line, so
        // no compaction or discard touches the index beside it. An ordinary failure loses
        // nothing (the journal holds every commit); a failed sync poisons the resource and is
        // the close's error. Not after open met damage of any kind (a bad superblock copy,
        // damaged records, an older state taken): the index keeps what `verify` reports.
        if mode == .readWrite, failure == nil, commitError == nil, !recovery.metDamage, index.wantsCheckpointOnClose {
            let task = Task { try await self.checkpointInCommitLine(reportingErrors: false) }
            commitTask = task
            do { try await task.value } catch { commitError = error }
            while let running = commitTask { _ = try? await running.value }
        }
        partials.removeAll()
        reader.close()
        let dataFile = self.dataFile
        let index = self.index
        if mode == .readWrite, failure == nil, commitError == nil, !index.isNamed {
            // A new index no commit went through takes its name now (synced first): the next
            // open finds the resource, empty. A poisoned one is left under its temporary name
            // (removed with the resource, or by the store's next start).
            do { try await io.run { try index.publish() } } catch { commitError = error }
        }
        _ = try? await io.run {
            // The journal room a writer keeps for a full disk is not kept by a closed resource.
            index.releaseReservation()
            // Released outright: a CommittedView's duplicate of the descriptor shares the open
            // file, and with it the lock, for as long as the view is held.
            dataFile.unlock()
            dataFile.close()
            index.close()
        }
        lifecycle = .closed
        if let commitError { throw commitError }
    }

    private func drain() async {
        while activeOperations > 0 || readCounters.inFlight.load(ordering: .sequentiallyConsistent) > 0 {
            await withCheckedContinuation { drainWaiters.append($0) }
        }
    }

    /// Wakes close() to look again (the last read in flight ended).
    func wakeDrain() {
        let waiters = drainWaiters
        drainWaiters.removeAll()
        for waiter in waiters { waiter.resume() }
    }

    /// Marks an operation in flight; close() waits for it.
    func beginOperation() { activeOperations += 1 }

    func endOperation() {
        activeOperations -= 1
        if activeOperations == 0 {
            let waiters = drainWaiters
            drainWaiters.removeAll()
            for waiter in waiters { waiter.resume() }
        }
    }

    /// Throws unless the resource is open and not poisoned.
    func checkUsable(_ operation: String) throws {
        if let failure { throw failure }
        if lifecycle != .open {
            throw SparseCacheError(.closed, operation: operation, path: path, detail: "resource is closed")
        }
    }

    func checkWritable(_ operation: String) throws {
        try checkUsable(operation)
        if mode != .readWrite {
            throw SparseCacheError(.invalidArgument, operation: operation, path: path, detail: "opened read-only")
        }
    }

    /// Poisons the resource after a failed sync: Linux may have dropped the dirty pages, and a
    /// later sync could succeed without them, so nothing since the last good sync is claimed.
    func poison(after error: SparseCacheError) {
        var poisoned = error
        poisoned.code = .needsReopen
        poisoned.detail = "an earlier \(error.operation) failed (\(error.errno.map(SparseCacheError.errnoText) ?? error.detail ?? "error")); "
            + "data written since the last successful sync is not claimed; reopen the resource"
        poisoned.operation = error.operation
        failure = poisoned
        withdrawCommittedView()
        unsynced.removeAll()
        committing.removeAll()
        partials.removeAll()
    }
}

/// What opening found in the index, in plain values.
package struct RecoverySummary: Sendable, Equatable {
    /// The resource was created by this open.
    package var created = false

    /// No commit ever went through the index: created by this open, or opened as creation
    /// left it (the two checkpoints of generations 0 and 1, no journal record). Its names may
    /// not be durable yet (creation syncs no directory).
    package var neverCommitted: Bool { created || (generation <= 1 && recordsReplayed == 0 && !fellBack) }
    /// Open found damage of any kind: a bad superblock copy, damaged records, an older state
    /// taken, something lost.
    package var metDamage: Bool {
        slotProblems.contains { $0 != nil } || !damage.isEmpty || fellBack || newestLost != nil || lostSegments > 0
    }
    /// Per superblock slot: nil when valid, else why it was rejected.
    package var slotProblems: [String?] = [nil, nil]
    package var generation: UInt64 = 0
    package var recordsReplayed = 0
    /// A torn last journal record (normal after a crash), if any.
    package var journalTail: String?
    /// Damage in the index: authentic data that cannot be applied (replay stopped before it),
    /// or journal records damaged while intact later records follow (replay went on past them;
    /// what is lost is in ``lostSegments``).
    package var damage: [String] = []
    /// The newest state could not be used and an older one was taken.
    package var fellBack = false
    /// Damage that recovery put right without losing anything: a superblock copy with one
    /// flipped bit, a damaged newest checkpoint rebuilt from the older one and the journals.
    /// A writable open folds it away with fresh checkpoints.
    package var corrected: [String] = []
    /// Present segments (and bytes) of committed state that the state in use lacks.
    package var lostSegments = 0
    package var lostBytes: Int64 = 0
    /// The newest checkpoint was damaged and could not be rebuilt: what happened.
    package var newestLost: String?
    /// Disk bytes a writable open freed: blocks of segments written but never committed (a
    /// crash, a kill, a full disk), which are not present and were holding space.
    package var reclaimedBytes: Int64 = 0

    init() {}

    init(_ report: IndexFile.RecoveryReport) {
        slotProblems = report.slotProblems
        generation = report.generation
        recordsReplayed = report.recordsReplayed
        journalTail = report.journalTail
        damage = report.damage
        fellBack = report.fellBack
        corrected = report.correctedSlots.map { "superblock slot \($0): \(report.slotProblems[$0] ?? "damaged")" }
        if let rebuilt = report.rebuiltCheckpoint { corrected.append(rebuilt) }
        lostSegments = report.lost?.segments ?? 0
        lostBytes = report.lost?.bytes ?? 0
        newestLost = report.newestLost
    }
}
