extension ProgressiveCache {
    /// Starts a fetch of the missing segments from `segment` on, up to the first segment that
    /// is present or already being fetched, `before`, or the span limit. Returns its id.
    func startFetch(_ resource: FillResource, from segment: Int, before stop: Int) async -> Int {
        guard let handle = resource.handle else { return -1 }
        let file = handle.file
        let span = max(1, Int(options.maximumFetch >> Int64(file.segmentShift)))
        let limit = min(stop, segment + span)
        let start = Int64(segment) << Int64(file.segmentShift)
        let missing = await file.missingRanges(in: start..<(Int64(limit) << Int64(file.segmentShift)))
        // Re-check after the await: another reader may have started a fetch for it meanwhile.
        if let owner = resource.owner[segment] { return owner }
        var end = segment + 1
        if let first = missing.first, first.lowerBound <= start {
            end = max(end, min(limit, Int((first.upperBound + Int64(file.segmentSize) - 1) >> Int64(file.segmentShift))))
        }
        if let taken = (segment..<end).first(where: { resource.owner[$0] != nil }) { end = max(segment + 1, taken) }
        let id = takeID()
        for owned in segment..<end { resource.owner[owned] = id }
        resource.fetches[id] = FillResource.Fetch(segments: segment..<end)
        resource.users += 1
        resource.fetches[id]?.task = Task { await self.runFetch(resource, id: id) }
        return id
    }

    /// Brings one fetch's segments: asks the origin, writes what arrives, commits as it goes,
    /// retries failures that may pass from the last byte received, and hands ownership back.
    private func runFetch(_ resource: FillResource, id: Int) async {
        var failure: Error?
        let generation = resource.generation
        if let fetch = resource.fetches[id], let handle = resource.handle, let info = resource.info, let source = resource.source {
            do {
                try await transfer(fetch.segments, of: resource, id: id, handle: handle, info: info, source: source)
            } catch is CancellationError {
                // Nobody wanted the rest.
            } catch {
                failure = error
            }
            // What arrived stays: commit it even when the fetch stopped early (not when the
            // resource was replaced: those bytes are of the old version).
            if resource.generation == generation {
                do { try await handle.file.commit() } catch { failure = failure ?? error }
            }
        }
        for segment in resource.fetches[id]?.segments ?? 0..<0 where resource.owner[segment] == id {
            resource.owner[segment] = nil
        }
        resource.fetches[id] = nil
        if let failure, resource.generation == generation { resource.outcomes[id] = failure }
        resource.lastCommit = .now
        await changed(resource)
        detach(resource)
    }

    private func transfer(
        _ segments: Range<Int>, of resource: FillResource, id: Int, handle: ResourceHandle, info: ContentInfo, source: any RangeSource
    ) async throws {
        let file = handle.file
        let generation = resource.generation
        guard let length = info.length else { return }
        var position = Int64(segments.lowerBound) << Int64(file.segmentShift)
        let end = min(Int64(segments.upperBound) << Int64(file.segmentShift), length)
        var attempt = 0
        var sinceCommit: Int64 = 0
        while position < end {
            try Task.checkCancellation()
            guard resource.generation == generation else { return }
            let response: RangeResponse
            do {
                response = try await fetchWithRetries(source, position..<end, validator: info.validator.isEmpty ? nil : info.validator, key: resource.key)
            }
            defer { response.cancel() }
            if Self.isDifferentVersion(response.info, than: info) {
                try await replace(resource, with: response.info, by: id)
                return
            }
            // An origin that ignores ranges sends the whole resource: skip to the position.
            var skip = position - response.offset
            do {
                for try await chunk in response.body {
                    count { $0.bytesReceived += Int64(chunk.count) }
                    try Task.checkCancellation()
                    guard resource.generation == generation else { return }
                    var bytes = chunk[...]
                    if skip > 0 {
                        let dropped = min(Int64(bytes.count), skip)
                        bytes = bytes.dropFirst(Int(dropped))
                        skip -= dropped
                        if bytes.isEmpty { continue }
                    }
                    let take = Int(min(Int64(bytes.count), end - position))
                    _ = try await handle.write(Array(bytes.prefix(take)), at: position)
                    position += Int64(take)
                    sinceCommit += Int64(take)
                    attempt = 0
                    if try await commitIfDue(resource, file: file, position: position, sinceCommit: sinceCommit) { sinceCommit = 0 }
                    if position >= end { break }
                }
                if position < end {
                    throw SparseCacheError(
                        .originUnavailable, operation: "fetch", path: resource.key, offset: position,
                        detail: "the body ended before byte \(end)")
                }
            } catch let error as SparseCacheError where error.code == .originUnavailable && attempt < options.retries {
                // A cut connection: resume from the last byte received, after a pause.
                try Task.checkCancellation()
                attempt += 1
                count { $0.retries += 1 }
                try await Task.sleep(for: options.backoff(attempt: attempt))
            }
        }
    }

