import SparseCacheEngine
import SparseCacheStore
import SparseHTTP
import Synchronization

extension ProgressiveCache {
    /// Opens a resource for reading and tells what its origin said about it (length, type,
    /// validators) before any byte is read: what an HTTP server needs to write a response head.
    /// A new resource costs one request to the origin, for what the reader reads first
    /// (`first`), whose bytes the reader then gets as they arrive; a known one none. An origin that answered without a length (chunked, or until the
    /// connection closes) gives a reader of unknown ``CacheReader/length`` that follows the
    /// answer as it arrives; the answer is stored, with its length, once it has ended.
    ///
    /// The resource stays open (and pinned in the store) until ``CacheReader/close()``.
    ///
    /// - Parameter first: what the reader will read first, which a new resource's first contact
    ///   asks the origin for (``FirstRequest``): its answer brings those bytes too.
    public func open(_ source: any RangeSource, first: FirstRequest = .whole) async throws -> CacheReader {
        try await open(source, first: first, lookedUp: false)
    }

    /// ``open(_:first:)``; `lookedUp`: the caller has just found nothing stored for the key
    /// (``openIfStored(_:)`` said nil), so the store is not asked again.
    func open(_ source: any RangeSource, first: FirstRequest, lookedUp: Bool) async throws -> CacheReader {
        await settleMove(key: source.key)
        if smallContacts[source.key] != nil, let small = try await firstContactSmall(source, first: first) { return small }
        let absent = lookedUp ? true : await isUnknown(source.key)
        if absent, resources[source.key] == nil {
            if !lookedUp, let small = try await openSmallIfStored(source) { return small }
            // Re-check after the awaits: another reader may have started the key's first contact.
            // A range reaching past the threshold is a large resource's, nearly always: no
            // small-object attempt, and the files are made while the origin answers.
            if options.smallObjectThreshold > 0, resources[source.key] == nil, !reachesPastSmall(first),
                let small = try await firstContactSmall(source, first: first)
            {
                return small
            }
        }
        let resource = try await attach(source, first: first, new: absent)
        guard let info = resource.info else {
            detach(resource)
            throw SparseCacheError(.closed, operation: "open", path: source.key, detail: "the resource is not open")
        }
        guard let handle = resource.handle else {
            detach(resource)
            throw SparseCacheError(.closed, operation: "open", path: source.key, detail: "the resource is not open")
        }
        // The fetch first contact started for this opener is this reader's until it closes.
        let firstFetch = resource.update { $0.takeOpenerFetch() }
        return CacheReader(
            cache: self, source: source, info: info, handle: handle, generation: resource.generation, firstFetch: firstFetch)
    }

    func closeReader(key: String, firstFetch: Int? = nil) {
        guard let resource = resources[key] else { return }
        if let firstFetch { releaseInterest(resource, [firstFetch]) }
        detach(resource)
    }

    /// The step before closing the store: stops every fetch in flight, waits until each has
    /// committed what it received, and closes the resources kept open for reuse. Readers
    /// waiting on those fetches get ``OriginError`` `.unavailable` or see the bytes that arrived.
    public func shutdown() async {
        let tasks = resources.values.flatMap { $0.fetches.values.compactMap(\.task) }
        for task in tasks { task.cancel() }
        // Answers without a length stop now, not at their next chunk (and are dropped).
        for resource in resources.values {
            resource.stream?.cancel()
            // Range fetches too: none finishes its segment first, the process is stopping.
            for fetch in resource.fetches.values { fetch.stop?() }
        }
        for task in tasks { await task.value }
        for key in Array(resources.keys) { closeIfIdle(key: key, force: true) }
        for release in Array(releases.values) { await release.value }
        // Small objects still being written go in before the store closes.
        await settleAllSmall()
    }
}

/// A reader's hold on one resource of a ``ProgressiveCache``: the version it was opened at, and
/// reads of any of its ranges. Every byte comes from that version; a resource that changes on
/// the origin meanwhile fails the read with ``OriginError`` `.changed` rather than mixing versions.
///
/// Cached bytes are read straight from the resource on the reader's own task; only a missing
/// byte takes the read to the cache's actor, which fetches it or joins the fetch bringing it.
/// (A hop to the actor for every chunk would cost more than the read itself under wrk.)
public final class CacheReader: Sendable {
    /// What the origin said when the resource was opened; `length` is nil while an answer
    /// without a length is still arriving (see ``isLengthKnown``).
    public let info: ContentInfo
    package let cache: ProgressiveCache
    public let source: any RangeSource
    /// Where the bytes are.
    private enum Backing: Sendable {
        /// The resource as it was opened: the version this reader promised. A replacement (the
        /// origin changed) closes it, so reads here fail and go to the cache, which says so.
        case resource(ResourceHandle, generation: Int)
        /// A small object's whole body: read from its log record (CRC-checked) when it was
        /// opened, or the answer that just came from the origin, on its way to the log.
        case memory([UInt8], fromCache: Bool)
    }

    private let backing: Backing
    /// The fetch first contact started with the answer to this reader's first request: it runs
    /// for this reader until it closes (or reads, which holds its own interest).
    let firstFetch: Int?
    private let closed = Atomic<Bool>(false)

    init(cache: ProgressiveCache, source: any RangeSource, info: ContentInfo, handle: ResourceHandle, generation: Int, firstFetch: Int?) {
        self.cache = cache
        self.firstFetch = firstFetch
        self.source = source
        self.info = info
        self.backing = .resource(handle, generation: generation)
    }

