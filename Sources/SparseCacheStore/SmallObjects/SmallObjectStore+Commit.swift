@_spi(Locking) import SparseCacheEngine

/// Group commit: a batch is written ``SmallObjectOptions/groupCommitDelay`` after its first
/// record was queued (or once the batch before it is synced, when that takes longer), so the
/// records queued meanwhile share it; then one pwrite and one fdatasync make the whole batch
/// durable, and only then does the index name its records and do their callers return.
extension SmallObjectStore {
    /// Queues `record` and waits until its batch is durable (or failed).
    func append(_ record: PendingRecord) async throws {
        var record = record
        unsettled[record.key, default: 0] += 1
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
            record.continuation = continuation
            queue(record)
            startFlushing()
        }
    }

    /// Queues records that succeed or fail together (a compaction's copies) and waits for them.
    func appendTogether(_ records: [PendingRecord]) async throws {
        guard let last = records.last else { return }
        for record in records.dropLast() {
            unsettled[record.key, default: 0] += 1
            queue(record)
        }
        // No suspension between the appends above and this one: they are in one batch.
        try await append(last)
    }

    private func queue(_ record: PendingRecord) {
        if pending.isEmpty { pendingSince = .now }
        pending.append(record)
    }

    private func startFlushing() {
        guard flushing == nil else { return }
        let delay = options.groupCommitDelay
        flushing = Task(executorPreference: LoopExecutor.current) {
            await self.flushAll(delay: delay)
        }
    }

    /// Writes batches until nothing is pending, each `delay` after its first record arrived.
    /// Every batch waits, not only the first: under a steady trickle of puts (a client's
    /// misses one after another) the records that arrive while a batch syncs would otherwise
    /// make the next batch at once, one record and one fdatasync each.
    private func flushAll(delay: Duration) async {
        while let since = pendingSince {
            let wait = since + delay - .now
            if wait > .zero { try? await Task.sleep(for: wait) }
            await flush()
        }
        flushing = nil
    }

    /// Writes and syncs everything pending as one batch, then installs it.
    func flush() async {
        let batch = pending
        pending.removeAll()
        pendingSince = nil
        guard !batch.isEmpty else { return }
        do {
            let placed = try await write(batch)
            batches += 1
            for (record, location) in zip(batch, placed) { install(record, at: location) }
            for record in batch { settle(record.key) }
            for record in batch { record.continuation?.resume() }
        } catch {
            // fsyncgate: after a failed write or sync nothing of the batch is claimed, and the
            // file is not appended to again (its pages past the last good sync are unknown).
            sealActive = true
            for record in batch { settle(record.key) }
            for record in batch { record.continuation?.resume(throwing: error) }
        }
    }

    private func settle(_ key: String) {
        if let count = unsettled[key], count > 1 { unsettled[key] = count - 1 } else { unsettled[key] = nil }
    }

    /// Places the batch in the file appended to (a new one when it is sealed or full), then
    /// encodes it, writes it with one pwrite and syncs it, on the writer's thread. Returns each
    /// record's location.
    private func write(_ batch: [PendingRecord]) async throws -> [Location] {
        let sizes = batch.map {
            SmallObjectFormat.recordSize(keyCount: $0.key.utf8.count, metadataCount: $0.metadata.count, bodyCount: $0.body.count)
        }
        let size = sizes.reduce(0, +)
        let header = Int64(SmallObjectFormat.headerSize)
        let current = fileSizes[active] ?? header
        let maximumFileSize = min(options.maximumFileSize, SmallObjectStore.maximumLogSize)
        if sealActive || logs[active] == nil || (current > header && current + Int64(size) > maximumFileSize) {
            let sealed = active
            let id = nextFileID
            nextFileID += 1
            let directory = self.directory
            let descriptors = self.descriptors
            let log = try await io.run { try SmallObjectStore.createLog(directory: directory, id: id, descriptors: descriptors) }
            logs[id] = log
            fileSizes[id] = header
            diskCounter.withLock { $0 += header }
            active = id
            sealActive = false
            scheduleHint(for: sealed)
        }
        guard let log = logs[active] else {
            throw SparseCacheError(.closed, operation: "append small object", path: directory, detail: "no log file to append to")
        }
        let start = fileSizes[active] ?? header
        var locations: [Location] = []
        locations.reserveCapacity(batch.count)
        var offset = start
        for (record, count) in zip(batch, sizes) {
            locations.append(
                Location(
                    file: log.id, offset: offset, count: count, bodyCount: record.body.count, sequence: record.sequence,
                    lastAccess: record.lastAccess))
            offset += Int64(count)
        }
        // Counted whether or not the batch succeeds: after a failed sync its records may still
        // be in the file (claimed by nobody now, found by the next open), so they take space
        // and a tombstone of their keys must outlive them.
        fileSizes[log.id] = start + Int64(size)
        diskCounter.withLock { $0 += Int64(size) }
        if let lowest = batch.map(\.sequence).min() { minimumSequence[log.id] = min(minimumSequence[log.id] ?? .max, lowest) }
        guard start + Int64(size) <= Int64(UInt32.max) else {
            throw SparseCacheError(
                .invalidArgument, operation: "append small objects", path: log.path,
                detail: "a batch of \(size) bytes does not fit one log file")
        }
        // The records' parts (arrays shared, not copied) for the writer's thread: encoding and
        // checksumming them there keeps that work off the event loop that answered the clients.
        let parts = batch.map { (kind: $0.kind, sequence: $0.sequence, key: $0.key, metadata: $0.metadata, body: $0.body) }
        let salt = log.salt
        do {
            try await io.run {
                var data: [UInt8] = []
                data.reserveCapacity(size)
                for part in parts {
                    SmallObjectFormat.appendRecord(
                        to: &data, kind: part.kind, sequence: part.sequence, key: part.key, metadata: part.metadata, body: part.body,
                        salt: salt)
                }
                // One descriptor for the write and its sync: an eviction meanwhile cannot close
                // it between them (the sync must see the write's errors).
                let file = try log.file()
                try file.descriptor.write(toAbsoluteOffset: start, data)
                try file.descriptor.dataSync()
            }
        } catch {
            failedFiles.insert(log.id)
            throw error
        }
        return locations
    }

    /// Makes a durable record visible: an object becomes the key's (unless a later one already
    /// is), a tombstone removes an older object, a compaction copy moves its original.
    private func install(_ record: PendingRecord, at location: Location) {
        switch record.kind {
        case .tombstone:
            tombstones[location.file, default: [:]][record.key] = record.sequence
            if let current = index[record.key], current.sequence < record.sequence { drop(record.key) }
        case .object:
            if let from = record.copiedFrom {
                guard let current = index[record.key], current.file == from, current.sequence == record.sequence else { return }
            } else if let current = index[record.key], current.sequence > record.sequence {
                return
            }
            var location = location
            // A copy keeps its original's recency.
            if record.copiedFrom != nil { location.lastAccess = index[record.key]?.lastAccess ?? location.lastAccess }
            drop(record.key)
            index[record.key] = location
            liveBytes[location.file, default: 0] += Int64(location.count)
            liveBodyBytes += Int64(location.bodyCount)
        }
    }

    /// Writes, in the background, the hint of log `id` that was just sealed (never appended to
    /// again), so the next open need not read its bodies. Not for a log whose write or sync
    /// failed (its contents past the last good sync are unknown) or one being compacted (it
    /// is about to go).
    func scheduleHint(for id: UInt32) {
        guard options.useHints, let log = logs[id], !failedFiles.contains(id), !compactingFiles.contains(id), hintTasks[id] == nil else {
            return
        }
        let directory = self.directory
        let hintIO = self.hintIO
        hintTasks[id] = Task {
            do {
                try await hintIO.run { try SmallObjectHint.make(for: log, directory: directory) }
            } catch {
                self.hintFailures += 1
            }
            self.hintTasks[id] = nil
        }
    }
}
