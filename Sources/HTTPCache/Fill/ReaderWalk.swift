import SparseCacheEngine
import SparseCacheStore

/// One reader's walk over its range (``ProgressiveCache/serve(_:range:deliver:generation:progress:)``):
/// where it is, what it has handed on, and the fetches it waits on. Each ``step(in:)`` hands on
/// the next bytes (present ones from the file, received ones from memory) or, at the first
/// byte nobody has, joins the fetch bringing it or starts one and waits for the next change.
///
/// Its methods run on the cache's actor (the `isolated` parameter): the walk lives in the
/// reader's call of `serve`, and after every await it looks at the resource again.
struct ReaderWalk {
    let resource: FillResource
    /// The reader's range (the whole resource when nil; an upper bound of `Int64.max` runs to
    /// the end).
    let range: Range<Int64>?
    /// Takes the bytes; nil only brings them in (a prefetch).
    let deliver: (@Sendable (_ bytes: [UInt8]) async throws -> Void)?
    let progress: (@Sendable (FillProgress) -> Void)?
    /// Fetches this reader holds an interest in: released when the walk ends.
    var interests = Set<Int>()
    /// The version the reader reads: a resource replaced after the reader had bytes fails it.
    var generation: Int
    /// Whether the reader has had bytes (or was promised a version, which counts the same).
    var delivered: Bool
    /// Whether the last step waited for a fetch (its bytes are not counted as cache hits).
    var waited = false
    /// Whether this reader had bytes from memory, before they were durable.
    var cutThrough = false
    var position: Int64
    /// Read-ahead: how far this reader has made sure fetches exist, from where it started.
    var ahead: ReadAhead
    /// The answer of unknown length this reader took bytes of, if any: when it stops before its
    /// end, that is the reader's error (not a change of version).
    var followed: StreamFill?

    init(
        _ resource: FillResource, range: Range<Int64>?, deliver: (@Sendable (_ bytes: [UInt8]) async throws -> Void)?,
        progress: (@Sendable (FillProgress) -> Void)?, promised: Bool
    ) {
        self.resource = resource
        self.range = range
        self.deliver = deliver
        self.progress = progress
        generation = resource.generation
        delivered = promised
        position = range?.lowerBound ?? 0
        ahead = ReadAhead(start: position)
    }

    /// One step of the walk. Returns false when the reader has its whole range.
    mutating func step(in cache: isolated ProgressiveCache) async throws -> Bool {
        try Task.checkCancellation()
        if let failure = followed?.failure { throw failure }
        if resource.generation != generation {
            // The origin changed: never hand one reader bytes of two versions.
            if delivered {
                throw OriginError(
                    .changed, operation: "read", key: resource.key, offset: position,
                    detail: "the resource changed on the origin after \(position - (range?.lowerBound ?? 0)) bytes were read")
            }
            generation = resource.generation
        }
        guard let handle = resource.handle, let info = resource.info else {
            // Being opened again or replaced (the origin changed): wait for the new version. The
            // task moves the phase on itself before it finishes, so this never spins.
            if let running = resource.phase.running {
                try await running.value
                return true
            }
            throw OriginError(.unavailable, operation: "read", key: resource.key, detail: "the resource is not open")
        }
        guard let length = info.length else { return try await follow(handle, in: cache) }
        // A range ending at Int64.max runs to the end, whatever the length turns out to be.
        let end = min(range?.upperBound ?? length, length)
        if let range, range.lowerBound > length || (range.upperBound > length && range.upperBound != .max) {
            throw SparseCacheError(
                .invalidArgument, operation: "read", path: resource.key, offset: range.lowerBound,
                length: Int64(range.count), detail: "runs past the resource length \(length)")
        }
        if position >= end {
            // The reader has every byte; those it had from memory become durable behind it.
            // It ends once they have (a keep-alive client's next request waits that long):
            // fills writing back never pile up behind clients faster than the disk.
            if cutThrough { await cache.awaitDurable(resource, (range?.lowerBound ?? 0)..<end, generation: generation) }
            return false
        }
        let file = handle.file
        let stop = Int((end + Int64(file.segmentSize) - 1) >> Int64(file.segmentShift))
        // Noted before the look: the wait below ends at once if anything changed since.
        let seen = resource.changes
        if deliver != nil {
            if try await handOn(handle, end: end, stop: stop, in: cache) { return true }
            // Re-check after the await: bytes read while the resource was replaced are dropped.
            if resource.generation != generation { return true }
        } else {
            let missing = await file.missingRanges(in: position..<end)
            if resource.generation != generation { return true }
            guard let first = missing.first else { return false }
            position = first.lowerBound
        }
        return try await fetchMissing(file, stop: stop, seen: seen, in: cache)
    }

