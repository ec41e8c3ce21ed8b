import SparseCacheEngine
import SparseCacheStore
import SparseHTTP

extension ProgressiveCache {
    /// How much of an origin's answer is taken to be sent already, sitting in the socket buffers
    /// between the origin and the cache (a loopback or LAN origin writes a small answer into
    /// them whole, at once): a fetch nobody waits on any more reads a range answer with no more
    /// than this left to its end rather than drop bytes the origin counts as sent.
    static let answerInFlight: Int64 = 256 << 10

    /// Starts a fetch of the missing segments from `segment` on, up to the first segment that
    /// is present or already being fetched, `before`, or `span` segments (the span limit,
    /// ``FillOptions/maximumFetch``, when nil). Returns its id, or -1 when the resource is being
    /// replaced or `segment` arrived meanwhile (the caller looks again).
    func startFetch(_ resource: FillResource, from segment: Int, before stop: Int, span: Int? = nil) async -> Int {
        // A resource of one answer is never extended by a range request (RFC 9111 section 3.4).
        guard let handle = resource.handle, !isOneAnswer(resource) else { return -1 }
        let file = handle.file
        let span = max(1, min(span ?? .max, Int(options.maximumFetch >> Int64(file.segmentShift))))
        let limit = min(stop, segment + span)
        let start = Int64(segment) << Int64(file.segmentShift)
        let ended = resource.fetchesEnded
        let missing = await file.missingRanges(in: start..<(Int64(limit) << Int64(file.segmentShift)))
        // Re-check after the await: another reader may have started a fetch for it meanwhile,
        // the resource may be being replaced, or a fetch may have ended and committed some of
        // what `missing` names (fetching it again would ask the origin twice for those bytes).
        if let owner = resource.owner[segment] { return owner }
        guard resource.handle === handle, resource.fetchesEnded == ended, let first = missing.first, first.lowerBound <= start else {
            return -1
        }
        let end = max(segment + 1, min(limit, Int((first.upperBound + Int64(file.segmentSize) - 1) >> Int64(file.segmentShift))))
        let owned = (segment..<end).first { resource.owner[$0] != nil }.map { max(segment + 1, $0) } ?? end
        return registerFetch(resource, segments: segment..<owned, first: nil)
    }

    /// Makes `segments` one fetch's (with `first` as its first answer, already received from
    /// the origin, when given) and starts it. Returns its id.
    func registerFetch(_ resource: FillResource, segments: Range<Int>, first: FirstAnswer?, interest: Int = 0) -> Int {
        let id = takeID()
        for taken in segments where resource.owner[taken] == nil { resource.owner[taken] = id }
        // A first answer's connection was taken under its own promotion (or none): the fetch
        // that reads it on has that one, so promoting the fetch reaches the connection.
        let promotion = first.map(\.promotion) ?? ConnectionLimiter.newPromotion()
        let gate = RequestGate()
        resource.fetches[id] = FillResource.Fetch(
            segments: segments, interest: interest, promotion: promotion, readsOn: first?.readsOn ?? false, gate: gate)
        resource.users += 1
        resource.fetches[id]?.task = onLoop {
            await ConnectionLimiter.$promotion.withValue(promotion) {
                await RequestGate.$current.withValue(gate) { await self.runFetch(resource, id: id, first: first) }
            }
        }
        return id
    }

