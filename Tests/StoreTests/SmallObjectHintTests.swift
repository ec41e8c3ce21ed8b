// Hint files of the small-object store (issue 21, "the catalog scales"): a sealed log gets a
// hint, open reads the hints instead of the logs' bodies, and a hint is only ever a faster way
// to the same index: a damaged, foreign or stale hint falls back to a full scan of its log,
// and a hint naming a record that is not there costs a miss, never a wrong answer.
import Foundation
import SeededRandom
import Testing

@_spi(Locking) @testable import SparseCacheEngine
@testable import SparseCacheStore
import TestSupport
import StoreTestSupport

@Suite("Small-object hint files", .timeLimit(.minutes(10)))
struct SmallObjectHintTests {
    static var options: SmallObjectOptions {
        var options = SmallObjectOptions()
        options.maximumFileSize = 32 * 1024
        options.groupCommitDelay = .zero
        return options
    }

    static func files(_ directory: String, _ suffix: String) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasSuffix(suffix) }.sorted()
    }

    /// Fills `directory` with 60 objects over several sealed logs, replaces and removes some;
    /// returns what each key must hold (nil: removed).
    static func fill(_ directory: String, seed: UInt64) async throws -> [String: [UInt8]?] {
        var random = SplitMix64(seed: seed)
        let store = try await SmallObjectStore.open(directory: directory, options: options)
        var expected: [String: [UInt8]?] = [:]
        for index in 0..<60 {
            let key = "http://origin.example/objects/\(index)"
            let body = SmallObjectStoreTests.body(key, count: 500 + Int(random.next() % 4000))
            try await store.put(key: key, metadata: SmallObjectStoreTests.metadata(key), body: body)
            expected[key] = body
        }
        for index in stride(from: 0, to: 60, by: 7) {
            let key = "http://origin.example/objects/\(index)"
            let body = SmallObjectStoreTests.body(key, version: 1, count: 300)
            try await store.put(key: key, metadata: SmallObjectStoreTests.metadata(key, version: 1), body: body)
            expected[key] = body
        }
        for index in stride(from: 3, to: 60, by: 11) {
            let key = "http://origin.example/objects/\(index)"
            try await store.remove(key: key)
            expected[key] = .some(nil)
        }
        while let compacting = await store.compacting { await compacting.value }
        await store.close()
        return expected
    }

    /// Opens `directory` and checks every key: `lossless` demands every object be there (the
    /// logs are intact); otherwise a missing object is allowed, a wrong one never.
    static func check(_ directory: String, _ expected: [String: [UInt8]?], lossless: Bool, context: String) async throws
        -> SmallObjectStore.OpenReport
    {
        let store = try await SmallObjectStore.open(directory: directory, options: options)
        for (key, body) in expected {
            let object = try await store.object(for: key)
            if let body {
                if let object {
                    #expect(object.body == body && object.key == key, "\(context): \(key) served wrong bytes")
                } else {
                    #expect(!lossless, "\(context): \(key) lost")
                }
            } else {
                #expect(object == nil, "\(context): removed \(key) came back")
            }
        }
        let report = await store.report
        await store.close()
        return report
    }

    @Test("sealed logs get hints; open reads them instead of the logs and finds exactly what a full scan finds")
    func sealedLogsGetHints() async throws {
        let directory = try TemporaryDirectory("hint-basic")
        defer { directory.remove() }
        let expected = try await Self.fill(directory.path, seed: 2101)
        let logs = try Self.files(directory.path, ".sco"), hints = try Self.files(directory.path, ".sch")
        #expect(logs.count >= 4, "\(logs)")
        // Every log but the one appended to has its hint, and no hint outlives its log.
        #expect(hints.count == logs.count - 1, "logs \(logs), hints \(hints)")
        #expect(hints.allSatisfy { logs.contains(String($0.dropLast(4)) + ".sco") })

        let hinted = try await Self.check(directory.path, expected, lossless: true, context: "with hints")
        #expect(hinted.hintedFiles == logs.count - 1 && hinted.scannedFiles == 1, "\(hinted)")
        let withHints = try await SmallObjectStore.open(directory: directory.path, options: Self.options)
        let listed = Dictionary(uniqueKeysWithValues: await withHints.listing().map { ($0.key, $0.place) })
        await withHints.close()

        // The same store without its hints: every log scanned whole, the same index.
        for hint in try Self.files(directory.path, ".sch") { try FileManager.default.removeItem(atPath: directory.file(hint)) }
        let scanned = try await SmallObjectStore.open(directory: directory.path, options: Self.options)
        #expect(await scanned.report.hintedFiles == 0)
        let full = Dictionary(uniqueKeysWithValues: await scanned.listing().map { ($0.key, $0.place) })
        #expect(full == listed)
        await scanned.close()
        // That open wrote the hints again for the sealed logs.
        #expect(try Self.files(directory.path, ".sch").count == hints.count)
        // And the read-only listing of `ls` agrees.
        let inspected = try SmallObjectStore.inspectEntries(directory: directory.path)
        #expect(Set(inspected.map(\.key)) == Set(listed.keys))
    }

    @Test("a damaged hint (flipped bits, cut, garbage, another log's, a stale size) falls back to a full scan of its log: nothing lost")
    func damagedHintFallsBack() async throws {
        try await offPool("hint-damage") { try await self.damagedHintFallsBackOnItsThread() }
    }

    /// The body of ``damagedHintFallsBack()``, on a thread of its own (OffPool.swift).
    private func damagedHintFallsBackOnItsThread() async throws {
        let seed = testSeed(2103)
        var random = SplitMix64(seed: seed)
        let rounds = Int(ProcessInfo.processInfo.environment["SPARSECACHE_FUZZ_ROUNDS"] ?? "") ?? 40
        let base = try TemporaryDirectory("hint-fuzz")
        defer { base.remove() }
        let pristine = base.file("pristine")
        let expected = try await Self.fill(pristine, seed: seed)
        let hints = try Self.files(pristine, ".sch")
        #expect(hints.count >= 3)
        for round in 0..<rounds {
            let copy = base.file("round\(round)")
            try FileManager.default.copyItem(atPath: pristine, toPath: copy)
            let victim = hints[Int(random.next() % UInt64(hints.count))]
            var bytes = try RawFile.read(copy + "/" + victim)
            let damage = random.next() % 5
            switch damage {
            case 0:
                for _ in 0..<(1 + random.next() % 8) { bytes[Int(random.next() % UInt64(bytes.count))] ^= UInt8(1 << (random.next() % 8)) }
            case 1:
                bytes = Array(bytes.prefix(Int(random.next() % UInt64(bytes.count))))
            case 2:
                let start = Int(random.next() % UInt64(bytes.count)), count = 1 + Int(random.next() % 200)
                for index in start..<min(bytes.count, start + count) { bytes[index] = UInt8(truncatingIfNeeded: random.next()) }
            case 3:
                // Another log's hint under this name: its id and salt are not this log's.
                let other = hints.first { $0 != victim }!
                bytes = try RawFile.read(copy + "/" + other)
            default:
                // The log grew after its hint was made (it must then not be trusted).
                let log = copy + "/" + String(victim.dropLast(4)) + ".sco"
                try RawFile.write(log, offset: try RawFile.size(log), [1, 2, 3, 4])
            }
            if damage != 4 { try RawFile.replace(copy + "/" + victim, with: bytes) }
            let report = try await Self.check(copy, expected, lossless: true, context: "seed \(seed) round \(round) damage \(damage)")
            // The victim's hint is refused (its log scanned whole beside the one appended to),
            // the others are used.
            #expect(report.hintedFiles == hints.count - 1 && report.scannedFiles == 2, "seed \(seed) round \(round): \(report)")
            try? FileManager.default.removeItem(atPath: copy)
        }
    }

    @Test("a hint naming a record that is not there, or one whose record was damaged since: not served, the rest is")
    func hintNamingMissingRecord() async throws {
        let directory = try TemporaryDirectory("hint-lies")
        defer { directory.remove() }
        let expected = try await Self.fill(directory.path, seed: 2104)
        let hint = try Self.files(directory.path, ".sch")[0]
        let id = SmallObjectHint.logID(fromName: hint)!
        guard case .success(let decoded) = SmallObjectHint.decode(try RawFile.read(directory.file(hint))) else {
            Issue.record("the hint written does not decode")
            return
        }
        var scan = decoded.0
        let live = Set(expected.compactMap { $0.value == nil ? nil : $0.key })
        let liars = scan.records.indices.filter { scan.records[$0].kind == .object && live.contains(scan.records[$0].key) }.prefix(3)
        #expect(liars.count == 3)
        let first = liars[liars.startIndex], second = liars[liars.startIndex + 1], third = liars[liars.startIndex + 2]
        // First: a key the log does not hold at that place (a well-formed, checksummed lie).
        let invented = "http://origin.example/never-stored"
        scan.records[first].key = invented
        // Second: its sequence is not the record's.
        scan.records[second].sequence += 1_000_000
        try SmallObjectHint.write(scan, size: decoded.size, directory: directory.path, syncDirectory: true)
        // Third: the record's body is damaged on disk after the hint was made.
        let log = directory.file(SmallObjectFormat.fileName(id: id))
        let place = scan.records[third].offset + Int64(scan.records[third].recordCount) - 8
        try RawFile.write(log, offset: place, [~(try RawFile.read(log, offset: place, count: 1)[0])])

        let store = try await SmallObjectStore.open(directory: directory.path, options: Self.options)
        #expect(await store.report.hintedFiles >= 1)
        #expect(try await store.object(for: invented) == nil)
        var missing: [String] = []
        for (key, body) in expected {
            guard let body else {
                #expect(try await store.object(for: key) == nil)
                continue
            }
            if let object = try await store.object(for: key) {
                #expect(object.body == body, "\(key) served wrong bytes")
            } else {
                missing.append(key)
            }
        }
        // The three whose hint entries lie or whose record is damaged are misses (the first
        // one's key is simply unknown); nothing else is lost.
        let named = [scan.records[second].key, scan.records[third].key, decoded.0.records[first].key]
        #expect(Set(missing).isSubset(of: Set(named)), "missing \(missing)")
        #expect(missing.contains(scan.records[second].key) && missing.contains(scan.records[third].key))
        #expect(await store.damagedReads >= 2)
        await store.close()
    }

    @Test("a log with a hint is never appended to again: the next open starts a new log and the hint stays valid")
    func hintedLogStaysSealed() async throws {
        let directory = try TemporaryDirectory("hint-sealed")
        defer { directory.remove() }
        var options = Self.options
        options.maximumFileSize = 1 << 20
        var store = try await SmallObjectStore.open(directory: directory.path, options: options)
        for index in 0..<5 { try await store.put(key: "k\(index)", metadata: ResourceMetadata(), body: [UInt8](repeating: 7, count: 100)) }
        await store.close()
        let newest = try Self.files(directory.path, ".sco").last!
        let id = SmallObjectFormat.fileID(fromName: newest)!
        // The newest log gets a hint (as if it had been sealed just before a stop).
        let bytes = try RawFile.read(directory.file(newest))
        guard case .success(let scan) = SmallObjectLogScan.scan(bytes) else {
            Issue.record("the log does not scan")
            return
        }
        try SmallObjectHint.write(scan, size: Int64(bytes.count), directory: directory.path, syncDirectory: true)
        store = try await SmallObjectStore.open(directory: directory.path, options: options)
        #expect(await store.report.hintedFiles == 1)
        try await store.put(key: "after", metadata: ResourceMetadata(), body: [1, 2, 3])
        await store.close()
        #expect(try RawFile.read(directory.file(newest)) == bytes, "a hinted log was appended to")
        store = try await SmallObjectStore.open(directory: directory.path, options: options)
        let reopened = await store.report
        #expect(reopened.hintedFiles == 1, "\(reopened)")
        #expect(try await store.object(for: "after")?.body == [1, 2, 3])
        #expect(try await store.object(for: "k4")?.body == [UInt8](repeating: 7, count: 100))
        #expect(await store.listing().first { $0.key == "after" }?.place.hasPrefix(SmallObjectFormat.fileName(id: id)) == false)
        await store.close()
    }

    @Test("stale hints go at open: a temporary one, one whose log is gone; compaction deletes a log's hint with it")
    func staleHintsGo() async throws {
        let directory = try TemporaryDirectory("hint-stale")
        defer { directory.remove() }
        let expected = try await Self.fill(directory.path, seed: 2105)
        let orphan = SmallObjectHint.fileName(id: 0xFFF0)
        try RawFile.replace(directory.file(orphan), with: [1, 2, 3])
        let temporary = String(SmallObjectHint.fileName(id: 1).dropLast(4)) + SmallObjectHint.temporaryExtension
        try RawFile.replace(directory.file(temporary), with: [4, 5, 6])
        _ = try await Self.check(directory.path, expected, lossless: true, context: "stale hints")
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path)
        #expect(!names.contains(orphan) && !names.contains(temporary), "\(names.sorted())")

        // Remove most objects: compaction deletes the mostly dead logs, hints with them.
        let store = try await SmallObjectStore.open(directory: directory.path, options: Self.options)
        for key in expected.keys.sorted().prefix(50) { try await store.remove(key: key) }
        while let compacting = await store.compacting { await compacting.value }
        _ = try await store.evict(bytes: 1 << 30)
        await store.close()
        let logs = try Self.files(directory.path, ".sco"), hints = try Self.files(directory.path, ".sch")
        #expect(hints.allSatisfy { logs.contains(String($0.dropLast(4)) + ".sco") }, "logs \(logs), hints \(hints)")
    }

    @Test("one index entry is 32 bytes beside its key (a dictionary slot of 48)")
    func locationIsPacked() {
        #expect(MemoryLayout<SmallObjectStore.Location>.size == 32)
        #expect(MemoryLayout<SmallObjectStore.Location>.stride == 32)
    }

    /// Descriptors of this process open on a log file of `directory`.
    static func openLogs(_ directory: String) -> Int {
        let links = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return links.filter { fd in
            let target = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + fd)) ?? ""
            return target.hasPrefix(directory + "/") && target.hasSuffix(".sco")
        }.count
    }

    @Test("log descriptors stay within maximumOpenLogs: reading every log in turn closes the least recently used and reopens on demand")
    func logDescriptorsBounded() async throws {
        let seed = testSeed(2106)
        var random = SplitMix64(seed: seed)
        let directory = try TemporaryDirectory("hint-descriptors")
        defer { directory.remove() }
        var options = Self.options
        options.maximumFileSize = 16 * 1024
        options.maximumOpenLogs = 2
        var store = try await SmallObjectStore.open(directory: directory.path, options: options)
        var bodies: [String: [UInt8]] = [:]
        for index in 0..<40 {
            let key = "k\(index)"
            bodies[key] = SmallObjectStoreTests.body(key, count: 3000)
            try await store.put(key: key, metadata: ResourceMetadata(), body: bodies[key]!)
            #expect(store.openLogDescriptors <= 2)
        }
        await store.close()
        #expect(Self.openLogs(directory.path) == 0, "a closed store holds no log")
        #expect(try Self.files(directory.path, ".sco").count >= 8)

        store = try await SmallObjectStore.open(directory: directory.path, options: options)
        for key in bodies.keys.sorted().shuffled(using: &random) {
            let object = try await store.object(for: key)
            #expect(object?.body == bodies[key], "seed \(seed): \(key)")
            #expect(
                store.openLogDescriptors <= 2 && Self.openLogs(directory.path) <= 2,
                "seed \(seed): \(Self.openLogs(directory.path)) logs open")
        }
        #expect(store.descriptors.opens > 2, "the evicted descriptors were opened again")
        await store.close()
    }
}
