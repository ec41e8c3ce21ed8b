// Store fixtures shared by the store's suites and the cache's: keyed content, the usual
// store options, a resource filled whole.
@_spi(Locking) import SparseCacheEngine
import SparseCacheStore
import SeededRandom
import TestSupport

/// Each key's bytes are a pure function of the key and the offset.
package func keyedBytes(_ key: String, _ range: Range<Int64>) -> [UInt8] {
    sourceBytes(range, salt: UInt64(truncatingIfNeeded: key.utf8.reduce(5381) { ($0 << 5) &+ $0 &+ Int($1) }))
}

extension StoreOptions {
    /// Whole-resource LRU: the suites built on this check eviction against an LRU model
    /// (EvictionPolicyTests sets sfifo).
    package static func testing(budget: Int64, segmentSize: Int = 16384) -> StoreOptions {
        var options = StoreOptions(budget: budget)
        options.eviction = .lru
        options.segmentSize = segmentSize
        options.commitPolicy = .manual
        options.catalogSaveDelay = .milliseconds(50)
        return options
    }
}

/// Writes the whole resource for `key` through the store and releases it.
package func fill(_ store: SparseStore, key: String, length: Int64) async throws {
    let handle = try await store.open(key: key, length: length)
    try await handle.write(keyedBytes(key, 0..<length), at: 0)
    try await handle.file.commit()
    try await handle.release()
}

/// A store over `directory` with the usual test options (``StoreOptions/testing(budget:segmentSize:)``,
/// a 10 MiB budget) holding `keys`, each filled whole with `length` bytes (``fill(_:key:length:)``).
package func openStore(_ directory: TemporaryDirectory, filling keys: [String] = [], length: Int64 = 0) async throws -> SparseStore {
    let store = try await SparseStore.open(directory: directory.path, options: .testing(budget: 10 << 20))
    for key in keys { try await fill(store, key: key, length: length) }
    return store
}
