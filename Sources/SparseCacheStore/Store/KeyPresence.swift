@_spi(Locking) import SparseCacheEngine

/// The keys a store holds, as hashes, for questions from outside its actor: a key whose hash is
/// not here is surely not stored, and the caller knows it without a hop into the store (two jobs
/// on the event loop, about 1.2 µs each). A key whose hash is here may be stored: the store
/// itself answers.
///
/// The store inserts a key before its table names it and removes it after the table dropped
/// it, in the same synchronous step, so at any moment every key of the table is here: "absent"
/// is never wrong, whichever thread asks. 32-bit hashes, not keys: 4 bytes a key in a set, 5 to
/// 11 with the set's free room. Two keys with one hash are counted, so removing one leaves the
/// other present; an absent key whose hash is here (about one in 4,000 with a million keys)
/// only costs the hop this saves.
///
/// ``SparseStore`` keeps one for its resources. The small-object log does not: filling one at
/// open took 0.25 to 0.45 µs a key (every key a cache miss by then), a third more restart time
/// at 10^5 objects against a goal of 1 s at 10^6, to save two jobs of a miss.
package final class KeyPresence: Sendable {
    private struct Hashes {
        var present = Set<UInt32>()
        /// Hashes held by more than one key, with how many.
        var shared: [UInt32: Int] = [:]

        mutating func add(_ hash: UInt32) {
            if !present.insert(hash).inserted { shared[hash, default: 1] += 1 }
        }
    }

    private let hashes = Lock(Hashes())
    private let hash: @Sendable (String) -> UInt32

    /// - Parameter hash: the key's hash (tests give one that collides).
    package init(hash: @escaping @Sendable (String) -> UInt32 = { UInt32(truncatingIfNeeded: $0.hashValue) }) {
        self.hash = hash
    }

    /// Whether `key` may be held (false: surely not).
    package func mayContain(_ key: String) -> Bool {
        let hash = hash(key)
        return hashes.withLock { $0.present.contains(hash) }
    }

    /// Notes that the store now holds `key`, which it did not hold before.
    package func insert(_ key: String) {
        let hash = hash(key)
        hashes.withLock { $0.add(hash) }
    }

    /// Notes that the store no longer holds `key`, which it held.
    package func remove(_ key: String) {
        let hash = hash(key)
        hashes.withLock { hashes in
            switch hashes.shared[hash] {
            case .none: hashes.present.remove(hash)
            case 2: hashes.shared[hash] = nil
            case let count?: hashes.shared[hash] = count - 1
            }
        }
    }

    /// Notes every key of `keys` (held from now on, none of them held before).
    package func insert(contentsOf keys: some Collection<String>) {
        let values = keys.map(hash)
        hashes.withLock { hashes in
            hashes.present.reserveCapacity(hashes.present.count + values.count)
            for hash in values { hashes.add(hash) }
        }
    }

    /// How many hashes are held (a key per hash but for collisions): for tests.
    package var count: Int { hashes.withLock { $0.present.count + $0.shared.values.reduce(0) { $0 + $1 - 1 } } }
}
