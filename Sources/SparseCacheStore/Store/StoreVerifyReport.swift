import SparseCacheEngine

/// What ``StoreVerifier`` checked and found in a cache directory. Codable:
/// `sparsecache verify --cache-dir DIR --json` prints it.
package struct StoreVerifyReport: Sendable, Equatable, Codable {
    /// One resource (a data file with its index).
    package struct Resource: Sendable, Equatable, Codable {
        /// The data file's name in `DIR/resources`.
        package var name: String
        /// The key in its index's metadata (nil when the index is unusable).
        package var key: String?
        package var length: Int64?
        package var presentBytes: Int64
        package var allocatedBytes: Int64
        /// "clean", "damaged" (see `report`), "unusable" (no usable index state: `problem`),
        /// or "vanished" (removed by the store's owner while it was being checked).
        package var status: String
        package var problem: String?
        /// The resource's own verification: checksums, data file, index.
        package var report: VerifyReport?
        /// With `--repair`: the resource was removed (its index was unusable).
        package var removed = false
    }

    /// A file the store's layout does not account for as a whole resource.
    /// One small-object log file, every record checked (``SmallObjectStore``).
    package struct SmallObjectLog: Sendable, Equatable, Codable {
        package var name: String
        package var size: Int64
        package var records: Int
        /// "clean", "damaged" (stretches that hold no valid record: skipped, never served) or
        /// "unusable" (the header: the next open deletes the file).
        package var status: String
        package var problem: String?
    }

    package struct Leftover: Sendable, Equatable, Codable {
        /// Path relative to the cache directory.
        package var path: String
        /// "data file without an index" (a crash while creating or evicting: claims nothing),
        /// "index without a data file" (its present bytes are lost), or "temporary file".
        package var kind: String
        package var allocatedBytes: Int64
        /// With `--repair`: deleted.
        package var removed = false
    }

    package var directory: String
    /// Another process (a running `serve`, `fetch`) owned the directory: the check was
    /// read-only, and catalog lag and temporary files are expected.
    package var inUse: Bool
    package var resources: [Resource] = []
    /// "catalog" when there is none or it is damaged; else nil.
    package var catalogProblem: String?
    /// Where the catalog and the indexes disagree, one line each. The indexes are the truth;
    /// the catalog lags them after a crash.
    package var catalogDifferences: [String] = []
    package var leftovers: [Leftover] = []
    package var smallObjectLogs: [SmallObjectLog] = []
    /// Files in `resources` that the store does not make, left alone.
    package var foreignFiles = 0
    /// With `--repair`: the catalog was rewritten from the indexes.
    package var catalogRewritten = false
    package var repaired = false

    package var segmentsChecked: Int { resources.reduce(0) { $0 + ($1.report?.segmentsChecked ?? 0) } }
    package var bytesChecked: Int64 { resources.reduce(0) { $0 + ($1.report?.bytesChecked ?? 0) } }
    package var presentBytes: Int64 { resources.reduce(0) { $0 + $1.presentBytes } }
    package var allocatedBytes: Int64 {
        resources.reduce(0) { $0 + $1.allocatedBytes } + leftovers.reduce(0) { $0 + $1.allocatedBytes }
            + smallObjectLogs.reduce(0) { $0 + $1.size }
    }
    /// Resources with damage or without a usable index.
    package var damagedResources: Int { resources.filter { $0.status == "damaged" || $0.status == "unusable" }.count }
    /// Indexes whose data file is gone.
    package var orphanedIndexes: Int { leftovers.filter { $0.kind == Self.indexWithoutData }.count }

    /// No damaged resource, no unusable index, no index without its data. A lagging catalog,
    /// data files without an index and temporary files are what a crash leaves; they are
    /// reported, not counted as damage.
    package var damagedSmallObjectLogs: Int { smallObjectLogs.filter { $0.status != "clean" }.count }

    package var isClean: Bool { damagedResources == 0 && orphanedIndexes == 0 && damagedSmallObjectLogs == 0 }

    static let dataWithoutIndex = "data file without an index"
    static let indexWithoutData = "index without a data file"
    static let temporaryFile = "temporary file"
}
