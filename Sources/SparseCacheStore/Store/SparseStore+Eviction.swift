import SparseCacheEngine

extension SparseStore {
    /// Changes the byte budget of a running store (an operator's command) and evicts down to
    /// it. Throws `.invalidArgument` for a budget smaller than one segment.
    public func setBudget(_ bytes: Int64) async throws {
        try checkOpen("set budget")
        guard bytes >= Int64(options.segmentSize) else {
            throw SparseCacheError(
                .invalidArgument, operation: "set budget", path: directory,
                detail: "budget \(bytes) is smaller than one segment (\(options.segmentSize) bytes)")
        }
        budget = bytes
        try await enforceBudget()
    }

    /// Evicts until the store is within its budget (and the minimum free space): first the
    /// parts of least-recently-used resources beyond their pinned prefix, then whole
    /// least-recently-used resources, then, when only open resources are left, their coldest
    /// segments. Open resources are never deleted. Concurrent callers share one queued pass.
    package func enforceBudget() async throws {
        if let pending = pendingEnforcement {
            _ = try await pending.value
            return
        }
        // Within the budget, with no free-space floor to check, a pass has nothing to do: none
        // is queued (a task and its wake-ups on every close of a cache that churns).
        guard isOverBudget || options.minimumFreeSpace != nil else { return }
        let task = queuePass(target: budget, useWindow: true)
        pendingEnforcement = task
        _ = try await task.value
    }

    /// Evicts least-recently-used resources until at most `bytes` are allocated; returns the
    /// keys evicted or trimmed. Open resources are skipped.
    @discardableResult
    public func evict(toSize bytes: Int64) async throws -> [String] {
        try checkOpen("evict")
        return try await queuePass(target: max(0, bytes), useWindow: false).value
    }

    /// Queues an eviction pass behind the ones already queued: passes never overlap, and no
    /// caller ever waits by polling. (Awaiting a finished task does not suspend, so a loop
    /// that waits for a task slot to clear can hold the actor forever.)
    private func queuePass(target: Int64, useWindow: Bool) -> Task<[String], Error> {
        let previous = evictionQueue
        let task = Task {
            await previous?.value
            return try await self.runPass(target: target, useWindow: useWindow)
        }
        evictionQueue = Task { _ = try? await task.value }
        return task
    }

    private func runPass(target: Int64, useWindow: Bool) async throws -> [String] {
        // A budget pass that has started no longer takes new joiners: they queue their own,
        // which sees the bytes written after this one measured.
        if useWindow { pendingEnforcement = nil }
        guard !isClosed else { return [] }
        return try await evictPass(target: target, useWindow: useWindow)
    }

    /// Removes every resource that is not open; returns the keys removed.
    @discardableResult
    public func clear() async throws -> [String] {
        try checkOpen("clear")
        var removed: [String] = []
        for entry in await smallObjects.entries() where try await smallObjects.remove(key: entry.key) {
            removed.append(entry.key)
        }
        for key in entries.keys.sorted() where live[key] == nil {
            do {
                try await remove(key: key)
                removed.append(key)
            } catch let error as SparseCacheError where error.code == .locked || error.code == .notFound {
                continue  // opened or removed meanwhile
            }
        }
        try await saveCatalog()
        return removed
    }

    /// How many bytes must go: over the budget, or short of the minimum free space.
    private func excess(target: Int64) async -> Int64 {
        var need = allocatedBytes - target
        if let minimum = options.minimumFreeSpace {
            let directory = self.directory
            if let available = try? await io.run({ try FileSystem.availableBytes(at: directory) }) {
                need = max(need, minimum - available)
            }
        }
        return need
    }

