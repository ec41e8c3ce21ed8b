import SparseCacheEngine
import SparseCacheStore
import SparseHTTP

/// What an HTTP cache does with stored responses besides reading them: look one up without
/// asking the origin, freshen its head after a revalidation, drop it.
extension ProgressiveCache {
    /// Opens the resource of `source` only if the store has it (or a reader is bringing it in
    /// now, whose first contact this one then shares); nil otherwise, with no request to the
    /// origin. A shared cache looks before it decides to forward (RFC 9111, section 4).
    package func openIfStored(_ source: any RangeSource) async throws -> CacheReader? {
        // A resource moving to the small-object logs is found there once it has moved.
        await settleMove(key: source.key)
        // A small-object first contact in flight decides what the key is: wait for it (its
        // answer is then an arriving small object, or a resource this reader joins).
        if let running = smallContacts[source.key] {
            _ = try? await withCheckedThrowingContinuation { running.waiters.append($0) }
        }
        let inUse = resources[source.key].map { $0.handle != nil || $0.phase.running != nil } ?? false
        // The store's entry, not its length: the catalog learns a resource's length only when
        // the resource is released, and one closing after its last reader is still stored.
        if !inUse, await !hasEntry(source.key) {
            // Re-check after the await: a first contact may have begun meanwhile.
            if resources[source.key].map({ $0.handle != nil || $0.phase.running != nil }) == true { return try await open(source) }
            return try await openSmallIfStored(source)
        }
        return try await open(source)
    }

    /// Whether the store has an entry (a sparse resource) for `key`. A key it surely lacks is
    /// answered here, without a hop into the store's actor: a miss is decided at once.
    func hasEntry(_ key: String) async -> Bool {
        guard store.mayHold(key) else { return false }
        return await store.entry(for: key) != nil
    }

    /// What ``openStoredOrFirst(_:first:claiming:)`` found.
    enum Lookup {
        /// A stored response (or one arriving): ``openIfStored(_:)``'s reader.
        case stored(CacheReader)
        /// Nothing was stored: the reader of the first contact made for it.
        case fetched(CacheReader)
        /// Nothing was stored, and the first contact is the caller's to make
        /// (``claimContact(key:)``).
        case claimed(ClaimedContact)
    }

    /// ``openIfStored(_:)``, and when nothing is stored, the first contact of
    /// ``open(_:first:)`` with `first` in the same call (unless `first` is nil): a miss enters
    /// the cache's actor once instead of twice (each entry and exit is a job on the event loop).
    /// An origin's answer not to store is thrown as ``open(_:first:)`` throws it.
    ///
    /// - Parameter claiming: a first contact of the whole resource that would be a small
    ///   object's is claimed for the caller instead of made (``claimContact(key:)``).
    func openStoredOrFirst(_ source: any RangeSource, first: FirstRequest?, claiming: Bool = false) async throws -> Lookup? {
        if let reader = try await openIfStored(source) { return .stored(reader) }
        guard let first else { return nil }
        // No await since the lookup found nothing.
        if claiming, first == .whole, let claim = claimContact(key: source.key) { return .claimed(claim) }
        return .fetched(try await open(source, first: first, lookedUp: true))
    }

    /// Replaces the stored head of `key` (committed with the resource's next commit): a
    /// revalidation answered `304` freshened it (RFC 9111, section 4.3.4). Returns false when the store no
    /// longer has the resource, or it was replaced meanwhile (the head is then not the one of
    /// the bytes stored, and is dropped).
    @discardableResult
    package func updateStoredHead(key: String, _ head: StoredHead) async throws -> Bool {
        if let resource = resources[key], let handle = resource.handle {
            try await Self.store(head, in: handle.file)
            // Re-check after the awaits: a replacement may have come meanwhile.
            guard resource.handle === handle else { return false }
            resource.update { $0.updateInfo { $0.stored = head } }
            return true
        }
        // Not open here (a background revalidation that outlived its reader): open it for the
        // update, unless it is gone. A small object gets a new record with the same body, once
        // it is in the log: one still on its way there (a revalidation can come back before its
        // batch is durable) would be missing, and the freshened answer taken for a changed one.
        guard await hasEntry(key) else {
            await settleSmall(key: key)
            return try await store.smallObjects.updateMetadata(key: key) { head.stored(in: $0) }
        }
        let handle = try await store.open(key: key)
        do {
            try await Self.store(head, in: handle.file)
        } catch {
            try? await handle.release()
            throw error
        }
        try await handle.release()
        // A reader that opened it meanwhile read the old head; the next one reads this.
        if let resource = resources[key], let handle = resource.handle, resource.info != nil {
            let head = StoredHead(await handle.file.metadata)
            // Re-check after the await: a replacement may have come meanwhile.
            if resource.handle === handle { resource.update { $0.updateInfo { $0.stored = head } } }
        }
        return true
    }

    /// The head goes in with the resource's next commit (at the latest when it closes), not
    /// at once: a freshening lost in a crash costs one more revalidation, never a wrong
    /// answer, and a commit per 304 would put an fsync on every revalidated hit.
    private static func store(_ head: StoredHead, in file: SparseFile) async throws {
        try await file.setMetadata(head.stored(in: await file.metadata))
    }

    /// Drops `key` from the cache: fetches of it stop, readers that had bytes of it get
    /// ``OriginError`` `.changed`, and its files are removed. Returns whether there was anything to drop.
    /// A purge, or what an unsafe request or a changed origin means for a stored response
    /// (RFC 9111, section 4.4).
    @discardableResult
    package func invalidate(key: String) async throws -> Bool {
        // A small-object first contact in flight ends first (it becomes a small object or a
        // resource, dropped below), and a small object still being written is removed after
        // it, not before.
        if let running = smallContacts[key] {
            _ = try? await withCheckedThrowingContinuation { running.waiters.append($0) }
        }
        await settleSmall(key: key)
        if let resource = resources[key] {
            // A first contact or a replacement in flight ends first; then its result is dropped.
            while let running = resource.phase.running { _ = try? await running.value }
            // Re-check after the awaits: another invalidation may have dropped it meanwhile.
            if resource.handle != nil {
                count { $0.invalidations += 1 }
                try await retire(resource) { _ = try await self.removeStored(key) }
                forgetIfIdle(resource)
                return true
            }
        }
        return try await removeStored(key)
    }

    /// Removes `key` from the store; false when it was not there.
    private func removeStored(_ key: String) async throws -> Bool {
        do {
            try await store.remove(key: key)
            return true
        } catch let error as SparseCacheError where error.code == .notFound {
            return false
        }
    }
}
