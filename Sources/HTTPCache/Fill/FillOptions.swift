import SparseCacheEngine
import SparseCacheStore
import SparseHTTP

/// How a ``ProgressiveCache`` fetches and commits.
public struct FillOptions: Sendable {
    /// Attempts after a failure that may pass (a connection refused or cut, a body that
    /// stalls, a 5xx from a source of its own; not a request that timed out before any answer,
    /// nor a proxy's 5xx, which is an answer) before a fetch gives up. Each resumes from the
    /// last byte received. Default 5.
    public var retries = 5
    /// The pause before the first retry; it doubles up to ``maximumBackoff``.
    package var initialBackoff: Duration = .milliseconds(100)
    package var maximumBackoff: Duration = .seconds(5)
    /// The write-back starts a commit once this many bytes were written since the last one
    /// began, so a crash or a cancel keeps what arrived. The commit runs beside the next
    /// writes, and covers everything written before it began: a fast origin's megabytes share
    /// one fdatasync. Readers do not wait for it: they get bytes as they arrive
    /// (``arrivedLimit``). Default 1 MiB, one write batch: a slow origin's bytes become present
    /// (and survive a crash) as each megabyte arrives.
    package var commitEvery: Int64 = 1 << 20
    /// The most bytes one fill holds in memory received and not yet present (cut-through:
    /// readers take them from there while the write-back writes, syncs and commits them). The
    /// origin is read only as fast as the disk takes the bytes once this is full. Default
    /// 8 MiB, several commits' worth, so receiving goes on while a commit syncs.
    package var arrivedLimit: Int64 = 8 << 20
    /// The largest span one request asks the origin for. It bounds what a reader that stops
    /// early leaves in flight. Default 16 MiB.
    public var maximumFetch: Int64 = 16 << 20
    /// Read-ahead that adapts, as Linux's readahead does: a reader's fetches run
    /// ``readAheadMinimum`` past it at first, and a ``readAheadFraction`` of what it has read in
    /// a row once that is more, up to ``maximumFetch``; the next request leaves when less than
    /// that distance is in flight, for up to twice it. A reader that stops early leaves at most
    /// twice the distance fetched past its position (stopped when it hangs up, at the end of the segment being received). Only while
    /// fewer than ``readAheadLimit`` fetches run in the whole cache: under load a fetch ahead
    /// would take a connection another reader needs now. Off: each fetch is one
    /// ``maximumFetch`` span, nothing is asked ahead.
    public var readAhead = true
    /// See ``readAhead``. Default 64 KiB (one segment): what a player that seeks and hangs up
    /// at once leaves fetched past its last byte.
    package var readAheadMinimum: Int64 = 64 << 10
    /// See ``readAhead``. Default 64: a reader that has read 64 MiB in a row has 1 MiB ahead,
    /// 256 MiB 4 MiB. (Past what the client's socket took: its buffers hold more, unseen.)
    package var readAheadFraction: Int64 = 64
    /// See ``readAhead``. Half of ``HTTPRangeSource/connectionsPerOrigin`` by default.
    package var readAheadLimit = 3
    /// The largest chunk a reader is handed.
    package var readChunk = 1 << 20
    /// The largest first chunk of a read from the file: the response head waits for it (they
    /// leave in one send), so it is one segment rather than a whole ``readChunk`` to read and
    /// check. Measured on a warm 1 MiB range: the first byte left 0.4 ms earlier.
    var firstReadChunk = 64 << 10

    /// How much of `end - position` the next read from the file takes: ``firstReadChunk`` for
    /// a read's first chunk, ``readChunk`` after.
    func readSize(at position: Int64, end: Int64, first: Bool) -> Int {
        Int(min(Int64(max(1, first ? min(firstReadChunk, readChunk) : readChunk)), end - position))
    }
    /// How long a resource stays open after its last reader left, for the next one (a
    /// player's next range request) to skip reopening it. The store does not evict it meanwhile.
    public var keepOpen: Duration = .seconds(2)
    /// The most resources kept open that way (each holds two to four descriptors:
    /// docs/ARCHITECTURE.md, "Open files"); beyond it the one idle the longest closes at once.
    /// `sparsecache serve` sets it from its descriptor limit.
    package var maximumKeptOpen = 256
    /// Keep what each open resource with a stored HTTP head has committed ready for hits
    /// answered on the event loop (``CachingProxy/answerQuickly(_:_:)``).
    package var quickHits = true
    /// Tests only: awaited by a reader right after its read-ahead looked at the resource, one of
    /// the points where other calls on the cache interleave with the reader's (FillStallTests).
    var afterReadAheadLook: (@Sendable () async -> Void)?

