#if canImport(Glibc)
    import Glibc
#endif
import SparseCacheEngine
import SparseCacheStore
import SparseHTTP

// Readers attaching and detaching, and the resources kept open after the last one leaves.
extension ProgressiveCache {
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
            // The generation this reader's own open ran for, once it ran.
            var opened: Int?
            // Waits also while an opening runs with the length already known: first contact is
            // still writing the first segment, and a reader that went on now would fetch it again.
            attaching: while true {
                let action = resource.update { phase in
                    phase.attach(ownOpen: opened) { generation in
                        onLoop { try await self.open(resource, generation: generation, first: first, new: new) }
                    }
                }
                switch action {
                case .ready:
                    break attaching
                case .join(let task):
                    // The task moves the phase on itself before it finishes: no spin on a done task.
                    try await task.value
                case .opened(let task):
                    opened = resource.generation
                    try await task.value
                case .fail(let error):
                    // This reader's first contact got an answer of unknown length that was cut
                    // off (and the resource dropped) before the reader could follow it: it fails
                    // as the answer did, as the readers that followed it do. Asking the origin
                    // again would send the same request twice for one client request, which
                    // nginx does not do either once an answer has begun (its proxy_next_upstream
                    // retries only up to the response head).
                    throw error
                }
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
        guard resource.users == 0, resource.fetches.isEmpty, resource.phase.isSettledWithHandle else {
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

    /// Open (or held), and nobody reads, fetches or opens it.
    private func isUnused(_ resource: FillResource) -> Bool {
        resource.users == 0 && resource.fetches.isEmpty && resource.phase.isSettledWithHandle
    }

    /// Lets go of a resource nobody used for ``FillOptions/keepOpen`` (or at once with
    /// `force`, on shutdown).
    func closeIfIdle(key: String, force: Bool = false) {
        if !force, let resource = resources[key], isUnused(resource), keptForQuickHits(resource) { return }
        guard let resource = resources[key], isUnused(resource), force || ContinuousClock.now - resource.idleSince >= options.keepOpen
        else { return }
        keptOpen[key] = nil
        // An answer without a length that ended small is kept as a small object from now on:
        // one log record instead of a data file and an index.
        let threshold = options.smallObjectThreshold
        let movesToSmall = resource.endedWithoutLength && threshold > 0 && (resource.info?.length ?? .max) <= threshold
        resource.endedWithoutLength = false
        guard let handle = resource.update({ $0.close() }) else { return }
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
    package func closeIdle() async {
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
}