    /// An answer of unknown length still arriving: what is present from the file, the rest
    /// from memory as it arrives, until the answer ends.
    private mutating func follow(_ handle: ResourceHandle, in cache: isolated ProgressiveCache) async throws -> Bool {
        guard let stream = resource.stream else {
            throw OriginError(
                .unavailable, operation: "read", key: resource.key, detail: "the body of unknown length did not end")
        }
        if let failure = stream.failure { throw failure }
        let limit = range?.upperBound ?? .max
        if position >= limit { return false }
        let seen = resource.changes
        if let deliver {
            let chunk = Int64(cache.options.readChunk)
            guard var bytes = try await read(handle, maxLength: Int(min(chunk, limit - position)), in: cache) else { return true }
            if resource.generation != generation || resource.stream !== stream { return true }
            if bytes.isEmpty {
                // Committed meanwhile (the memory moved on): the file has it now.
                if position < stream.arrived.start { return true }
                bytes = stream.arrived.bytes(at: position, limit: min(chunk, limit - position))
                cache.count { $0.bytesCutThrough += Int64(bytes.count) }
            } else {
                cache.count { $0.bytesFromCache += Int64(bytes.count) }
            }
            if !bytes.isEmpty {
                followed = stream
                delivered = true
                position += Int64(bytes.count)
                try await deliver(bytes)
                return true
            }
        }
        await cache.waitForChange(resource, segment: .max, since: seen)
        return true
    }

    /// Hands on the bytes at ``position``: received by the fetch bringing them and not yet
    /// present (from memory), or present (from the file). False when there are none: the byte
    /// is missing.
    private mutating func handOn(_ handle: ResourceHandle, end: Int64, stop: Int, in cache: isolated ProgressiveCache) async throws
        -> Bool
    {
        guard let deliver else { return false }
        let segment = Int(position >> Int64(handle.file.segmentShift))
        if let owner = resource.owner[segment], let arrived = resource.fetches[owner]?.arrived {
            let bytes = arrived.bytes(at: position, limit: min(Int64(cache.options.readChunk), end - position))
            if !bytes.isEmpty {
                // The reader follows this fetch now: it runs while the reader is here (an opener
                // that leaves first must not stop it under the reader).
                hold(owner)
                cache.count { $0.bytesCutThrough += Int64(bytes.count) }
                cutThrough = true
                waited = false
                delivered = true
                position += Int64(bytes.count)
                try await deliver(bytes)
                // Past what the reader took (not what it is being handed): a reader that hangs
                // up leaves only the window past its last byte.
                await keepAhead(before: stop, in: cache)
                return true
            }
        }
        guard let bytes = try await read(handle, maxLength: cache.options.readSize(at: position, end: end, first: !delivered), in: cache) else {
            return true
        }
        // Re-check after the await: bytes read while the resource was replaced are dropped.
        guard resource.generation == generation, !bytes.isEmpty else { return false }
        if !waited { cache.count { $0.bytesFromCache += Int64(bytes.count) } }
        waited = false
        delivered = true
        position += Int64(bytes.count)
        // The resource's state may change while the reader takes the bytes: the next step
        // looks again.
        try await deliver(bytes)
        await keepAhead(before: stop, in: cache)
        return true
    }

