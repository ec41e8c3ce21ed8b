import SparseCacheEngine

extension SparseStore {
    /// Reads a store directory without taking its lock (for `sparsecache ls`), changing
    /// nothing on disk.
    ///
    /// Lengths and present bytes come from each resource's index, the truth: the catalog lags
    /// it by up to ``StoreOptions/catalogSaveDelay`` while a store runs, and by everything
    /// since the last save after a crash (a `serve` killed with SIGKILL). The catalog gives
    /// only what no index holds: last access and pinned prefix. A resource whose index
    /// cannot be used is left out, as the next open of the store removes it.
    ///
    /// Cost: one index recovery per resource (superblocks, checkpoint, journal; no data).
    ///
    /// - Throws: `.notFound` when `directory` is not a cache directory; `.io`.
    public static func inspect(directory: String) async throws -> StoreSummary {
        let io = BlockingExecutor(label: "sparsecache.inspect")
        return try await io.run {
            try requireCacheDirectory(directory, operation: "inspect store")
            let entries =
                try indexedEntries(directory: directory)
                + SmallObjectStore.inspectEntries(directory: directory + "/" + objectsDirectoryName)
            return summarize(directory: directory, budget: 0, entries: entries, open: [])
        }
    }

    /// Throws unless `directory` is a store directory (it has a `resources` directory).
    package static func requireCacheDirectory(_ directory: String, operation: String) throws {
        guard let status = try FileSystem.status(ofPath: directory) else {
            throw SparseCacheError(.notFound, operation: operation, path: directory, detail: "no such cache directory")
        }
        guard status.isDirectory else {
            throw SparseCacheError(.invalidArgument, operation: operation, path: directory, detail: "not a directory")
        }
        guard try FileSystem.status(ofPath: directory + "/resources")?.isDirectory == true else {
            throw SparseCacheError(
                .notFound, operation: operation, path: directory,
                detail: "not a sparsecache cache directory (it has no 'resources' directory)")
        }
    }

    /// One entry per resource whose data file and usable index are both there, with the
    /// index's numbers and the catalog's access time and pinned prefix.
    static func indexedEntries(directory: String) throws -> [StoreEntry] {
        var entries: [StoreEntry] = []
        try forEachIndexedEntry(directory: directory) { entries.append($0) }
        return entries
    }

    /// Calls `body` with each resource of `directory` as it is read (sparse resources from
    /// their indexes, then the small objects through their logs' hints), without building a
    /// list: `sparsecache ls` over a million resources. No lock is taken and nothing changes on
    /// disk; blocking: call it off the cooperative pool. The order is the files' (not LRU).
    ///
    /// - Throws: `.notFound` when `directory` is not a cache directory; `.io`; what `body`
    ///   throws (which ends the listing).
    package static func forEachEntry(directory: String, _ body: (StoreEntry) throws -> Void) throws {
        try requireCacheDirectory(directory, operation: "inspect store")
        try forEachIndexedEntry(directory: directory, body)
        try SmallObjectStore.forEachEntry(directory: directory + "/" + objectsDirectoryName, body)
    }

    private static func forEachIndexedEntry(directory: String, _ body: (StoreEntry) throws -> Void) throws {
        let resources = directory + "/resources"
        let catalog = Dictionary(
            (try StoreCatalog.load(directory: directory) ?? []).map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        for name in try ResourceFiles(directory: directory).resources {
            let path = resources + "/" + name
            let stored: SparseFile.StoredSummary
            do {
                stored = try SparseFile.storedSummary(path: path)
            } catch let error as SparseCacheError
                where error.code == .corruptIndex || error.code == .unsupportedVersion || error.code == .notFound
            {
                continue  // unusable, or removed since the listing
            }
            guard let key = stored.metadata.key else { continue }
            let known = catalog[name].flatMap { $0.key == key ? $0 : nil }
            try body(
                StoreEntry(
                    key: key, name: name, length: stored.length, presentBytes: stored.presentBytes,
                    allocatedBytes: try allocatedBytes(path), lastAccess: known?.lastAccess ?? 0,
                    pinnedPrefix: known?.pinnedPrefix ?? 0, isOpen: false))
        }
    }

    /// Every resource as the running store knows it now, for a listing streamed outside the
    /// actor (the admin listener's `GET /resources`): the sparse entries copied, the small
    /// objects' index shared copy-on-write (a change to the store while the listing runs
    /// copies the index once).
    package func listingSnapshot() async -> StoreSnapshot {
        let open = Set(live.keys)
        let sparse = entries.values.map { entry -> StoreEntry in
            var entry = entry
            entry.isOpen = open.contains(entry.key)
            return entry
        }
        return StoreSnapshot(
            directory: directory, budget: budget, allocatedBytes: allocatedBytes, sparse: sparse,
            small: await smallObjects.entrySnapshot(), housekeepingFailures: housekeepingFailures, evictions: evictions)
    }
}
