@_spi(Locking) import SparseCacheEngine
import SparseCacheStore
import SparseHTTP

/// Reads through a ``SparseStore``: what is cached comes from disk at once, what is missing is
/// fetched from the resource's origin (a ``RangeSource``), handed to waiting readers as it
/// arrives (cut-through, from memory), and written into the cache and committed behind them.
/// The cache claims (and serves from its file) only what is durable and CRC-checked.
///
/// - One fetch per missing byte: a reader that needs a segment another fetch is already
///   bringing waits for that fetch instead of starting its own, so any number of readers of
///   one uncached range cause one origin request per byte.
/// - A fetch's write-back commits as it goes (at least every ``FillOptions/commitEvery``
///   bytes), so a crash or a cancel keeps what arrived; it holds at most
///   ``FillOptions/arrivedLimit`` bytes not yet present, and only then makes the origin wait.
/// - A new resource costs no request of its own: first contact asks for the reader's own
///   range (``FirstRequest``), and its answer is the first fetch.
/// - A reader that goes away cancels the fetches it started unless another reader (or a
///   prefetch) still waits on them.
/// - The origin's validators are stored with the resource and sent on every range request
///   (`If-Range`): a resource that changed on the origin is dropped from the cache and fetched
///   anew, never mixed; a reader that already had bytes of the old version gets
///   ``OriginError`` `.changed`.
public actor ProgressiveCache {
    public nonisolated let store: SparseStore
    public nonisolated let options: FillOptions

    var resources: [String: FillResource] = [:]
    /// Handles being released (the store commits and closes their files), awaited by
    /// ``shutdown()`` so the store is closed only after them.
    var releases: [Int: Task<Void, Never>] = [:]
    var nextID = 0
    /// Resources open with no user, kept for ``FillOptions/keepOpen``, by when they went idle.
    var keptOpen: [String: UInt64] = [:]
    var nextKeptOpen: UInt64 = 0
    /// Closes what is kept open when its time is up (``sweepKeptOpen()``); nil while nothing is.
    var keptOpenSweeper: Task<Void, Never>?
    /// Small answers on their way to the small-object log (``ProgressiveCache/firstContactSmall(_:)``).
    var smallArriving: [String: ArrivingObject] = [:]
    /// Arriving objects not yet handed to the log, in arrival order, and the task handing
    /// them over (``writeQueuedSmall()``); nil when none is queued or being written.
    var smallQueue: [QueuedSmall] = []
    var smallWriter: Task<Void, Never>?
    /// Waiting for the batch being written to settle (``settleSmall(key:)``, ``settleAllSmall()``).
    var smallSettled: [CheckedContinuation<Void, Never>] = []
    /// The info (with its parsed ``StoredHead``) of small objects read recently, by key, with
    /// the record's sequence: a record never changes, so the same sequence is the same head,
    /// and a hit skips parsing the stored fields and dates again (about 7% of a small hit's CPU).
    var smallInfos = BoundedTable<(sequence: UInt64, info: ContentInfo)>(capacity: 4096)
    /// Small-object first contacts in flight, shared by the readers that come meanwhile.
    var smallContacts: [String: SmallContact] = [:]
    /// Keys whose resource is moving to the small-object logs, with the ``releases`` task that
    /// moves it: a lookup waits for it, then finds the object (instead of opening the resource
    /// as the move deletes it, and asking the origin again).
    var movingToSmall: [String: Int] = [:]
    /// Stored answers the event loops answer hits from (``CachingProxy/answerQuickly(_:_:)``).
    nonisolated let quickHits = QuickHits()
    /// Totals over every resource, counted from the actor and from readers' own tasks.
    private nonisolated let counters = Lock(FillStatistics())

    /// Totals over every resource.
    package nonisolated var statistics: FillStatistics { counters.withLock { $0 } }

    /// What is going on now: resources open, range fetches running, and the resources' users:
    /// the readers attached and, as each holds its resource open too, the fetches running.
    package struct Activity: Sendable, Equatable {
        package var openResources = 0
        package var fetchesInFlight = 0
        package var readers = 0
    }

    package var activity: Activity {
        var activity = Activity()
        for resource in resources.values where resource.handle != nil || resource.phase.running != nil {
            activity.openResources += 1
            activity.fetchesInFlight += resource.fetches.values.filter { $0.task != nil }.count
            activity.readers += resource.users
        }
        return activity
    }

    public init(store: SparseStore, options: FillOptions = FillOptions()) {
        self.store = store
        self.options = options
    }

    // MARK: Reading

    /// The bytes of `range` (the whole resource when nil; a range ending at `Int64.max` runs
    /// to the end) in order, in chunks of at most ``FillOptions/readChunk`` bytes, each read
    /// when the consumer asks for it. Stop by ending the iteration (or cancelling its task).
    ///
    /// The iteration throws `.invalidArgument` for a range past the end of the resource,
    /// ``OriginError`` `.badAnswer` / `.unavailable` / `.timedOut` when the origin cannot supply
    /// missing bytes, and `.changed` when the resource changed on the origin after the reader
    /// had bytes of the old version.
    public nonisolated func read(_ source: any RangeSource, range: Range<Int64>? = nil) -> CacheReadStream {
        CacheReadStream { send in
            try await self.serve(source, range: range, deliver: send)
        }
    }

    /// Brings `range` (the whole resource when nil) into the cache without reading it back,
    /// calling `progress` after every commit, and at least once: a range already cached gets
    /// one call, with what is present. Returns when all of it is present.
    public func prefetch(
        _ source: any RangeSource, range: Range<Int64>? = nil, progress: (@Sendable (FillProgress) -> Void)? = nil
    ) async throws {
        guard let progress else {
            // A small object is whole already.
            if await isSmallObject(source.key) { return }
            return try await serve(source, range: range, deliver: nil, progress: nil)
        }
        let called = CalledOnce()
        let counted: @Sendable (FillProgress) -> Void = { update in
            called.mark()
            progress(update)
        }
        if await !isSmallObject(source.key) { try await serve(source, range: range, deliver: nil, progress: counted) }
        if !called.happened { progress(try await self.progress(key: source.key, from: range?.lowerBound ?? 0)) }
    }

    /// The cache's view of `key` now: present bytes, length, and the present run from `offset`.
    /// Answers from the committed index, so it is right across restarts.
    public func progress(key: String, from offset: Int64 = 0) async throws -> FillProgress {
        if let resource = resources[key], let handle = resource.handle {
            return await Self.progress(of: handle.file, key: key, from: offset)
        }
        guard await hasEntry(key) else {
            return FillProgress(key: key, presentBytes: 0, length: nil, contiguousBytes: 0)
        }
        let handle = try await store.open(key: key)
        let progress = await Self.progress(of: handle.file, key: key, from: offset)
        try await handle.release()
        return progress
    }

    static func progress(of file: SparseFile, key: String, from offset: Int64) async -> FillProgress {
        let length = await file.length
        let contiguous = await file.contiguousPresentEnd(from: offset) - offset
        return FillProgress(key: key, presentBytes: await file.presentBytes, length: length, contiguousBytes: max(0, contiguous))
    }

    /// Progress updates for `key` after every commit of a fetch, starting with the state now.
    public func progressUpdates(key: String, from offset: Int64 = 0) async throws -> AsyncStream<FillProgress> {
        let (stream, continuation) = AsyncStream<FillProgress>.makeStream(bufferingPolicy: .bufferingNewest(16))
        continuation.yield(try await progress(key: key, from: offset))
        let id = takeID()
        let resource = entry(for: key)
        resource.listeners[id] = (offset, continuation)
        continuation.onTermination = { _ in Task { await self.removeListener(key: key, id: id) } }
        return stream
    }

    private func removeListener(key: String, id: Int) {
        resources[key]?.listeners[id] = nil
        if let resource = resources[key] { forgetIfIdle(resource) }
    }

    func takeID() -> Int {
        nextID += 1
        return nextID
    }

    func entry(for key: String) -> FillResource {
        if let existing = resources[key] { return existing }
        let made = FillResource(key: key, quickHits: quickHits)
        resources[key] = made
        return made
    }

    func forgetIfIdle(_ resource: FillResource) {
        if resource.users == 0, resource.handle == nil, resource.listeners.isEmpty, resource.fetches.isEmpty,
            resources[resource.key] === resource
        {
            resources[resource.key] = nil
        }
    }

    /// Fetches running now, over every resource.
    var fetchesRunning: Int { resources.values.reduce(0) { $0 + $1.fetches.count } }

    nonisolated func count(_ change: (inout FillStatistics) -> Void) {
        counters.withLock { change(&$0) }
    }
}

