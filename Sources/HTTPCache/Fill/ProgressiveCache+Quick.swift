import SparseCacheEngine
import SparseCacheStore

extension ProgressiveCache {
    /// ``refreshQuickHit(_:)`` for the resource `reader` holds, when it still holds the
    /// version the reader opened.
    ///
    /// For a small object read from the store: its record, while it is still the key's.
    func rememberQuickHit(_ reader: CacheReader) async {
        guard options.quickHits else { return }
        let key = reader.source.key
        guard reader.isSmallObject else {
            guard let (handle, generation) = reader.resourceHeld, let resource = resources[key], resource.handle === handle,
                resource.generation == generation
            else { return }
            await refreshQuickHit(resource)
            return
        }
        guard smallArriving[key] == nil, resources[key] == nil, let known = smallInfos[key], let head = known.info.stored,
            let view = await store.smallObjects.view(for: key, sequence: known.sequence)
        else { return }
        quickHits.insert(QuickHits.Hit(head: head, bytes: .small(view)), for: key)
    }

    /// Tells the small-object store which objects quick answers used (its recency decides
    /// eviction), a second after the first of them: one task per second at most, whatever the
    /// rate of hits.
    nonisolated func tellSmallUses() {
        let hits = quickHits, objects = store.smallObjects
        Task(executorPreference: LoopExecutor.current) { @Sendable in
            try? await Task.sleep(for: .seconds(1))
            for key in hits.takeSmallUses() { await objects.noteUse(of: key) }
        }
    }

    /// Lets the event loops answer hits of what `resource` has committed without this actor
    /// (``quickHits``): its stored head and a view of its committed segments, taken now. The
    /// entry goes as soon as the head or the handle changes (``FillResource/handle``); a view
    /// the engine withdrew is dropped at its next use.
    func refreshQuickHit(_ resource: FillResource) async {
        guard let handle = resource.handle, let info = resource.info, let head = info.stored, info.length != nil else { return }
        let generation = resource.generation
        guard let view = await handle.file.committedView() else { return }
        // Re-check after the await: a replacement, an invalidation or a freshened head may
        // have come meanwhile (each removed whatever entry there was, and this one would
        // outlive them).
        guard resources[resource.key] === resource, resource.handle === handle, resource.generation == generation,
            resource.info?.stored === head
        else { return }
        let known = quickHits[resource.key]
        guard known?.view !== view else { return }
        let hit = QuickHits.Hit(head: head, bytes: .resource(view))
        if let known { hit.lastUse.store(known.lastUse.load(ordering: .relaxed), ordering: .relaxed) }
        quickHits.insert(hit, for: resource.key)
    }

    /// Whether quick answers used `resource` since it went idle, recently enough to keep it
    /// open: the kept-open time then counts from the last of them, and the store hears of the
    /// use and of the byte ranges sent (its eviction policy counts them as reads).
    func keptForQuickHits(_ resource: FillResource) -> Bool {
        guard let hit = quickHits[resource.key], hit.view != nil, let handle = resource.handle else { return false }
        let last = hit.lastUse.load(ordering: .relaxed)
        guard last > 0 else { return false }
        let used = QuickHits.epoch + .nanoseconds(last)
        guard used > resource.idleSince else { return false }
        resource.idleSince = used
        let sent = hit.takeSentRanges()
        _ = onLoop { await handle.noteUse(reading: sent) }
        return ContinuousClock.now - used < options.keepOpen
    }
}
