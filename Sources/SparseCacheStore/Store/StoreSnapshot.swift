/// Every resource of a running store at one moment, to list without holding the store's
/// actor: see ``SparseStore/listingSnapshot()``.
public struct StoreSnapshot: Sendable, Sequence {
    public let directory: String
    public let budget: Int64
    /// Disk space of everything the store holds (dead log records included).
    public let allocatedBytes: Int64
    let sparse: [StoreEntry]
    let small: SmallObjectStore.EntrySnapshot
    public let housekeepingFailures: HousekeepingFailures
    public let evictions: Int

    /// How many resources it holds.
    public var count: Int { sparse.count + small.count }

    /// The sparse resources, then the small objects, each made as it is reached.
    public func makeIterator() -> Iterator {
        Iterator(sparse: sparse.makeIterator(), small: small.makeIterator())
    }

    public struct Iterator: IteratorProtocol {
        var sparse: IndexingIterator<[StoreEntry]>
        var small: SmallObjectStore.EntrySnapshot.Iterator

        public mutating func next() -> StoreEntry? { sparse.next() ?? small.next() }
    }
}
