/// The state of the ``EvictionPolicy/sfifo`` policy: every resource's present segments as
/// runs (contiguous ranges sharing one queue position and one use count), in two FIFO
/// queues, plus a ghost list of recently evicted ranges.
///
/// The shape is S3-FIFO's (Yang et al., SOSP 2023) applied to segment runs instead of whole
/// objects:
/// - bytes written (a miss) enter the small queue, unless the ghost list remembers them
///   (they were evicted from the small queue not long ago) or they continue a main-queue run
///   of the same resource (a player going on past a popular head): then the main queue;
/// - a read of present bytes (a hit) raises their use count (at most 3) and moves nothing;
/// - eviction takes from the small queue while it holds more than ``smallShare`` of the
///   tracked segments, else from the main queue. A small-queue run that was used moves to
///   the main queue; one that was not is evicted and remembered in the ghost list. A
///   main-queue run that was used is reinserted at the tail with its count lowered by one;
///   one that was not is evicted;
/// - a run is evicted from its end: the later bytes of a video go before its start.
///
/// Memory is bounded per resource: at most ``maximumRunsPerResource`` runs (past it, the two
/// runs with the smallest gap between them merge into one that spans the gap, so a run may
/// name segments that are not present: evicting them frees nothing and costs nothing). The
/// ghost list holds at most as many segments as the queues track.
///
/// A pure value: no I/O, no clock. The store feeds it what it writes, reads and discards and
/// asks it for victims; the benchmark's trace simulator drives this same type.
package struct SegmentQueues: Sendable {
    package enum Queue: UInt8, Sendable, Equatable {
        case small = 0
        case main = 1
    }

    /// Segments of one resource sharing a queue position and a use count.
    package struct Run: Sendable, Equatable {
        package var segments: Range<Int>
        package var queue: Queue
        /// Uses since the run entered its queue (or was last reinserted), at most ``maximumFrequency``.
        package var frequency: UInt8
        /// Position in its queue: smaller is nearer the head (evicted sooner).
        package var sequence: UInt64

        package init(segments: Range<Int>, queue: Queue, frequency: UInt8, sequence: UInt64) {
            self.segments = segments
            self.queue = queue
            self.frequency = frequency
            self.sequence = sequence
        }
    }

    /// A range of a resource's segments the policy gave up.
    package struct Victim: Sendable, Equatable {
        package var key: String
        package var segments: Range<Int>
    }

    package static let maximumRunsPerResource = 32
    package static let maximumFrequency: UInt8 = 3
    /// The use count a run can reach (at most ``maximumFrequency``).
    package var frequencyCap: UInt8 = 3
    /// The ghost list's size as a multiple of the segments tracked.
    package var ghostShare = 1.0

    /// The share of tracked segments above which eviction takes from the small queue.
    package var smallShare = 0.1

    /// Every tracked resource's runs, sorted by their first segment, disjoint.
    package private(set) var runs: [String: [Run]] = [:]
    package private(set) var smallSegments = 0
    package private(set) var mainSegments = 0
    private var clock: UInt64 = 0
    private var small = FIFO()
    private var main = FIFO()
    private var ghost = Ghost()
    private var queuedAtCompaction = 0

    package init() {}

    /// Segments tracked in both queues (runs merged over a gap count the gap).
    package var trackedSegments: Int { smallSegments + mainSegments }

    // MARK: Events

    /// Bytes written: the parts of `segments` not tracked yet enter the small queue, or the
    /// main queue when the ghost list remembers them.
    package mutating func noteWritten(key: String, segments: Range<Int>) {
        guard !segments.isEmpty else { return }
        var list = runs[key] ?? []
        var added: [Run] = []
        for piece in Self.subtract(list.map(\.segments), from: segments) {
            let remembered = ghost.take(key: key, segments: piece)
            // A player going on past a head that earned its place: those bytes follow it.
            let continues = list.contains { $0.queue == .main && $0.segments.upperBound == piece.lowerBound }
            clock += 1
            let run = Run(segments: piece, queue: remembered || continues ? .main : .small, frequency: 0, sequence: clock)
            added.append(run)
            count(run, sign: 1)
            push(run, key: key)
        }
        guard !added.isEmpty else { return }
        list += added
        list.sort { $0.segments.lowerBound < $1.segments.lowerBound }
        runs[key] = bound(coalesce(list), key: key)
    }

    /// Bytes read: the tracked runs inside `segments` count one more use (split off so the
    /// use counts for these segments only).
    package mutating func noteRead(key: String, segments: Range<Int>) {
        guard !segments.isEmpty, var list = runs[key] else { return }
        var changed = false
        var result: [Run] = []
        result.reserveCapacity(list.count + 2)
        for run in list {
            let overlap = run.segments.clamped(to: segments)
            guard !overlap.isEmpty else {
                result.append(run)
                continue
            }
            changed = true
            if run.segments.lowerBound < overlap.lowerBound {
                result.append(Run(segments: run.segments.lowerBound..<overlap.lowerBound, queue: run.queue, frequency: run.frequency, sequence: run.sequence))
            }
            result.append(
                Run(segments: overlap, queue: run.queue, frequency: min(frequencyCap, run.frequency + 1), sequence: run.sequence))
            if overlap.upperBound < run.segments.upperBound {
                result.append(Run(segments: overlap.upperBound..<run.segments.upperBound, queue: run.queue, frequency: run.frequency, sequence: run.sequence))
            }
        }
        guard changed else { return }
        list = bound(coalesce(result), key: key)
        runs[key] = list
    }

    /// Segments discarded by other means (a trim, the larger-than-budget window): forgotten.
    package mutating func noteDiscarded(key: String, segments: Range<Int>) {
        guard !segments.isEmpty, let list = runs[key] else { return }
        var result: [Run] = []
        for run in list {
            let overlap = run.segments.clamped(to: segments)
            guard !overlap.isEmpty else {
                result.append(run)
                continue
            }
            count(Run(segments: overlap, queue: run.queue, frequency: 0, sequence: 0), sign: -1)
            if run.segments.lowerBound < overlap.lowerBound {
                result.append(Run(segments: run.segments.lowerBound..<overlap.lowerBound, queue: run.queue, frequency: run.frequency, sequence: run.sequence))
            }
            if overlap.upperBound < run.segments.upperBound {
                result.append(Run(segments: overlap.upperBound..<run.segments.upperBound, queue: run.queue, frequency: run.frequency, sequence: run.sequence))
            }
        }
        runs[key] = result.isEmpty ? nil : result
    }

    /// The resource is gone: all of its runs are forgotten (its ghost entries stay).
    package mutating func noteRemoved(key: String) {
        guard let list = runs.removeValue(forKey: key) else { return }
        for run in list { count(run, sign: -1) }
    }

    // MARK: Eviction

    /// Takes the next victim, at most `limit` segments from the end of one run, and forgets
    /// it. Runs of resources for which `isHeld` answers true are passed over and keep their
    /// place. Nil when every tracked run is held.
    package mutating func takeVictim(limit: Int, isHeld: (String) -> Bool) -> Victim? {
        let limit = max(1, limit)
        let fromSmall = Double(smallSegments) > smallShare * Double(trackedSegments) || mainSegments == 0
        for queue in fromSmall ? [Queue.small, .main] : [.main, .small] {
            if let victim = takeVictim(from: queue, limit: limit, isHeld: isHeld) { return victim }
        }
        return nil
    }

    private mutating func takeVictim(from queue: Queue, limit: Int, isHeld: (String) -> Bool) -> Victim? {
        var index = fifo(queue).head
        // Every visit either passes a held or stale entry, or lowers a use count, or moves a
        // run to the other queue: the scan ends.
        while index < fifo(queue).entries.count {
            let entry = fifo(queue).entries[index]
            index += 1
            guard let list = runs[entry.key], let position = list.lastIndex(where: { $0.sequence == entry.sequence && $0.queue == queue })
            else {
                if index - 1 == fifo(queue).head { advanceHead(queue) }
                continue
            }
            if isHeld(entry.key) { continue }
            var run = list[position]
            if run.frequency > 0 {
                // Used: a small-queue run moves to the main queue, a main-queue run is
                // reinserted with one use fewer.
                count(run, sign: -1)
                clock += 1
                run.sequence = clock
                if queue == .small {
                    run.queue = .main
                    run.frequency = 0
                } else {
                    run.frequency -= 1
                }
                count(run, sign: 1)
                var updated = list
                updated[position] = run
                runs[entry.key] = bound(coalesce(updated), key: entry.key)
                push(run, key: entry.key)
                continue
            }
            let taken = max(run.segments.lowerBound, run.segments.upperBound - limit)..<run.segments.upperBound
            var updated = list
            if taken.lowerBound == run.segments.lowerBound {
                updated.remove(at: position)
            } else {
                updated[position].segments = run.segments.lowerBound..<taken.lowerBound
            }
            count(Run(segments: taken, queue: queue, frequency: 0, sequence: 0), sign: -1)
            runs[entry.key] = updated.isEmpty ? nil : updated
            if queue == .small { ghost.insert(key: entry.key, segments: taken, capacity: max(Int(ghostShare * Double(trackedSegments)), 1)) }
            compactIfNeeded()
            return Victim(key: entry.key, segments: taken)
        }
        return nil
    }

    // MARK: Persistence

    /// Restores runs saved with a resource (the catalog keeps them across restarts). Runs
    /// that overlap ones already tracked are ignored.
    package mutating func restore(key: String, runs saved: [Run]) {
        for run in saved.sorted(by: { $0.segments.lowerBound < $1.segments.lowerBound }) where !run.segments.isEmpty {
            var list = runs[key] ?? []
            guard !list.contains(where: { $0.segments.overlaps(run.segments) }) else { continue }
            var run = run
            run.frequency = min(run.frequency, Self.maximumFrequency)
            clock = max(clock, run.sequence)
            list.append(run)
            list.sort { $0.segments.lowerBound < $1.segments.lowerBound }
            runs[key] = bound(list, key: key)
            count(run, sign: 1)
        }
    }

    /// Rebuilds both queues in sequence order after ``restore(key:runs:)`` calls.
    package mutating func finishRestore() {
        small = FIFO()
        main = FIFO()
        let all = runs.flatMap { key, list in list.map { (key, $0) } }.sorted { $0.1.sequence < $1.1.sequence }
        for (key, run) in all { push(run, key: key) }
    }

    // MARK: Internals

    /// The queue's FIFO of (sequence, key) entries; an entry whose run has moved, merged or
    /// gone is stale and skipped.
    private struct FIFO {
        struct Entry {
            var sequence: UInt64
            var key: String
        }
        var entries: [Entry] = []
        var head = 0
    }

    private func fifo(_ queue: Queue) -> FIFO { queue == .small ? small : main }

    private mutating func push(_ run: Run, key: String) {
        let entry = FIFO.Entry(sequence: run.sequence, key: key)
        if run.queue == .small { small.entries.append(entry) } else { main.entries.append(entry) }
    }

    private mutating func advanceHead(_ queue: Queue) {
        if queue == .small { small.head += 1 } else { main.head += 1 }
    }

    private mutating func count(_ run: Run, sign: Int) {
        if run.queue == .small { smallSegments += sign * run.segments.count } else { mainSegments += sign * run.segments.count }
    }

    /// Drops stale entries once the queues have doubled since the last time: they stay
    /// proportional to the runs tracked, at a cost spread over the evictions.
    private mutating func compactIfNeeded() {
        guard small.entries.count + main.entries.count > max(1024, 2 * queuedAtCompaction) else { return }
        func isLive(_ entry: FIFO.Entry, _ queue: Queue) -> Bool {
            runs[entry.key]?.contains { $0.sequence == entry.sequence && $0.queue == queue } ?? false
        }
        small = FIFO(entries: small.entries[small.head...].filter { isLive($0, .small) }, head: 0)
        main = FIFO(entries: main.entries[main.head...].filter { isLive($0, .main) }, head: 0)
        queuedAtCompaction = small.entries.count + main.entries.count
    }

    /// Merges touching runs of one queue with one use count (the later position wins).
    private func coalesce(_ list: [Run]) -> [Run] {
        var result: [Run] = []
        result.reserveCapacity(list.count)
        for run in list {
            if var last = result.last, last.segments.upperBound == run.segments.lowerBound, last.queue == run.queue,
                last.frequency == run.frequency
            {
                last.segments = last.segments.lowerBound..<run.segments.upperBound
                last.sequence = max(last.sequence, run.sequence)
                result[result.count - 1] = last
            } else {
                result.append(run)
            }
        }
        return result
    }

    /// Keeps a resource within ``maximumRunsPerResource``: the two runs with the smallest gap
    /// merge (main queue if either is, the larger count, the later position).
    private mutating func bound(_ list: [Run], key: String) -> [Run] {
        var list = list
        while list.count > Self.maximumRunsPerResource {
            var best = 0
            for index in 1..<(list.count - 1) {
                let gap = list[index + 1].segments.lowerBound - list[index].segments.upperBound
                if gap < list[best + 1].segments.lowerBound - list[best].segments.upperBound { best = index }
            }
            let first = list[best], second = list[best + 1]
            count(first, sign: -1)
            count(second, sign: -1)
            let merged = Run(
                segments: first.segments.lowerBound..<second.segments.upperBound,
                queue: first.queue == .main || second.queue == .main ? .main : .small,
                frequency: max(first.frequency, second.frequency), sequence: max(first.sequence, second.sequence))
            count(merged, sign: 1)
            // The queue entry of the run whose place the merged one took still names it;
            // otherwise it needs one of its own.
            if ![first, second].contains(where: { $0.sequence == merged.sequence && $0.queue == merged.queue }) {
                push(merged, key: key)
            }
            list[best] = merged
            list.remove(at: best + 1)
        }
        return list
    }

    /// Ranges of `segments` not covered by `covered` (sorted, disjoint).
    static func subtract(_ covered: [Range<Int>], from segments: Range<Int>) -> [Range<Int>] {
        var pieces: [Range<Int>] = []
        var start = segments.lowerBound
        for range in covered where range.upperBound > start && range.lowerBound < segments.upperBound {
            if range.lowerBound > start { pieces.append(start..<range.lowerBound) }
            start = max(start, range.upperBound)
        }
        if start < segments.upperBound { pieces.append(start..<segments.upperBound) }
        return pieces
    }
}

