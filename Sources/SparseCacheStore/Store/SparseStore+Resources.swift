import SparseCacheEngine

extension SparseStore {
    /// Opens the resource for `key`, creating it when the store does not have it. The resource
    /// stays pinned (never evicted) until the handle is released. Concurrent opens of one key
    /// share one ``SparseFile``.
    ///
    /// - Parameters:
    ///   - length: the resource length when known (checked against a stored one).
    ///   - contentType: stored in the metadata of a new resource.
    /// - Throws: `.invalidArgument` for an empty or oversized key or a conflicting length;
    ///   `.closed`; `.io`. A resource whose index is damaged is dropped and created anew.
    public func open(key: String, length: Int64? = nil, contentType: String? = nil) async throws -> ResourceHandle {
        try checkOpen("open")
        try Self.validate(key: key)
        await lockKey(key)
        defer { unlockKey(key) }
        try checkOpen("open")
        if let file = live[key]?.file {
            live[key]?.leases += 1
            if let length, await file.length != length { try await file.setLength(length) }
            touch(key)
            return ResourceHandle(key: key, file: file, store: self)
        }
        let file = try await openFile(key: key, length: length, contentType: contentType)
        live[key] = LiveResource(file: file, leases: 1)
        touch(key)
        return ResourceHandle(key: key, file: file, store: self)
    }

    /// Runs `body` with the resource for `key` open, releasing it afterwards.
    public func withResource<T: Sendable>(
        key: String, length: Int64? = nil, _ body: @Sendable (ResourceHandle) async throws -> T
    ) async throws -> T {
        let handle = try await open(key: key, length: length)
        do {
            let result = try await body(handle)
            try await handle.release()
            return result
        } catch {
            // The body's error is the one the caller gets; a release failing after it is counted
            // and logged, not lost.
            do { try await handle.release() } catch let releaseError { noteHousekeepingFailure(.release, key: key, releaseError) }
            throw error
        }
    }

    static func validate(key: String) throws(SparseCacheError) {
        if key.isEmpty {
            throw SparseCacheError(.invalidArgument, operation: "open", detail: "empty key")
        }
        if key.utf8.count > maximumKeyLength {
            throw SparseCacheError(
                .invalidArgument, operation: "open",
                detail: "key is \(key.utf8.count) bytes, over the limit of \(maximumKeyLength)")
        }
    }

    private func fileOptions(length: Int64?, contentType: String?, key: String) -> SparseFileOptions {
        var fileOptions = SparseFileOptions()
        fileOptions.length = length
        fileOptions.commitPolicy = options.commitPolicy
        fileOptions.metadata = ResourceMetadata(key: key, contentType: contentType)
        return fileOptions
    }

    /// Opens the file behind `key` (the caller holds the key's lock).
    private func openFile(key: String, length: Int64?, contentType: String?) async throws -> SparseFile {
        if let entry = entries[key] {
            let path = resourcesDirectory + "/" + entry.name
            var reopen = fileOptions(length: length, contentType: contentType, key: key)
            reopen.create = false
            do {
                let file = try await SparseFile.open(path, options: reopen)
                if await file.metadata.key == key { return file }
                // The file holds another key: the catalog was wrong. Forget this entry.
                try? await file.close()
                keyByName[entry.name] = await file.metadata.key
                entries[key] = nil
                queues.noteRemoved(key: key)
            } catch let error as SparseCacheError
                where [.corruptIndex, .unsupportedVersion, .corruptData, .notFound].contains(error.code)
            {
                // A damaged resource in a cache is dropped and fetched again.
                try await deleteFiles(name: entry.name)
                entries[key] = nil
                keyByName[entry.name] = nil
                queues.noteRemoved(key: key)
            }
        }
        let (name, file) = try await createFile(key: key, length: length, contentType: contentType)
        if await file.metadata.key != key {
            var metadata = await file.metadata
            metadata.key = key
            try await file.setMetadata(metadata)
            try await file.commit()
        }
        entries[key] = StoreEntry(
            key: key, name: name, length: length, presentBytes: 0, allocatedBytes: 0, lastAccess: Self.now(),
            pinnedPrefix: options.pinnedPrefix, isOpen: true)
        keyByName[name] = key
        markCatalogDirty()
        return file
    }

