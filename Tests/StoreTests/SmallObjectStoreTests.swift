// The small-object store (issue 21): many objects per log file, group commit, per-record
// CRC32C, a torn tail cut on open, a damaged record never served, compaction and LRU eviction.
import Foundation
import SeededRandom
import SparseCacheTesting
import Testing

@_spi(Locking) @testable import SparseCacheEngine
@testable import SparseCacheStore
import TestSupport

@Suite("Small-object store", .timeLimit(.minutes(10)))
struct SmallObjectStoreTests {
    static func body(_ key: String, version: Int = 0, count: Int = 4096) -> [UInt8] {
        var random = SplitMix64(seed: key.utf8.reduce(UInt64(version)) { $0 &* 31 &+ UInt64($1) })
        return (0..<count).map { _ in UInt8(truncatingIfNeeded: random.next()) }
    }

    static func metadata(_ key: String, version: Int = 0) -> ResourceMetadata {
        ResourceMetadata(key: key, contentType: "text/plain", etag: "\"\(version)\"", user: ["http.status": "200", "v": "\(version)"])
    }

    /// Whether `object` holds `body` (nil for none); compared here so a failure does not print
    /// kilobytes of bytes.
    static func same(_ object: SmallObject?, _ body: [UInt8]?) -> Bool { object?.body == body }

    @Test("put, read back, replace, remove; all of it survives a reopen")
    func roundTrip() async throws {
        let directory = try TemporaryDirectory("smallobj-roundtrip")
        var store = try await SmallObjectStore.open(directory: directory.path)
        for index in 0..<20 { try await store.put(key: "k\(index)", metadata: Self.metadata("k\(index)"), body: Self.body("k\(index)")) }
        try await store.put(key: "k3", metadata: Self.metadata("k3", version: 1), body: Self.body("k3", version: 1, count: 100))
        #expect(try await store.remove(key: "k4"))
        #expect(try await store.remove(key: "missing") == false)
        try await store.put(key: "empty", metadata: ResourceMetadata(), body: [])
        let read = try await store.object(for: "k7")
        #expect(read?.body == Self.body("k7") && read?.metadata == Self.metadata("k7"))
        await store.close()

        store = try await SmallObjectStore.open(directory: directory.path)
        #expect(await store.count == 20)
        #expect(Self.same(try await store.object(for: "k3"), Self.body("k3", version: 1, count: 100)))
        #expect(try await store.object(for: "k3")?.metadata == Self.metadata("k3", version: 1))
        #expect(try await store.object(for: "k4") == nil)
        #expect(try await store.object(for: "empty")?.body == [])
        for index in [0, 1, 2, 5, 19] {
            #expect(Self.same(try await store.object(for: "k\(index)"), Self.body("k\(index)")))
        }
        let report = await store.report
        #expect(report.tornTailBytes == 0 && report.damagedBytes == 0)
        // Bodies and heads of 4 KiB objects: little more than the bodies on disk.
        let disk = store.diskBytes
        #expect(disk < Int64(20 * 4096 * 13 / 10), "\(disk) bytes of logs for 20 x 4 KiB")
        await store.close()
    }

