@_spi(Locking) import SparseCacheEngine

/// Space: dead records (replaced, removed, evicted) are reclaimed by compacting their file:
/// its live records are copied forward through the group commit (same sequence numbers, so
/// replay keeps whichever copy it meets), and only once the copies are durable is the file
/// deleted. A crash in between leaves both copies, which are the same object.
extension SmallObjectStore {
    /// Drops least recently used objects (those used before `cutoff`, ns since 1970) and
    /// compacts files until the logs take at least `bytes` less disk, or nothing more can go.
    /// Returns the keys dropped. The dropped keys get tombstones (one batch), so a restart
    /// before their records are compacted away does not bring them back: an evicted key is as
    /// gone as a removed one, and a later removal of it has nothing to do.
    @discardableResult
    package func evict(bytes: Int64, olderThan cutoff: Int64 = .max) async throws -> [String] {
        guard bytes > 0, !isClosed else { return [] }
        let before = diskBytes
        let goal = before - bytes
        var dropped: [String] = []
        // Dead bytes are freed by compaction alone; live ones must be dropped first.
        var reclaimable = before - liveByteCount - Int64(logs.count * SmallObjectFormat.headerSize)
        if reclaimable < bytes {
            let candidates = index.filter { $0.value.lastAccess < cutoff }.sorted {
                ($0.value.lastAccess, $0.value.sequence) < ($1.value.lastAccess, $1.value.sequence)
            }
            var tombstones: [PendingRecord] = []
            for (key, location) in candidates where reclaimable < bytes {
                drop(key)
                dropped.append(key)
                reclaimable += Int64(location.count)
                tombstones.append(
                    PendingRecord(kind: .tombstone, key: key, sequence: takeSequence(), metadata: [], body: [], lastAccess: 0))
            }
            try await appendTogether(tombstones)
        }
        // Files with dead bytes, most dead first; the file appended to too (sealed first). Only
        // the files there now: the copies go to new files, which would otherwise be compacted
        // again and again while the goal is out of reach.
        let candidates = logs.keys.filter { deadBytes($0) > 0 }.sorted { liveRatio($0) < liveRatio($1) }
        for id in candidates where diskBytes > goal {
            try await compact(id)
        }
        return dropped
    }

    /// Bytes of file `id` that no live record uses (its header aside).
    func deadBytes(_ id: UInt32) -> Int64 {
        (fileSizes[id] ?? 0) - (liveBytes[id] ?? 0) - Int64(SmallObjectFormat.headerSize)
    }

    /// Live bytes over file bytes.
    func liveRatio(_ id: UInt32) -> Double {
        let size = Double(fileSizes[id] ?? 0)
        return size <= 0 ? 1 : Double(liveBytes[id] ?? 0) / size
    }

    /// Compacts, in the background, sealed files whose live records fill less than
    /// ``SmallObjectOptions/compactBelow`` of them.
    func scheduleCompaction() {
        guard compacting == nil, !isClosed else { return }
        let threshold = options.compactBelow
        let candidates = logs.keys.filter { $0 != active && deadBytes($0) > 0 && liveRatio($0) < threshold }
        guard !candidates.isEmpty else { return }
        compacting = Task {
            for id in candidates.sorted() { try? await self.compact(id) }
            self.compacting = nil
        }
    }

    /// Copies file `id`'s live records (and the tombstones an older file may still need)
    /// forward, waits until they are durable, then deletes the file.
    func compact(_ id: UInt32) async throws {
        guard logs[id] != nil, !compactingFiles.contains(id) else { return }
        compactingFiles.insert(id)
        defer { compactingFiles.remove(id) }
        if id == active {
            // The next batch starts a new file; a batch being written here ends first, so the
            // file read below is the whole of it.
            sealActive = true
            while let flushing { await flushing.value }
        }
        guard let log = logs[id] else { return }
        let size = fileSizes[id] ?? 0
        let bytes = try await io.run { try log.file().descriptor.read(fromAbsoluteOffset: 0, count: Int(size)) }
        // Re-read after the await: the index may have changed meanwhile.
        var copies: [PendingRecord] = []
        for (key, location) in index where location.file == id {
            let start = Int(location.offset), end = start + Int(location.count)
            guard end <= bytes.count, case .success(let decoded) = SmallObjectFormat.decodeRecord(bytes[start..<end], salt: log.salt),
                decoded.key == key, decoded.0.sequence == location.sequence
            else {
                // A damaged record is not copied: the object is gone, never served.
                damagedReads += 1
                drop(key)
                continue
            }
            copies.append(
                PendingRecord(
                    kind: .object, key: key, sequence: location.sequence, metadata: Array(decoded.metadata), body: Array(decoded.body),
                    lastAccess: location.lastAccess, copiedFrom: id))
        }
        // A tombstone matters while another file may hold a record older than it (by sequence:
        // compaction copies keep theirs, so a newer file may hold older records). A key stored
        // again since needs none: its newer record wins anyway.
        for (key, sequence) in tombstones[id] ?? [:] where index[key] == nil || index[key]!.sequence < sequence {
            guard logs.keys.contains(where: { $0 != id && (minimumSequence[$0] ?? .max) < sequence }) else { continue }
            copies.append(
                PendingRecord(kind: .tombstone, key: key, sequence: sequence, metadata: [], body: [], lastAccess: 0, copiedFrom: id))
        }
        if !copies.isEmpty { try await appendTogether(copies) }
        guard logs[id] != nil else { return }
        // A key whose copy was refused (replaced or removed meanwhile) no longer points here;
        // nothing else can (appends go to the file appended to, which this is not any more).
        for (key, location) in index where location.file == id { drop(key) }
        // The file leaves the table only once it is gone: one that could not be deleted keeps
        // its tombstones' reasons (its records are still read by the next open).
        let path = log.path
        // The hint goes first (a hint without its log is deleted at open; a log without its
        // hint is only scanned): wait for one being written so it cannot come back after.
        await hintTasks[id]?.value
        let directory = self.directory
        try await io.run {
            try SmallObjectHint.remove(directory: directory, id: id)
            try FileSystem.unlink(path)
        }
        guard logs[id] != nil else { return }
        let removedSize = fileSizes[id] ?? size
        logs[id] = nil
        descriptors.forget(id)
        fileSizes[id] = nil
        liveBytes[id] = nil
        tombstones[id] = nil
        minimumSequence[id] = nil
        failedFiles.remove(id)
        diskCounter.withLock { $0 -= removedSize }
        try await io.run { try FileSystem.syncParentDirectory(of: path) }
    }
}
