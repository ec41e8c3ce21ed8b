/// How a ``SparseFile`` is opened.
public enum AccessMode: Sendable, Equatable {
    /// Queries and reads only. Takes no lock, so it works while another process writes.
    case readOnly
    /// Reads, writes and commits. Takes an exclusive advisory lock on the data file.
    case readWrite
}

/// When a ``SparseFile`` commits on its own.
public struct CommitPolicy: Sendable, Equatable {
    /// Commit inside `write` once this many bytes of complete segments are uncommitted.
    public var bytes: Int64?
    /// Commit this long after the first uncommitted segment appeared.
    public var interval: Duration?

    public init(bytes: Int64?, interval: Duration?) {
        self.bytes = bytes
        self.interval = interval
    }

    /// Only explicit `commit()` and `close()` commit.
    public static let manual = CommitPolicy(bytes: nil, interval: nil)
    /// 8 MiB or one second, whichever comes first: a good default for network fills.
    public static let automatic = CommitPolicy(bytes: 8 << 20, interval: .seconds(1))
}

/// Options for ``SparseFile/open(_:mode:options:)``.
public struct SparseFileOptions: Sendable {
    /// Create the data file and index when they do not exist. Default true.
    public var create = true
    /// The segment size: a power of two from 4 KiB to 16 MiB. Used at creation (default 64 KiB);
    /// on reopen, a value that differs from the stored one is an error, nil accepts the stored one.
    public var segmentSize: Int?
    /// The resource length, when known. At creation it is stored; on reopen it must match a stored
    /// length, or it is set if none was stored yet.
    public var length: Int64?
    /// Metadata to store at creation.
    public var metadata: ResourceMetadata?
    /// Memory for bytes of incomplete segments; past it the least recently touched incomplete
    /// segment is dropped (and reported). Default 64 MiB.
    public var partialSegmentBudget = 64 << 20
    /// When to commit without being asked. Default ``CommitPolicy/automatic``.
    public var commitPolicy = CommitPolicy.automatic
    /// Check every segment read against its CRC32C (default true). A mismatch throws
    /// `.corruptData` and the segment stops being present.
    public var verifyReads = true
    /// Serve reads from the page cache on the calling task first (preadv2 with RWF_NOWAIT,
    /// which never waits for the device) and send only what is not cached through the
    /// DispatchIO channel. Default true; off, every read goes through the channel.
    public var readsFromPageCacheFirst = true
    /// Reserve disk blocks (fallocate) before writing each segment, so a full disk is reported
    /// before data is written. Default false.
    public var preallocate = false

    /// A writable open refuses a data file shorter than the index says; repair turns this off.
    var requireDataFileCoversIndex = true
    /// Creation of a new resource only: the open fails with ``NameTaken`` when a data file or
    /// an index is at the path already. A store picking a free name lets the creation check it
    /// (one job on the I/O threads instead of a look first and the creation after).
    package var mustBeNew = false
    /// Creation: the new index keeps a temporary name until the first commit through it (or
    /// the close), instead of being synced and named before the open returns. Nothing is
    /// claimed before that commit, so a new resource's first bytes need not wait for the
    /// sync; meanwhile another process's open finds no resource at the path. The store's
    /// resources, which only the store opens, are made so.
    package var namesIndexAtFirstCommit = false

    public init() {}

    public static let defaultSegmentSize = 64 * 1024
    public static let segmentSizes: ClosedRange<Int> = 4096...(16 << 20)
}

/// A creation with ``SparseFileOptions/mustBeNew`` found the data file or the index there
/// already.
package struct NameTaken: Error {
    package let path: String
}

/// What one ``SparseFile/write(_:at:)`` did with its bytes.
public struct WriteResult: Sendable, Equatable {
    /// Byte ranges whose segments this write completed and wrote to the data file. They become
    /// present (readable, claimed by the index) at the next commit.
    public var completed: [Range<Int64>] = []
    /// Bytes now held in memory in incomplete segments.
    public var bufferedBytes = 0
    /// Bytes skipped because their segment is already present or being written.
    public var alreadyPresentBytes = 0
    /// Bytes dropped from memory to stay within the partial-segment budget, from this write
    /// or earlier ones. They were never present and must be written again.
    public var dropped: [Range<Int64>] = []

    public init() {}
}
