#if canImport(Glibc)
    import Glibc
#endif
@_spi(Locking) import SparseCacheEngine

/// Small whole objects (an HTTP cache's small bodies with their heads) in append-only log
/// files, many objects per file: no data file and index per object, one write and one
/// fdatasync per batch of objects.
///
/// Durability follows the sparse engine's rules (docs/DURABILITY.md):
/// - an object is found by ``object(for:)`` only once its record is durable (written and
///   fdatasync'ed, in a file whose directory entry is durable); ``put(key:metadata:body:)``
///   returns then, and a failed sync claims nothing of its batch;
/// - every record carries a CRC32C of its header and one of its key, metadata and body; a
///   read checks both and the key, and a damaged record is dropped, never served;
/// - open replays the files in order (the highest sequence number of a key wins, a tombstone
///   removes it), skips damaged stretches between valid records, and cuts a torn tail.
///
/// Space: removals and replacements leave dead records; a sealed file that is mostly dead is
/// compacted (its live records copied forward, then the file deleted). ``evict(bytes:olderThan:)``
/// drops least recently used objects for the owning ``SparseStore``'s budget.
///
/// Layout: `DIR/log-XXXXXXXX.sco`, the hex number increasing; the byte layout is in
/// ``SmallObjectFormat``.
package actor SmallObjectStore {
    package nonisolated let directory: String
    package nonisolated let options: SmallObjectOptions
    /// Appends and syncs, in order.
    nonisolated let io: BlockingExecutor
    /// Reads that miss the page cache, so they never wait behind a sync.
    nonisolated let readIO: BlockingExecutor
    /// The logs' open descriptors: at most ``SmallObjectOptions/maximumOpenLogs`` held.
    nonisolated let descriptors: SmallObjectLogDescriptors
    /// Changes of records by key, for ``SmallObjectView``.
    nonisolated let changes = SmallObjectChanges()

    /// Where a key's live record is: 32 bytes (with the key's 16, a dictionary slot of 48).
    /// The offset fits 32 bits because no log grows past ``maximumLogSize``.
    struct Location: Sendable {
        var file: UInt32
        private var offset32: UInt32
        var count: UInt32
        var bodyCount: UInt32
        var sequence: UInt64
        var lastAccess: Int64

        init(file: UInt32, offset: Int64, count: Int, bodyCount: Int, sequence: UInt64, lastAccess: Int64) {
            self.file = file
            offset32 = UInt32(offset)
            self.count = UInt32(count)
            self.bodyCount = UInt32(bodyCount)
            self.sequence = sequence
            self.lastAccess = lastAccess
        }

        var offset: Int64 { Int64(offset32) }
    }

    /// The largest log file: ``SmallObjectOptions/maximumFileSize`` is clamped to it, so every
    /// record offset fits a ``Location``'s 32 bits (a batch bigger than it gets a file alone).
    static let maximumLogSize: Int64 = 1 << 30

    var index: [String: Location] = [:]
    var logs: [UInt32: SmallObjectLog] = [:]
    /// Bytes of each file (the end of its valid part for the one appended to).
    var fileSizes: [UInt32: Int64] = [:]
    /// Bytes of live records in each file.
    var liveBytes: [UInt32: Int64] = [:]
    /// Body bytes of every live object (what a listing's totals call present), kept as the
    /// index changes so totals need no pass over a million keys.
    var liveBodyBytes: Int64 = 0
    /// Tombstones in each file, by key with their sequence: copied forward by compaction while
    /// another file could still hold a record they remove.
    var tombstones: [UInt32: [String: UInt64]] = [:]
    /// The lowest sequence number of any record in each file. A compaction copy keeps its
    /// original's number, so a newer file can hold older records: a tombstone is needed while
    /// any other file has a record older than it.
    var minimumSequence: [UInt32: UInt64] = [:]
    var active: UInt32
    /// The file appended to cannot be trusted past its last good sync: the next batch starts
    /// a new one.
    var sealActive = false
    var nextSequence: UInt64
    var pending: [PendingRecord] = []
    /// When the first of `pending` was queued: its batch is written
    /// ``SmallObjectOptions/groupCommitDelay`` after it.
    var pendingSince: ContinuousClock.Instant?
    /// Keys with records queued or being written: a removal of one writes its tombstone even
    /// though the index does not name the key yet.
    var unsettled: [String: Int] = [:]
    var flushing: Task<Void, Never>?
    var compacting: Task<Void, Never>?
    var compactingFiles: Set<UInt32> = []
    /// Hints being written for logs just sealed (off the actor, on ``hintIO``).
    var hintTasks: [UInt32: Task<Void, Never>] = [:]
    /// Logs that had a write or sync fail: their bytes past the last good sync are unknown,
    /// so they never get a hint from this process (the next open scans them whole).
    var failedFiles: Set<UInt32> = []
    /// Hints that could not be written (each costs one scan at the next open).
    var hintFailures = 0
    /// Hint writing: a read of the sealed log and a small synced write, kept off the queue of
    /// appends so no batch waits behind it.
    nonisolated let hintIO = BlockingExecutor(label: "sparsecache.smallobjects.hints")
    /// The id of the next log file made (never one used before in this run).
    var nextFileID: UInt32
    var isClosed = false
    /// Disk bytes of every log, readable without the actor (the owner's budget arithmetic).
    nonisolated let diskCounter = Lock<Int64>(0)
    /// What open found, and damage met since.
    package private(set) var report: OpenReport
    package internal(set) var damagedReads = 0
    /// Batches written and synced since open (one fdatasync each).
    package internal(set) var batches = 0

    /// A record waiting for its batch.
    struct PendingRecord {
        var kind: SmallObjectFormat.Kind
        var key: String
        var sequence: UInt64
        var metadata: [UInt8]
        var body: [UInt8]
        var lastAccess: Int64
        var continuation: CheckedContinuation<Void, Error>?
        /// For a compaction copy: installed only if the key still has this record.
        var copiedFrom: UInt32?
    }

    /// What opening the directory found.
    package struct OpenReport: Sendable, Equatable {
        package var files = 0
        package var objects = 0
        package var tombstones = 0
        /// Bytes between valid records that held none (damaged records), skipped.
        package var damagedBytes: Int64 = 0
        /// Bytes after the last valid record of a file (unsynced writes torn by a crash).
        package var tornTailBytes: Int64 = 0
        /// Files whose header was unusable (their records cannot be checked), deleted.
        var damagedFiles = 0
        /// Logs rebuilt from their hint file (no body read).
        package var hintedFiles = 0
        /// Logs read and checked whole (no usable hint: the file appended to, a hint missing
        /// or refused).
        package var scannedFiles = 0
        /// Hints written by open for sealed logs that had none.
        var hintsWritten = 0
    }

    /// Disk bytes of every log file now.
    package nonisolated var diskBytes: Int64 { diskCounter.withLock { $0 } }

    init(
        directory: String, options: SmallObjectOptions, io: BlockingExecutor, descriptors: SmallObjectLogDescriptors, report: OpenReport,
        active: UInt32, nextSequence: UInt64
    ) {
        self.directory = directory
        self.descriptors = descriptors
        self.options = options
        self.io = io
        self.readIO = BlockingExecutor(label: "sparsecache.smallobjects.read")
        self.report = report
        self.active = active
        self.nextFileID = active + 1
        self.nextSequence = nextSequence
    }

    // MARK: Open

    /// Opens (creating when missing) the logs in `directory`: reads the hint of every sealed
    /// log (``SmallObjectHint``: a few bytes per object, no bodies), scans whole the logs
    /// without a usable hint (and writes their hint when they are sealed), cuts the torn tail
    /// of the newest, deletes files whose header is unusable.
    ///
    /// - Throws: `.io` when the directory or a file cannot be read or written.
    package static func open(directory: String, options: SmallObjectOptions = SmallObjectOptions()) async throws -> SmallObjectStore {
        let io = BlockingExecutor(label: "sparsecache.smallobjects")
        let maximumFileSize = min(options.maximumFileSize, maximumLogSize)
        let useHints = options.useHints
        let descriptors = SmallObjectLogDescriptors(limit: options.maximumOpenLogs)
        let opened = try await io.run {
            try openBlocking(directory: directory, maximumFileSize: maximumFileSize, useHints: useHints, descriptors: descriptors)
        }
        let store = SmallObjectStore(
            directory: directory, options: options, io: io, descriptors: descriptors, report: opened.report, active: opened.active,
            nextSequence: opened.nextSequence)
        await store.install(opened)
        return store
    }

    struct Opened: @unchecked Sendable {
        // @unchecked: built on the io queue, handed over once.
        var report = OpenReport()
        var logs: [SmallObjectLog] = []
        var sizes: [UInt32: Int64] = [:]
        var replay = SmallObjectReplay()
        var active: UInt32 = 0
        var nextSequence: UInt64 = 1
    }

    private func install(_ opened: Opened) {
        for log in opened.logs { logs[log.id] = log }
        fileSizes = opened.sizes
        index = opened.replay.index
        tombstones = opened.replay.tombstones
        minimumSequence = opened.replay.minimumSequence
        for location in index.values {
            liveBytes[location.file, default: 0] += Int64(location.count)
            liveBodyBytes += Int64(location.bodyCount)
        }
        diskCounter.withLock { $0 = opened.sizes.values.reduce(0, +) }
    }

    private static func openBlocking(
        directory: String, maximumFileSize: Int64, useHints: Bool, descriptors: SmallObjectLogDescriptors
    ) throws -> Opened {
        try FileSystem.createDirectory(directory)
        var opened = Opened()
        let names = try FileSystem.listDirectory(directory)
        let ids = names.compactMap(SmallObjectFormat.fileID(fromName:)).sorted()
        var changedDirectory = removeStaleHints(directory: directory, names: names, logs: Set(ids))
        var newest: (scan: SmallObjectLogScan, hinted: Bool)?
        if useHints {
            // Sized once from the hints' headers: growing a dictionary of 10^6 keys rehashes
            // every key at each doubling.
            let hinted = Set(names.compactMap { $0.hasSuffix(SmallObjectHint.fileExtension) ? SmallObjectHint.logID(fromName: $0) : nil })
            let expected = ids.filter(hinted.contains).reduce(0) {
                $0 + min(1 << 24, SmallObjectHint.recordCount(directory: directory, id: $1) ?? 0)
            }
            opened.replay.index.reserveCapacity(expected)
        }
        for id in ids {
            let path = directory + "/" + SmallObjectFormat.fileName(id: id)
            // Held only while open reads it: afterwards the log's descriptor comes from
            // `descriptors`, on demand.
            let descriptor = try FileDescriptor.open(path, access: .readWrite)
            defer { descriptor.close() }
            let size = try descriptor.status().size
            var scan: SmallObjectLogScan
            var hinted = false
            if useHints, let header = try? descriptor.read(fromAbsoluteOffset: 0, count: SmallObjectFormat.headerSize),
                case .success(let found) = SmallObjectFormat.decodeFileHeader(header), found.id == id,
                let fromHint = SmallObjectHint.load(directory: directory, id: id, salt: found.salt, size: size)
            {
                scan = fromHint
                hinted = true
                opened.report.hintedFiles += 1
            } else {
                let bytes = try descriptor.read(fromAbsoluteOffset: 0, count: Int(size))
                guard case .success(let found) = SmallObjectLogScan.scan(bytes), found.id == id else {
                    // No record of it can be checked without its header: its objects are lost to
                    // the cache (fetched again), and the file goes (its hint first).
                    try SmallObjectHint.remove(directory: directory, id: id)
                    try FileSystem.unlink(path)
                    changedDirectory = true
                    opened.report.damagedFiles += 1
                    continue
                }
                scan = found
                opened.report.scannedFiles += 1
            }
            if scan.validEnd < size {
                opened.report.tornTailBytes += size - scan.validEnd
                // Cut in the file appended to next; in a sealed one the tail is dead bytes.
                if id == ids.last, !hinted {
                    try descriptor.truncate(to: scan.validEnd)
                    try descriptor.dataSync()
                    scan.size = scan.validEnd
                }
            }
            opened.report.damagedBytes += scan.damagedBytes
            opened.logs.append(SmallObjectLog(id: id, salt: scan.salt, path: path, descriptors: descriptors))
            opened.sizes[id] = scan.size
            opened.report.files += 1
            opened.replay.add(scan)
            if id == ids.last {
                newest = (scan, hinted)
            } else if !hinted, useHints {
                // Sealed and scanned whole: the next open reads its hint instead.
                changedDirectory = writeHint(scan, directory: directory, report: &opened.report) || changedDirectory
            }
        }
        opened.nextSequence = opened.replay.nextSequence
        opened.replay.removed = [:]
        opened.report.objects = opened.replay.index.count
        opened.report.tombstones = opened.replay.tombstones.values.reduce(0) { $0 + $1.count }
        // Appends go on in the newest file when it is usable, has no hint (a log with a hint is
        // sealed for good) and is not full; else a new one, and the newest is sealed.
        if let last = opened.logs.last, last.id == ids.last, let newest, !newest.hinted,
            (opened.sizes[last.id] ?? 0) < maximumFileSize
        {
            opened.active = last.id
        } else {
            if useHints, let newest, !newest.hinted, opened.logs.last?.id == newest.scan.id {
                changedDirectory = writeHint(newest.scan, directory: directory, report: &opened.report) || changedDirectory
            }
            let id = (opened.logs.last?.id ?? 0) + 1
            let log = try createLog(directory: directory, id: id, descriptors: descriptors)
            opened.logs.append(log)
            opened.sizes[id] = Int64(SmallObjectFormat.headerSize)
            opened.active = id
        }
        if changedDirectory { try FileSystem.syncParentDirectory(of: directory + "/x") }
        return opened
    }

    /// Writes the hint of a sealed log found without one; a failure only costs a scan at the
    /// next open. Returns whether a hint was written (the directory then needs a sync).
    private static func writeHint(_ scan: SmallObjectLogScan, directory: String, report: inout OpenReport) -> Bool {
        do {
            try SmallObjectHint.write(scan, size: scan.size, directory: directory, syncDirectory: false)
            report.hintsWritten += 1
            return true
        } catch {
            return false
        }
    }

    /// Deletes temporary hints (a crash while one was written) and hints whose log is gone
    /// (a crash between the two unlinks of a compaction). Returns whether any went.
    private static func removeStaleHints(directory: String, names: [String], logs: Set<UInt32>) -> Bool {
        var removed = false
        for name in names {
            guard let id = SmallObjectHint.logID(fromName: name) else { continue }
            if name.hasSuffix(SmallObjectHint.temporaryExtension) || !logs.contains(id) {
                removed = (try? FileSystem.unlink(directory + "/" + name)) != nil || removed
            }
        }
        return removed
    }

    /// Creates log file `id`: header written and synced, then the directory synced, so no
    /// record is ever acknowledged in a file whose name could vanish.
    static func createLog(directory: String, id: UInt32, descriptors: SmallObjectLogDescriptors) throws -> SmallObjectLog {
        let path = directory + "/" + SmallObjectFormat.fileName(id: id)
        if try FileSystem.exists(path) { try FileSystem.unlink(path) }
        // A hint left under this id describes another log (its salt differs, so it would be
        // refused anyway): it goes.
        try SmallObjectHint.remove(directory: directory, id: id)
        let descriptor = try FileDescriptor.open(path, access: .readWrite, create: true, exclusive: true)
        let salt = UInt32.random(in: 1...UInt32.max)
        do {
            try descriptor.write(toAbsoluteOffset: 0, SmallObjectFormat.encodeFileHeader(id: id, salt: salt))
            try descriptor.dataSync()
            try FileSystem.syncParentDirectory(of: path)
        } catch {
            descriptor.close()
            try? FileSystem.unlink(path)
            throw error
        }
        // The header is durable: appends open the file again through `descriptors`.
        descriptor.close()
        return SmallObjectLog(id: id, salt: salt, path: path, descriptors: descriptors)
    }

    // MARK: Reading

    /// Whether `key` has a durable object (no disk access).
    package func contains(_ key: String) -> Bool { index[key] != nil }

    /// The body length of `key`'s object, if stored.
    package func bodyLength(of key: String) -> Int? { index[key].map { Int($0.bodyCount) } }

    /// The object stored for `key`, read from disk and checked (CRC32C of header and payload,
    /// and the key). A damaged record is dropped from the store and nil returned: the caller
    /// fetches the object again. Marks the object as used (LRU).
    ///
    /// - Throws: `.io` when the read fails (the object stays; a later read may succeed).
    package func object(for key: String) async throws -> SmallObject? {
        guard let (location, payload) = try await readRecord(key) else { return nil }
        guard let metadata = try? MetadataCoding.decode(payload.metadata) else {
            dropDamaged(key, at: location)
            return nil
        }
        return SmallObject(key: key, metadata: metadata, body: Array(payload.body), sequence: location.sequence)
    }

    /// The body of `key`'s object when its record is still the one of `sequence`, read and
    /// checked as ``object(for:)`` reads it, without decoding its metadata: for a caller that
    /// holds what that record's metadata says. Nil when the key holds another record or none
    /// (nothing is read then), or the record is damaged (dropped, as by ``object(for:)``).
    package func body(for key: String, sequence: UInt64) async throws -> [UInt8]? {
        guard index[key]?.sequence == sequence, let (_, payload) = try await readRecord(key) else { return nil }
        return Array(payload.body)
    }

    /// A view of `key`'s record for reads without this actor, when it is still the one of
    /// `sequence` and its log is open; nil otherwise. Marks the object used.
    package func view(for key: String, sequence: UInt64) -> SmallObjectView? {
        guard var location = index[key], location.sequence == sequence, let log = logs[location.file] else { return nil }
        location.lastAccess = SparseStore.now()
        index[key] = location
        return SmallObjectView(key: key, location: location, log: log, changes: changes)
    }

    /// Marks `key`'s object used (its reads went through a view).
    package func noteUse(of key: String) {
        guard var location = index[key] else { return }
        location.lastAccess = SparseStore.now()
        index[key] = location
    }

    /// Reads and checks `key`'s live record and marks it used; nil when there is none, or it
    /// is damaged (then dropped).
    private func readRecord(_ key: String) async throws -> (Location, (metadata: ArraySlice<UInt8>, body: ArraySlice<UInt8>))? {
        guard var location = index[key], let log = logs[location.file] else { return nil }
        location.lastAccess = SparseStore.now()
        index[key] = location
        let bytes = try await log.read(offset: location.offset, count: Int(location.count), io: readIO)
        // Checked outside any state: a failure below only drops this very record.
        guard case .success(let decoded) = SmallObjectFormat.decodeRecord(bytes[...], salt: log.salt),
            decoded.0.kind == .object, decoded.key == key, decoded.0.sequence == location.sequence
        else {
            dropDamaged(key, at: location)
            return nil
        }
        return (location, (decoded.metadata, decoded.body))
    }

    /// Counts a damaged read and forgets the record, unless the key holds another one by now.
    private func dropDamaged(_ key: String, at location: Location) {
        damagedReads += 1
        if let now = index[key], now.file == location.file, now.offset == location.offset { drop(key) }
    }

    // MARK: Writing

    /// Stores `body` with `metadata` under `key`, replacing what the key held; returns once the
    /// object is durable (with the other objects of its batch: one write and one fdatasync),
    /// with the sequence number of its record (``SmallObject/sequence``, ``body(for:sequence:)``).
    /// Until then ``object(for:)`` answers the previous object, or nil.
    ///
    /// - Throws: `.invalidArgument` for an empty or oversized key, a body over 1 MiB or
    ///   metadata over 64 KiB; `.io` when the write or the sync fails (then nothing of the
    ///   batch is claimed); `.closed`.
    @discardableResult
    package func put(key: String, metadata: ResourceMetadata, body: [UInt8]) async throws -> UInt64 {
        try checkOpen("put")
        let record = try objectRecord(SmallObjectWrite(key: key, metadata: metadata, body: body))
        try await append(record)
        return record.sequence
    }

    /// Stores several objects, each as ``put(key:metadata:body:)`` does, in one call: they go
    /// in the same batch (with whatever else is pending), and the call returns once it is
    /// durable. Costs one call into the actor, not one per object. Gives each object's
    /// sequence number, or why it was not stored: its own `.invalidArgument` (the others are
    /// stored), or the batch's `.io` or `.closed` (then none is).
    package func put(_ writes: [SmallObjectWrite]) async -> [Result<UInt64, SparseCacheError>] {
        var results: [Result<UInt64, SparseCacheError>] = []
        results.reserveCapacity(writes.count)
        var records: [PendingRecord] = []
        records.reserveCapacity(writes.count)
        do {
            try checkOpen("put")
        } catch {
            return Array(repeating: .failure(error), count: writes.count)
        }
        for write in writes {
            do {
                let record = try objectRecord(write)
                records.append(record)
                results.append(.success(record.sequence))
            } catch {
                results.append(.failure(error))
            }
        }
        do {
            try await appendTogether(records)
        } catch {
            let failure = error as? SparseCacheError ?? SparseCacheError(.io, operation: "put small objects", path: directory, detail: "\(error)")
            results = results.map { $0.flatMap { _ in .failure(failure) } }
        }
        return results
    }

    /// The record that stores `write`, with the next sequence number.
    ///
    /// - Throws: `.invalidArgument` for an empty or oversized key, a body over 1 MiB or
    ///   metadata over 64 KiB.
    private func objectRecord(_ write: SmallObjectWrite) throws(SparseCacheError) -> PendingRecord {
        let key = write.key, body = write.body
        try SparseStore.validate(key: key)
        let encoded = MetadataCoding.encode(write.metadata)
        guard body.count <= SmallObjectFormat.maximumBody, encoded.count <= SmallObjectFormat.maximumMetadata else {
            throw SparseCacheError(
                .invalidArgument, operation: "put small object", path: key,
                detail: "body of \(body.count) bytes or metadata of \(encoded.count) bytes over the limits "
                    + "(\(SmallObjectFormat.maximumBody), \(SmallObjectFormat.maximumMetadata))")
        }
        return PendingRecord(
            kind: .object, key: key, sequence: takeSequence(), metadata: encoded, body: body, lastAccess: SparseStore.now())
    }

    /// Replaces the metadata of `key`'s object by `change` of it, keeping its body (a new
    /// record; returns once it is durable). Returns false when the key has no object, or it was
    /// replaced meanwhile.
    @discardableResult
    package func updateMetadata(key: String, _ change: @Sendable (ResourceMetadata) -> ResourceMetadata) async throws -> Bool {
        guard let object = try await object(for: key), index[key]?.sequence == object.sequence else { return false }
        try await put(key: key, metadata: change(object.metadata), body: object.body)
        return true
    }

    /// Removes `key`'s object: a durable tombstone, so no restart brings it back. Returns false
    /// when the key had none.
    @discardableResult
    package func remove(key: String) async throws -> Bool {
        try checkOpen("remove")
        guard index[key] != nil || unsettled[key] != nil else { return false }
        drop(key)
        let sequence = takeSequence()
        try await append(PendingRecord(kind: .tombstone, key: key, sequence: sequence, metadata: [], body: [], lastAccess: 0))
        scheduleCompaction()
        return true
    }

    func takeSequence() -> UInt64 {
        defer { nextSequence += 1 }
        return nextSequence
    }

    /// Forgets `key`'s live record (its bytes become dead in their file). Every change of a
    /// key's record drops the one before, so its views go stale here.
    func drop(_ key: String) {
        changes.note(key)
        guard let location = index.removeValue(forKey: key) else { return }
        liveBytes[location.file, default: 0] -= Int64(location.count)
        liveBodyBytes -= Int64(location.bodyCount)
    }

    func checkOpen(_ operation: String) throws(SparseCacheError) {
        if isClosed { throw SparseCacheError(.closed, operation: operation, path: directory, detail: "small-object store is closed") }
    }

    // MARK: Listing

    /// Every live object as a store entry: its name is `objects/<log file>@<offset>`, its
    /// length and present bytes the body's, its allocated bytes the record's.
    package func entries() -> [StoreEntry] {
        index.map { key, location in Self.entry(key: key, location: location) }
    }

    /// Every live object: key, body length, record bytes, last access (ns since 1970; 0 for
    /// one not used since open), and the file and offset of its record.
    package func listing() -> [(key: String, bodyLength: Int64, recordBytes: Int64, lastAccess: Int64, place: String)] {
        index.map { key, location in
            (
                key, Int64(location.bodyCount), Int64(location.count), location.lastAccess,
                SmallObjectFormat.fileName(id: location.file) + "@" + String(location.offset)
            )
        }
    }

    /// Log descriptors held now (at most ``SmallObjectOptions/maximumOpenLogs``; see
    /// ``SmallObjectLogDescriptors`` for the bound with operations under way).
    package nonisolated var openLogDescriptors: Int { descriptors.count }

    /// Bytes of live records.
    var liveByteCount: Int64 { liveBytes.values.reduce(0, +) }

    /// How many objects are stored.
    package var count: Int { index.count }

    /// The keys that start with `prefix` (one pass over the keys, no entry built): PURGE of a
    /// prefix, and the `Vary` variants of a key an unsafe method invalidates.
    package func keys(withPrefix prefix: String) -> [String] {
        index.keys.filter { $0.hasPrefix(prefix) }
    }

    /// Writes what is pending, waits for compaction, and closes the files.
    package func close() async {
        if isClosed { return }
        await compacting?.value
        isClosed = true
        while let flushing {
            await flushing.value
            if self.flushing == flushing { self.flushing = nil }
        }
        if !pending.isEmpty { await flush() }
        while let (_, task) = hintTasks.first { await task.value }
        logs.removeAll()
        descriptors.forgetAll()
    }
}