    /// Commits when enough has arrived, or when a waiting reader's segment is complete and the
    /// last commit is long enough ago. Returns whether it committed.
    private func commitIfDue(_ resource: FillResource, file: SparseFile, position: Int64, sinceCommit: Int64) async throws -> Bool {
        let completedBefore = Int(position >> Int64(file.segmentShift))
        let readerWaits = resource.waiters.values.contains { $0.segment < completedBefore }
            || (position == resource.info?.length && !resource.waiters.isEmpty)
        let due = sinceCommit >= options.commitEvery
            || (readerWaits && ContinuousClock.now - resource.lastCommit >= options.readerCommitDelay)
        guard due else { return false }
        try await file.commit()
        resource.lastCommit = .now
        await changed(resource)
        return true
    }

    /// A response of another version than the one cached: a different validator or length.
    static func isDifferentVersion(_ response: ContentInfo, than cached: ContentInfo) -> Bool {
        if !response.validator.isEmpty, !cached.validator.isEmpty, !response.validator.matches(cached.validator) { return true }
        if let length = response.length, let known = cached.length, length != known { return true }
        return false
    }

    /// Sends one request, retrying failures that may pass with backoff.
    func fetchWithRetries(_ source: any RangeSource, _ range: Range<Int64>, validator: ContentValidator?, key: String) async throws -> RangeResponse {
        var attempt = 0
        while true {
            try Task.checkCancellation()
            count { $0.requests += 1 }
            do {
                return try await source.fetch(range, validator: validator)
            } catch let error as SparseCacheError where error.code == .originUnavailable && attempt < options.retries {
                attempt += 1
                count { $0.retries += 1 }
                try await Task.sleep(for: options.backoff(attempt: attempt))
            }
        }
    }

    /// The resource changed on the origin: stop every fetch of the old version, drop the
    /// cached bytes, and start over with the new version's length and validators. Readers
    /// that had bytes of the old version get `.originChanged`.
    private func replace(_ resource: FillResource, with info: ContentInfo, by fetchID: Int) async throws {
        count { $0.invalidations += 1 }
        resource.generation += 1
        resource.outcomes.removeAll()
        let others = resource.fetches.filter { $0.key != fetchID }.compactMap(\.value.task)
        for task in others { task.cancel() }
        await changed(resource)
        // They stop at their next step and write nothing more once the generation moved on.
        for task in others { await task.value }
        guard let handle = resource.handle else { return }
        resource.handle = nil
        resource.info = nil
        try await handle.release()
        try await store.remove(key: resource.key)
        guard info.length != nil else {
            throw SparseCacheError(.origin, operation: "fetch", path: resource.key, detail: "the changed resource came without a length")
        }
        resource.handle = try await store.open(key: resource.key)
        try await adopt(info, in: resource)
        await changed(resource)
    }
}
