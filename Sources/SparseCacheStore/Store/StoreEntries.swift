/// The store's sparse resources by key, with the sum of their allocated bytes kept up to date
/// as entries change. The budget is checked after every small object stored (thousands a
/// second): summing every entry each time made that check grow with the cache.
struct StoreEntries {
    private var table: [String: StoreEntry]
    /// The allocated bytes of every entry, summed.
    private(set) var allocatedBytes: Int64
    /// The keys, for questions from outside the store's actor (kept as the table changes).
    /// Shared by copies: the store changes its one table in place, never a copy of it.
    let presence: KeyPresence

    /// The entries, one per key; of two for one key the one used last. `presence` is told
    /// every key from now on.
    init(_ entries: [StoreEntry], presence: KeyPresence) {
        self.presence = presence
        table = Dictionary(entries.map { ($0.key, $0) }, uniquingKeysWith: { $1.lastAccess > $0.lastAccess ? $1 : $0 })
        allocatedBytes = table.values.reduce(0) { $0 + $1.allocatedBytes }
        presence.insert(contentsOf: table.keys)
    }

    subscript(key: String) -> StoreEntry? {
        get { table[key] }
        set {
            let old = table[key]
            allocatedBytes += (newValue?.allocatedBytes ?? 0) - (old?.allocatedBytes ?? 0)
            // Present before the table names the key, absent after it dropped it.
            if old == nil, newValue != nil { presence.insert(key) }
            table[key] = newValue
            if old != nil, newValue == nil { presence.remove(key) }
        }
    }

    var keys: Dictionary<String, StoreEntry>.Keys { table.keys }
    var values: Dictionary<String, StoreEntry>.Values { table.values }
    var count: Int { table.count }
}
