// The sfifo eviction policy: its queues as a value, and the store running it on real files
// (budget, held resources, one-hit wonders, state across a restart), plus parsing its name.
import Foundation
import SeededRandom
import Testing

@testable import SparseCacheEngine
@testable import SparseCacheStore
import TestSupport
import StoreTestSupport

extension StoreOptions {
    static func testing(budget: Int64, eviction: EvictionPolicy, segmentSize: Int = 16384) -> StoreOptions {
        var options = StoreOptions.testing(budget: budget, segmentSize: segmentSize)
        options.eviction = eviction
        return options
    }
}

/// Writes `segments` whole segments of `key` from the start and releases it (a miss).
private func write(_ store: SparseStore, _ key: String, segments: Int, segment: Int64 = 16384) async throws {
    let length = Int64(segments) * segment
    let handle = try await store.open(key: key, length: length)
    try await handle.write(keyedBytes(key, 0..<length), at: 0)
    try await handle.file.commit()
    try await handle.release()
}

/// Reads `segments` whole segments of `key` from the start (a hit).
private func read(_ store: SparseStore, _ key: String, segments: Int, segment: Int64 = 16384) async throws {
    let handle = try await store.open(key: key)
    let bytes = try await handle.read(offset: 0, length: segments * Int(segment))
    try await handle.release()
    #expect(bytes == keyedBytes(key, 0..<(Int64(segments) * segment)), "wrong bytes for \(key)")
}

@Suite("Eviction policy")
struct EvictionPolicyTests {
    @Test("eviction policy names parse, case-insensitively; anything else is an invalid argument naming the value")
    func parsing() throws {
        #expect(try EvictionPolicy(parsing: "lru") == .lru)
        #expect(try EvictionPolicy(parsing: "SFIFO") == .sfifo)
        #expect(EvictionPolicy.defaultPolicy == .sfifo)
        #expect(StoreOptions(budget: 1 << 20).eviction == .sfifo)
        do {
            _ = try EvictionPolicy(parsing: "arc")
            Issue.record("'arc' parsed")
        } catch {
            #expect(error.code == .invalidArgument)
            #expect("\(error)".contains("'arc'") && "\(error)".contains("lru, sfifo"), "\(error)")
        }
    }

    @Test("queues: a run written once goes before a run read again, from its end; held keys are passed over")
    func queuesOrder() {
        var queues = SegmentQueues()
        queues.noteWritten(key: "popular", segments: 0..<10)
        queues.noteRead(key: "popular", segments: 0..<4)
        queues.noteWritten(key: "once", segments: 0..<10)
        // Held: nothing of "once" goes, the small queue's used run moves on instead.
        let first = queues.takeVictim(limit: 3, isHeld: { $0 == "once" })
        #expect(first == SegmentQueues.Victim(key: "popular", segments: 7..<10), "\(String(describing: first))")
        // The unread rest of "popular" is older than "once": it goes next, from its end.
        let second = queues.takeVictim(limit: 3, isHeld: { _ in false })
        #expect(second == SegmentQueues.Victim(key: "popular", segments: 4..<7), "\(String(describing: second))")
        // The read head of "popular" moves to the main queue; "once", never read, goes.
        let third = queues.takeVictim(limit: 3, isHeld: { _ in false })
        #expect(third == SegmentQueues.Victim(key: "once", segments: 7..<10), "\(String(describing: third))")
        #expect(queues.runs["popular"]?.map(\.queue) == [.main])
        var order: [SegmentQueues.Victim] = []
        while let victim = queues.takeVictim(limit: 100, isHeld: { _ in false }) { order.append(victim) }
        #expect(order == [SegmentQueues.Victim(key: "once", segments: 0..<7), SegmentQueues.Victim(key: "popular", segments: 0..<4)], "\(order)")
        #expect(queues.trackedSegments == 0 && queues.runs.isEmpty)
        // Every key held: no victim at all.
        queues.noteWritten(key: "a", segments: 0..<2)
        #expect(queues.takeVictim(limit: 1, isHeld: { _ in true }) == nil)
    }

    @Test("queues: a resource keeps at most maximumRunsPerResource runs, whatever the pattern (seeded)")
    func queuesBounded() {
        var random = SplitMix64(seed: 45)
        var queues = SegmentQueues()
        for step in 0..<5000 {
            let start = Int(random.next() % 4000)
            let range = start..<(start + 1 + Int(random.next() % 3))
            if random.next() % 2 == 0 {
                queues.noteWritten(key: "k\(step % 3)", segments: range)
            } else {
                queues.noteRead(key: "k\(step % 3)", segments: range)
            }
            if step % 7 == 0 { _ = queues.takeVictim(limit: 2, isHeld: { _ in false }) }
            for (key, runs) in queues.runs {
                #expect(runs.count <= SegmentQueues.maximumRunsPerResource, "seed 45 step \(step): \(key) has \(runs.count) runs")
                #expect(zip(runs, runs.dropFirst()).allSatisfy { $0.segments.upperBound <= $1.segments.lowerBound }, "seed 45 step \(step)")
            }
        }
        let counted = queues.runs.values.joined().reduce(0) { $0 + $1.segments.count }
        #expect(counted == queues.trackedSegments)
    }

