#if canImport(Glibc)
    import Glibc
#endif
import SparseCacheEngine
import SparseCacheStore
import SparseHTTP

// The read walk: what a reader gets of a range, from disk, from memory, or by fetching it.
extension ProgressiveCache {
    /// Walks `range` from its start: present bytes are read (and handed to `deliver`) at once;
    /// bytes a fetch has received and not yet made present are handed over from memory
    /// (cut-through); at the first byte nobody has, the reader joins the fetch bringing it, or
    /// starts one, and waits for the next bytes to arrive. Fetches run ahead of the reader by a
    /// window that grows as it reads on (``FillOptions/readAhead``). `deliver` nil only brings
    /// the bytes in (prefetch); the walk goes on only when it returns (a slow reader holds back
    /// its own reads). `generation`, when given, is the version the reader was promised
    /// (``CacheReader``): a resource replaced since then fails with ``OriginError`` `.changed` before any
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
            throw OriginError(
                .changed, operation: "read", key: source.key,
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
            throw OriginError(
                .changed, operation: "read", key: resource.key, detail: "the resource changed on the origin after it was opened")
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
                    throw OriginError(
                        .changed, operation: "read", key: resource.key, offset: position,
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
                throw OriginError(.unavailable, operation: "read", key: resource.key, detail: "the resource is not open")
            }
            guard let length = info.length else {
                // An answer of unknown length still arriving: follow it.
                guard let stream = resource.stream else {
                    throw OriginError(
                        .unavailable, operation: "read", key: resource.key, detail: "the body of unknown length did not end")
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
                    throw OriginError(
                        .unavailable, operation: "read", key: resource.key, offset: position,
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
}