    /// Brings one fetch's segments: asks the origin (or reads the answer it was started with),
    /// hands what arrives to waiting readers at once and writes it back behind them (write,
    /// fdatasync, commit), retries failures that may pass from the last byte received, and
    /// hands ownership back.
    private func runFetch(_ resource: FillResource, id: Int, first: FirstAnswer?) async {
        var failure: Error?
        let generation = resource.generation
        if let fetch = resource.fetches[id], let handle = resource.handle, let info = resource.info, let source = resource.source {
            do {
                try await transfer(fetch.segments, of: resource, id: id, handle: handle, info: info, source: source, first: first)
            } catch is CancellationError {
                // Nobody wanted the rest.
            } catch {
                // An answer to pass on is only passed on from first contact: here nobody reads it.
                (error as? OriginAnswer)?.cancel()
                failure = error
            }
            first?.response.cancel()
            // What arrived stays: written back and committed even when the fetch stopped early
            // (not when the resource was replaced: those bytes are of the old version).
            if resource.generation == generation {
                do {
                    if let arrived = resource.fetches[id]?.arrived {
                        try await finishWriteBack(arrived, of: resource, handle: handle, generation: generation)
                    } else {
                        try await handle.file.commit()
                    }
                } catch {
                    failure = failure ?? error
                }
            }
            // A commit line still running (a replaced resource's, or one a failed write left)
            // ends before the fetch does: nothing of it runs beside the release of the file.
            if let arrived = resource.fetches[id]?.arrived { await writeBackIdle(arrived) }
        }
        for segment in resource.fetches[id]?.segments ?? 0..<0 where resource.owner[segment] == id {
            resource.owner[segment] = nil
        }
        resource.fetchesEnded += 1
        resource.fetches[id] = nil
        if let failure, resource.generation == generation { resource.outcomes[id] = failure }
        resource.lastCommit = .now
        await changed(resource)
        detach(resource)
    }

    private func transfer(
        _ segments: Range<Int>, of resource: FillResource, id: Int, handle: ResourceHandle, info: ContentInfo, source: any RangeSource,
        first: FirstAnswer?
    ) async throws {
        let file = handle.file
        let generation = resource.generation
        guard let length = info.length else { return }
        var position = Int64(segments.lowerBound) << Int64(file.segmentShift)
        var end = min(Int64(segments.upperBound) << Int64(file.segmentShift), length)
        // Received bytes wait here, readable by readers, until the write-back made them present.
        let arrived = ArrivedBytes(at: position)
        resource.fetches[id]?.arrived = arrived
        var given = first
        var attempt = 0
        // The end a claim of the next span was last tried from (``claimOnward``).
        var claimTried: Int64 = 0
        // Cancelled: finishing the segment being received, then stopping.
        var stopping = false
        while position < end {
            try Task.checkCancellation()
            guard resource.generation == generation else { return }
            // Stopped while it read an answer (and nobody came back): no new request.
            if resource.fetches[id].map({ $0.unwanted && $0.interest <= 0 }) == true { return }
            let response: RangeResponse
            let readsOn: Bool
            if let answer = given {
                given = nil
                response = answer.response
                readsOn = answer.readsOn
            } else {
                response = try await fetchWithRetries(
                    source, position..<end, validator: info.validator.isEmpty ? nil : info.validator, key: resource.key)
                readsOn = false
            }
            defer {
                response.cancel()
                resource.fetches[id]?.gate.answered()
            }
            // Re-check after the await: while this request was out, another fetch may have seen
            // the new version and started the replacement (which cancelled this one and waits
            // for it to end). Replacing again here would wait for that fetch in turn: two
            // replacements waiting on each other wedge the key for good.
            guard resource.generation == generation else { return }
            // Nobody wanted it while the request was out (``RequestGate``): the answer is on its
            // way (the origin counts it sent), so the segment being received is still taken
            // below rather than asked for again by the next reader.
            if Self.isDifferentVersion(response.info, than: info) {
                try await replace(resource, with: response.info, by: id)
                return
            }
            // An origin that ignores ranges sends the whole resource: skip to the position, and
            // read on past the span (below) rather than ask again for every span, each
            // answered from byte 0 again (quadratic in the length). A whole answer asked for as
            // such (first contact without a range) reads on too.
            var skip = position - response.offset
            if skip > 0 { resource.ignoresRanges = true }
            let whole = skip > 0 || readsOn
            // The one answer a resource without a strong validator may be filled by: it cannot be
            // resumed by another, so it does not give its connection up to waiting clients.
            let oneAnswer = isOneAnswer(resource)
            if oneAnswer { resource.fetches[id]?.promotion?.promote() }
            // A replacement or shutdown cuts the answer at once (``FillResource/Fetch/stop``): a
            // stalled origin would hold the fetch until the timeout.
            resource.fetches[id]?.stop = response.cancel
            defer { resource.fetches[id]?.stop = nil }
            do {
                for try await chunk in response.body {
                    count { $0.bytesReceived += Int64(chunk.count) }
                    if Task.isCancelled || resource.fetches[id].map({ $0.unwanted && $0.interest <= 0 }) == true {
                        // Nobody wants the rest: stop at the end of the segment being received
                        // (its bytes are on their way already, paid for; a segment left partial
                        // would be asked for again, whole, by the next reader of it). An answer
                        // with at most ``answerInFlight`` left (to its end for a range, to the
                        // resource's end for a whole one: a prefetched segment stopped while its
                        // 200 arrives) is read to its end: the origin has sent that much already,
                        // and cut here it would be sent twice when the player asks for it.
                        let shift = Int64(file.segmentShift)
                        if (whole ? length : end) - position > Self.answerInFlight { end = min(end, ((position >> shift) + 1) << shift) }
                        stopping = true
                    }
                    guard resource.generation == generation else { return }
                    var bytes = chunk[...]
                    if skip > 0 {
                        let dropped = min(Int64(bytes.count), skip)
                        bytes = bytes.dropFirst(Int(dropped))
                        skip -= dropped
                        if bytes.isEmpty { continue }
                    }
                    // A whole-resource answer may carry on past `end` within this chunk: what
                    // follows is taken once the next segments are claimed, never dropped.
                    var reachedEnd = false
                    while !bytes.isEmpty {
                        let take = Int(min(Int64(bytes.count), end - position))
                        try await receive(bytes.prefix(take), into: arrived, of: resource, handle: handle, generation: generation)
                        bytes = bytes.dropFirst(take)
                        position += Int64(take)
                        attempt = 0
                        // Reading a whole answer on: the next span is claimed half a span before
                        // this one ends, so a reader right behind never finds the segment at the
                        // end unclaimed and starts a fetch of its own (which would stop this one).
                        if whole, !stopping, end < length, end > claimTried, end - position <= options.maximumFetch / 2 {
                            claimTried = end
                            if let more = await claimOnward(resource, id: id, from: end, length: length) { end = more }
                        }
                        if position >= end {
                            guard whole, !stopping, position < length, resource.generation == generation,
                                let more = await claimOnward(resource, id: id, from: position, length: length)
                            else {
                                reachedEnd = true
                                break
                            }
                            end = more
                        }
                    }
                    if reachedEnd { break }
                }
                try Task.checkCancellation()
                guard resource.generation == generation else { return }
                if position < end {
                    throw OriginError(
                        .unavailable, operation: "fetch", key: resource.key, offset: position,
                        detail: "the body ended before byte \(end)")
                }
            } catch is ConnectionYielded where oneAnswer {
                // Yielded before it was promoted: what arrived stays, nothing continues it.
                return
            } catch is ConnectionYielded {
                // A request a client waits on took the connection: keep what arrived and queue
                // again for one (behind the waited-on requests), from the last byte, at once.
                let unread = (whole ? length : end) - position
                count {
                    $0.yields += 1
                    $0.yieldedUnread += unread
                }
            } catch let error as OriginError where error.mayPass && attempt < options.retries && !oneAnswer {
                // A cut connection: keep what arrived, resume from the last byte after a pause.
                try Task.checkCancellation()
                attempt += 1
                count { $0.retries += 1 }
                try await Task.sleep(for: options.backoff(attempt: attempt))
            }
        }
    }

