import SparseCacheEngine
import SparseCacheStore

extension ProgressiveCache {
    /// Lets the event loops answer hits of the resource `reader` holds without this actor
    /// (``quickHits``): when it is complete, holds a stored head, and is still the version the
    /// reader opened. The entry goes as soon as that stops being so (``FillResource/handle``).
    func rememberQuickHit(_ reader: CacheReader) async {
        let key = reader.source.key
        guard let (handle, generation) = reader.resourceHeld, let head = reader.info.stored, let resource = resources[key],
            resource.handle === handle, resource.generation == generation, resource.info?.stored === head,
            !quickHits.contains(key)
        else { return }
        guard let view = await handle.file.completeView() else { return }
        // Re-check after the await: a replacement, an invalidation or a freshened head may
        // have come meanwhile (each removed whatever entry there was, and this one would
        // outlive them).
        guard resources[key] === resource, resource.handle === handle, resource.generation == generation,
            resource.info?.stored === head
        else { return }
        quickHits.insert(QuickHits.Hit(head: head, view: view), for: key)
    }

    /// Whether quick answers used `resource` since it went idle, recently enough to keep it
    /// open: the kept-open time then counts from the last of them, and the store hears of the
    /// use (its recency decides eviction).
    func keptForQuickHits(_ resource: FillResource) -> Bool {
        guard let hit = quickHits[resource.key], let handle = resource.handle else { return false }
        let last = hit.lastUse.load(ordering: .relaxed)
        guard last > 0 else { return false }
        let used = QuickHits.epoch + .nanoseconds(last)
        guard used > resource.idleSince else { return false }
        resource.idleSince = used
        let length = hit.view.length
        _ = onLoop { await handle.noteRead(0..<length) }
        return ContinuousClock.now - used < options.keepOpen
    }
}
