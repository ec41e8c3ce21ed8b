/// Every resource of a running store at one moment, to list without holding the store's
/// actor: see ``SparseStore/listingSnapshot()``.
package struct StoreSnapshot: Sendable, Sequence {
    package let directory: String
    package let budget: Int64
    /// Disk space of everything the store holds (dead log records included).
    package let allocatedBytes: Int64
    let sparse: [StoreEntry]
    let small: SmallObjectStore.EntrySnapshot
    package let housekeepingFailures: HousekeepingFailures
    package let evictions: Int

    /// How many resources it holds.
    package var count: Int { sparse.count + small.count }

    /// The sparse resources, then the small objects, each made as it is reached.
    package func makeIterator() -> Iterator {
        Iterator(sparse: sparse.makeIterator(), small: small.makeIterator())
    }

    package struct Iterator: IteratorProtocol {
        var sparse: IndexingIterator<[StoreEntry]>
        var small: SmallObjectStore.EntrySnapshot.Iterator

        package mutating func next() -> StoreEntry? { sparse.next() ?? small.next() }
    }
}
