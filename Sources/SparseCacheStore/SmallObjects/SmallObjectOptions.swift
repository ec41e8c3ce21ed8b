/// How a ``SmallObjectStore`` lays out and commits its logs.
public struct SmallObjectOptions: Sendable {
    /// A log file past this size is sealed and the next record starts a new one. Smaller files
    /// make compaction cheaper (it copies one file's live records); 16 MiB holds about 3,500
    /// objects of 4 KiB.
    public var maximumFileSize: Int64 = 16 << 20
    /// How long the first object of a batch waits for others before the batch is written and
    /// synced (one fdatasync for all of them). Objects that arrive while a sync runs go in the
    /// next batch whatever this is.
    ///
    /// An fdatasync costs about the same CPU whether it makes one record durable or thirty
    /// (about 110 µs on the benchmark VM), so the delay sets the CPU a small object costs.
    /// 5 ms: at 2,700 misses a second a batch holds about 15 objects (6.5 at 2 ms), and the
    /// writer's threads spend 27 µs a miss instead of 49. Nobody waits for it: the client got
    /// its answer already, and later readers get the object from memory until it is durable.
    public var groupCommitDelay: Duration = .milliseconds(5)
    /// A sealed file whose live records fill less than this fraction of it is compacted.
    public var compactBelow = 0.5
    /// The most log descriptors held open (the least recently used closes beyond it; a log
    /// is opened again when needed). Each log holds thousands of objects, so a few serve the
    /// hot ones; `sparsecache serve` sets it from its descriptor limit.
    public var maximumOpenLogs = 64
    /// Whether open reads hint files and sealed logs get one (``SmallObjectHint``). Off: every
    /// open reads every log whole, as before hints existed (the benchmark's baseline).
    package var useHints = true

    public init() {}
}