/// Recently evicted small-queue ranges, oldest first, at most `capacity` segments.
private struct Ghost: Sendable {
    private var byKey: [String: [Range<Int>]] = [:]
    private var order: [(key: String, segments: Range<Int>)] = []
    private var head = 0
    private var segments = 0

    mutating func insert(key: String, segments range: Range<Int>, capacity: Int) {
        byKey[key, default: []].append(range)
        order.append((key, range))
        segments += range.count
        while segments > capacity, head < order.count {
            let oldest = order[head]
            head += 1
            segments -= oldest.segments.count
            if var list = byKey[oldest.key], let index = list.firstIndex(of: oldest.segments) {
                list.remove(at: index)
                byKey[oldest.key] = list.isEmpty ? nil : list
            }
        }
        if head > 1024, head * 2 > order.count {
            order.removeFirst(head)
            head = 0
        }
    }

    /// Whether any of `range` was evicted recently; the remembered ranges it overlaps are
    /// forgotten (they come back now).
    mutating func take(key: String, segments range: Range<Int>) -> Bool {
        guard var list = byKey[key] else { return false }
        let before = list.count
        list.removeAll { $0.overlaps(range) }
        guard list.count < before else { return false }
        byKey[key] = list.isEmpty ? nil : list
        return true
    }
}