    /// For a fetch reading a whole-resource answer: takes the missing segments from `position`
    /// (a segment boundary) that no other fetch brings, up to one more span, as this fetch's.
    /// Returns the new end, or nil when the next segment is present or someone else's.
    private func claimOnward(_ resource: FillResource, id: Int, from position: Int64, length: Int64) async -> Int64? {
        guard let file = resource.handle?.file else { return nil }
        let shift = Int64(file.segmentShift)
        let missing = await file.missingRanges(in: position..<min(length, position + options.maximumFetch))
        // Re-check after the await: another fetch may have taken these segments meanwhile.
        guard let first = missing.first, first.lowerBound == position, var segments = resource.fetches[id]?.segments else { return nil }
        let from = Int(position >> shift)
        let upTo = Int((first.upperBound + Int64(file.segmentSize) - 1) >> shift)
        let claimed = (from..<upTo).first { resource.owner[$0] != nil } ?? upTo
        guard claimed > from, segments.upperBound == from else { return nil }
        for segment in from..<claimed { resource.owner[segment] = id }
        segments = segments.lowerBound..<claimed
        resource.fetches[id]?.segments = segments
        return min(Int64(claimed) << shift, length)
    }

    /// A response of another version than the one cached: a different validator or length.
    static func isDifferentVersion(_ response: ContentInfo, than cached: ContentInfo) -> Bool {
        if !response.validator.isEmpty, !cached.validator.isEmpty, !response.validator.matches(cached.validator) { return true }
        if let length = response.length, let known = cached.length, length != known { return true }
        return false
    }