    /// Creates the resource's files under the first candidate name that no other key uses and
    /// no file occupies. The creation itself checks that the name is free (``NameTaken``): a
    /// name a file occupies that no key claims holds leftovers (the scan removes orphans) or a
    /// foreign file, and is passed over.
    private func createFile(key: String, length: Int64?, contentType: String?) async throws -> (String, SparseFile) {
        var create = fileOptions(length: length, contentType: contentType, key: key)
        create.segmentSize = options.segmentSize
        create.namesIndexAtFirstCommit = true
        for attempt in 0..<1000 {
            let name = ResourceNaming.candidate(for: key, attempt: attempt)
            if let owner = keyByName[name], owner != key { continue }
            // A name this key holds already is opened whatever is there.
            create.mustBeNew = keyByName[name] == nil
            do {
                return (name, try await SparseFile.open(resourcesDirectory + "/" + name, options: create))
            } catch is NameTaken {
                continue
            }
        }
        throw SparseCacheError(
            .io, operation: "open", path: resourcesDirectory, detail: "no free file name for key after 1000 attempts")
    }

    /// Called by the last handle's release: commits and closes the file and measures it.
    func release(key: String) async throws {
        guard try await closeIfLastLease(key: key) else { return }
        // Outside the key's lock: the pass may pick this very key as its victim.
        try await enforceBudget()
    }

    /// Drops one lease; the last one commits and closes the file. Returns true when it closed.
    private func closeIfLastLease(key: String) async throws -> Bool {
        await lockKey(key)
        defer { unlockKey(key) }
        guard let resource = live[key] else { return false }
        if resource.leases > 1 {
            live[key]?.leases -= 1
            touch(key)
            return false
        }
        live[key] = nil
        var closeError: Error?
        do { try await resource.file.close() } catch { closeError = error }
        await refresh(key: key, from: resource.file)
        touch(key)
        if let closeError { throw closeError }
        return true
    }

    /// Updates an entry's sizes from its file (present bytes) and the disk (allocated bytes).
    /// The disk is not asked when this open of the file changed nothing on it: the entry's
    /// allocated bytes were measured when the store opened or the file last closed, and only
    /// an open's own writes, discards or recovery change them (the cache directory is this
    /// store's alone).
    func refresh(key: String, from file: SparseFile) async {
        guard let name = entries[key]?.name else { return }
        let (length, presentBytes, leftUnchanged) = await file.sizes
        let path = resourcesDirectory + "/" + name
        let measured = leftUnchanged ? nil : try? await io.run({ try Self.allocatedBytes(path) })
        // Re-read after the awaits: a touch, a pin or a write may have changed the entry (or the
        // resource been removed and made anew) meanwhile. Writing back the copy read before them
        // undid pins, moved the resource back in LRU order and made the byte count drift.
        guard var entry = entries[key], entry.name == name else { return }
        entry.length = length
        entry.presentBytes = presentBytes
        if let measured { entry.allocatedBytes = measured }
        entries[key] = entry
        markCatalogDirty()
    }

    func touch(_ key: String) {
        guard var entry = entries[key] else { return }
        entry.lastAccess = max(Self.now(), entry.lastAccess + 1)
        entries[key] = entry
        markCatalogDirty()
    }