    @Test("sfifo store: within the budget after every release, and a resource held open is never evicted")
    func budgetAndHeld() async throws {
        let directory = try TemporaryDirectory("sfifo-budget")
        defer { directory.remove() }
        let budget: Int64 = 40 * 16384
        let store = try await SparseStore.open(directory: directory.path, options: .testing(budget: budget, eviction: .sfifo))
        let held = try await store.open(key: "held", length: 8 * 16384)
        try await held.write(keyedBytes("held", 0..<(8 * 16384)), at: 0)
        try await held.file.commit()
        for index in 0..<30 {
            try await write(store, "r\(index)", segments: 6)
            let allocated = await store.allocatedBytes
            #expect(allocated <= budget, "after r\(index): \(allocated) > \(budget)")
            #expect(await held.file.presentBytes == 8 * 16384, "the held resource lost bytes after r\(index)")
        }
        #expect(try await held.read(offset: 0, length: 8 * 16384) == keyedBytes("held", 0..<(8 * 16384)))
        try await held.release()
        #expect(await store.evictions > 0)
        try await store.close()
    }

    @Test("sfifo keeps the read head of a popular resource through a flood of resources read once; LRU does not")
    func oneHitWondersDoNotFlush() async throws {
        for policy in [EvictionPolicy.sfifo, .lru] {
            let directory = try TemporaryDirectory("sfifo-flood")
            defer { directory.remove() }
            let store = try await SparseStore.open(directory: directory.path, options: .testing(budget: 40 * 16384, eviction: policy))
            try await write(store, "popular", segments: 8)
            try await read(store, "popular", segments: 8)
            try await read(store, "popular", segments: 8)
            for index in 0..<12 { try await write(store, "once\(index)", segments: 6) }
            let kept = await store.entry(for: "popular")?.presentBytes ?? 0
            if policy == .sfifo {
                #expect(kept == 8 * 16384, "sfifo kept \(kept) bytes of the popular resource")
            } else {
                #expect(kept == 0, "LRU kept \(kept) bytes: the comparison shows nothing")
            }
            try await store.close()
        }
    }

    @Test("sfifo state survives a restart through the catalog: the popular head still outlives a flood after reopening")
    func restartKeepsState() async throws {
        let directory = try TemporaryDirectory("sfifo-restart")
        defer { directory.remove() }
        let options = StoreOptions.testing(budget: 40 * 16384, eviction: .sfifo)
        do {
            let store = try await SparseStore.open(directory: directory.path, options: options)
            try await write(store, "popular", segments: 8)
            try await read(store, "popular", segments: 8)
            try await read(store, "popular", segments: 8)
            // Enough newer bytes that, without its state, the popular resource is the oldest.
            for index in 0..<3 { try await write(store, "before\(index)", segments: 6) }
            try await store.close()
        }
        let reopened = try await SparseStore.open(directory: directory.path, options: options)
        #expect(await reopened.queues.runs["popular"]?.contains { $0.frequency > 0 || $0.queue == .main } == true)
        for index in 0..<12 { try await write(reopened, "once\(index)", segments: 6) }
        let kept = await reopened.entry(for: "popular")?.presentBytes ?? 0
        #expect(kept == 8 * 16384, "kept \(kept) bytes of the popular resource after a restart")
        try await reopened.close()
    }

    @Test("reads made without the handle (the proxy's quick hits) count as uses of exactly the segments they covered")
    func readsWithoutTheHandle() async throws {
        let directory = try TemporaryDirectory("sfifo-quick-uses")
        defer { directory.remove() }
        let store = try await SparseStore.open(directory: directory.path, options: .testing(budget: 1 << 30, eviction: .sfifo))
        try await write(store, "clip", segments: 8)
        let handle = try await store.open(key: "clip")
        await handle.noteUse(reading: [16384..<(3 * 16384), (5 * 16384)..<(5 * 16384 + 1)])
        let runs = await store.queues.runs["clip"] ?? []
        let used = runs.filter { $0.frequency > 0 }.map(\.segments)
        #expect(used == [1..<3, 5..<6], "\(runs)")
        try await handle.release()
        try await store.close()
    }
}
