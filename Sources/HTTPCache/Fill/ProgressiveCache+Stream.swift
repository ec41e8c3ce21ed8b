import SparseCacheEngine
import SparseCacheStore
import SparseHTTP

/// Answers without a length (chunked or close-delimited), received whole (``StreamFill``).
extension ProgressiveCache {
    /// Adopts the answer's head (stored with the first commit, without a length) and starts
    /// the task that receives its body. Readers that attach meanwhile follow it.
    func receiveWhole(_ response: RangeResponse, in resource: FillResource, handle: ResourceHandle) async throws {
        guard response.offset == 0 else {
            throw OriginError(
                .badAnswer, operation: "fetch", key: resource.key, detail: "a part of unknown length from offset \(response.offset)")
        }
        try await adopt(response.info, in: resource)
        let id = takeID()
        let stream = StreamFill(id: id, cancel: response.cancel)
        resource.stream = stream
        resource.fetches[id] = FillResource.Fetch(segments: 0..<0)
        resource.users += 1
        resource.fetches[id]?.task = onLoop { await self.runStream(stream, of: resource, response: response, handle: handle) }
    }

    /// Receives the body into the resource, commits as it goes, and at its end sets the length
    /// and commits: from then on the resource is complete. A body that stops before its end is
    /// dropped (``StreamFill``).
    private func runStream(_ stream: StreamFill, of resource: FillResource, response: RangeResponse, handle: ResourceHandle) async {
        let generation = resource.generation
        let file = handle.file
        let arrived = stream.arrived
        do {
            for try await chunk in response.body {
                try Task.checkCancellation()
                guard resource.generation == generation else { throw CancellationError() }
                count { $0.bytesReceived += Int64(chunk.count) }
                // Readers at the front take the chunk from memory now; the write-back follows.
                try await receive(chunk[...], into: arrived, of: resource, handle: handle, generation: generation)
            }
            // The body ended as its framing says (the last chunk, or the close that ends a
            // close-delimited one): it is the whole resource.
            try Task.checkCancellation()
            guard resource.generation == generation else { throw CancellationError() }
            try await finishWriteBack(arrived, of: resource, handle: handle, generation: generation, commit: false)
            try await file.setLength(arrived.end)
            try await file.commit()
            guard resource.generation == generation else { throw CancellationError() }
            resource.update { $0.updateInfo { $0.length = arrived.end } }
            resource.endedWithoutLength = true
            resource.stream = nil
        } catch {
            stream.failure = error
        }
        response.cancel()
        // A write-back or commit still running ends before the files may go.
        await writeBackIdle(arrived)
        resource.fetches[stream.id] = nil
        resource.fetchesEnded += 1
        if let failure = stream.failure, resource.generation == generation {
            // Cut off: what arrived is not the resource. Readers that followed it fail with
            // the stream's error; the files go.
            resource.update { $0.noteCutOff(generation: generation, error: failure) }
            count { $0.invalidations += 1 }
            try? await retire(resource) { _ = try? await self.store.remove(key: resource.key) }
        }
        if resource.stream === stream { resource.stream = nil }
        resource.lastCommit = .now
        await changed(resource)
        detach(resource)
    }
}
