import SparseCacheEngine
import SparseCacheStore

/// Resources one answer alone fills (RFC 9111 section 3.4: a cache combines parts of a
/// response only when they share a strong validator). Without one, nothing shows that a second
/// answer is of the same version as the first, even with the same length and weak validators:
/// the bytes the first answer brought are never extended by another. A fetch that reads the
/// answer on is not resumed after a cut, read-ahead starts no range fetch beside it, and a
/// reader that needs bytes it did not bring gets the resource fetched anew (or, through the
/// proxy, its own request passed on).
extension ProgressiveCache {
    /// How far past the bytes the filling answer has received a reader still waits for it rather
    /// than ask the origin for its own bytes (four spans: at disk speed, a fraction of a second).
    var readOnReach: Int64 { 4 * options.maximumFetch }

    /// Whether only the answer that brought `resource`'s bytes may bring more: its source
    /// combines parts only under a strong validator, and its validator is not strong.
    func isOneAnswer(_ resource: FillResource) -> Bool {
        guard let source = resource.source, source.partsNeedStrongValidator, let info = resource.info, info.length != nil else {
            return false
        }
        return !info.validator.isStrong
    }

    /// What a reader of `range` of `reader`'s resource should do, decided before it sends a byte:
    /// a resource of one answer (``isOneAnswer(_:)``) that lacks bytes of `range` no answer in
    /// flight brings cannot give them without combining answers. `.read` for every other
    /// resource. `.refetch` only when nobody else reads the resource.
    func oneAnswerPlan(for reader: CacheReader, range: Range<Int64>) async -> OneAnswerPlan {
        guard !reader.isSmallObject, let resource = resources[reader.source.key] else { return .read }
        let plan = await oneAnswerPlan(resource, range: range, reach: readOnReach)
        return plan == .refetch && resource.users > 1 ? .passOn : plan
    }

    /// For the proxy's `.refetch` (``oneAnswerPlan(for:range:)``): drops the resource `reader`
    /// holds, in one step with the check that nobody else holds it (no await in between, so no
    /// client that attaches meanwhile is cut off), and closes the reader. Returns false, with the
    /// reader still open, when someone else holds it now or a fetch runs.
    func dropOneAnswerPart(of reader: CacheReader) async throws -> Bool {
        let key = reader.source.key
        guard let resource = resources[key], resource.users == 1, resource.fetches.isEmpty, resource.phase.isSettledWithHandle,
            isOneAnswer(resource), reader.markClosed()
        else { return false }
        closeReader(key: key, firstFetch: reader.firstFetch)
        keptOpen[key] = nil
        count { $0.invalidations += 1 }
        try await retire(resource) {
            do {
                try await self.store.remove(key: key)
            } catch let error as SparseCacheError where error.code == .notFound {}
        }
        forgetIfIdle(resource)
        return true
    }

    /// ``oneAnswerPlan(for:range:)`` for `resource`: `.read` when `range` is present or the
    /// answer being read on brings it within `reach` bytes of what it has received; `.refetch`
    /// when no fetch runs; `.passOn` when other fetches run (or the answer in flight is too far).
    func oneAnswerPlan(_ resource: FillResource, range: Range<Int64>, reach: Int64) async -> OneAnswerPlan {
        guard !range.isEmpty, isOneAnswer(resource), let file = resource.handle?.file else { return .read }
        let generation = resource.generation
        let missing = await file.missingRanges(in: range)
        // Re-check after the await: the resource may have been replaced, or its answer ended.
        guard resource.generation == generation, let first = missing.first else { return .read }
        if let arrived = resource.fetches.values.first(where: { $0.readsOn })?.arrived {
            return first.lowerBound >= arrived.start && first.lowerBound - arrived.end <= reach ? .read : .passOn
        }
        return resource.fetches.isEmpty ? .refetch : .passOn
    }

    /// Before a reader of `range` (the whole when nil) hands on its first byte: when the
    /// resource is of one answer and lacks bytes of it that no answer in flight brings, waits for
    /// the fetches running to end and fetches the resource anew (``refetchOneAnswer(_:)``).
    /// Returns the fetch the reader then holds an interest in, if one was started.
    func prepareOneAnswerReader(_ resource: FillResource, range: Range<Int64>?) async throws -> Int? {
        while isOneAnswer(resource), let length = resource.info?.length {
            let wanted = (range?.lowerBound ?? 0)..<min(range?.upperBound ?? length, length)
            let seen = resource.changes
            switch await oneAnswerPlan(resource, range: wanted, reach: .max) {
            case .read:
                return nil
            case .refetch:
                if let fetch = try await refetchOneAnswer(resource) { return fetch }
                // Others read the resource: look again once they leave.
                await waitForRefetch(resource, since: seen)
            case .passOn:
                // Other fetches run (a bounded first answer): look again once they end.
                await waitForChange(resource, segment: 0, since: seen)
            }
            try Task.checkCancellation()
        }
        return nil
    }

    /// For a reader of a resource of one answer at a byte nobody brings (the answer ended
    /// before it): fetches the resource anew, whole, as a first contact does, and returns the
    /// fetch reading the new answer on (the caller's, with one interest held for it). Nil when
    /// fetches of the resource still run or other readers still read it (a refetch would cut
    /// them off): the caller waits for them (a fetch ending or a reader leaving wakes it) and
    /// looks again.
    func refetchOneAnswer(_ resource: FillResource) async throws -> Int? {
        // Readers parked for a refetch of their own count as nobody: they handed on nothing.
        guard resource.fetches.isEmpty, resource.users - resource.refetchWaiting == 1, let source = resource.source else { return nil }
        count { $0.refetches += 1 }
        try await retire(resource) {
            try await self.store.remove(key: resource.key)
            let handle = try await self.store.open(key: resource.key)
            resource.update { $0.opened(handle) }
            try await self.firstContact(resource, source: source, handle: handle, first: .whole)
        }
        return resource.update { $0.takeOpenerFetch() }.flatMap { resource.fetches[$0] != nil ? $0 : nil }
    }

    /// Parks a reader whose refetch others hold back (``refetchOneAnswer(_:)`` said nil), counted
    /// in ``FillResource/refetchWaiting`` meanwhile: a reader leaving, or the next reader that
    /// parks, wakes it once only readers like it remain.
    func waitForRefetch(_ resource: FillResource, since seen: Int) async {
        resource.refetchWaiting += 1
        // Everyone else may be parked for the same reason now: the first to look again refetches.
        if resource.users - resource.refetchWaiting <= 0 { wakeWaiters(resource) }
        await waitForChange(resource, segment: 0, since: seen)
        resource.refetchWaiting -= 1
    }
}
