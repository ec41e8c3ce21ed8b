import SparseCacheEngine
import SparseCacheStore
import SparseHTTP

/// Small whole answers: a complete body of at most
/// ``FillOptions/smallObjectThreshold`` bytes whose length the origin gave is kept as one record of the store's
/// ``SmallObjectStore`` (body and head together, one shared fdatasync) instead of a sparse file
/// and its index. Larger and ranged resources stay sparse files; the first contact's answer is
/// handed to them, so deciding costs no second request (the small-object first contact is in
/// FirstContact/, ``firstContactSmall(_:first:)``).
extension ProgressiveCache {
    /// An answer on its way to the small-object log: readers that come meanwhile get its bytes
    /// from memory (as readers of an arriving stream do), an invalidation waits for it.
    struct ArrivingObject {
        var id: Int
        var info: ContentInfo
        var body: [UInt8]
    }

    /// An arriving object not yet handed to the log (``writeQueuedSmall()``), with the head its
    /// record keeps (its info's stored head).
    struct QueuedSmall {
        var key: String
        var object: ArrivingObject
        var head: StoredHead
    }

    /// The small object stored for `source` (or arriving), as a reader from memory; nil when
    /// there is none.
    func openSmallIfStored(_ source: any RangeSource) async throws -> CacheReader? {
        if let arriving = smallArriving[source.key] {
            return CacheReader(cache: self, source: source, info: arriving.info, body: arriving.body, fromCache: false)
        }
        // The head of the record is known (the answer that stored it, or an earlier hit): only
        // the body is read, its metadata not decoded again.
        if let known = smallInfos[source.key], let body = try await store.smallObjects.body(for: source.key, sequence: known.sequence) {
            return CacheReader(cache: self, source: source, info: known.info, body: body, fromCache: true)
        }
        guard let object = try await store.smallObjects.object(for: source.key) else { return nil }
        let info = Self.smallInfo(length: object.body.count, metadata: object.metadata, head: StoredHead(object.metadata))
        smallInfos.set((object.sequence, info), for: source.key)
        return CacheReader(cache: self, source: source, info: info, body: object.body, fromCache: true)
    }

    /// What a reader of a small object is told about it: from the metadata of its record, and
    /// the head kept in that metadata (decoded, or the one that was encoded into it).
    static func smallInfo(length: Int, metadata: ResourceMetadata, head: StoredHead?) -> ContentInfo {
        ContentInfo(
            length: Int64(length), contentType: metadata.contentType,
            validator: ContentValidator(etag: metadata.etag, lastModified: metadata.lastModified), stored: head)
    }

    /// Whether `key` is held as a small object (stored or arriving) and not as a resource.
    func isSmallObject(_ key: String) async -> Bool {
        guard resources[key] == nil else { return false }
        if smallArriving[key] != nil { return true }
        guard await !hasEntry(key) else { return false }
        return await store.smallObjects.contains(key)
    }

    /// Writes the object in the background; it is found in memory until it is durable.
    func keepSmall(key: String, info: ContentInfo, body: [UInt8]) {
        // A resource made for the key meanwhile (another reader's first contact) is the one kept.
        guard resources[key] == nil, let head = info.stored else { return }
        let id = takeID()
        let object = ArrivingObject(id: id, info: info, body: body)
        smallArriving[key] = object
        smallQueue.append(QueuedSmall(key: key, object: object, head: head))
        if smallWriter == nil { smallWriter = onLoop { await self.writeQueuedSmall() } }
    }

    /// Hands the queued objects to the log until none is left: all that queued meanwhile in
    /// one call, which returns when their batch is durable. A client's misses one after
    /// another queue while the batch before them syncs, so the calls into the store (and this
    /// task) are per batch, not per object.
    private func writeQueuedSmall() async {
        while !smallQueue.isEmpty {
            let queued = smallQueue
            smallQueue.removeAll()
            // The records' metadata is made here, after the clients have their answers.
            let writes = queued.map { queued in
                let info = queued.object.info
                return SmallObjectWrite(
                    key: queued.key,
                    metadata: queued.head.stored(
                        in: ResourceMetadata(
                            key: queued.key, contentType: info.contentType, etag: info.validator.etag,
                            lastModified: info.validator.lastModified)),
                    body: queued.object.body)
            }
            let results = await store.smallObjects.put(writes)
            var stored = 0
            for (index, result) in results.enumerated() {
                let key = queued[index].key, object = queued[index].object
                switch result {
                case .success(let sequence):
                    // Once durable, the first hit needs only the body: it is told what the
                    // record's metadata says without decoding it (StoredHead(metadata) gives
                    // `head` back).
                    let info = Self.smallInfo(length: object.body.count, metadata: writes[index].metadata, head: queued[index].head)
                    smallInfos.set((sequence, info), for: key)
                    stored += 1
                case .failure(let error):
                    count { $0.smallObjectFailures += 1 }
                    await store.noteHousekeepingFailure(.release, key: key, error)
                }
                if smallArriving[key]?.id == object.id { smallArriving[key] = nil }
            }
            count { $0.smallObjectsStored += stored }
            let settled = smallSettled
            smallSettled.removeAll()
            for waiter in settled { waiter.resume() }
            // Past the budget: the store evicts (the writes succeeded whatever the pass does).
            if let last = queued.last, await store.isOverBudget {
                do { try await store.enforceBudget() } catch { await store.noteHousekeepingFailure(.eviction, key: last.key, error) }
            }
        }
        smallWriter = nil
    }

    /// Waits until every small object on its way to the log is durable (or failed).
    package func settleAllSmall() async {
        while !smallArriving.isEmpty { await nextSmallBatch() }
    }

    /// Waits until an object arriving for `key` is durable (or failed): a removal after it
    /// then removes it, never the other way round.
    func settleSmall(key: String) async {
        while smallArriving[key] != nil { await nextSmallBatch() }
    }

    /// Returns when ``writeQueuedSmall()`` has settled its next batch. Every arriving object
    /// is queued or in the batch being written, so one comes.
    private func nextSmallBatch() async {
        await withCheckedContinuation { smallSettled.append($0) }
    }
}