/// The cache's state for one resource. Only the owning ``ProgressiveCache`` touches it, on
/// its actor.
final class FillResource {
    let key: String
    /// The cache's quick hits: an entry for this key stands for ``handle`` and ``info`` as they
    /// are, so any change to either removes it (``update(_:)``).
    let quickHits: QuickHits
    var source: (any RangeSource)?
    /// Which phase the resource is in (closed, opening, open, held, replacing) and what that
    /// phase holds. Changed only through ``update(_:)``.
    private(set) var phase = FillPhase<ResourceHandle>()
    /// Held while anyone reads or fetches: the store never evicts a pinned resource.
    var handle: ResourceHandle? { phase.handle }
    var info: ContentInfo? { phase.info }
    /// Bumped when the resource changed on the origin and its cached bytes were dropped.
    var generation: Int { phase.generation }
    var users = 0
    var fetches: [Int: Fetch] = [:]
    /// The origin answered a range request with the whole resource: one fetch reads it on to
    /// the end (``ProgressiveCache/claimOnward``) and no read-ahead splits it further.
    var ignoresRanges = false
    /// An answer without a length was received whole into it: when it ended small, the
    /// resource moves to the small-object logs once nobody uses it (``ProgressiveCache/closeIfIdle(key:force:)``).
    var endedWithoutLength = false
    /// Readers parked until they may fetch a resource of one answer anew: they have handed on
    /// no byte, so a refetch cuts none of them off, and readers that all wait for one must not
    /// wait for each other (``ProgressiveCache/refetchOneAnswer(_:)``).
    var refetchWaiting = 0
    /// The answer of unknown length being received, while it is (``StreamFill``).
    var stream: StreamFill?
    /// Segment -> the fetch bringing it.
    var owner: [Int: Int] = [:]
    /// Fetches that have handed their segments back. A look at the missing ranges taken
    /// before the last one ended may name segments it has since committed.
    var fetchesEnded = 0
    /// How fetches that ended without their segments ended (kept while a reader waits on them).
    var outcomes: [Int: Error] = [:]
    /// Bumped by every ``ProgressiveCache/changed(_:)``. A reader notes it before it looks at the
    /// resource and parks only if it has not moved: a change that came while the reader was
    /// between its look and its wait (at any await) is not missed.
    var changes = 0
    /// Readers waiting for the next change, with the segment each one needs.
    var waiters: [Int: (segment: Int, continuation: CheckedContinuation<Void, Never>)] = [:]
    var listeners: [Int: (offset: Int64, continuation: AsyncStream<FillProgress>.Continuation)] = [:]
    var lastCommit = ContinuousClock.now
    /// When the last user left (``ProgressiveCache/keptOpen`` closes it if nobody comes back).
    var idleSince = ContinuousClock.now