    /// Sends one request, retrying failures that may pass with backoff: a connection that
    /// could not be made or was cut before the answer's head (a GET is idempotent, so asking
    /// again is safe), and for a source of its own a 5xx (``HTTPRangeSource`` reports those as
    /// ``OriginError`` `.unavailable` only when not forwarding: for a proxy a 5xx is an answer, passed
    /// on). A timeout is not retried: six of them would keep a client waiting for minutes.
    func fetchWithRetries(_ source: any RangeSource, _ range: Range<Int64>?, validator: ContentValidator?, key: String) async throws
        -> RangeResponse
    {
        var attempt = 0
        while true {
            try Task.checkCancellation()
            count { $0.requests += 1 }
            do {
                return try await source.fetch(range, validator: validator)
            } catch let error as OriginError where error.kind == .unavailable && attempt < options.retries {
                attempt += 1
                count { $0.retries += 1 }
                try await Task.sleep(for: options.backoff(attempt: attempt))
            }
        }
    }

    /// The resource changed on the origin: stop every fetch of the old version, drop the
    /// cached bytes, and start over with the new version's length and validators. Readers
    /// that had bytes of the old version get ``OriginError`` `.changed`.
    ///
    /// One replacement per change: its caller checked the generation with no await since, and
    /// the generation moves on below before this method's first await, so a second fetch that
    /// sees the change finds it moved and ends. (It must never wait for the replacement: that
    /// waits for every other fetch.)
    private func replace(_ resource: FillResource, with info: ContentInfo, by fetchID: Int) async throws {
        count { $0.invalidations += 1 }
        guard info.length != nil else {
            throw OriginError(.badAnswer, operation: "fetch", key: resource.key, detail: "the changed resource came without a length")
        }
        try await retire(resource, except: fetchID) {
            try await self.store.remove(key: resource.key)
            let handle = try await self.store.open(key: resource.key)
            resource.update { $0.opened(handle) }
            try await self.adopt(info, in: resource)
        }
    }

    /// Takes the resource's bytes out of use at once (``FillPhase/retire(_:)``: the phase is
    /// `replacing`), then finishes in the retirement's task: waits for every fetch but `fetchID`
    /// to stop, releases the old handle and runs `then` (which removes the stored files, and for
    /// a replacement opens the new version). From the first line nobody reads the old bytes:
    /// readers that had some get ``OriginError`` `.changed`, the others wait for the task, as for first
    /// contact. No await before the generation moves on.
    ///
    /// `then` must run on this actor, as everything that touches a ``FillResource``: a closure
    /// written in a method of the cache is isolated to it (checked below). Handed over as
    /// `sending` or `@Sendable`, it would be nonisolated and run on the global executor, its
    /// writes to the resource racing with readers on the actor, and the compiler would say
    /// nothing.
    func retire(_ resource: FillResource, except fetchID: Int? = nil, then: @escaping @isolated(any) () async throws -> Void) async throws {
        precondition(then.isolation === self, "retire's closure must be isolated to the cache that retires the resource")
        let stopping = resource.fetches.filter { $0.key != fetchID }
        let others = stopping.compactMap(\.value.task)
        let task = resource.update { phase in
            phase.retire { old, generation in
                Task {
                    defer { resource.update { $0.endWork(generation: generation) }?.response.cancel() }
                    // They stop at their next step and write nothing more once the generation moved on.
                    for fetch in others { await fetch.value }
                    try await old?.release()
                    try await then()
                    await self.changed(resource)
                }
            }
        }
        resource.outcomes.removeAll()
        for task in others { task.cancel() }
        for fetch in stopping.values { fetch.stop?() }
        // An answer without a length may be waiting on a silent origin: cut it now.
        resource.stream?.cancel()
        await changed(resource)
        try await task.value
    }
}