    /// The bytes at ``position`` from `handle`, or nil when the handle was closed under the read
    /// because the resource was replaced or opened again meanwhile: the next step sees that
    /// (a reader that has bytes of the old version fails with ``OriginError`` `.changed`), not
    /// an engine error about a closed file. Any other failure is the read's own.
    private func read(_ handle: ResourceHandle, maxLength: Int, in cache: isolated ProgressiveCache) async throws -> [UInt8]? {
        do {
            return try await handle.readAvailable(from: position, maxLength: maxLength)
        } catch let error as SparseCacheError where error.code == .closed && (resource.generation != generation || resource.handle !== handle) {
            return nil
        }
    }

    /// ``position`` is missing: joins the fetch bringing its segment, or starts one, and waits
    /// for the next change. A failed fetch shows on the next step: the byte is still missing,
    /// nobody brings it, and this reader waited on the fetch that failed.
    private mutating func fetchMissing(_ file: SparseFile, stop: Int, seen: Int, in cache: isolated ProgressiveCache) async throws -> Bool {
        let shift = Int64(file.segmentShift)
        let missingSegment = Int(position >> shift)
        let fetchID: Int
        if let owner = resource.owner[missingSegment] {
            fetchID = owner
        } else if let failure = interests.compactMap({ resource.outcomes[$0] }).first {
            throw failure
        } else if let (readOn, stream) = resource.fetches.first(where: { $0.value.readsOn }).flatMap({ fetch in
            fetch.value.arrived.map { (fetch.key, $0) }
        }), position >= stream.end, cache.isOneAnswer(resource) || (deliver != nil && position - stream.end <= cache.readOnReach) {
            // A whole answer being read on reaches this byte soon: wait for it, and keep it
            // going while waiting. A fetch of its own would stop that answer at this segment,
            // and the answer's bytes in flight past it would be paid twice. For a resource of
            // one answer there is no other way to these bytes.
            hold(readOn)
            await cache.waitForChange(resource, segment: missingSegment, since: seen)
            return true
        } else if cache.isOneAnswer(resource) {
            // No strong validator, and the answer that filled the resource ended before this
            // byte: no other answer may add to it (RFC 9111 section 3.4).
            if delivered {
                throw OriginError(
                    .unavailable, operation: "read", key: resource.key, offset: position,
                    detail: "the origin's answer ended before this byte, and without a strong validator it cannot be resumed"
                        + " from another answer (RFC 9111 section 3.4)")
            }
            if let refetched = try await cache.refetchOneAnswer(resource) {
                interests.insert(refetched)
            } else {
                await cache.waitForRefetch(resource, since: seen)
            }
            return true
        } else {
            // Re-check after the await: the resource may be being replaced (no fetch started).
            // A prefetch brings spans; a reader a window that grows as it reads on.
            let span = deliver == nil ? nil : ahead.window(at: position, options: cache.options, shift: shift)
            fetchID = await cache.startFetch(resource, from: missingSegment, before: stop, span: span)
            if fetchID < 0 || resource.generation != generation { return true }
        }
        hold(fetchID)
        // A client now waits on a fetch that may have started in the background.
        if deliver != nil, ConnectionLimiter.effectivePriority == .waited { resource.fetches[fetchID]?.promotion?.promote() }
        if let span = resource.fetches[fetchID]?.segments {
            ahead.covered = max(ahead.covered, Int64(span.upperBound) << shift)
        }
        if deliver == nil {
            await prefetchAhead(fetchID: fetchID, before: stop, in: cache)
        } else {
            await keepAhead(before: stop, in: cache)
        }
        await cache.waitForChange(resource, segment: missingSegment, since: seen)
        waited = true
        if let progress {
            progress(await ProgressiveCache.progress(of: file, key: resource.key, from: range?.lowerBound ?? 0))
        }
        return true
    }

    /// Holds an interest in the fetch `id` (once): it runs while this reader is here.
    private mutating func hold(_ id: Int) {
        if interests.insert(id).inserted { resource.fetches[id]?.interest += 1 }
    }

