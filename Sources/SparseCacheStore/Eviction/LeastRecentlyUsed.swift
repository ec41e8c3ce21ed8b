/// The ``EvictionPolicy/lru`` choice of whole resources to delete, shared by the store's
/// eviction pass and the benchmark's trace simulator.
package enum LeastRecentlyUsed {
    /// Entries in eviction order: least recently used first (ties by key).
    package static func order(_ entries: some Sequence<StoreEntry>) -> [StoreEntry] {
        entries.sorted { ($0.lastAccess, $0.key) < ($1.lastAccess, $1.key) }
    }

    /// The keys to delete, in `order`, until `need` bytes are freed: never a resource that is
    /// held (open or locked) or wholly pinned.
    package static func victims(in order: [StoreEntry], need: Int64, isHeld: (String) -> Bool) -> [String] {
        var need = need
        var victims: [String] = []
        for entry in order where need > 0 {
            guard !isHeld(entry.key), entry.pinnedPrefix != .max else { continue }
            victims.append(entry.key)
            need -= entry.allocatedBytes
        }
        return victims
    }
}
