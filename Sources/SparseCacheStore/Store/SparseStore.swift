#if canImport(Glibc)
    import Glibc
    import SparseCacheEngine
#endif

/// A directory of resources under one byte budget.
///
/// Resources are found by key (any string, such as a URL). Disk space (data blocks plus
/// indexes) is kept under ``StoreOptions/budget`` by evicting the least recently used
/// resources; a resource that is open (through a ``ResourceHandle``) is pinned and never
/// evicted. A resource larger than the whole budget keeps a window of its most recently used
/// segments instead of failing. Access times are persisted in a catalog so the LRU order
/// survives restarts, and start-up reads the catalog rather than every index.
///
/// One process owns a directory at a time: it holds an exclusive lock on `DIR/lock`, and a
/// second process gets `.locked`. ``inspect(directory:)`` reads a directory without the lock.
///
/// Layout: `DIR/lock`, `DIR/catalog`, `DIR/resources/<name>` and `<name>.scidx`, and the
/// small-object logs in `DIR/objects` (``SmallObjectStore``). Files in `resources` whose names
/// this store does not make are never touched.
public actor SparseStore {
    public nonisolated let directory: String
    public nonisolated let options: StoreOptions
    nonisolated let resourcesDirectory: String
    nonisolated let lockFile: FileDescriptor
    nonisolated let io: BlockingExecutor
    /// Small whole objects (`DIR/objects`), under the same budget: the LRU order runs across
    /// both kinds (see ``enforceBudget()``).
    package nonisolated let smallObjects: SmallObjectStore

    var entries: StoreEntries
    /// The keys of `entries`, for ``mayHold(_:)``.
    private nonisolated let presence = KeyPresence()
    var keyByName: [String: String]
    var live: [String: LiveResource] = [:]
    var lockedKeys: Set<String> = []
    var keyWaiters: [String: [CheckedContinuation<Void, Never>]] = [:]
    var catalogDirty = false
    var saveTask: Task<Void, Never>?
    /// The catalog save being written now, if any (one at a time): a save asked for meanwhile
    /// waits for it, or it would return before the file it asked for is there.
    var catalogSaving: Task<Void, Error>?
    /// The last eviction pass queued; each pass waits for the one before it.
    var evictionQueue: Task<Void, Never>?
    /// A queued budget pass that has not started: concurrent callers of `enforceBudget` join it.
    var pendingEnforcement: Task<[String], Error>?
    var touchClock: UInt64 = 0
    /// The ``EvictionPolicy/sfifo`` policy's state (empty under ``EvictionPolicy/lru``).
    var queues = SegmentQueues()
    var isClosed = false
    /// Housekeeping that failed without failing its caller, counted since the store opened.
    public private(set) var housekeepingFailures = HousekeepingFailures()
    /// The byte budget now: ``StoreOptions/budget`` until ``setBudget(_:)`` changes it.
    public internal(set) var budget: Int64
    /// Resources evicted or trimmed to keep the budget, since the store opened.
    public internal(set) var evictions = 0
    /// What start-up found and did, for `ls` and logs.
    package nonisolated let startup: StartupReport

    /// An open resource: its actor, how many handles hold it, and per-segment recency for the
    /// larger-than-budget window.
    ///
    /// Change it in place (`live[key]?.touch(...)`): a copy taken out of `live` and written
    /// back shares `segmentTouch`'s storage while it is changed, so every change copied the
    /// whole table (one entry per segment read; 1.7% of the proxy's CPU under wrk).
    struct LiveResource {
        var file: SparseFile
        var leases: Int
        var segmentTouch: [Int: UInt64] = [:]

        /// Marks `segments` as used at `clock`.
        mutating func touch(_ segments: Range<Int>, at clock: UInt64) {
            for segment in segments { segmentTouch[segment] = clock }
        }
    }

    /// The small-object logs' directory inside the store's.
    static let objectsDirectoryName = "objects"

    /// Keys longer than this (in UTF-8 bytes) are refused.
    static let maximumKeyLength = 8192

    /// What opening a directory found.
    package struct StartupReport: Sendable, Equatable {
        package var resources = 0
        /// Resources found on disk but missing from the catalog (their indexes were read).
        package var indexesRead = 0
        /// Data files without an index (a crash during creation or eviction), deleted.
        package var orphansRemoved = 0
        /// Resources whose index could not be used, deleted.
        var damagedRemoved = 0
        /// Files in `resources` that this store does not make, left alone.
        package var foreignFiles = 0
        package var catalogFound = false
        /// Leftovers that could not be deleted, each with the error: they still take disk
        /// space, and the next start-up tries again.
        package var removalFailures: [String] = []
    }

    init(
        directory: String, options: StoreOptions, lockFile: FileDescriptor, entries: [StoreEntry], startup: StartupReport,
        io: BlockingExecutor, smallObjects: SmallObjectStore, runs: [String: [SegmentQueues.Run]] = [:]
    ) {
        self.smallObjects = smallObjects
        self.directory = directory
        self.options = options
        budget = options.budget
        self.resourcesDirectory = directory + "/resources"
        self.lockFile = lockFile
        self.io = io
        self.startup = startup
        self.entries = StoreEntries(entries, presence: presence)
        self.keyByName = Dictionary(self.entries.values.map { ($0.name, $0.key) }, uniquingKeysWith: { first, _ in first })
        if options.eviction == .sfifo {
            for (key, list) in runs where self.entries[key] != nil { queues.restore(key: key, runs: list) }
            queues.finishRestore()
        }
    }

    deinit {
        lockFile.close()
    }

    // MARK: Open and close

    /// Opens (creating when missing) the store at `directory`.
    ///
    /// - Throws: `.locked` when another process owns the directory; `.invalidArgument` for a
    ///   budget smaller than one segment or a path that is a file; `.io` / `.notFound` when the
    ///   directory cannot be created or read.
    public static func open(directory: String, options: StoreOptions) async throws -> SparseStore {
        guard options.budget >= Int64(options.segmentSize) else {
            throw SparseCacheError(
                .invalidArgument, operation: "open store", path: directory,
                detail: "budget \(options.budget) is smaller than one segment (\(options.segmentSize) bytes)")
        }
        guard SparseFileOptions.segmentSizes.contains(options.segmentSize), options.segmentSize.nonzeroBitCount == 1 else {
            throw SparseCacheError(
                .invalidArgument, operation: "open store", path: directory,
                detail: "segment size \(options.segmentSize) is not a power of two from 4 KiB to 16 MiB")
        }
        let io = BlockingExecutor(label: "sparsecache.store")
        let (lock, entries, report, runs) = try await io.run { try openBlocking(directory: directory) }
        let smallObjects: SmallObjectStore
        do {
            smallObjects = try await SmallObjectStore.open(directory: directory + "/" + objectsDirectoryName, options: options.smallObjects)
        } catch {
            lock.close()
            throw error
        }
        let store = SparseStore(
            directory: directory, options: options, lockFile: lock, entries: entries, startup: report, io: io, smallObjects: smallObjects,
            runs: runs)
        if report.indexesRead + report.orphansRemoved + report.damagedRemoved > 0 || !report.catalogFound {
            await store.markCatalogDirty()
        }
        try await store.enforceBudget()
        return store
    }

    private static func openBlocking(directory: String) throws -> (FileDescriptor, [StoreEntry], StartupReport, [String: [SegmentQueues.Run]]) {
        try FileSystem.createDirectory(directory)
        let resources = directory + "/resources"
        try FileSystem.createDirectory(resources)
        let lock = try FileDescriptor.open(directory + "/lock", access: .readWrite, create: true)
        do {
            guard try lock.tryLock(exclusive: true, patience: FileDescriptor.lockPatience) else {
                throw SparseCacheError(
                    .locked, operation: "open store", path: directory,
                    detail: lock.lockIsHeldByThisProcess()
                        ? "cache directory is already open in this process (one SparseStore per directory: share it)"
                        : "cache directory is in use by another process")
            }
            var runs: [String: [SegmentQueues.Run]] = [:]
            let (entries, report) = try scan(directory: directory, runs: &runs)
            return (lock, entries, report, runs)
        } catch {
            lock.close()
            throw error
        }
    }

    /// Reconciles the catalog with the files: drops entries whose index is gone, reads the
    /// indexes of resources the catalog does not know, deletes orphaned data files and
    /// resources whose index is unusable, refreshes allocated sizes with one stat per file.
    static func scan(directory: String, removing: Bool = true) throws -> ([StoreEntry], StartupReport) {
        var runs: [String: [SegmentQueues.Run]] = [:]
        return try scan(directory: directory, removing: removing, runs: &runs)
    }

    /// ``scan(directory:removing:)`` that also hands back the eviction policy's runs the
    /// catalog kept.
    static func scan(directory: String, removing: Bool = true, runs: inout [String: [SegmentQueues.Run]]) throws -> ([StoreEntry], StartupReport) {
        let resources = directory + "/resources"
        var report = StartupReport()
        let loaded = try StoreCatalog.loadWithRuns(directory: directory)
        let catalog = loaded?.entries
        runs = loaded?.runs ?? [:]
        report.catalogFound = catalog != nil
        let files = try ResourceFiles(directory: directory)
        let names = Set(files.resources)
        var entries: [StoreEntry] = []
        var known = Set<String>()
        /// Deletes a leftover; a failure is reported, never counted as removed.
        func remove(_ path: String) -> Bool {
            do {
                try FileSystem.unlink(path)
                return true
            } catch let error as SparseCacheError where error.errno == ENOENT {
                return true
            } catch {
                report.removalFailures.append("\(error)")
                return false
            }
        }
        for var entry in catalog ?? [] where names.contains(entry.name) {
            guard !known.contains(entry.name) else { continue }
            known.insert(entry.name)
            entry.allocatedBytes = try allocatedBytes(resources + "/" + entry.name)
            entries.append(entry)
        }
        report.foreignFiles = files.foreignFiles
        if removing {
            for name in files.temporaryIndexes { _ = remove(resources + "/" + name) }
            for name in files.dataWithoutIndex where remove(resources + "/" + name) { report.orphansRemoved += 1 }
            // An index whose data file is gone names bytes nobody has: a power cut that kept a
            // new resource's index name but not its data file's (creation syncs no directory;
            // nothing was claimed then), or damage. It would block its name for ever.
            for name in files.indexesWithoutData where remove(resources + "/" + name) { report.orphansRemoved += 1 }
        }
        for name in files.resources where !known.contains(name) {
            let path = resources + "/" + name
            do {
                let stored = try SparseFile.storedSummary(path: path)
                guard let key = stored.metadata.key else {
                    throw SparseCacheError(.corruptIndex, operation: "open", path: path, detail: "no key in the metadata")
                }
                entries.append(
                    StoreEntry(
                        key: key, name: name, length: stored.length, presentBytes: stored.presentBytes,
                        allocatedBytes: try allocatedBytes(path), lastAccess: 0, pinnedPrefix: 0, isOpen: false))
                known.insert(name)
                report.indexesRead += 1
            } catch let error as SparseCacheError where error.code == .corruptIndex || error.code == .unsupportedVersion {
                // The index first: a data file without one is an orphan, never a resource.
                if removing, remove(SparseFile.indexPath(for: path)), remove(path) { report.damagedRemoved += 1 }
            }
        }
        if removing, report.orphansRemoved + report.damagedRemoved > 0 {
            try FileSystem.syncParentDirectory(of: resources + "/x")
        }
        report.resources = entries.count
        return (entries, report)
    }

    /// Disk space of a resource: the blocks of its data file and its index.
    static func allocatedBytes(_ path: String) throws -> Int64 {
        let data = try FileSystem.status(ofPath: path)?.allocatedBytes ?? 0
        let index = try FileSystem.status(ofPath: SparseFile.indexPath(for: path))?.allocatedBytes ?? 0
        return data + index
    }

    static func summarize(directory: String, budget: Int64, entries: [StoreEntry], open: Set<String>) -> StoreSummary {
        let sorted = entries.map { entry -> StoreEntry in
            var entry = entry
            entry.isOpen = open.contains(entry.key)
            return entry
        }.sorted { ($0.lastAccess, $0.key) < ($1.lastAccess, $1.key) }
        return StoreSummary(
            directory: directory, budget: budget, allocatedBytes: sorted.reduce(0) { $0 + $1.allocatedBytes },
            presentBytes: sorted.reduce(0) { $0 + $1.presentBytes }, entries: sorted)
    }

    /// Closes every open resource (committing it), saves the catalog and releases the
    /// directory. Handles still held afterwards get `.closed`.
    public func close() async throws {
        if isClosed { return }
        isClosed = true
        await evictionQueue?.value
        var firstError: Error?
        // Keys under their lock too: a release that took its resource out of `live` may still
        // be closing it and refreshing its entry, which must reach the catalog saved below.
        for key in Set(live.keys).union(lockedKeys) {
            await lockKey(key)
            if let resource = live.removeValue(forKey: key) {
                do { try await resource.file.close() } catch { firstError = firstError ?? error }
                await refresh(key: key, from: resource.file)
            }
            unlockKey(key)
        }
        saveTask?.cancel()
        await smallObjects.close()
        do { try await saveCatalog() } catch { firstError = firstError ?? error }
        let lockFile = self.lockFile
        _ = try? await io.run { lockFile.unlock() }
        if let firstError { throw firstError }
    }

    // MARK: Summary

    /// Every resource with its sizes and last access, least recently used first, plus totals.
    /// Answered from memory.
    public func summary() async -> StoreSummary {
        await learnLengthsOfOpenResources()
        let small = await smallObjects.entries()
        var summary = Self.summarize(directory: directory, budget: budget, entries: Array(entries.values) + small, open: Set(live.keys))
        // The logs' headers and dead records count too: the budget sees them.
        summary.allocatedBytes = allocatedBytes
        summary.housekeepingFailures = housekeepingFailures
        summary.evictions = evictions
        return summary
    }

    /// Copies into the entries the lengths that open resources learned since they were opened
    /// (a fill learns it from the origin's first answer; the entry hears of it otherwise only
    /// at the last release), so a summary shows the length, and the percentage, of a resource
    /// still open.
    private func learnLengthsOfOpenResources() async {
        let unknown = live.compactMap { key, resource in entries[key]?.length == nil ? (key, resource.file) : nil }
        for (key, file) in unknown {
            guard let length = await file.length else { continue }
            // Re-checked after the await: the entry may have been removed or made anew.
            if var entry = entries[key], entry.length == nil, live[key]?.file === file {
                entry.length = length
                entries[key] = entry
                markCatalogDirty()
            }
        }
    }

    /// The totals of ``summary()`` without its entries (`entries` empty, ``StoreSummary/resources``
    /// set): for metrics and status, which must not build an entry per resource on every
    /// scrape (a million small objects).
    package func totals() async -> StoreSummary {
        let small = await (count: smallObjects.count, present: smallObjects.liveBodyBytes)
        var summary = StoreSummary(
            directory: directory, budget: budget, allocatedBytes: allocatedBytes,
            presentBytes: entries.values.reduce(0) { $0 + $1.presentBytes } + small.present, entries: [])
        summary.resources = entries.count + small.count
        summary.housekeepingFailures = housekeepingFailures
        summary.evictions = evictions
        return summary
    }

    /// The keys, of both kinds of resource, that start with `prefix` (no entry built).
    public func keys(withPrefix prefix: String) async -> [String] {
        entries.keys.filter { $0.hasPrefix(prefix) } + (await smallObjects.keys(withPrefix: prefix))
    }

    /// Counts a housekeeping failure that no caller sees and logs it through
    /// ``StoreOptions/log``. The fill reports the releases it runs in the background here.
    package func noteHousekeepingFailure(_ kind: HousekeepingFailures.Kind, key: String, _ error: Error) {
        let what = kind == .eviction ? "eviction after a write to '\(key)'" : "release of '\(key)'"
        let line = "\(what) failed: \(error)"
        housekeepingFailures.record(kind, line: line)
        options.log?(line)
    }

    /// Whether the store may have an entry for `key` (as a sparse resource): false means it
    /// surely has none, answered on the caller's thread without a hop into the store's actor
    /// (a cache miss asks this first). True means ``entry(for:)`` decides.
    package nonisolated func mayHold(_ key: String) -> Bool { presence.mayContain(key) }

    /// The entry for `key`, if the store has it.
    public func entry(for key: String) -> StoreEntry? {
        guard var entry = entries[key] else { return nil }
        entry.isOpen = live[key] != nil
        return entry
    }

    /// Disk space taken by all resources (estimated for open resources between measurements)
    /// and the small-object logs.
    public var allocatedBytes: Int64 { entries.allocatedBytes + smallObjects.diskBytes }

    /// Whether the store holds more than its budget (one question, one hop to the store).
    package var isOverBudget: Bool { allocatedBytes > budget }

    // MARK: Per-key serialisation

    /// Waits until no other open, close, trim or removal of `key` is in progress.
    func lockKey(_ key: String) async {
        while lockedKeys.contains(key) {
            await withCheckedContinuation { keyWaiters[key, default: []].append($0) }
        }
        lockedKeys.insert(key)
    }

    func unlockKey(_ key: String) {
        lockedKeys.remove(key)
        for waiter in keyWaiters.removeValue(forKey: key) ?? [] { waiter.resume() }
    }

    func checkOpen(_ operation: String) throws {
        if isClosed { throw SparseCacheError(.closed, operation: operation, path: directory, detail: "store is closed") }
    }

    static func now() -> Int64 {
        var time = timespec()
        clock_gettime(CLOCK_REALTIME, &time)
        return Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
    }

    func markCatalogDirty() {
        catalogDirty = true
        guard saveTask == nil, !isClosed else { return }
        let delay = options.catalogSaveDelay
        saveTask = Task {
            try? await Task.sleep(for: delay)
            await self.saveFromTimer()
        }
    }

    private func saveFromTimer() async {
        saveTask = nil
        guard !isClosed else { return }
        try? await saveCatalog()
    }

    /// Writes the catalog now (atomically: temporary file, sync, rename, directory sync).
    package func saveCatalog() async throws {
        // A save in flight (the timer's) took its snapshot already: wait for it, then save
        // again only if something changed since. Re-check after each await: another may start.
        while let running = catalogSaving { _ = try? await running.value }
        guard catalogDirty else { return }
        catalogDirty = false
        let snapshot = Array(entries.values)
        let runs = queues.runs
        let directory = self.directory
        let io = self.io
        // The task (on this actor) clears its own entry as it ends: a waiter that looked again
        // before the saver resumed would otherwise find it still there, done, and spin. No
        // other save starts before then (each waits above), so the entry is this task's.
        let task = Task {
            defer { self.catalogSaving = nil }
            try await io.run { try StoreCatalog.save(snapshot, runs: runs, directory: directory) }
        }
        catalogSaving = task
        do {
            try await task.value
        } catch {
            catalogDirty = true
            throw error
        }
    }
}
