#if canImport(Glibc)
    import Glibc
#endif
import SparseCacheEngine
import SparseCacheStore
import SparseHTTP

// Opening a resource: from its stored metadata, or by first contact with its origin.
extension ProgressiveCache {
    /// The opening of `generation` (``FillPhase/attach(ownOpen:open:)``): ends it as it ends,
    /// open, holding only the handle, or closed.
    func open(_ resource: FillResource, generation: Int, first: FirstRequest, new: Bool) async throws {
        defer { resource.update { $0.endWork(generation: generation) }?.response.cancel() }
        guard let source = resource.source else { return }
        // A new key: first contact's request goes out now, and the files are made while the
        // origin answers (a small-object attempt's answer is here already).
        var early: EarlyContact?
        if new, resource.handle == nil, !resource.phase.hasHandedOver { early = startEarlyContact(resource, source: source, first: first) }
        defer { early?.abandon() }
        if resource.handle == nil {
            let handle: ResourceHandle
            do {
                handle = try await store.open(key: resource.key)
            } catch let error as SparseCacheError where error.errno == EMFILE || error.errno == ENFILE {
                // Out of descriptors: the resources kept open for later give theirs back, and
                // the open is tried once more (a request must not fail for a spare handle).
                await closeIdle()
                handle = try await store.open(key: resource.key)
            }
            resource.update { $0.opened(handle) }
        }
        guard let handle = resource.handle else { return }
        // One call to the file's actor for both (every reopen asks).
        let (length, metadata) = await handle.file.lengthAndMetadata
        guard let length else {
            let given = early
            early = nil
            try await firstContact(resource, source: source, handle: handle, first: first, early: given)
            return
        }
        // Known from an earlier run: its validators go out with every request. A first-contact
        // answer a small-object attempt left is not needed.
        resource.update { $0.takeHandedOver() }?.response.cancel()
        let stored = StoredHead(metadata)
        resource.update {
            $0.adopt(
                ContentInfo(
                    length: length, contentType: metadata.contentType,
                    validator: ContentValidator(etag: metadata.etag, lastModified: metadata.lastModified, date: stored?.headers["date"]),
                    stored: stored))
        }
    }

    /// Stores what the origin said: the length (when it said one), the content type and the
    /// validators.
    func adopt(_ info: ContentInfo, in resource: FillResource) async throws {
        guard let handle = resource.handle else { return }
        let file = handle.file
        if let length = info.length, await file.length == nil { try await file.setLength(length) }
        var metadata = await file.metadata
        metadata.key = resource.key
        metadata.contentType = info.contentType
        metadata.etag = info.validator.etag
        metadata.lastModified = info.validator.lastModified
        if let stored = info.stored { metadata = stored.stored(in: metadata) }
        // Committed with the first bytes: a crash before then leaves a resource with nothing
        // present, which first contact simply repeats.
        try await file.setMetadata(metadata)
        resource.update { $0.adopt(info) }
    }
}
