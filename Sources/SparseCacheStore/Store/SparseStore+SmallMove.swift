import SparseCacheEngine

extension SparseStore {
    /// Moves the complete resource of `key`, when it is at most `maximum` bytes long and nobody
    /// has it open, into the small-object logs (``smallObjects``): its body and metadata become
    /// one record, and its data file and index go. Returns whether it moved.
    ///
    /// For resources whose length was learned only at their end (an answer without one, which
    /// is received into a resource as it arrives): once complete, a small one costs a record
    /// instead of a data file, an index and a descriptor while open.
    ///
    /// Durability: the record is durable (written and fdatasync'ed) before the files are
    /// deleted, index first. A crash in between leaves both, with the same bytes and metadata;
    /// lookups take the resource, and the next move finishes the job. The key's lock is held
    /// throughout, so no reader opens the resource meanwhile and no eviction picks it. The
    /// bytes are read back CRC-checked: a damaged segment fails the move and the resource
    /// stays as it is (a read of it drops the segment, to be fetched again).
    ///
    /// - Throws: `.io` when reading the resource, writing the record or deleting the files
    ///   fails; `.closed` when the store is closed.
    @discardableResult
    package func moveToSmallObject(key: String, maximum: Int64) async throws -> Bool {
        try checkOpen("move to small objects")
        await lockKey(key)
        defer { unlockKey(key) }
        // Re-checked under the lock: a reader may have opened it since the caller looked.
        guard live[key] == nil, let entry = entries[key], let length = entry.length, length <= maximum,
            entry.presentBytes == length, entry.pinnedPrefix == 0
        else { return false }
        var options = SparseFileOptions()
        options.create = false
        let file = try await SparseFile.open(resourcesDirectory + "/" + entry.name, mode: .readOnly, options: options)
        let body: [UInt8]
        let metadata: ResourceMetadata
        do {
            guard await file.isComplete, await file.length == length, await file.metadata.key == key else {
                try await file.close()
                return false
            }
            body = length == 0 ? [] : try await file.read(offset: 0, length: Int(length))
            metadata = await file.metadata
            try await file.close()
        } catch {
            try? await file.close()
            throw error
        }
        try await smallObjects.put(key: key, metadata: metadata, body: body)
        try await deleteFiles(name: entry.name)
        entries[key] = nil
        keyByName[entry.name] = nil
        queues.noteRemoved(key: key)
        markCatalogDirty()
        return true
    }
}
