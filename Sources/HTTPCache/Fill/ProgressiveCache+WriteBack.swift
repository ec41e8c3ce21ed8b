import SparseCacheEngine
import SparseCacheStore

/// Cut-through and write-back: what a fill receives goes to waiting readers from memory at
/// once (``ArrivedBytes``), and to the cache file behind them: written, then fdatasync'ed and
/// committed beside the next writes (the resource's commit line runs on its own queue, and
/// one commit covers every write before it: a fast origin's megabytes share one sync). The
/// receiver waits for the write-back only when the fill's memory is full
/// (``FillOptions/arrivedLimit``). Delivery is not a claim: the index names a byte only once
/// the write-back committed it (docs/DURABILITY.md, "Delivery is not a claim").
extension ProgressiveCache {
    /// Bytes gathered per write: one hop to the resource per batch instead of per network chunk.
    static let writeBatch = 1 << 20

    /// Takes `bytes` (received at `arrived.end`), wakes the readers waiting for them, and keeps
    /// the write-back going. Suspends only while the fill holds ``FillOptions/arrivedLimit`` bytes
    /// not yet present. Throws the write-back's failure (a full disk, an fsync error).
    func receive(
        _ bytes: ArraySlice<UInt8>, into arrived: ArrivedBytes, of resource: FillResource, handle: ResourceHandle, generation: Int
    ) async throws {
        arrived.append(bytes)
        let held = arrived.count
        count { $0.mostArrived = max($0.mostArrived, held) }
        arrivedMore(resource)
        if let failure = arrived.failure { throw failure }
        if arrived.writer == nil, arrived.unwrittenCount >= Self.writeBatch {
            startWriteBack(arrived, of: resource, handle: handle, generation: generation, commit: false)
        }
        while arrived.count >= options.arrivedLimit {
            // Memory full: the origin waits for the disk (its socket fills, TCP holds it back):
            // for the writes, then for the commit that makes the bytes present.
            count { $0.writeBackWaits += 1 }
            let before = arrived.count
            if arrived.writer == nil, arrived.unwrittenCount > 0 {
                startWriteBack(arrived, of: resource, handle: handle, generation: generation, commit: false, all: true)
            }
            if let writer = arrived.writer {
                await writer.value
            } else {
                if arrived.committer == nil { startCommits(arrived, of: resource, file: handle.file) }
                await arrived.committer?.value
                if let failure = arrived.failure { throw failure }
                // Only a partial segment left, which no commit makes present: take more.
                if arrived.count >= before { break }
            }
            if let failure = arrived.failure { throw failure }
            // Re-check after the await: bytes of a replaced version are never written.
            guard resource.generation == generation else { throw CancellationError() }
        }
    }

    /// Writes back everything received and (with `commit`) commits it: the end of a fill (also
    /// a cancelled or failed one: what arrived stays).
    func finishWriteBack(
        _ arrived: ArrivedBytes, of resource: FillResource, handle: ResourceHandle, generation: Int, commit: Bool = true
    ) async throws {
        await writeBackIdle(arrived)
        if let failure = arrived.failure { throw failure }
        guard resource.generation == generation else { return }
        try await writeBack(arrived, of: resource, handle: handle, generation: generation, commit: commit, all: true)
        // The commit also stores a length and metadata adopted without any byte written.
        if commit { try await handle.file.commit() }
    }

    /// Returns once neither a write nor a commit of `arrived` runs.
    func writeBackIdle(_ arrived: ArrivedBytes) async {
        while true {
            if let writer = arrived.writer {
                await writer.value
            } else if let committer = arrived.committer {
                await committer.value
            } else {
                return
            }
        }
    }

    /// Starts the write-back: whole batches (everything received with `all`), then with
    /// `commit` a commit of everything written.
    func startWriteBack(
        _ arrived: ArrivedBytes, of resource: FillResource, handle: ResourceHandle, generation: Int, commit: Bool, all: Bool? = nil
    ) {
        arrived.writer = onLoop {
            do {
                try await self.writeBack(
                    arrived, of: resource, handle: handle, generation: generation, commit: commit, all: all ?? commit)
            } catch {
                arrived.failure = arrived.failure ?? error
            }
            arrived.writer = nil
        }
    }

    /// Writes the received bytes in batches (all of them with `all`, else whole batches only),
    /// starts commits beside the writes every ``FillOptions/commitEvery`` bytes, and (with
    /// `commit`) commits what is left at the end.
    private func writeBack(
        _ arrived: ArrivedBytes, of resource: FillResource, handle: ResourceHandle, generation: Int, commit: Bool, all: Bool
    ) async throws {
        while resource.generation == generation {
            let batch = arrived.unwritten(limit: Self.writeBatch)
            if batch.bytes.isEmpty || (!all && batch.bytes.count < Self.writeBatch) { break }
            // The fill commits on its own (below), not inside the write.
            _ = try await handle.write(batch.bytes, at: batch.offset, applyingCommitPolicy: false)
            arrived.markWritten(batch.bytes.count)
            if arrived.sinceCommit >= options.commitEvery, arrived.committer == nil {
                startCommits(arrived, of: resource, file: handle.file)
            }
        }
        if commit, resource.generation == generation {
            while let committer = arrived.committer { await committer.value }
            if let failure = arrived.failure { throw failure }
            if arrived.sinceCommit > 0 { try await commitArrived(arrived, of: resource, file: handle.file) }
        }
    }

    /// Commits what the write-back has written, beside its next writes, until a commit finds
    /// nothing new written (each commit covers every write that returned before it began: a
    /// fast origin's megabytes share one fdatasync). A failure stops the fill.
    func startCommits(_ arrived: ArrivedBytes, of resource: FillResource, file: SparseFile) {
        arrived.committer = onLoop {
            while arrived.sinceCommit > 0, arrived.failure == nil {
                do {
                    try await self.commitArrived(arrived, of: resource, file: file)
                } catch {
                    arrived.failure = arrived.failure ?? error
                }
            }
            arrived.committer = nil
        }
    }

    private func commitArrived(_ arrived: ArrivedBytes, of resource: FillResource, file: SparseFile) async throws {
        arrived.sinceCommit = 0
        try await file.commit()
        resource.lastCommit = .now
        // Present now: readers find these bytes in the file.
        arrived.trim(upTo: await file.contiguousPresentEnd(from: arrived.start))
        await changed(resource)
    }

    /// Wakes the readers waiting on the resource: bytes arrived (no commit, so the progress
    /// listeners, which report what is present, are not told).
    func arrivedMore(_ resource: FillResource) {
        resource.changes += 1
        guard !resource.waiters.isEmpty else { return }
        let waiters = resource.waiters
        resource.waiters.removeAll()
        for (_, waiter) in waiters { waiter.continuation.resume() }
    }
}
