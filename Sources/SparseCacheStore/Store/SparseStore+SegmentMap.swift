import SparseCacheEngine

extension SparseStore {
    /// The present byte ranges of `key` as its committed index names them, for a status page:
    /// read from the index file on the store's blocking queue, without opening the resource
    /// (no lock, and no access recorded: looking does not change what is evicted first). Nil
    /// when the key is not a sparse resource here or its index cannot be read now.
    package func storedPresentRanges(key: String) async -> (length: Int64?, ranges: [Range<Int64>])? {
        guard let entry = entries[key] else { return nil }
        let path = resourcesDirectory + "/" + entry.name
        return try? await io.run { try SparseFile.storedPresentRanges(path: path) }
    }
}