    /// Adaptive read-ahead for a reader (as Linux's readahead): once fewer than
    /// ``ReadAhead/distance(at:options:)`` bytes past the reader are being fetched, the missing
    /// ones up to twice that distance are asked for, in the background (a request a client
    /// waits on goes first). The distance starts at ``FillOptions/readAheadMinimum`` and grows
    /// with what the reader has read since it started; a reader that stops reading stops it
    /// growing, and a reader that leaves cancels what nobody else waits on. Only while fewer than
    /// ``FillOptions/readAheadLimit`` fetches run in the whole cache.
    private mutating func keepAhead(before stop: Int, in cache: isolated ProgressiveCache) async {
        let options = cache.options
        guard options.readAhead, !resource.ignoresRanges, !cache.isOneAnswer(resource), let file = resource.handle?.file,
            resource.info?.length != nil
        else { return }
        let shift = Int64(file.segmentShift)
        // A whole answer being read on to the end brings these bytes already: a fetch ahead of
        // it would stop it (it reads on only into segments nobody else fetches).
        if resource.readsOn { return }
        let distance = ahead.distance(at: position, options: options)
        let limit = Int64(stop) << shift
        let wanted = min(limit, position + distance)
        guard ahead.covered < wanted else { return }
        let target = min(limit, position + 2 * distance)
        // Spans are at most maximumFetch: a window wider than that takes more than one fetch.
        for _ in 0..<4 where ahead.covered < target && cache.fetchesRunning < options.readAheadLimit {
            let missing = await file.missingRanges(in: max(ahead.covered, position)..<target)
            await options.afterReadAheadLook?()
            // Re-check after the await: the resource may have been replaced meanwhile.
            guard resource.generation == generation else { return }
            guard let first = missing.first else {
                ahead.covered = max(ahead.covered, target)
                return
            }
            let segment = Int(first.lowerBound >> shift)
            // Whole segments up to the target, at least one: a reader that hangs up leaves no
            // more than the window fetched past it.
            let targetSegment = max(segment + 1, Int(target >> shift))
            var id: Int
            if let owner = resource.owner[segment] {
                id = owner
            } else {
                // Nobody waits on these bytes yet: a request a client waits on goes first.
                id = await ConnectionLimiter.$priority.withValue(.background) {
                    await cache.startFetch(resource, from: segment, before: min(stop, targetSegment))
                }
                guard id >= 0, resource.generation == generation else { return }
            }
            guard let span = resource.fetches[id]?.segments else { return }
            hold(id)
            ahead.covered = max(ahead.covered, Int64(span.upperBound) << shift)
        }
    }

    /// For a prefetch (nobody reads the bytes): while it waits on the fetch `fetchID`, the next
    /// span is asked for too, so the origin does not idle between spans.
    private mutating func prefetchAhead(fetchID: Int, before stop: Int, in cache: isolated ProgressiveCache) async {
        let options = cache.options
        guard options.readAhead, !resource.ignoresRanges, !resource.readsOn, !cache.isOneAnswer(resource),
            let span = resource.fetches[fetchID]?.segments, span.upperBound < stop, resource.owner[span.upperBound] == nil,
            let file = resource.handle?.file, cache.fetchesRunning < options.readAheadLimit
        else { return }
        let shift = Int64(file.segmentShift)
        let spanSegments = max(1, Int(options.maximumFetch >> shift))
        let window = (Int64(span.upperBound) << shift)..<(Int64(min(stop, span.upperBound + spanSegments)) << shift)
        let missing = await file.missingRanges(in: window)
        await options.afterReadAheadLook?()
        guard resource.generation == generation, let first = missing.first else { return }
        let segment = Int(first.lowerBound >> shift)
        let id: Int
        if let owner = resource.owner[segment] {
            id = owner
        } else {
            id = await ConnectionLimiter.$priority.withValue(.background) { await cache.startFetch(resource, from: segment, before: stop) }
        }
        if id >= 0, resource.generation == generation { hold(id) }
    }
}
