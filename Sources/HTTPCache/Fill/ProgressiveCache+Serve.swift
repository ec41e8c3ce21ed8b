#if canImport(Glibc)
import Glibc
#endif
import SparseCacheEngine
import SparseCacheStore
import SparseHTTP

extension ProgressiveCache {
    /// Walks `range` from its start: present bytes are read (and handed to `deliver`) at once;
    /// at the first missing byte the reader joins the fetch bringing it, or starts one, and
    /// waits for the next commit. `deliver` nil only brings the bytes in (prefetch); the walk
    /// goes on only when it returns (a slow reader holds back its own reads).
    /// `generation`, when given, is the version the reader was promised (``CacheReader``): a
    /// resource replaced since then fails with `.originChanged` before any byte.
    func serve(
        _ source: any RangeSource, range: Range<Int64>?,
        deliver: (@Sendable (_ bytes: [UInt8]) async throws -> Void)?,
        generation expected: Int? = nil, progress: (@Sendable (FillProgress) -> Void)? = nil
    ) async throws {
        if let range, range.lowerBound < 0 {
            throw SparseCacheError(.invalidArgument, operation: "read", path: source.key, detail: "negative offset \(range.lowerBound)")
        }
        let resource = try await attach(source)
        var interests = Set<Int>()
        defer {
            releaseInterest(resource, interests)
            detach(resource)
        }
        var generation = resource.generation
        var delivered = expected != nil
        if let expected, expected != generation {
            throw SparseCacheError(
                .originChanged, operation: "read", path: resource.key, detail: "the resource changed on the origin after it was opened")
        }
        var waited = false
        var position = range?.lowerBound ?? 0
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
                        // Committed meanwhile (the buffer moved on): the file has it now.
                        if position < stream.start { continue }
                        bytes = stream.bytes(at: position, limit: min(chunk, limit - position))
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
            if position >= end { return }
            let file = handle.file
            // Noted before the look: the wait below ends at once if anything changed since.
            let seen = resource.changes
            if let deliver {
                let bytes = try await handle.readAvailable(from: position, maxLength: Int(min(Int64(options.readChunk), end - position)))
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
                    continue
                }
            } else {
                let missing = await file.missingRanges(in: position..<end)
                if resource.generation != generation { continue }
                guard let first = missing.first else { return }
                position = first.lowerBound
            }
            // `position` is missing: join the fetch bringing its segment, or start one.
            let segment = Int(position >> Int64(file.segmentShift))
            let stop = Int((end + Int64(file.segmentSize) - 1) >> Int64(file.segmentShift))
            let fetchID: Int
            if let owner = resource.owner[segment] {
                fetchID = owner
            } else if let failure = interests.compactMap({ resource.outcomes[$0] }).first {
                throw failure
            } else {
                // Re-check after the await: the resource may be being replaced (no fetch started).
                fetchID = await startFetch(resource, from: segment, before: stop)
                if fetchID < 0 || resource.generation != generation { continue }
            }
            if interests.insert(fetchID).inserted { resource.fetches[fetchID]?.interest += 1 }
            // A client now waits on a fetch that may have started in the background.
            if deliver != nil, ConnectionLimiter.effectivePriority == .waited { resource.fetches[fetchID]?.promotion?.promote() }
            if let span = resource.fetches[fetchID]?.segments,
                let ahead = await readAhead(resource, after: span, before: stop, generation: generation),
                interests.insert(ahead).inserted
            {
                resource.fetches[ahead]?.interest += 1
            }
            // A failed fetch shows on the next pass: the byte is still missing, nobody brings
            // it, and this reader waited on the fetch that failed.
            await waitForChange(resource, segment: segment, since: seen)
            waited = true
            if let progress {
                progress(await Self.progress(of: file, key: resource.key, from: range?.lowerBound ?? 0))
            }
        }
    }

    /// Reading ahead (``FillOptions/readAhead``): while a reader waits on the fetch of `span`,
    /// the first missing segment of the span after it (before `stop`) is asked for too, so the
    /// origin does not idle between spans for a request and the span's last commit. Returns the
    /// fetch bringing it, which the reader then holds an interest in (leaving cancels it), or nil.
    private func readAhead(_ resource: FillResource, after span: Range<Int>, before stop: Int, generation: Int) async -> Int? {
        guard options.readAhead, !resource.ignoresRanges, span.upperBound < stop, resource.owner[span.upperBound] == nil, let file = resource.handle?.file,
            fetchesRunning < options.readAheadLimit
        else { return nil }
        let shift = Int64(file.segmentShift)
        let spanSegments = max(1, Int(options.maximumFetch >> shift))
        let window = (Int64(span.upperBound) << shift)..<(Int64(min(stop, span.upperBound + spanSegments)) << shift)
        let missing = await file.missingRanges(in: window)
        await options.afterReadAheadLook?()
        // Re-check after the await: the resource may have been replaced meanwhile.
        guard resource.generation == generation, let first = missing.first else { return nil }
        let segment = Int(first.lowerBound >> shift)
        if let owner = resource.owner[segment] { return owner }
        // Nobody waits on these bytes yet: a request a client waits on goes first.
        let id = await ConnectionLimiter.$priority.withValue(.background) { await startFetch(resource, from: segment, before: stop) }
        return id >= 0 && resource.generation == generation ? id : nil
    }

    // MARK: Attaching readers

    /// Opens the resource in the store (once, shared) and learns what the origin says about
    /// it, from the stored metadata or by first contact.
    func attach(_ source: any RangeSource) async throws -> FillResource {
        let resource = entry(for: source.key)
        resource.users += 1
        keptOpen[source.key] = nil
        if resource.source == nil { resource.source = source }
        do {
            // Also while `opening` runs with the length already known: first contact is still
            // writing the first segment, and a reader that went on now would fetch it again.
            while resource.handle == nil || resource.info == nil || resource.opening != nil {
                if let opening = resource.opening {
                    // The task clears `opening` itself before it finishes: no spin on a done task.
                    try await opening.value
                    continue
                }
                let task = Task { try await self.open(resource) }
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
        resource.closing?.cancel()
        let key = resource.key
        let delay = options.keepOpen
        resource.closing = Task {
            try? await Task.sleep(for: delay)
            self.closeIfIdle(key: key)
        }
        // Each resource kept open holds two descriptors: beyond the limit the one idle the
        // longest closes now rather than after `keepOpen`.
        nextKeptOpen += 1
        keptOpen[key] = nextKeptOpen
        while keptOpen.count > options.maximumKeptOpen, let oldest = keptOpen.min(by: { $0.value < $1.value })?.key {
            keptOpen[oldest] = nil
            closeIfIdle(key: oldest, force: true)
        }
    }

    /// Lets go of a resource nobody used for ``FillOptions/keepOpen`` (or at once with
    /// `force`, on shutdown).
    func closeIfIdle(key: String, force: Bool = false) {
        guard let resource = resources[key], resource.users == 0, resource.fetches.isEmpty, resource.opening == nil,
            let handle = resource.handle, force || ContinuousClock.now - resource.idleSince >= options.keepOpen
        else { return }
        keptOpen[key] = nil
        resource.closing?.cancel()
        resource.closing = nil
        resource.handle = nil
        resource.info = nil
        resource.outcomes.removeAll()
        let id = takeID()
        releases[id] = Task {
            await self.release(handle)
            self.releases[id] = nil
        }
        forgetIfIdle(resource)
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

    private func open(_ resource: FillResource) async throws {
        defer { resource.opening = nil }
        guard let source = resource.source else { return }
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
        let metadata = await handle.file.metadata
        guard let length = await handle.file.length else {
            try await firstContact(resource, source: source, handle: handle)
            return
        }
        // Known from an earlier run: its validators go out with every request. A first-contact
        // answer a small-object attempt left is not needed.
        resource.firstResponse?.cancel()
        resource.firstResponse = nil
        resource.info = ContentInfo(
            length: length, contentType: metadata.contentType,
            validator: ContentValidator(etag: metadata.etag, lastModified: metadata.lastModified), stored: StoredHead(metadata))
    }

    /// First contact asks for the first segment: the answer tells the length, the validators
    /// and whether ranges work, and its bytes are kept (players read the start first), so a
    /// reader at 0 needs no second request. An answer without a length (chunked or
    /// close-delimited) is received whole from here on (``StreamFill``).
    private func firstContact(_ resource: FillResource, source: any RangeSource, handle: ResourceHandle) async throws {
        var handle = handle
        if await handle.file.presentBytes > 0 {
            // Bytes without a length: a body of unknown length that never ended (the process
            // stopped while it arrived). They are not the resource: start again without them.
            resource.handle = nil
            await release(handle)
            try await store.remove(key: resource.key)
            handle = try await store.open(key: resource.key)
            resource.handle = handle
        }
        let response: RangeResponse
        do {
            do {
                if let received = resource.firstResponse {
                    // A small-object attempt asked already (the same request) and found the
                    // answer large or ranged: no second request.
                    resource.firstResponse = nil
                    response = received
                } else {
                    response = try await fetchWithRetries(source, 0..<Int64(handle.file.segmentSize), validator: nil, key: resource.key)
                }
            } catch let error as SparseCacheError where error.httpStatus == 416 || error.httpStatus == 206 {
                // No byte range of an empty resource is satisfiable (RFC 9110, section 14.1.1):
                // some origins say so rather than send the empty 200. A 206 that does not say
                // the total length cannot be placed. Ask for the whole.
                response = try await fetchWithRetries(source, nil, validator: nil, key: resource.key)
            }
        } catch {
            // Nothing was learned: leave no empty resource behind (a client asking for missing
            // URLs must not fill the store with them).
            if resource.handle === handle, await handle.file.length == nil, await handle.file.presentBytes == 0 {
                resource.handle = nil
                await release(handle)
                try? await store.remove(key: resource.key)
            }
            throw error
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
        defer { response.cancel() }
        try await adopt(response.info, in: resource)
        // More than the first segment came: the origin ignores ranges, so no read-ahead may
        // split the fill into spans that each download from byte 0 again.
        if try await keepFirstSegment(of: response, length: length, in: handle) { resource.ignoresRanges = true }
    }

    /// Writes and commits the first segment from the first-contact answer. Best effort: a
    /// body cut short leaves the segment to the first fetch, as if nothing had arrived.
    /// Returns whether the answer went on past the segment asked for (a range ignored).
    private func keepFirstSegment(of response: RangeResponse, length: Int64, in handle: ResourceHandle) async throws -> Bool {
        guard response.offset == 0 else { return false }
        let wanted = Int(min(Int64(handle.file.segmentSize), length))
        var bytes: [UInt8] = []
        bytes.reserveCapacity(wanted)
        var more = false
        do {
            for try await chunk in response.body {
                count { $0.bytesReceived += Int64(chunk.count) }
                if chunk.count > wanted - bytes.count { more = true }
                bytes.append(contentsOf: chunk.prefix(wanted - bytes.count))
                if bytes.count >= wanted { break }
            }
            // A range answer ends here; a whole-resource answer has more (one more chunk tells).
            if !more, bytes.count == wanted, Int64(wanted) < length {
                var rest = response.body.makeAsyncIterator()
                if let chunk = try await rest.next() {
                    count { $0.bytesReceived += Int64(chunk.count) }
                    more = !chunk.isEmpty
                }
            }
        } catch let error as SparseCacheError where error.code == .originUnavailable {
            return more
        } catch is ConnectionYielded {
            return more
        }
        guard bytes.count == wanted else { return more }
        try await handle.write(bytes, at: 0)
        try await handle.file.commit()
        return more
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
        resource.changes += 1
        let waiters = resource.waiters
        resource.waiters.removeAll()
        for (_, waiter) in waiters { waiter.continuation.resume() }
        guard !resource.listeners.isEmpty, let handle = resource.handle else { return }
        for (_, listener) in resource.listeners {
            listener.continuation.yield(await Self.progress(of: handle.file, key: resource.key, from: listener.offset))
        }
    }

    private func releaseInterest(_ resource: FillResource, _ interests: Set<Int>) {
        for id in interests {
            guard var fetch = resource.fetches[id] else {
                continue
            }
            fetch.interest -= 1
            resource.fetches[id] = fetch
            // Nobody waits for it any more: stop it (it commits what it has).
            if fetch.interest <= 0 { fetch.task?.cancel() }
        }
        if resource.waiters.isEmpty, resource.fetches.isEmpty { resource.outcomes.removeAll() }
    }
}
