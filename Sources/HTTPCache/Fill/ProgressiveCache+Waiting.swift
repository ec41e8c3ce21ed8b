#if canImport(Glibc)
    import Glibc
#endif
import SparseCacheEngine
import SparseCacheStore
import SparseHTTP

// Readers waiting for a resource to change, and the wake-ups.
extension ProgressiveCache {
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
