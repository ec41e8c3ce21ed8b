extension SparseFile {
    /// Makes everything written so far durable and present: fdatasync of the data file, then one
    /// journal record naming the new segments (and any new length, metadata or dropped
    /// segments), then fdatasync of the index.
    ///
    /// Durability: when this returns, every segment completed by a `write` that returned before
    /// this call survives any crash. Concurrent callers share commits in flight.
    ///
    /// - Throws: `.needsReopen` when a sync failed (this call's or an earlier one's): the
    ///   segments since the last good sync are not claimed. `.io` for other write errors, after
    ///   which the change stays pending for the next commit.
    public func commit() async throws {
        try checkWritable("commit")
        try await commitPending()
    }

    /// Commits every change made so far, joining a commit already running.
    func commitPending() async throws {
        let target = changeCounter
        while committedCounter < target {
            if let failure { throw failure }
            if let running = commitTask {
                // Re-check after the await: another caller may have started the next commit.
                try await running.value
                continue
            }
            let task = startCommit()
            commitTask = task
            try await task.value
        }
        if let failure { throw failure }
        // Nothing was pending, yet the caller is told the resource is durable as it stands: a
        // resource no commit ever went through (created by this open, or by an earlier one
        // that ended before committing: creation syncs no directory) must then have durable
        // names too. (Any other's were made durable by the commit that claimed anything.)
        if !entryDurable, recovery.neverCommitted { try await syncEntry() }
    }

    /// The fsync of the directory a commit does before its first journal record, for a commit
    /// that writes none. A failure is a sync failure: the file needs a reopen.
    private func syncEntry() async throws {
        let index = self.index
        do {
            try await commitIO.run { try index.makeEntryDurable() }
        } catch let error as SparseCacheError {
            poison(after: error)
            throw failure!
        }
        entryDurable = true
    }

    private func startCommit() -> Task<Void, Error> {
        var change = pendingChange
        pendingChange = IndexChange()
        change.added = unsynced.sorted { $0.key < $1.key }.map { (segment: $0.key, checksum: $0.value) }
        // A segment dropped and written again since the last commit ends up present.
        let readded = Set(change.added.map(\.segment))
        change.dropped.removeAll { readded.contains($0) }
        for (segment, checksum) in unsynced { committing[segment] = checksum }
        unsynced.removeAll()
        let bytes = uncommittedBytes
        uncommittedBytes = 0
        let upTo = changeCounter
        committingChange = change
        return Task { try await self.runCommit(change, bytes: bytes, upTo: upTo) }
    }

    private func runCommit(_ change: IndexChange, bytes: Int64, upTo: UInt64) async throws {
        defer {
            commitTask = nil
            committingChange = nil
        }
        let dataFile = self.dataFile
        let index = self.index
        let before = committed
        let started = ContinuousClock.now
        defer { EngineMetrics.commitSeconds.observe(Histogram.seconds(ContinuousClock.now - started)) }
        do {
            if !change.added.isEmpty || change.length != nil {
                let length = change.length
                try await commitIO.run {
                    // A length set since the last commit: the data file covers it before a record
                    // names it (an open refuses a data file shorter than its index), its size
                    // synced with the data.
                    if let length, try dataFile.status().size < length { try dataFile.truncate(to: length) }
                    try dataFile.dataSync()
                }
            }
            try await commitIO.run { try index.append(change, committed: before) }
        } catch let error as SparseCacheError {
            if error.isSyncFailure {
                poison(after: error)
                throw failure!
            }
            restore(change, bytes: bytes)
            throw error
        }
        committed.apply(change)
        entryDurable = true
        for (segment, _) in change.added { committing[segment] = nil }
        committedCounter = max(committedCounter, upTo)
        if index.wantsCheckpoint { try await checkpoint() }
    }

    /// Puts a change whose record could not be written back in line for the next commit.
    private func restore(_ change: IndexChange, bytes: Int64) {
        for (segment, checksum) in change.added {
            committing[segment] = nil
            unsynced[segment] = checksum
        }
        uncommittedBytes += bytes
        if pendingChange.length == nil { pendingChange.length = change.length }
        if pendingChange.metadata == nil { pendingChange.metadata = change.metadata }
        pendingChange.dropped = Array(Set(pendingChange.dropped + change.dropped)).sorted()
    }

    /// Folds the journal into a new checkpoint. A failure other than a sync error leaves the
    /// journal in charge and is retried after a later commit.
    func checkpoint(reportingErrors: Bool = false, compacting: Bool = false) async throws {
        let state = committed
        let index = self.index
        do {
            try await commitIO.run { try index.checkpoint(state, compacting: compacting) }
        } catch let error as SparseCacheError {
            if error.isSyncFailure {
                poison(after: error)
                throw failure!
            }
            if reportingErrors { throw error }
        }
    }

    /// Runs the commit policy after a write: commits inline past the byte threshold (which
    /// also applies back-pressure), and arms the interval timer.
    func applyCommitPolicy() async throws {
        let policy = options.commitPolicy
        if let threshold = policy.bytes, uncommittedBytes >= threshold {
            try await commitPending()
            return
        }
        if let interval = policy.interval, autoCommitTask == nil, changeCounter > committedCounter {
            autoCommitTask = Task {
                try? await Task.sleep(for: interval)
                await self.autoCommitFired()
            }
        }
    }

    private func autoCommitFired() async {
        autoCommitTask = nil
        guard lifecycle == .open, failure == nil, !Task.isCancelled else { return }
        // Errors are kept: a sync error poisons the resource and the next call reports it;
        // anything else leaves the change pending for the next commit.
        try? await commitPending()
    }
}
