#if canImport(Glibc)
    import Glibc
#endif
import SparseCacheEngine
import SparseCacheStore
import SparseHTTP

extension ProgressiveCache {
    /// Walks `range` from its start: present bytes are read (and handed to `deliver`) at once;
    /// bytes a fetch has received and not yet made present are handed over from memory
    /// (cut-through); at the first byte nobody has, the reader joins the fetch bringing it, or
    /// starts one, and waits for the next bytes to arrive. Fetches run ahead of the reader by a
    /// window that grows as it reads on (``FillOptions/readAhead``). `deliver` nil only brings
    /// the bytes in (prefetch); the walk goes on only when it returns (a slow reader holds back
    /// its own reads). `generation`, when given, is the version the reader was promised
    /// (``CacheReader``): a resource replaced since then fails with `.originChanged` before any
    /// byte.
    func serve(
        _ source: any RangeSource, range: Range<Int64>?,
        deliver: (@Sendable (_ bytes: [UInt8]) async throws -> Void)?,
        generation expected: Int? = nil, progress: (@Sendable (FillProgress) -> Void)? = nil
    ) async throws {
        if let range, range.lowerBound < 0 {
            throw SparseCacheError(.invalidArgument, operation: "read", path: source.key, detail: "negative offset \(range.lowerBound)")
        }
        // A reader promised a version (``CacheReader``) holds its resource's entry: when that
        // version is gone (replaced, or an answer without a length was cut off and dropped), it
        // fails here, before `attach` could ask the origin for a new one only to refuse it.
        if let expected, resources[source.key]?.generation != expected {
            throw SparseCacheError(
                .originChanged, operation: "read", path: source.key,
                detail: "the version opened is gone: it changed on the origin, or its answer (without a length) was cut off")
        }
        // A key neither open here nor stored: first contact asks while the files are made. (A
        // reader promised a version holds its resource open.)
        let resource = try await attach(source, first: range.map { .range($0) } ?? .whole, new: await isUnknown(source.key))
        var interests = Set<Int>()
        // First contact started a fetch with the answer to this very request: it is this
        // reader's (its interest, held for the opener, is released with the others).
        if let opener = resource.openerFetch {
            resource.openerFetch = nil
            if resource.fetches[opener] != nil { interests.insert(opener) }
        }
        defer {
            releaseInterest(resource, interests)
            detach(resource)
        }
        // A resource one answer fills is fetched anew before the reader's first byte when that
        // answer did not bring its range (never its old part followed by another answer's rest).
        // A reader promised a version (``CacheReader``) was planned for by its opener.
        if expected == nil, let refetched = try await prepareOneAnswerReader(resource, range: range) { interests.insert(refetched) }
        var generation = resource.generation
        var delivered = expected != nil
        if let expected, expected != generation {
            throw SparseCacheError(
                .originChanged, operation: "read", path: resource.key, detail: "the resource changed on the origin after it was opened")
        }
        var waited = false
        // Whether this reader had bytes from memory, before they were durable.
        var cutThrough = false
        var position = range?.lowerBound ?? 0
        // Read-ahead: how far this reader has made sure fetches exist, from where it started.
        var ahead = ReadAhead(start: position)
        // The answer of unknown length this reader took bytes of, if any: when it stops before
        // its end, that is the reader's error (not a change of version).
        var followed: StreamFill?
        while true {
            try Task.checkCancellation()
            if let failure = followed?.failure { throw failure }
            if resource.generation != generation {
                // The origin changed: never hand one reader bytes of two versions.
                if delivered {
                    throw SparseCacheError(
                        .originChanged, operation: "read", path: resource.key, offset: position,
                        detail: "the resource changed on the origin after \(position - (range?.lowerBound ?? 0)) bytes were read")
                }
                generation = resource.generation
            }
            guard let handle = resource.handle, let info = resource.info else {
                // Being replaced (the origin changed): wait for the new version. The task
                // clears `opening` itself before it finishes, so this never spins.
                if let opening = resource.opening {
                    try await opening.value
                    continue
                }
                throw SparseCacheError(.originUnavailable, operation: "read", path: resource.key, detail: "the resource is not open")
            }
            guard let length = info.length else {
                // An answer of unknown length still arriving: follow it.
                guard let stream = resource.stream else {
                    throw SparseCacheError(
                        .originUnavailable, operation: "read", path: resource.key, detail: "the body of unknown length did not end")
                }
                if let failure = stream.failure { throw failure }
                let limit = range?.upperBound ?? .max
                if position >= limit { return }
                let seen = resource.changes
                if let deliver {
                    let chunk = Int64(options.readChunk)
                    var bytes = try await handle.readAvailable(from: position, maxLength: Int(min(chunk, limit - position)))
                    if resource.generation != generation || resource.stream !== stream { continue }
                    if bytes.isEmpty {
                        // Committed meanwhile (the memory moved on): the file has it now.
                        if position < stream.arrived.start { continue }
                        bytes = stream.arrived.bytes(at: position, limit: min(chunk, limit - position))
                        count { $0.bytesCutThrough += Int64(bytes.count) }
                    } else {
                        count { $0.bytesFromCache += Int64(bytes.count) }
                    }
                    if !bytes.isEmpty {
                        followed = stream
                        delivered = true
                        position += Int64(bytes.count)
                        try await deliver(bytes)
                        continue
                    }
                }
                await waitForChange(resource, segment: .max, since: seen)
                continue
            }
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
                if cutThrough { await awaitDurable(resource, (range?.lowerBound ?? 0)..<end, generation: generation) }
                return
            }
            let file = handle.file
            let shift = Int64(file.segmentShift)
            let segment = Int(position >> shift)
            let stop = Int((end + Int64(file.segmentSize) - 1) >> shift)
            // Noted before the look: the wait below ends at once if anything changed since.
            let seen = resource.changes
            if let deliver {
                // Received by the fetch bringing it, not yet present: from memory.
                if let owner = resource.owner[segment], let arrived = resource.fetches[owner]?.arrived {
                    let bytes = arrived.bytes(at: position, limit: min(Int64(options.readChunk), end - position))
                    if !bytes.isEmpty {
                        // The reader follows this fetch now: it runs while the reader is here
                        // (an opener that leaves first must not stop it under the reader).
                        if interests.insert(owner).inserted { resource.fetches[owner]?.interest += 1 }
                        count { $0.bytesCutThrough += Int64(bytes.count) }
                        cutThrough = true
                        waited = false
                        delivered = true
                        position += Int64(bytes.count)
                        try await deliver(bytes)
                        // Past what the reader took (not what it is being handed): a reader
                        // that hangs up leaves only the window past its last byte.
                        await keepAhead(resource, &ahead, position: position, before: stop, generation: generation, interests: &interests)
                        continue
                    }
                }
                let bytes = try await handle.readAvailable(
                    from: position, maxLength: options.readSize(at: position, end: end, first: !delivered))
                // Re-check after the await: bytes read while the resource was replaced are dropped.
                if resource.generation != generation { continue }
                if !bytes.isEmpty {
                    if !waited { count { $0.bytesFromCache += Int64(bytes.count) } }
                    waited = false
                    delivered = true
                    position += Int64(bytes.count)
                    // The resource's state may change while the reader takes the bytes: the
                    // next pass looks again.
                    try await deliver(bytes)
                    await keepAhead(resource, &ahead, position: position, before: stop, generation: generation, interests: &interests)
                    continue
                }
            } else {
                let missing = await file.missingRanges(in: position..<end)
                if resource.generation != generation { continue }
                guard let first = missing.first else { return }
                position = first.lowerBound
            }
            // `position` is missing: join the fetch bringing its segment, or start one.
            let missingSegment = Int(position >> shift)
            let fetchID: Int
            if let owner = resource.owner[missingSegment] {
                fetchID = owner
            } else if let failure = interests.compactMap({ resource.outcomes[$0] }).first {
                throw failure
            } else if let (readOn, stream) = resource.fetches.first(where: { $0.value.readsOn }).flatMap({ fetch in
                fetch.value.arrived.map { (fetch.key, $0) }
            }), position >= stream.end, isOneAnswer(resource) || (deliver != nil && position - stream.end <= readOnReach) {
                // A whole answer being read on reaches this byte soon: wait for it, and keep it
                // going while waiting. A fetch of its own would stop that answer at this
                // segment, and the answer's bytes in flight past it would be paid twice. For a
                // resource of one answer there is no other way to these bytes.
                if interests.insert(readOn).inserted { resource.fetches[readOn]?.interest += 1 }
                await waitForChange(resource, segment: missingSegment, since: seen)
                continue
            } else if isOneAnswer(resource) {
                // No strong validator, and the answer that filled the resource ended before this
                // byte: no other answer may add to it (RFC 9111 section 3.4).
                if delivered {
                    throw SparseCacheError(
                        .originUnavailable, operation: "read", path: resource.key, offset: position,
                        detail: "the origin's answer ended before this byte, and without a strong validator it cannot be resumed"
                            + " from another answer (RFC 9111 section 3.4)")
                }
                if let refetched = try await refetchOneAnswer(resource) {
                    interests.insert(refetched)
                } else {
                    await waitForRefetch(resource, since: seen)
                }
                continue
            } else {
                // Re-check after the await: the resource may be being replaced (no fetch started).
                // A prefetch brings spans; a reader a window that grows as it reads on.
                let span = deliver == nil ? nil : ahead.window(at: position, options: options, shift: shift)
                fetchID = await startFetch(resource, from: missingSegment, before: stop, span: span)
                if fetchID < 0 || resource.generation != generation { continue }
            }
            if interests.insert(fetchID).inserted { resource.fetches[fetchID]?.interest += 1 }
            // A client now waits on a fetch that may have started in the background.
            if deliver != nil, ConnectionLimiter.effectivePriority == .waited { resource.fetches[fetchID]?.promotion?.promote() }
            if let span = resource.fetches[fetchID]?.segments {
                ahead.covered = max(ahead.covered, Int64(span.upperBound) << shift)
            }
            if deliver == nil {
                await prefetchAhead(resource, fetchID: fetchID, before: stop, generation: generation, interests: &interests)
            } else {
                await keepAhead(resource, &ahead, position: position, before: stop, generation: generation, interests: &interests)
            }
            // A failed fetch shows on the next pass: the byte is still missing, nobody brings
            // it, and this reader waited on the fetch that failed.
            await waitForChange(resource, segment: missingSegment, since: seen)
            waited = true
            if let progress {
                progress(await Self.progress(of: file, key: resource.key, from: range?.lowerBound ?? 0))
            }
        }
    }

    /// Waits until `range` is present, as long as fetches still bring (write back) what is
    /// missing of it; returns at once when nobody does (a fetch that stopped early), when the
    /// resource was replaced, or when the reader's task is cancelled.
    private func awaitDurable(_ resource: FillResource, _ range: Range<Int64>, generation: Int) async {
        while !Task.isCancelled, resource.generation == generation, let file = resource.handle?.file {
            let seen = resource.changes
            let missing = await file.missingRanges(in: range)
            guard resource.generation == generation, let first = missing.first else { return }
            let shift = Int64(file.segmentShift)
            let segments = missing.lazy.flatMap { Int($0.lowerBound >> shift)...Int(($0.upperBound - 1) >> shift) }
            let owners = Set(segments.compactMap { resource.owner[$0] }.prefix(64))
            guard !owners.isEmpty else { return }
            // Not at the fetch's next commit (up to commitEvery later): write back and commit
            // what it received now, so the segment a reader waits on is committed early.
            for owner in owners {
                if let arrived = resource.fetches[owner]?.arrived, arrived.writer == nil,
                    arrived.unwrittenCount > 0 || arrived.sinceCommit > 0, let handle = resource.handle
                {
                    startWriteBack(arrived, of: resource, handle: handle, generation: generation, commit: true)
                }
            }
            await waitForChange(resource, segment: Int(first.lowerBound >> shift), since: seen)
        }
    }

    /// Adaptive read-ahead for a reader (as Linux's readahead): once fewer than
    /// ``ReadAhead/distance(at:options:)`` bytes past the reader are being fetched, the missing
    /// ones up to twice that distance are asked for, in the background (a request a client
    /// waits on goes first). The distance starts at ``FillOptions/readAheadMinimum`` and grows
    /// with what the reader has read since it started; a reader that stops reading stops it
    /// growing, and a reader that leaves cancels what nobody else waits on. Only while fewer than
    /// ``FillOptions/readAheadLimit`` fetches run in the whole cache.
    private func keepAhead(
        _ resource: FillResource, _ ahead: inout ReadAhead, position: Int64, before stop: Int, generation: Int,
        interests: inout Set<Int>
    ) async {
        guard options.readAhead, !resource.ignoresRanges, !isOneAnswer(resource), let file = resource.handle?.file,
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
        for _ in 0..<4 where ahead.covered < target && fetchesRunning < options.readAheadLimit {
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
                    await startFetch(resource, from: segment, before: min(stop, targetSegment))
                }
                guard id >= 0, resource.generation == generation else { return }
            }
            guard let span = resource.fetches[id]?.segments else { return }
            if interests.insert(id).inserted { resource.fetches[id]?.interest += 1 }
            ahead.covered = max(ahead.covered, Int64(span.upperBound) << shift)
        }
    }

    /// For a prefetch (nobody reads the bytes): while it waits on the fetch `fetchID`, the next
    /// span is asked for too, so the origin does not idle between spans.
    private func prefetchAhead(_ resource: FillResource, fetchID: Int, before stop: Int, generation: Int, interests: inout Set<Int>) async {
        guard options.readAhead, !resource.ignoresRanges, !resource.readsOn, !isOneAnswer(resource), let span = resource.fetches[fetchID]?.segments,
            span.upperBound < stop,
            resource.owner[span.upperBound] == nil, let file = resource.handle?.file, fetchesRunning < options.readAheadLimit
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
            id = await ConnectionLimiter.$priority.withValue(.background) { await startFetch(resource, from: segment, before: stop) }
        }
        if id >= 0, resource.generation == generation, interests.insert(id).inserted { resource.fetches[id]?.interest += 1 }
    }

    // MARK: Attaching readers

    /// Opens the resource in the store (once, shared) and learns what the origin says about
    /// it, from the stored metadata or by first contact.
    ///
    /// `new`: the caller found nothing stored for the key just before. First contact then asks
    /// the origin while the store makes the resource's files, instead of after.
    func attach(_ source: any RangeSource, first: FirstRequest = .whole, new: Bool = false) async throws -> FillResource {
        let resource = entry(for: source.key)
        resource.users += 1
        keptOpen[source.key] = nil
        if resource.source == nil { resource.source = source }
        do {
            // The generation this reader's own open filled, once it ran.
            var opened: Int?
            // Also while `opening` runs with the length already known: first contact is still
            // writing the first segment, and a reader that went on now would fetch it again.
            while resource.handle == nil || resource.info == nil || resource.opening != nil {
                if let opening = resource.opening {
                    // The task clears `opening` itself before it finishes: no spin on a done task.
                    try await opening.value
                    continue
                }
                // This reader's first contact got an answer of unknown length that was cut off
                // (and the resource dropped) before the reader could follow it: it fails as
                // the answer did, as the readers that followed it do. Asking the origin again
                // would send the same request twice for one client request, which nginx does
                // not do either once an answer has begun (its proxy_next_upstream retries only
                // up to the response head).
                if let opened, let cut = resource.cutOff, cut.generation == opened { throw cut.error }
                opened = resource.generation
                let task = onLoop { try await self.open(resource, first: first, new: new) }
                resource.opening = task
                try await task.value
            }
        } catch {
            detach(resource)
            throw error
        }
        return resource
    }

    /// One user fewer. The last one leaves the resource open for ``FillOptions/keepOpen``:
    /// the next request for it (a player's next range) then skips reopening it.
    func detach(_ resource: FillResource) {
        resource.users -= 1
        // A reader of a resource of one answer may be waiting to be its only user (to fetch it
        // anew without cutting anyone off): it looks again.
        if !resource.waiters.isEmpty, resource.users - resource.refetchWaiting <= 1, isOneAnswer(resource) { wakeWaiters(resource) }
        // Nobody but the stream itself holds the resource: stop it (a body nobody reads to
        // its end is not stored; a live stream without clients would never end).
        if let stream = resource.stream, resource.users == 1, stream.failure == nil {
            stream.cancel()
            resource.fetches[stream.id]?.task?.cancel()
        }
        guard resource.users == 0, resource.fetches.isEmpty, resource.opening == nil, resource.handle != nil else {
            forgetIfIdle(resource)
            return
        }
        resource.idleSince = .now
        let key = resource.key
        // Each resource kept open holds two descriptors: beyond the limit the one idle the
        // longest closes now rather than after `keepOpen`.
        nextKeptOpen += 1
        keptOpen[key] = nextKeptOpen
        sweepKeptOpen()
        while keptOpen.count > options.maximumKeptOpen, let oldest = keptOpen.min(by: { $0.value < $1.value })?.key {
            keptOpen[oldest] = nil
            closeIfIdle(key: oldest, force: true)
        }
    }

    /// Closes the resources kept open once their ``FillOptions/keepOpen`` has passed: one task
    /// for the whole cache, asleep until the first of them is due, running while any is kept.
    /// (A task with its own timer per idle resource, started and cancelled by every request of a
    /// player's range after range, would cost about a tenth of the CPU time of a cached hit.)
    private func sweepKeptOpen() {
        guard keptOpenSweeper == nil else { return }
        keptOpenSweeper = Task {
            while let due = self.firstKeptOpenDue() {
                try? await Task.sleep(until: due, clock: .continuous)
                for key in Array(self.keptOpen.keys) { self.closeIfIdle(key: key) }
            }
            // No await since the look found none kept: the next detach starts a new sweeper.
            self.keptOpenSweeper = nil
        }
    }

    /// When the first resource kept open that nothing uses now is due to close (one that a
    /// fetch still holds waits for the next detach).
    private func firstKeptOpenDue() -> ContinuousClock.Instant? {
        keptOpen.keys.compactMap { key in resources[key].flatMap { isUnused($0) ? $0.idleSince : nil } }.min().map {
            $0 + options.keepOpen
        }
    }

    /// Open, and nobody reads, fetches or opens it.
    private func isUnused(_ resource: FillResource) -> Bool {
        resource.users == 0 && resource.fetches.isEmpty && resource.opening == nil && resource.handle != nil
    }

    /// Lets go of a resource nobody used for ``FillOptions/keepOpen`` (or at once with
    /// `force`, on shutdown).
    func closeIfIdle(key: String, force: Bool = false) {
        if !force, let resource = resources[key], isUnused(resource), keptForQuickHits(resource) { return }
        guard let resource = resources[key], isUnused(resource), let handle = resource.handle,
            force || ContinuousClock.now - resource.idleSince >= options.keepOpen
        else { return }
        keptOpen[key] = nil
        // An answer without a length that ended small is kept as a small object from now on:
        // one log record instead of a data file and an index.
        let threshold = options.smallObjectThreshold
        let movesToSmall = resource.endedWithoutLength && threshold > 0 && (resource.info?.length ?? .max) <= threshold
        resource.endedWithoutLength = false
        resource.handle = nil
        resource.info = nil
        resource.outcomes.removeAll()
        let id = takeID()
        // On the request's loop when there is one (a resource closed beyond the kept-open
        // bound, at a request): the close's hops wake no pool thread.
        releases[id] = onLoop {
            await self.release(handle)
            if movesToSmall { await self.moveToSmall(key: key, maximum: threshold) }
            self.releases[id] = nil
            if self.movingToSmall[key] == id { self.movingToSmall[key] = nil }
        }
        if movesToSmall { movingToSmall[key] = id }
        forgetIfIdle(resource)
    }

    /// Waits until a move of `key` to the small-object logs has finished (``movingToSmall``).
    func settleMove(key: String) async {
        while let id = movingToSmall[key] {
            guard let task = releases[id] else {
                movingToSmall[key] = nil
                return
            }
            await task.value
        }
    }

    /// Moves a released resource into the small-object logs (``SparseStore/moveToSmallObject(key:maximum:)``,
    /// which re-checks under the key's lock that nobody opened it meanwhile). A failure leaves
    /// the resource as it was, counted and logged.
    private func moveToSmall(key: String, maximum: Int64) async {
        do {
            if try await store.moveToSmallObject(key: key, maximum: maximum) { count { $0.smallObjectsStored += 1 } }
        } catch {
            count { $0.smallObjectFailures += 1 }
            await store.noteHousekeepingFailure(.release, key: key, error)
        }
    }

    /// Closes every resource kept open with no reader and no fetch (instead of after
    /// ``FillOptions/keepOpen``) and waits until the store has them back: before an operator's
    /// eviction, which never deletes an open resource.
    public func closeIdle() async {
        for key in Array(resources.keys) { closeIfIdle(key: key, force: true) }
        for release in Array(releases.values) { await release.value }
    }

    /// Releases a handle no caller waits on: a failure is counted (``FillStatistics/releaseFailures``)
    /// and reported to the store, which logs it.
    func release(_ handle: ResourceHandle) async {
        do {
            try await handle.release()
        } catch {
            count { $0.releaseFailures += 1 }
            await store.noteHousekeepingFailure(.release, key: handle.key, error)
        }
    }

    private func open(_ resource: FillResource, first: FirstRequest, new: Bool) async throws {
        defer { resource.opening = nil }
        guard let source = resource.source else { return }
        // A new key: first contact's request goes out now, and the files are made while the
        // origin answers (a small-object attempt's answer is here already).
        var early: EarlyContact?
        if new, resource.handle == nil, resource.firstResponse == nil { early = startEarlyContact(resource, source: source, first: first) }
        defer { early?.abandon() }
        if resource.handle == nil {
            do {
                resource.handle = try await store.open(key: resource.key)
            } catch let error as SparseCacheError where error.errno == EMFILE || error.errno == ENFILE {
                // Out of descriptors: the resources kept open for later give theirs back, and
                // the open is tried once more (a request must not fail for a spare handle).
                await closeIdle()
                resource.handle = try await store.open(key: resource.key)
            }
        }
        guard let handle = resource.handle else { return }
        // One call to the file's actor for both (every reopen asks).
        let (length, metadata) = await handle.file.lengthAndMetadata
        guard let length else {
            let given = early
            early = nil
            try await firstContact(resource, source: source, handle: handle, first: first, early: given)
            return
        }
        // Known from an earlier run: its validators go out with every request. A first-contact
        // answer a small-object attempt left is not needed.
        resource.firstResponse?.cancel()
        resource.firstResponse = nil
        let stored = StoredHead(metadata)
        resource.info = ContentInfo(
            length: length, contentType: metadata.contentType,
            validator: ContentValidator(etag: metadata.etag, lastModified: metadata.lastModified, date: stored?.headers["date"]),
            stored: stored)
    }

    /// The range first contact asks the origin for (nil: the whole): the reader's range from its
    /// segment-aligned start, at most ``FillOptions/maximumFetch`` of it, and the first
    /// read-ahead window when open-ended. A revalidation asks the same, so that its answer, when
    /// it is a new version, is the new resource's first contact.
    public nonisolated func firstContactRange(for first: FirstRequest) -> Range<Int64>? {
        guard case .range(let wanted) = first else { return nil }
        let segmentSize = Int64(store.options.segmentSize)
        let shift = Int64(segmentSize.trailingZeroBitCount)
        let start = (max(0, wanted.lowerBound) >> shift) << shift
        let bounded = wanted.upperBound != .max && wanted.upperBound - start <= options.maximumFetch
        let window = max(segmentSize, 2 * options.readAheadMinimum)
        let stop = bounded ? ((wanted.upperBound + segmentSize - 1) >> shift) << shift : start + window
        return start..<max(start + segmentSize, stop)
    }

    /// First contact asks the origin for what the reader itself wants (`first`): the answer
    /// tells the length, the validators and whether ranges work, and its body becomes the
    /// first fetch, which the reader reads from memory as it arrives (no separate request for
    /// the first segment before the reader's own). A range is asked from its segment-aligned
    /// start, bounded (``FirstRequest``); the whole resource without a range, its `200` read on
    /// to the end. An answer without a length (chunked or close-delimited) is received whole
    /// from here on (``StreamFill``).
    ///
    /// `early`: the request made already, while the files were being made.
    func firstContact(
        _ resource: FillResource, source: any RangeSource, handle: ResourceHandle, first: FirstRequest, early: EarlyContact? = nil
    ) async throws {
        var handle = handle
        if await handle.file.presentBytes > 0 {
            // Bytes without a length: a body of unknown length that never ended (the process
            // stopped while it arrived). They are not the resource: start again without them.
            resource.handle = nil
            await release(handle)
            do {
                try await store.remove(key: resource.key)
                handle = try await store.open(key: resource.key)
            } catch {
                early?.abandon()
                throw error
            }
            resource.handle = handle
        }
        let shift = Int64(handle.file.segmentShift)
        let segmentSize = Int64(handle.file.segmentSize)
        let probe = 0..<segmentSize
        var asked = firstContactRange(for: first)
        // A prefetch's first contact takes its connection under a promotion of its own, which
        // the fetch reading the answer on keeps: a player that comes to wait on it promotes it.
        var promotion = early?.promotion ?? ConnectionLimiter.newPromotion()
        var response: RangeResponse
        do {
            do {
                if let received = resource.firstResponse {
                    // A small-object attempt asked already (the same request) and found the
                    // answer large or ranged: no second request.
                    resource.firstResponse = nil
                    response = received
                    asked = resource.firstAsked
                    promotion = resource.firstPromotion
                } else if let early {
                    // The same request, asked while the files were made.
                    response = try await early.task.value
                } else {
                    response = try await ConnectionLimiter.$promotion.withValue(promotion) {
                        try await fetchWithRetries(source, asked, validator: nil, key: resource.key)
                    }
                }
            } catch let error as SparseCacheError where error.httpStatus == 416 && asked != nil && asked != probe {
                // Past the end: the resource is shorter than the reader thought. Its start tells
                // the length (the reader then gets its own error).
                response = try await ConnectionLimiter.$promotion.withValue(promotion) {
                    try await fetchWithRetries(source, probe, validator: nil, key: resource.key)
                }
            }
        } catch let error as SparseCacheError where error.httpStatus == 416 || error.httpStatus == 206 {
            // No byte range of an empty resource is satisfiable (RFC 9110, section 14.1.1):
            // some origins say so rather than send the empty 200. A 206 that does not say
            // the total length cannot be placed. Ask for the whole.
            response = try await askWhole(resource, source: source, handle: handle, promotion: promotion)
            asked = nil
        } catch {
            await forgetUnknown(resource, handle: handle)
            throw error
        }
        if response.isPartial, source.partsNeedStrongValidator, !response.info.validator.isStrong {
            // A part without a strong validator could never be completed by another answer
            // (RFC 9111 section 3.4): the whole is asked for instead, read on by one answer.
            // (Through the proxy such a part is passed on before it gets here.)
            response.cancel()
            response = try await askWhole(resource, source: source, handle: handle, promotion: promotion)
            asked = nil
        }
        guard let length = response.info.length else {
            do {
                try await receiveWhole(response, in: resource, handle: handle)
            } catch {
                response.cancel()
                throw error
            }
            return
        }
        do {
            try await adopt(response.info, in: resource)
        } catch {
            response.cancel()
            throw error
        }
        if length == 0 {
            response.cancel()
            try await handle.file.commit()
            return
        }
        // The answer's bytes: from where it starts (0 for a 200) to the end of what was asked,
        // or on to the end for a 200 (asked for whole, or a range the origin ignored: then no
        // read-ahead may split the fill into spans that each download from byte 0 again).
        let whole = asked == nil || response.offset < asked!.lowerBound
        if asked != nil, whole { resource.ignoresRanges = true }
        let from = Int(response.offset >> shift)
        let upTo = whole ? min(length, response.offset + options.maximumFetch) : min(length, asked!.upperBound)
        let segments = from..<max(from + 1, Int((upTo + segmentSize - 1) >> shift))
        resource.openerFetch = registerFetch(
            resource, segments: segments, first: FirstAnswer(response: response, readsOn: whole, promotion: promotion), interest: 1)
    }

    /// Sends first contact's request for a new key at once, before its files exist
    /// (``open(_:first:new:)``); ``firstContact(_:source:handle:first:early:)`` takes the answer.
    func startEarlyContact(_ resource: FillResource, source: any RangeSource, first: FirstRequest) -> EarlyContact {
        let asked = firstContactRange(for: first)
        let promotion = ConnectionLimiter.newPromotion()
        let key = resource.key
        let task = onLoop {
            try await ConnectionLimiter.$promotion.withValue(promotion) {
                try await self.fetchWithRetries(source, asked, validator: nil, key: key)
            }
        }
        return EarlyContact(promotion: promotion, task: task)
    }

    /// Whether nothing is held for `key` as a sparse resource: not open here, and no store
    /// entry. Its first contact may then ask the origin before the files exist.
    func isUnknown(_ key: String) async -> Bool {
        guard resources[key] == nil else { return false }
        return await !hasEntry(key)
    }

    /// Whether `first` asks for bytes past ``FillOptions/smallObjectThreshold``, which a small
    /// object has none of: a range starting there, or ending past it. A client that asks so
    /// expects a large resource (a player, a download manager); one that is small after all is
    /// kept as a sparse resource, as before small objects existed.
    func reachesPastSmall(_ first: FirstRequest) -> Bool {
        guard case .range(let wanted) = first else { return false }
        let threshold = options.smallObjectThreshold
        return wanted.lowerBound >= threshold || (wanted.upperBound != .max && wanted.upperBound > threshold)
    }

    /// First contact's fallback: the whole resource, under the first contact's promotion; a
    /// failure leaves no empty resource behind.
    private func askWhole(
        _ resource: FillResource, source: any RangeSource, handle: ResourceHandle, promotion: ConnectionLimiter.Promotion?
    ) async throws -> RangeResponse {
        do {
            return try await ConnectionLimiter.$promotion.withValue(promotion) {
                try await fetchWithRetries(source, nil, validator: nil, key: resource.key)
            }
        } catch {
            await forgetUnknown(resource, handle: handle)
            throw error
        }
    }

    /// Nothing was learned: leave no empty resource behind (a client asking for missing URLs
    /// must not fill the store with them).
    private func forgetUnknown(_ resource: FillResource, handle: ResourceHandle) async {
        if resource.handle === handle, await handle.file.length == nil, await handle.file.presentBytes == 0 {
            resource.handle = nil
            await release(handle)
            try? await store.remove(key: resource.key)
        }
    }

    /// Stores what the origin said: the length (when it said one), the content type and the
    /// validators.
    func adopt(_ info: ContentInfo, in resource: FillResource) async throws {
        guard let handle = resource.handle else { return }
        let file = handle.file
        if let length = info.length, await file.length == nil { try await file.setLength(length) }
        var metadata = await file.metadata
        metadata.key = resource.key
        metadata.contentType = info.contentType
        metadata.etag = info.validator.etag
        metadata.lastModified = info.validator.lastModified
        if let stored = info.stored { metadata = stored.stored(in: metadata) }
        // Committed with the first bytes: a crash before then leaves a resource with nothing
        // present, which first contact simply repeats.
        try await file.setMetadata(metadata)
        resource.info = info
    }

    // MARK: Waiting

    /// Suspends until the resource changes (a commit, a fetch ending, a replacement) or the
    /// task is cancelled. Returns at once when it has changed since `seen` (the reader's look is
    /// stale: the fetch it joined may have ended meanwhile, and with it the last wake-up).
    ///
    /// The waiter is registered in `park`, an actor method: the operation closure of
    /// `withTaskCancellationHandler` does not keep the actor's isolation (a long-standing Swift
    /// bug, swiftlang/swift#85518), so touching actor state inside it races. Seen as a crash
    /// with 32 concurrent proxy clients, and by ThreadSanitizer.
    func waitForChange(_ resource: FillResource, segment: Int, since seen: Int) async {
        let id = takeID()
        let key = resource.key
        await withTaskCancellationHandler {
            await self.park(key: key, waiter: id, segment: segment, since: seen)
        } onCancel: {
            Task { await self.wake(key: key, waiter: id) }
        }
    }

    private func park(key: String, waiter id: Int, segment: Int, since seen: Int) async {
        guard let resource = resources[key], resource.changes == seen else { return }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            // A cancel that came before this registration finds nothing to wake: look here.
            if Task.isCancelled {
                continuation.resume()
            } else {
                resource.waiters[id] = (segment, continuation)
            }
        }
    }

    private func wake(key: String, waiter id: Int) {
        resources[key]?.waiters.removeValue(forKey: id)?.continuation.resume()
    }

    /// Wakes every waiting reader and tells the progress listeners.
    func changed(_ resource: FillResource) async {
        wakeWaiters(resource)
        if options.quickHits, resource.info?.stored != nil { await refreshQuickHit(resource) }
        guard !resource.listeners.isEmpty, let handle = resource.handle else { return }
        for (_, listener) in resource.listeners {
            listener.continuation.yield(await Self.progress(of: handle.file, key: resource.key, from: listener.offset))
        }
    }

    /// Wakes every waiting reader: they look again.
    func wakeWaiters(_ resource: FillResource) {
        resource.changes += 1
        let waiters = resource.waiters
        resource.waiters.removeAll()
        for (_, waiter) in waiters { waiter.continuation.resume() }
    }

    func releaseInterest(_ resource: FillResource, _ interests: Set<Int>) {
        for id in interests {
            guard var fetch = resource.fetches[id] else {
                continue
            }
            fetch.interest -= 1
            resource.fetches[id] = fetch
            // Nobody waits for it any more: stop it, and commit what it has. One whose request
            // is out or that reads an answer finishes the segment it is receiving first (those
            // bytes are on their way, paid for): cancelling its task would drop them at once.
            if fetch.interest <= 0 {
                if fetch.stop == nil, fetch.gate.withdraw() {
                    fetch.task?.cancel()
                } else {
                    resource.fetches[id]?.unwanted = true
                }
            }
        }
        if resource.waiters.isEmpty, resource.fetches.isEmpty { resource.outcomes.removeAll() }
    }
}