    @Test("group commit: concurrent puts share batches (one fdatasync each)")
    func groupCommit() async throws {
        let directory = try TemporaryDirectory("smallobj-group")
        let store = try await SmallObjectStore.open(directory: directory.path)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<64 {
                group.addTask { try await store.put(key: "g\(index)", metadata: Self.metadata("g\(index)"), body: Self.body("g\(index)")) }
            }
            try await group.waitForAll()
        }
        let batches = await store.batches
        #expect(batches >= 1 && batches <= 32, "64 concurrent puts took \(batches) batches")
        #expect(await store.count == 64)
        await store.close()
    }

    @Test("put of several objects: one batch; a refused object alone; a failed sync fails them all")
    func putSeveral() async throws {
        let directory = try faultScopedDirectory("smallobj-several")
        defer { directory.remove() }
        let store = try await SmallObjectStore.open(directory: directory.path)
        var writes = (0..<6).map { SmallObjectWrite(key: "s\($0)", metadata: Self.metadata("s\($0)"), body: Self.body("s\($0)")) }
        writes[2].body = [UInt8](repeating: 1, count: SmallObjectFormat.maximumBody + 1)
        writes[4].key = ""
        let before = await store.batches
        let results = await store.put(writes)
        let batches = await store.batches - before
        #expect(batches == 1, "six objects in one call took \(batches) batches")
        var sequences: [UInt64] = []
        for (index, result) in results.enumerated() {
            switch result {
            case .success(let sequence):
                #expect(index != 2 && index != 4)
                sequences.append(sequence)
                #expect(Self.same(try await store.object(for: writes[index].key), writes[index].body))
            case .failure(let error):
                #expect(index == 2 || index == 4, "\(error)")
                #expect(error.code == .invalidArgument)
            }
        }
        #expect(sequences == sequences.sorted() && Set(sequences).count == 4, "sequences in order: \(sequences)")
        #expect(try await store.object(for: "s2") == nil)

        // A failed sync: none of the batch is claimed, each gets the error.
        let rule = try FaultInjection.add(FaultRule([.fdatasync], pathContains: directory.path, trigger: .nth(1), maxFires: 1, error: EIO))
        let failed = await store.put((0..<3).map { SmallObjectWrite(key: "f\($0)", metadata: Self.metadata("f\($0)"), body: Self.body("f\($0)")) })
        FaultInjection.remove(rule)
        for result in failed {
            guard case .failure(let error) = result else {
                Issue.record("a write of a batch whose sync failed was claimed")
                continue
            }
            #expect(error.code == .io, "\(error)")
        }
        for index in 0..<3 { #expect(try await store.object(for: "f\(index)") == nil) }
        #expect(await store.count == 4)

        await store.close()
        let closed = await store.put([SmallObjectWrite(key: "late", metadata: ResourceMetadata(), body: [1])])
        guard case .failure(let error) = closed.first else {
            Issue.record("a put on a closed store succeeded")
            return
        }
        #expect(error.code == .closed)
    }

    @Test("group commit under a steady trickle: every batch waits for the delay, not only the first")
    func groupCommitTrickle() async throws {
        // A put every 200 µs or so (faster than a sync), none waiting for another: misses one
        // after another. Each batch is written a delay after its first record, so a batch
        // holds what arrived in that delay. (Before: only the first batch waited, and every
        // record that arrived while a batch synced made the next batch at once, one each.)
        let directory = try TemporaryDirectory("smallobj-trickle")
        var options = SmallObjectOptions()
        options.groupCommitDelay = .milliseconds(25)
        let store = try await SmallObjectStore.open(directory: directory.path, options: options)
        let puts = 300
        let clock = ContinuousClock()
        let started = clock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<puts {
                group.addTask { try await store.put(key: "t\(index)", metadata: Self.metadata("t\(index)"), body: Self.body("t\(index)")) }
                try await Task.sleep(for: .microseconds(200))  // pacing: a trickle of puts
            }
            try await group.waitForAll()
        }
        let elapsed = clock.now - started
        let batches = await store.batches
        // The bound follows from the time the puts took here, whatever the machine's speed:
        // at most one batch per delay, plus the one that starts at the last put.
        let bound = Int(elapsed / options.groupCommitDelay) + 2
        #expect(batches <= bound, "\(puts) puts over \(elapsed) took \(batches) batches (at most \(bound) expected)")
        #expect(await store.count == puts)
        await store.close()
    }

    @Test("a torn tail is cut on open and appends go on after it")
    func tornTail() async throws {
        let seed = testSeed(2101)
        var random = SplitMix64(seed: seed)
        for round in 0..<12 {
            let directory = try TemporaryDirectory("smallobj-torn")
            var store = try await SmallObjectStore.open(directory: directory.path)
            for index in 0..<5 { try await store.put(key: "t\(index)", metadata: Self.metadata("t\(index)"), body: Self.body("t\(index)")) }
            await store.close()
            let file = try smallObjectLogFiles(directory.path)[0]
            let size = Int64(try RawFile.read(file).count)
            let lastSize = Int64(32 + 2 + 4096 + MetadataCoding.encode(Self.metadata("t4")).count + 4)
            // Cut anywhere inside the last record, or leave it whole and add garbage after it.
            let garbage = round % 3 == 2
            if garbage {
                try RawFile.write(
                    file, offset: size, (0..<Int(1 + random.next() % 5000)).map { _ in UInt8(truncatingIfNeeded: random.next()) })
            } else {
                try RawFile.truncate(file, to: size - 1 - Int64(random.next() % UInt64(lastSize - 1)))
            }
            store = try await SmallObjectStore.open(directory: directory.path)
            #expect(await store.report.tornTailBytes > 0, "seed \(seed) round \(round)")
            #expect(Int64(try RawFile.read(file).count) == (garbage ? size : size - lastSize), "seed \(seed) round \(round)")
            for index in 0..<4 { #expect(Self.same(try await store.object(for: "t\(index)"), Self.body("t\(index)"))) }
            #expect(Self.same(try await store.object(for: "t4"), garbage ? Self.body("t4") : nil))
            try await store.put(key: "after", metadata: Self.metadata("after"), body: Self.body("after"))
            await store.close()
            store = try await SmallObjectStore.open(directory: directory.path)
            #expect(Self.same(try await store.object(for: "after"), Self.body("after")), "seed \(seed) round \(round)")
            #expect(await store.report.tornTailBytes == 0)
            await store.close()
        }
    }

    @Test("a damaged record is never served: skipped at open, dropped when read; the records after it stay")
    func damagedRecord() async throws {
        let directory = try TemporaryDirectory("smallobj-damage")
        var store = try await SmallObjectStore.open(directory: directory.path)
        for index in 0..<6 { try await store.put(key: "d\(index)", metadata: Self.metadata("d\(index)"), body: Self.body("d\(index)")) }
        let listing = await store.listing()
        await store.close()
        let file = try smallObjectLogFiles(directory.path)[0]
        func offset(_ key: String) -> Int64 { Int64(listing.first { $0.key == key }!.place.split(separator: "@")[1])! }
        // A body byte of d2, a header byte of d4.
        try RawFile.flip(file, at: offset("d2") + 32 + 2 + 100)
        try RawFile.flip(file, at: offset("d4") + 17, mask: 0x40)
        store = try await SmallObjectStore.open(directory: directory.path)
        #expect(try await store.object(for: "d2") == nil)
        #expect(try await store.object(for: "d4") == nil)
        for index in [0, 1, 3, 5] { #expect(Self.same(try await store.object(for: "d\(index)"), Self.body("d\(index)"))) }
        #expect(await store.report.damagedBytes > 0)
        // Damage after open: the read checks and drops.
        try RawFile.flip(file, at: offset("d5") + 32 + 2 + 4000)
        #expect(try await store.object(for: "d5") == nil)
        #expect(await store.damagedReads == 1)
        #expect(await store.contains("d5") == false)
        await store.close()
    }

    @Test("the body of a known record: read and checked only while the key still holds that record")
    func bodyOfKnownRecord() async throws {
        let directory = try TemporaryDirectory("smallobj-body")
        let store = try await SmallObjectStore.open(directory: directory.path)
        let first = try await store.put(key: "b", metadata: Self.metadata("b"), body: Self.body("b"))
        #expect(try await store.body(for: "b", sequence: first) == Self.body("b"))
        #expect(try await store.object(for: "b")?.sequence == first)
        let second = try await store.put(key: "b", metadata: Self.metadata("b", version: 1), body: Self.body("b", version: 1))
        #expect(second > first)
        #expect(try await store.body(for: "b", sequence: first) == nil, "the key holds a later record")
        #expect(try await store.body(for: "b", sequence: second) == Self.body("b", version: 1))
        #expect(try await store.body(for: "missing", sequence: second) == nil)
        // Damage is found as object(for:) finds it: the record is dropped, never served.
        let place = try #require(await store.listing().first { $0.key == "b" }?.place)
        let file = directory.path + "/" + place.split(separator: "@")[0]
        try RawFile.flip(file, at: Int64(place.split(separator: "@")[1])! + 32 + 1 + 200)
        #expect(try await store.body(for: "b", sequence: second) == nil)
        #expect(await store.damagedReads == 1)
        #expect(await store.contains("b") == false)
        #expect(try await store.remove(key: "b") == false)
        await store.close()
    }

    @Test("fuzzed log files: open never fails or traps, and what it serves is what was stored")
    func fuzz() async throws {
        try await offPool("log-fuzz") { try await self.fuzzOnItsThread() }
    }

    /// The body of ``fuzz()``, on a thread of its own (OffPool.swift).
    private func fuzzOnItsThread() async throws {
        let seed = testSeed(2102)
        var random = SplitMix64(seed: seed)
        let rounds = Int(ProcessInfo.processInfo.environment["SPARSECACHE_FUZZ_ROUNDS"] ?? "") ?? 60
        let directory = try TemporaryDirectory("smallobj-fuzz")
        let pristine = directory.file("pristine")
        var store = try await SmallObjectStore.open(directory: pristine)
        var stored: [String: [UInt8]] = [:]
        for index in 0..<24 {
            let body = Self.body("f\(index)", count: Int(random.next() % 9000))
            try await store.put(key: "f\(index)", metadata: Self.metadata("f\(index)"), body: body)
            stored["f\(index)"] = body
        }
        await store.close()
        let original = try RawFile.read(try smallObjectLogFiles(pristine)[0])
        for round in 0..<rounds {
            let copy = try directory.directory("round\(round)")
            var bytes = original
            switch random.next() % 4 {
            case 0:  // bit flips anywhere, header included
                for _ in 0..<(1 + random.next() % 8) { bytes[Int(random.next() % UInt64(bytes.count))] ^= UInt8(1 << (random.next() % 8)) }
            case 1:  // truncation
                bytes = Array(bytes.prefix(Int(random.next() % UInt64(bytes.count))))
            case 2:  // a run of garbage over some records
                let start = Int(random.next() % UInt64(bytes.count)), count = Int(random.next() % 6000)
                for index in start..<min(bytes.count, start + count) { bytes[index] = UInt8(truncatingIfNeeded: random.next()) }
            default:  // a run of zeros (a hole a power cut left)
                let start = Int(random.next() % UInt64(bytes.count)), count = Int(random.next() % 10000)
                for index in start..<min(bytes.count, start + count) { bytes[index] = 0 }
            }
            try RawFile.replace(copy + "/" + SmallObjectFormat.fileName(id: 1), with: bytes)
            store = try await SmallObjectStore.open(directory: copy)
            for (key, body) in stored {
                if let object = try await store.object(for: key) {
                    #expect(
                        object.body == body && object.metadata == Self.metadata(key), "seed \(seed) round \(round): \(key) served wrong")
                }
            }
            // And it takes new objects.
            try await store.put(key: "new", metadata: ResourceMetadata(), body: [1, 2, 3])
            #expect(try await store.object(for: "new")?.body == [1, 2, 3])
            await store.close()
            try? FileManager.default.removeItem(atPath: copy)
        }
    }

    @Test("compaction reclaims removed objects; removals and replacements stay across it and a reopen")
    func compaction() async throws {
        let directory = try TemporaryDirectory("smallobj-compact")
        var options = SmallObjectOptions()
        options.maximumFileSize = 64 * 1024
        var store = try await SmallObjectStore.open(directory: directory.path, options: options)
        let target = store
        for index in 0..<100 { try await store.put(key: "c\(index)", metadata: Self.metadata("c\(index)"), body: Self.body("c\(index)")) }
        let full = store.diskBytes
        #expect(try smallObjectLogFiles(directory.path).count > 4)
        // Removed together: a few group commits, not 80 (a loaded machine syncs slowly).
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<100 where index % 5 != 0 { group.addTask { try await target.remove(key: "c\(index)") } }
            try await group.waitForAll()
        }
        try await store.put(key: "c0", metadata: Self.metadata("c0", version: 2), body: Self.body("c0", version: 2))
        // Removals start compaction in the background: files mostly dead are rewritten.
        while let compacting = await store.compacting { await compacting.value }
        let compacted = store.diskBytes
        #expect(compacted < full / 2, "\(compacted) of \(full) bytes left after removing 80%")
        let damaged = await store.damagedReads
        #expect(await store.count == 20, "damaged reads \(damaged)")
        await store.close()
        store = try await SmallObjectStore.open(directory: directory.path, options: options)
        #expect(await store.count == 20)
        #expect(Self.same(try await store.object(for: "c0"), Self.body("c0", version: 2)))
        for index in 0..<100 {
            let object = try await store.object(for: "c\(index)")
            if index % 5 == 0 {
                if index > 0 { #expect((object?.body == Self.body("c\(index)")) == true, "c\(index)") }
            } else {
                #expect(object == nil, "c\(index) came back after its removal")
            }
        }
        await store.close()
    }

    @Test("eviction drops the least recently used objects first and frees their disk")
    func lruEviction() async throws {
        let directory = try TemporaryDirectory("smallobj-lru")
        var options = SmallObjectOptions()
        options.maximumFileSize = 32 * 1024
        let store = try await SmallObjectStore.open(directory: directory.path, options: options)
        for index in 0..<40 { try await store.put(key: "e\(index)", metadata: Self.metadata("e\(index)"), body: Self.body("e\(index)")) }
        // Used recently: the first ten.
        for index in 0..<10 { _ = try await store.object(for: "e\(index)") }
        let before = store.diskBytes
        let dropped = try await store.evict(bytes: before / 2)
        #expect(!dropped.isEmpty)
        #expect(Set(dropped).isDisjoint(with: (0..<10).map { "e\($0)" }), "recently used objects were evicted: \(dropped)")
        #expect(store.diskBytes <= before - before / 2 + 64 * 1024, "\(store.diskBytes) of \(before)")
        for index in 0..<10 { #expect(Self.same(try await store.object(for: "e\(index)"), Self.body("e\(index)"))) }
        // A goal out of reach (nothing used before the cutoff, every record live) ends: it
        // once copied live records from file to file for ever.
        let left = await store.count
        let none = try await store.evict(bytes: .max / 2, olderThan: 0)
        let after = await store.count
        #expect(none.isEmpty && after == left)
        await store.close()
    }
}
