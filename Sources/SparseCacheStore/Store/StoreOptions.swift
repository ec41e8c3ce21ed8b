import SparseCacheEngine

/// How a ``SparseStore`` manages its directory.
public struct StoreOptions: Sendable {
    /// The most disk space (bytes actually allocated: data blocks plus indexes) the store's
    /// resources may take. Past it, ``eviction`` chooses what goes.
    public var budget: Int64
    /// Keep at least this much free space on the file system, evicting more if needed.
    public var minimumFreeSpace: Int64?
    /// Segment size for new resources.
    public var segmentSize = SparseFileOptions.defaultSegmentSize
    /// Bytes at the start of every resource kept when the resource is evicted (a preload for
    /// the next play); 0 evicts whole resources. ``SparseStore/pinPrefix(key:bytes:)`` sets it
    /// per resource.
    public var pinnedPrefix: Int64 = 0
    /// Commit policy for the resources the store opens.
    public var commitPolicy = CommitPolicy.automatic
    /// How long after a change the catalog (keys, sizes, access times) is saved.
    public var catalogSaveDelay: Duration = .seconds(2)
    /// Where the store reports housekeeping that failed without failing a caller (an eviction
    /// after a write, a release in the background), one line each; nil: counted only (see
    /// ``SparseStore/housekeepingFailures``). Called on the store's actor: hand the line off,
    /// do not block.
    public var log: (@Sendable (String) -> Void)?
    /// What goes when the store is over its budget: whole least-recently-used resources
    /// (``EvictionPolicy/lru``) or segment runs in FIFO queues with a ghost list
    /// (``EvictionPolicy/sfifo``, the default). Either never evicts an open resource's bytes
    /// while closed ones can go, nor a pinned prefix.
    public var eviction = EvictionPolicy.defaultPolicy
    /// How the small-object logs are laid out and committed.
    public var smallObjects = SmallObjectOptions()

    public init(budget: Int64) {
        self.budget = budget
    }
}

/// A resource as the store sees it, for UIs: answered from memory.
public struct StoreEntry: Sendable, Equatable, Codable {
    public var key: String
    /// The file name of the data file inside the store's `resources` directory.
    public var name: String
    public var length: Int64?
    public var presentBytes: Int64
    /// Disk space taken (data blocks and index).
    public var allocatedBytes: Int64
    /// Last open, read or write, in nanoseconds since 1970: the order eviction follows (each
    /// access moves it at least one past the last). ``lastAccessTime`` is its public face.
    package var lastAccess: Int64
    /// Bytes at the start kept when the resource is evicted.
    public var pinnedPrefix: Int64
    /// Open by a reader or writer right now (never evicted while open).
    public var isOpen: Bool

    /// Last open, read or write (persisted across restarts).
    public var lastAccessTime: WallClockTime { WallClockTime(nanosecondsSince1970: lastAccess) }

    package init(
        key: String, name: String, length: Int64?, presentBytes: Int64, allocatedBytes: Int64, lastAccess: Int64, pinnedPrefix: Int64,
        isOpen: Bool
    ) {
        self.key = key
        self.name = name
        self.length = length
        self.presentBytes = presentBytes
        self.allocatedBytes = allocatedBytes
        self.lastAccess = lastAccess
        self.pinnedPrefix = pinnedPrefix
        self.isOpen = isOpen
    }

    /// Present bytes as a percentage of the length (nil while unknown).
    public var percentPresent: Double? {
        guard let length else { return nil }
        return length == 0 ? 100 : Double(presentBytes) * 100 / Double(length)
    }
}

/// Totals plus one entry per resource, least recently used first.
public struct StoreSummary: Sendable, Equatable, Codable {
    public var directory: String
    public var budget: Int64
    public var allocatedBytes: Int64
    public var presentBytes: Int64
    public var entries: [StoreEntry]
    /// Housekeeping that failed in this process (a live store's summary); nil when the
    /// directory was only inspected.
    public var housekeepingFailures: HousekeepingFailures?
    /// Resources evicted or trimmed in this process (a live store's summary).
    public var evictions: Int?
    /// How many resources the store holds, set by ``SparseStore/totals()`` whose `entries` is
    /// empty (nil otherwise: count `entries`).
    public var resources: Int?

    /// How many resources: ``resources`` when set, else the entries.
    public var resourceCount: Int { resources ?? entries.count }
}