    func noteWrite(key: String, result: WriteResult) async {
        guard var entry = entries[key] else { return }
        let written = result.completed.reduce(Int64(0)) { $0 + Int64($1.count) }
        entry.allocatedBytes += written
        entry.presentBytes += written
        entry.lastAccess = max(Self.now(), entry.lastAccess + 1)
        entries[key] = entry
        if let file = live[key]?.file {
            let shift = Int64(file.segmentSize.trailingZeroBitCount)
            touchClock += 1
            for range in result.completed {
                let segments = Int(range.lowerBound >> shift)..<Int((range.upperBound + (1 << shift) - 1) >> shift)
                live[key]?.touch(segments, at: touchClock)
                if options.eviction == .sfifo { queues.noteWritten(key: key, segments: segments) }
            }
        }
        markCatalogDirty()
        // The write succeeded whatever the pass does: a failed pass is counted and logged, and
        // the next write or release runs another.
        if written > 0, allocatedBytes > budget {
            do { try await enforceBudget() } catch { noteHousekeepingFailure(.eviction, key: key, error) }
        }
    }

    func noteRead(key: String, range: Range<Int64>) async {
        guard let file = live[key]?.file, !range.isEmpty else { return }
        let shift = Int64(file.segmentSize.trailingZeroBitCount)
        touchClock += 1
        let segments = Int(range.lowerBound >> shift)..<Int((range.upperBound - 1) >> shift) + 1
        live[key]?.touch(segments, at: touchClock)
        if options.eviction == .sfifo { queues.noteRead(key: key, segments: segments) }
        touch(key)
    }

    /// Pins the whole resource: eviction never removes it (so a budget can be exceeded by
    /// pinned resources alone) until ``unpin(key:)``. Kept in the catalog across restarts.
    public func pin(key: String) throws {
        try pinPrefix(key: key, bytes: .max)
    }

    /// Ends a pin (of the whole resource or of a prefix).
    public func unpin(key: String) throws {
        try pinPrefix(key: key, bytes: 0)
    }

    /// Keeps the first `bytes` of the resource when it is evicted (`Int64.max`: all of it,
    /// never evicted).
    public func pinPrefix(key: String, bytes: Int64) throws {
        guard var entry = entries[key] else {
            throw SparseCacheError(.notFound, operation: "pin prefix", detail: "no resource for key '\(key)'")
        }
        entry.pinnedPrefix = max(0, bytes)
        entries[key] = entry
        markCatalogDirty()
    }

    /// Removes the resource for `key` (a sparse resource, a small object, or both).
    ///
    /// - Throws: `.locked` while it is open; `.notFound` when the store does not have it.
    public func remove(key: String) async throws {
        try checkOpen("remove")
        await lockKey(key)
        defer { unlockKey(key) }
        let small = try await smallObjects.remove(key: key)
        guard let entry = entries[key] else {
            if small { return }
            throw SparseCacheError(.notFound, operation: "remove", path: directory, detail: "no resource for key '\(key)'")
        }
        if live[key] != nil {
            throw SparseCacheError(.locked, operation: "remove", path: directory, detail: "'\(key)' is open by a reader or writer")
        }
        try await deleteFiles(name: entry.name)
        entries[key] = nil
        keyByName[entry.name] = nil
        queues.noteRemoved(key: key)
        markCatalogDirty()
    }

    /// Deletes a resource's files: the index first, so a crash in between leaves a data file
    /// that claims nothing (removed at the next start), never a resource claiming missing data.
    func deleteFiles(name: String) async throws {
        try await deleteFiles(names: [name])
    }

    /// Deletes the files of several resources with two directory syncs in all: every index,
    /// a sync, then every data file, and a sync.
    func deleteFiles(names: [String]) async throws {
        let paths = names.map { resourcesDirectory + "/" + $0 }
        guard let anyPath = paths.first else { return }
        try await io.run {
            for path in paths {
                // A resource whose index never took its name (its close failed) has it here.
                for index in SparseFile.indexPaths(for: path) where try FileSystem.exists(index) { try FileSystem.unlink(index) }
            }
            try FileSystem.syncParentDirectory(of: anyPath)
            for path in paths where try FileSystem.exists(path) {
                try FileSystem.unlink(path)
            }
            try FileSystem.syncParentDirectory(of: anyPath)
        }
    }
}