    @discardableResult
    private func evictPass(target: Int64, useWindow: Bool = true) async throws -> [String] {
        var evicted: [String] = []
        var progress = true
        while progress, await excess(target: target) > 0 {
            progress = false
            // Least recently used first, sorted once per round: every candidate is re-checked
            // after each await below, so a resource opened meanwhile is never touched.
            let order = LeastRecentlyUsed.order(entries.values.filter { live[$0.key] == nil && !lockedKeys.contains($0.key) })
            for candidate in order where candidate.pinnedPrefix > 0 && candidate.presentBytes > candidate.pinnedPrefix {
                guard await excess(target: target) > 0 else { break }
                if try await trimToPrefix(key: candidate.key) {
                    evicted.append(candidate.key)
                    progress = true
                }
            }
            // Small objects used before the least recently used resource go first.
            let cutoff = order.first { $0.pinnedPrefix != .max }?.lastAccess ?? .max
            let smallNeed = await excess(target: target)
            if smallNeed > 0 {
                let before = smallObjects.diskBytes
                let dropped = try await smallObjects.evict(bytes: smallNeed, olderThan: cutoff)
                evicted += dropped
                // Progress is disk given back: a pass that only moved records must end.
                if smallObjects.diskBytes < before { progress = true }
            }
            if options.eviction == .sfifo {
                let (removed, freed) = try await evictSegmentRuns(target: target, order: order)
                evicted += removed
                if freed { progress = true }
                if progress { continue }
            }
            let need = await excess(target: target)
            let victims = LeastRecentlyUsed.victims(
                in: order.compactMap { entries[$0.key] }, need: need, isHeld: { live[$0] != nil || lockedKeys.contains($0) })
            if !victims.isEmpty {
                let removed = try await removeClosedResources(victims)
                evicted += removed
                progress = progress || !removed.isEmpty
            }
            if !progress, useWindow {
                progress = try await shrinkOpenResources(by: await excess(target: target))
            }
        }
        evictions += evicted.count
        if !evicted.isEmpty { try? await saveCatalog() }
        return evicted
    }

    /// Deletes closed resources in one batch: every index first (then one directory sync),
    /// then every data file (and one more sync). A crash anywhere leaves data files that claim
    /// nothing, which the next start-up removes; never a resource claiming missing data.
    /// Returns the keys removed.
    private func removeClosedResources(_ keys: [String]) async throws -> [String] {
        for key in keys { await lockKey(key) }
        defer { for key in keys { unlockKey(key) } }
        // Re-check after the awaits: any of them may have been opened or removed meanwhile.
        let victims = keys.compactMap { key in live[key] == nil ? entries[key] : nil }
        guard !victims.isEmpty else { return [] }
        try await deleteFiles(names: victims.map(\.name))
        for entry in victims {
            entries[entry.key] = nil
            keyByName[entry.name] = nil
            queues.noteRemoved(key: entry.key)
        }
        markCatalogDirty()
        return victims.map(\.key)
    }

    /// A closed resource opened for eviction to drop segments of: never created, committed
    /// only when asked.
    private func openClosed(_ entry: StoreEntry) async throws -> SparseFile {
        var reopen = SparseFileOptions()
        reopen.create = false
        reopen.commitPolicy = .manual
        return try await SparseFile.open(resourcesDirectory + "/" + entry.name, options: reopen)
    }

    /// Drops everything of a closed resource beyond its pinned prefix. Returns false when
    /// nothing could be dropped.
    private func trimToPrefix(key: String) async throws -> Bool {
        await lockKey(key)
        defer { unlockKey(key) }
        guard live[key] == nil, let entry = entries[key] else { return false }
        let file = try await openClosed(entry)
        let firstDropped = Int((entry.pinnedPrefix + Int64(file.segmentSize) - 1) / Int64(file.segmentSize))
        let beyond = await file.presentSegments().flatMap { run in
            Array(max(run.lowerBound, firstDropped)..<max(run.upperBound, firstDropped))
        }
        do {
            if !beyond.isEmpty { try await file.discard(segments: beyond) }
            try await file.close()
        } catch {
            try? await file.close()
            throw error
        }
        await refresh(key: key, from: file)
        queues.noteDiscarded(key: key, segments: firstDropped..<Int.max)
        if var updated = entries[key] {
            // Present bytes now fit the prefix: it is no longer a trim candidate.
            updated.presentBytes = min(updated.presentBytes, updated.pinnedPrefix)
            entries[key] = updated
        }
        return !beyond.isEmpty
    }

    /// The larger-than-budget window: drops the coldest segments of open resources (never
    /// their pinned prefix, never segments being written). Returns false when nothing could
    /// be dropped.
    private func shrinkOpenResources(by bytes: Int64) async throws -> Bool {
        var freed: Int64 = 0
        let byAllocation = live.keys.sorted { (entries[$0]?.allocatedBytes ?? 0) > (entries[$1]?.allocatedBytes ?? 0) }
        for key in byAllocation where freed < bytes {
            // Held so the last handle cannot close the file under the discard.
            await lockKey(key)
            defer { unlockKey(key) }
            guard let resource = live[key], let entry = entries[key] else { continue }
            let size = Int64(resource.file.segmentSize)
            // The index counts against the budget too: fold a long journal before dropping data.
            let beforeCompaction = entries[key]?.allocatedBytes ?? 0
            try await resource.file.compactIndex(ifJournalExceeds: size)
            await refresh(key: key, from: resource.file)
            freed += max(0, beforeCompaction - (entries[key]?.allocatedBytes ?? 0))
            if freed >= bytes { break }
            let firstEvictable = Int((entry.pinnedPrefix + size - 1) / size)
            let present = await resource.file.presentSegments().flatMap { Array($0) }.filter { $0 >= firstEvictable }
            // Re-read the recency after the await: reads may have touched segments meanwhile.
            let touches = live[key]?.segmentTouch ?? [:]
            let coldest = present.sorted { (touches[$0] ?? 0, $0) < (touches[$1] ?? 0, $1) }
            // Keep at least one segment: the one being read or written right now.
            let count = min(max(0, coldest.count - 1), Int((bytes - freed + size - 1) / size))
            guard count > 0 else { continue }
            let victims = Array(coldest.prefix(count))
            try await resource.file.discard(segments: victims)
            for segment in victims {
                live[key]?.segmentTouch[segment] = nil
                queues.noteDiscarded(key: key, segments: segment..<(segment + 1))
            }
            let before = entries[key]?.allocatedBytes ?? 0
            await refresh(key: key, from: resource.file)
            freed += max(Int64(count) * size, before - (entries[key]?.allocatedBytes ?? 0))
        }
        return freed > 0
    }