    /// A reader of a small object's body (``SmallObjectStore``); nothing to release.
    init(cache: ProgressiveCache, source: any RangeSource, info: ContentInfo, body: [UInt8], fromCache: Bool) {
        self.cache = cache
        self.firstFetch = nil
        self.source = source
        self.info = info
        self.backing = .memory(body, fromCache: fromCache)
    }

    /// The resource this reader holds and the version it was opened at; nil for a small object.
    var resourceHeld: (handle: ResourceHandle, generation: Int)? {
        if case .resource(let handle, let generation) = backing { return (handle, generation) }
        return nil
    }

    /// Whether this reader's bytes are a small object's, held whole (no sparse resource).
    package var isSmallObject: Bool {
        if case .memory = backing { return true }
        return false
    }

    deinit {
        if case .resource = backing, !closed.load(ordering: .acquiring) {
            let cache = self.cache, key = source.key, firstFetch = self.firstFetch
            Task { await cache.closeReader(key: key, firstFetch: firstFetch) }
        }
    }

    /// The resource length (0 while it is not known).
    public var length: Int64 { info.length ?? 0 }

    /// False while the origin's answer has no length yet: it is still arriving, and a read of
    /// `0..<Int64.max` follows it to its end.
    public var isLengthKnown: Bool { info.length != nil }

    /// Hands the bytes of `range` to `deliver` in order, in chunks of at most
    /// ``FillOptions/readChunk`` bytes: cached ones from the file, missing ones as they arrive
    /// from the origin (from memory, before they are durable: delivery, not a claim). The next
    /// chunk is read only after `deliver` returns, so a slow consumer holds no more than one
    /// chunk; fetches run ahead of it by a window that grows as it reads on (see
    /// ``FillOptions/readAhead``).
    ///
    /// Throws `.invalidArgument` for a range past the end, ``OriginError`` (`.changed`, or
    /// `.badAnswer` / `.unavailable` / `.timedOut` when the origin cannot supply missing bytes),
    /// and whatever `deliver` throws (which stops the fetches nobody else waits on). A resource
    /// that one answer alone may fill (no strong validator) fails with `.unavailable` at a byte
    /// that answer
    /// did not bring: ask ``ProgressiveCache/oneAnswerPlan(for:range:)`` before the first read.
    public func read(
        _ range: Range<Int64>, deliver: @escaping @Sendable (_ bytes: [UInt8]) async throws -> Void
    ) async throws {
        guard !closed.load(ordering: .acquiring) else {
            throw SparseCacheError(.closed, operation: "read", path: source.key, detail: "the reader is closed")
        }
        if range.isEmpty { return }
        let handle: ResourceHandle, generation: Int
        switch backing {
        case .memory(let body, let fromCache):
            let end = range.upperBound == .max ? Int64(body.count) : range.upperBound
            guard range.lowerBound >= 0, range.lowerBound <= end, end <= Int64(body.count) else {
                throw SparseCacheError(
                    .invalidArgument, operation: "read", path: source.key, offset: range.lowerBound, length: Int64(range.count),
                    detail: "runs past the resource length \(body.count)")
            }
            var position = Int(range.lowerBound)
            while position < Int(end) {
                let next = min(Int(end), position + cache.options.readChunk)
                if fromCache { cache.count { $0.bytesFromCache += Int64(next - position) } }
                try await deliver(Array(body[position..<next]))
                position = next
            }
            return
        case .resource(let opened, let version):
            handle = opened
            generation = version
        }
        guard isLengthKnown else {
            // Still arriving: the cache's path follows it (file first, then what just came).
            try await cache.serve(source, range: range, deliver: deliver, generation: generation)
            return
        }
        // A range ending at Int64.max runs to the end, as in ``ProgressiveCache/read(_:range:)``.
        let end = range.upperBound == .max ? length : range.upperBound
        if range.lowerBound < 0 || range.lowerBound > length || end > length {
            throw SparseCacheError(
                .invalidArgument, operation: "read", path: source.key, offset: range.lowerBound, length: Int64(range.count),
                detail: "runs past the resource length \(length)")
        }
        var position = range.lowerBound
        while position < end {
            let bytes: [UInt8]
            do {
                bytes = try await handle.readAvailable(
                    from: position, maxLength: cache.options.readSize(at: position, end: end, first: position == range.lowerBound))
            } catch {
                // Closed by a replacement, or damaged: the cache's path knows what to do.
                break
            }
            if bytes.isEmpty { break }
            cache.count { $0.bytesFromCache += Int64(bytes.count) }
            position += Int64(bytes.count)
            try await deliver(bytes)
        }
        if position < end {
            try await cache.serve(source, range: position..<end, deliver: deliver, generation: generation)
        }
    }

    /// The parts of `range` not in the cache now (committed or not yet).
    public func missingRanges(in range: Range<Int64>) async throws -> [Range<Int64>] {
        guard !closed.load(ordering: .acquiring) else {
            throw SparseCacheError(.closed, operation: "read", path: source.key, detail: "the reader is closed")
        }
        guard case .resource(let handle, _) = backing else { return [] }
        return await handle.file.missingRanges(in: range)
    }

    /// Marks the reader closed without telling the cache (the cache does, in the same step);
    /// false when it was closed already.
    func markClosed() -> Bool {
        guard case .resource = backing else { return false }
        return !closed.exchange(true, ordering: .acquiringAndReleasing)
    }

    /// Lets the resource go (the store may evict it once nobody holds it).
    public func close() async {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        guard case .resource = backing else { return }
        await cache.closeReader(key: source.key, firstFetch: firstFetch)
    }
}
