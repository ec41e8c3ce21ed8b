import SparseCacheEngine

/// What ``StoreVerifier`` checked and found in a cache directory. Codable:
/// `sparsecache verify --cache-dir DIR --json` prints it.
public struct StoreVerifyReport: Sendable, Equatable, Codable {
    /// One resource (a data file with its index).
    public struct Resource: Sendable, Equatable, Codable {
        /// The data file's name in `DIR/resources`.
        public var name: String
        /// The key in its index's metadata (nil when the index is unusable).
        public var key: String?
        public var length: Int64?
        public var presentBytes: Int64
        public var allocatedBytes: Int64
        /// "clean", "damaged" (see `report`), "unusable" (no usable index state: `problem`),
        /// or "vanished" (removed by the store's owner while it was being checked).
        public var status: String
        public var problem: String?
        /// The resource's own verification: checksums, data file, index.
        public var report: VerifyReport?
        /// With `--repair`: the resource was removed (its index was unusable).
        public var removed = false
    }

    /// A file the store's layout does not account for as a whole resource.
    /// One small-object log file, every record checked (``SmallObjectStore``).
    public struct SmallObjectLog: Sendable, Equatable, Codable {
        public var name: String
        public var size: Int64
        public var records: Int
        /// "clean", "damaged" (stretches that hold no valid record: skipped, never served) or
        /// "unusable" (the header: the next open deletes the file).
        public var status: String
        public var problem: String?
    }

    public struct Leftover: Sendable, Equatable, Codable {
        /// Path relative to the cache directory.
        public var path: String
        /// "data file without an index" (a crash while creating or evicting: claims nothing),
        /// "index without a data file" (its present bytes are lost), or "temporary file".
        public var kind: String
        public var allocatedBytes: Int64
        /// With `--repair`: deleted.
        public var removed = false
    }

    public var directory: String
    /// Another process (a running `serve`, `fetch`) owned the directory: the check was
    /// read-only, and catalog lag and temporary files are expected.
    public var inUse: Bool
    public var resources: [Resource] = []
    /// "catalog" when there is none or it is damaged; else nil.
    public var catalogProblem: String?
    /// Where the catalog and the indexes disagree, one line each. The indexes are the truth;
    /// the catalog lags them after a crash.
    public var catalogDifferences: [String] = []
    public var leftovers: [Leftover] = []
    public var smallObjectLogs: [SmallObjectLog] = []
    /// Files in `resources` that the store does not make, left alone.
    public var foreignFiles = 0
    /// With `--repair`: the catalog was rewritten from the indexes.
    public var catalogRewritten = false
    public var repaired = false

    public var segmentsChecked: Int { resources.reduce(0) { $0 + ($1.report?.segmentsChecked ?? 0) } }
    public var bytesChecked: Int64 { resources.reduce(0) { $0 + ($1.report?.bytesChecked ?? 0) } }
    public var presentBytes: Int64 { resources.reduce(0) { $0 + $1.presentBytes } }
    public var allocatedBytes: Int64 {
        resources.reduce(0) { $0 + $1.allocatedBytes } + leftovers.reduce(0) { $0 + $1.allocatedBytes }
            + smallObjectLogs.reduce(0) { $0 + $1.size }
    }
    /// Resources with damage or without a usable index.
    public var damagedResources: Int { resources.filter { $0.status == "damaged" || $0.status == "unusable" }.count }
    /// Indexes whose data file is gone.
    public var orphanedIndexes: Int { leftovers.filter { $0.kind == Self.indexWithoutData }.count }

    /// No damaged resource, no unusable index, no index without its data. A lagging catalog,
    /// data files without an index and temporary files are what a crash leaves; they are
    /// reported, not counted as damage.
    public var damagedSmallObjectLogs: Int { smallObjectLogs.filter { $0.status != "clean" }.count }

    public var isClean: Bool { damagedResources == 0 && orphanedIndexes == 0 && damagedSmallObjectLogs == 0 }

    static let dataWithoutIndex = "data file without an index"
    static let indexWithoutData = "index without a data file"
    static let temporaryFile = "temporary file"
}