    /// The ``EvictionPolicy/sfifo`` part of a pass: closed resources the queues do not track
    /// (found on disk, or from a catalog without runs) go first, least recently used first;
    /// then the runs the queues give up, a batch at a time. A resource left with no run is
    /// deleted whole. Returns the keys trimmed or removed and whether any disk was freed.
    private func evictSegmentRuns(target: Int64, order: [StoreEntry]) async throws -> ([String], Bool) {
        var touched: [String] = []
        var freed = false
        let untracked = order.filter { queues.runs[$0.key] == nil && $0.pinnedPrefix != .max }
        if !untracked.isEmpty {
            let victims = LeastRecentlyUsed.victims(
                in: untracked.compactMap { entries[$0.key] }, need: await excess(target: target),
                isHeld: { live[$0] != nil || lockedKeys.contains($0) || queues.runs[$0] != nil })
            let removed = try await removeClosedResources(victims)
            touched += removed
            freed = freed || !removed.isEmpty
        }
        var need = await excess(target: target)
        while need > 0 {
            let segmentSize = Int64(options.segmentSize)
            // One batch: victims worth the bytes needed now, grouped by resource. A run's
            // resource is held while open or locked, or when it is pinned whole.
            var batch: [String: [Range<Int>]] = [:]
            var planned: Int64 = 0
            while planned < need {
                let limit = Int((need - planned + segmentSize - 1) / segmentSize)
                guard let victim = queues.takeVictim(limit: limit, isHeld: { key in
                    live[key] != nil || lockedKeys.contains(key) || (entries[key]?.pinnedPrefix ?? 0) == .max
                }) else { break }
                batch[victim.key, default: []].append(victim.segments)
                planned += Int64(victim.segments.count) * segmentSize
            }
            guard !batch.isEmpty else { break }
            var wholly: [String] = []
            for (key, ranges) in batch.sorted(by: { $0.key < $1.key }) {
                if queues.runs[key] == nil, (entries[key]?.pinnedPrefix ?? 0) == 0 {
                    wholly.append(key)
                } else if try await discardClosed(key: key, segments: ranges) {
                    touched.append(key)
                    freed = true
                }
            }
            let removed = try await removeClosedResources(wholly)
            touched += removed
            freed = freed || !removed.isEmpty
            let left = await excess(target: target)
            // Victims that named only absent segments free nothing: ask for more, but stop
            // when the queues are out of victims (the caller falls back to whole resources).
            need = left
        }
        return (touched, freed)
    }

    /// Discards `segments` of a closed resource, never below its pinned prefix. Returns false
    /// when it was open, gone, or nothing was dropped.
    private func discardClosed(key: String, segments ranges: [Range<Int>]) async throws -> Bool {
        await lockKey(key)
        defer { unlockKey(key) }
        // Re-check after the await: the resource may have been opened or removed meanwhile.
        guard live[key] == nil, let entry = entries[key] else { return false }
        let file = try await openClosed(entry)
        let size = Int64(file.segmentSize)
        let firstEvictable = Int((entry.pinnedPrefix + size - 1) / size)
        let present = await file.presentSegments()
        let victims = ranges.flatMap { range in
            present.flatMap { run -> [Int] in
                let lower = max(run.lowerBound, range.lowerBound, firstEvictable)
                let upper = min(run.upperBound, range.upperBound)
                return lower < upper ? Array(lower..<upper) : []
            }
        }
        do {
            if !victims.isEmpty { try await file.discard(segments: victims) }
            try await file.close()
        } catch {
            try? await file.close()
            throw error
        }
        await refresh(key: key, from: file)
        return !victims.isEmpty
    }
}