    /// A complete answer with a length of at most this many bytes is kept in the store's
    /// small-object logs
    /// (``SmallObjectStore``: one record, one shared fdatasync) instead of a sparse file and
    /// its index; 0 keeps every answer in sparse files. Answers without a length stay with
    /// the sparse path (they are streamed to readers and joined in flight as they arrive; one
    /// that ends small is not moved to the logs). At most the store's segment size for
    /// ranged first contacts (the first answer must hold the whole body). Measured in
    /// docs/BENCHMARKS.md (scenario 13).
    public var smallObjectThreshold: Int64 = 64 * 1024

    public init() {}

    func backoff(attempt: Int) -> Duration {
        var pause = initialBackoff
        for _ in 1..<max(1, attempt) where pause < maximumBackoff { pause = pause * 2 }
        return min(pause, maximumBackoff)
    }
}

/// How much of a resource is cached, for a UI: stays right across restarts because it is
/// read from the committed index.
public struct FillProgress: Sendable, Equatable {
    public var key: String
    public var presentBytes: Int64
    /// The resource length, once the origin has told it.
    public var length: Int64?
    /// Present bytes in one run from the offset the progress was asked for.
    public var contiguousBytes: Int64

    public init(key: String, presentBytes: Int64, length: Int64?, contiguousBytes: Int64) {
        self.key = key
        self.presentBytes = presentBytes
        self.length = length
        self.contiguousBytes = contiguousBytes
    }

    /// Present bytes as a fraction of the length (0 while it is unknown).
    public var fraction: Double {
        guard let length else { return 0 }
        return length == 0 ? 1 : Double(presentBytes) / Double(length)
    }
}

/// What a ``ProgressiveCache`` has asked its origins for (for tests, logs and the CLI).
package struct FillStatistics: Sendable, Equatable {
    /// Requests sent, first contact and retries included.
    package var requests = 0
    /// Body bytes received from origins (bytes skipped before a range's start included).
    package var bytesReceived: Int64 = 0
    /// Bytes handed to readers from the cache without waiting for a fetch.
    package var bytesFromCache: Int64 = 0
    /// Hits answered on the event loop (``CachingProxy/answerQuickly(_:_:)``).
    package var quickAnswers = 0
    /// Bytes handed to readers from memory as they arrived, before they were present
    /// (cut-through).
    package var bytesCutThrough: Int64 = 0
    /// The most bytes one fill held received and not yet present (bounded by
    /// ``FillOptions/arrivedLimit`` plus one network chunk).
    package var mostArrived: Int64 = 0
    /// Times a fill stopped receiving until the write-back caught up (its memory was full).
    var writeBackWaits = 0
    /// Answers stored as small objects, and small objects that could not be stored (the log
    /// write or its sync failed: the client had its answer, the cache did not keep it).
    var smallObjectsStored = 0
    var smallObjectFailures = 0
    package var retries = 0
    /// Background transfers (read-ahead, prefetch) that gave their connection to a request a
    /// client waits on, and asked again from their last byte.
    package var yields = 0
    /// Of those transfers, the bytes asked for and not yet read when they stopped: what the
    /// origin may have sent for nothing (already on its way when the connection closed).
    package var yieldedUnread: Int64 = 0
    /// Resources found changed on their origin (their cached bytes were dropped).
    package var invalidations = 0
    /// Resources without a strong validator fetched anew because a reader needed bytes the
    /// answer that filled them did not bring (RFC 9111 section 3.4: never combined with another).
    package var refetches = 0
    /// Handles released in the background whose release failed (the resource's last commit or
    /// close, or the budget pass after it); each is also reported to the store
    /// (``SparseStore/housekeepingFailures``, ``StoreOptions/log``).
    package var releaseFailures = 0

    package init() {}
}