    struct Fetch {
        var segments: Range<Int>
        var task: Task<Void, Never>?
        /// Readers (and prefetches) waiting on it; at zero the fetch is cancelled.
        var interest = 0
        /// For a fetch started in the background (read-ahead, prefetch): promoted once a client
        /// waits on its bytes, so it no longer yields its connection (``ConnectionLimiter``).
        var promotion: ConnectionLimiter.Promotion?
        /// What it received and has not yet made present: readers take bytes from here as
        /// they arrive (cut-through).
        var arrived: ArrivedBytes?
        /// Cuts the origin's answer being read at once (a replacement, shutdown); a fetch
        /// nobody waits on any more is cancelled instead, and finishes its segment first.
        var stop: (@Sendable () -> Void)?
        /// Reads a whole answer on to the resource's end (``FirstAnswer/readsOn``).
        var readsOn = false
        /// Nobody waited on it any more while its request was out or it read an answer: it
        /// stops at the end of the segment it is receiving (unless a reader came back meanwhile).
        var unwanted = false
        /// Whether its request may be out, which decides how a fetch nobody wants is stopped.
        var gate = RequestGate()
    }

    init(key: String, quickHits: QuickHits) {
        self.key = key
        self.quickHits = quickHits
    }

    /// Applies a transition of ``phase``. One that changes the handle or the info removes the
    /// key's quick hit, which stands for both as they were.
    @discardableResult
    func update<Result>(_ transition: (inout FillPhase<ResourceHandle>) throws -> Result) rethrows -> Result {
        let content = phase.content
        defer { if phase.content != content { quickHits.remove(key) } }
        return try transition(&phase)
    }

    /// A fetch reads a whole answer on to the end: no read-ahead may split it.
    var readsOn: Bool { fetches.values.contains { $0.readsOn } }
}

extension ProgressiveCache {
    /// A task on the cache's actor that prefers the event loop of the current task's connection
    /// (see `LoopExecutor`): the fill a client's request starts (its fetches, the write-back, the
    /// commits) runs on that request's thread, woken by its own loop, instead of beside it on
    /// the cooperative pool, where it would compete with the loops for the same cores. Off the
    /// loops (the library without the server) it is a plain `Task {}` on the actor, as before.
    func onLoop(@_inheritActorContext(always) _ operation: sending @escaping @isolated(any) () async -> Void) -> Task<Void, Never> {
        guard let loop = LoopExecutor.current else { return Task { await operation() } }
        return Task(executorPreference: loop) { await operation() }
    }

    /// ``onLoop(_:)`` for work that returns a value or throws.
    func onLoop<Value: Sendable>(
        @_inheritActorContext(always) _ operation: sending @escaping @isolated(any) () async throws -> Value
    ) -> Task<Value, Error> {
        guard let loop = LoopExecutor.current else { return Task { try await operation() } }
        return Task(executorPreference: loop) { try await operation() }
    }
}

/// Whether a callback ran (``ProgressiveCache/prefetch(_:range:progress:)`` calls its progress
/// closure once itself when the fetch never did).
private final class CalledOnce: Sendable {
    private let flag = Lock(false)

    func mark() { flag.withLock { $0 = true } }

    var happened: Bool { flag.withLock { $0 } }
}
