// A crash or a power cut at every I/O call of a store eviction. Power-loss recording is one
// per process, so this lives in the serialized power-loss suite.
import Foundation
import SparseCacheTesting
import Testing

@_spi(Locking) @testable import SparseCacheEngine
@testable import SparseCacheStore
import TestSupport
import StoreTestSupport

extension StorePowerLossTests {
    /// The directories of a crash sweep: the store's, and one for the power-cut snapshots.
    private static func sweepDirectories(_ label: String) throws -> (directory: TemporaryDirectory, snapshots: TemporaryDirectory) {
        (try TemporaryDirectory("store-\(label)-crash"), try TemporaryDirectory("store-\(label)-snapshots"))
    }

    /// Saves the store's catalog, then runs `evict` with every unsynced change to the files
    /// under `directory/resources` recorded and a power-cut snapshot (8 variants of `seed`)
    /// written into `snapshots` before each call there. The catalog as saved, and what `evict`
    /// returned.
    private static func evictRecordingPowerCuts<T>(
        _ store: SparseStore, in directory: TemporaryDirectory, snapshots: TemporaryDirectory, seed: UInt64,
        _ evict: () async throws -> T
    ) async throws -> (catalog: Data, evicted: T) {
        try await store.saveCatalog()
        let catalog = try Data(contentsOf: URL(fileURLWithPath: directory.path + "/catalog"))
        let resources = directory.path + "/resources"
        try PowerLoss.begin(directory: resources)
        let rule = try PowerLoss.snapshotBefore(pathContains: resources, into: snapshots.path, variants: 8, seed: seed)
        defer {
            FaultInjection.remove(rule)
            PowerLoss.end()
        }
        return (catalog, try await evict())
    }

    /// Opens each power-cut snapshot in `snapshots` as the resources directory of a store
    /// (`options`) beside `catalog`, in a directory of its own, and hands it to `check`, which
    /// closes it. How many snapshots there were.
    private static func forEachPowerCut(
        in snapshots: TemporaryDirectory, catalog: Data, label: String, options: StoreOptions,
        _ check: (_ snapshot: String, _ reopened: SparseStore, _ trial: TemporaryDirectory) async throws -> Void
    ) async throws -> Int {
        let names = try FileManager.default.contentsOfDirectory(atPath: snapshots.path).sorted()
        for snapshot in names {
            let trial = try TemporaryDirectory("store-\(label)-trial")
            defer { trial.remove() }
            try FileManager.default.copyItem(atPath: snapshots.path + "/" + snapshot, toPath: trial.path + "/resources")
            try catalog.write(to: URL(fileURLWithPath: trial.path + "/catalog"))
            try await check(snapshot, try await SparseStore.open(directory: trial.path, options: options), trial)
        }
        return names.count
    }

    @Test("a crash or power cut at any call of an eviction: no resource claims missing data")
    func crashDuringEviction() async throws {
        try await offPool("eviction-crash") { try await self.crashDuringEvictionOnItsThread() }
    }

    /// The body of ``crashDuringEviction()``, on a thread of its own (OffPool.swift).
    private func crashDuringEvictionOnItsThread() async throws {
        let (directory, snapshots) = try Self.sweepDirectories("evict")
        defer { directory.remove(); snapshots.remove() }
        let length: Int64 = 40 << 10
        let keys = (0..<6).map { "video-\($0)" }
        let store = try await SparseStore.open(directory: directory.path, options: .testing(budget: 10 << 20))
        for key in keys { try await fill(store, key: key, length: length) }

        // Evict the three least recently used, recording every unsynced change to the files.
        let summary = await store.summary()
        let victims = summary.entries.prefix(3)
        let target = summary.allocatedBytes - victims.reduce(0) { $0 + $1.allocatedBytes }
        let (catalog, evicted) = try await Self.evictRecordingPowerCuts(store, in: directory, snapshots: snapshots, seed: 0xE71C) {
            try await store.evict(toSize: target)
        }
        try await store.close()
        #expect(evicted == victims.map(\.key))

        var violations = 0
        // Each snapshot as the resources directory of a store whose catalog predates the
        // eviction (its save after the eviction may not have happened either).
        let points = try await Self.forEachPowerCut(in: snapshots, catalog: catalog, label: "evict", options: .testing(budget: 10 << 20)) {
            snapshot, reopened, trial in
            let listed = await reopened.summary().entries
            for entry in listed {
                let handle = try await reopened.open(key: entry.key, length: length)
                let present = await handle.file.presentBytes
                let bytes = try await handle.read(offset: 0, length: Int(length))
                try await handle.release()
                if present != length || bytes != keyedBytes(entry.key, 0..<length) {
                    violations += 1
                    Issue.record("\(snapshot): '\(entry.key)' is listed but holds \(present) of \(length) bytes or wrong bytes")
                }
            }
            let kept = Set(keys).subtracting(evicted)
            let missing = kept.subtracting(listed.map(\.key))
            if !missing.isEmpty {
                violations += 1
                Issue.record("\(snapshot): resources that were never evicted are gone: \(missing.sorted())")
            }
            try await reopened.close()
            // Start-up cleans up after the crash: only the listed resources' files remain.
            let expected = Set(listed.flatMap { [$0.name, $0.name + SparseFile.indexSuffix] })
            let found = Set(try FileManager.default.contentsOfDirectory(atPath: trial.path + "/resources"))
            if found != expected {
                violations += 1
                Issue.record("\(snapshot): leftovers after start-up: \(found.subtracting(expected).sorted()); missing: \(expected.subtracting(found).sorted())")
            }
        }
        reportCounts("store eviction crashes", ["snapshots": points, "violations": violations])
        #expect(points >= 8, "the eviction made no recorded call")
        #expect(violations == 0)
    }

    @Test("a crash or power cut at any call of an sfifo eviction (segment runs dropped from closed resources): every claimed byte reads back")
    func crashDuringSegmentEviction() async throws {
        try await offPool("sfifo-eviction-crash") { try await self.crashDuringSegmentEvictionOnItsThread() }
    }

    /// The body of ``crashDuringSegmentEviction()``, on a thread of its own (OffPool.swift).
    private func crashDuringSegmentEvictionOnItsThread() async throws {
        let (directory, snapshots) = try Self.sweepDirectories("sfifo")
        defer { directory.remove(); snapshots.remove() }
        let length: Int64 = 160 << 10
        let keys = (0..<6).map { "video-\($0)" }
        let options = StoreOptions.testing(budget: 10 << 20, eviction: .sfifo)
        let store = try await SparseStore.open(directory: directory.path, options: options)
        for key in keys { try await fill(store, key: key, length: length) }
        // Two resources read again: their runs move on to the main queue, the others' tails go.
        for key in keys.prefix(2) {
            let handle = try await store.open(key: key)
            _ = try await handle.read(offset: 0, length: Int(length))
            try await handle.release()
        }
        let before = await store.allocatedBytes
        let (catalog, _) = try await Self.evictRecordingPowerCuts(store, in: directory, snapshots: snapshots, seed: 0x5F1F) {
            // Half a resource's worth: tails of runs, not whole resources.
            try await store.evict(toSize: before - 2 * length - length / 2)
        }
        var untouched: Set<String> = []
        for key in keys where await store.entry(for: key)?.presentBytes == length { untouched.insert(key) }
        let partial = await store.summary().entries.filter { $0.presentBytes > 0 && $0.presentBytes < length }.count
        try await store.close()
        #expect(partial > 0, "the eviction dropped no run from inside a resource")

        var violations = 0
        let points = try await Self.forEachPowerCut(in: snapshots, catalog: catalog, label: "sfifo", options: options) { snapshot, reopened, _ in
            for entry in await reopened.summary().entries {
                let handle = try await reopened.open(key: entry.key, length: length)
                let segment = Int64(handle.file.segmentSize)
                var present: Int64 = 0
                for run in await handle.file.presentSegments() {
                    let range = Int64(run.lowerBound) * segment..<min(length, Int64(run.upperBound) * segment)
                    let bytes = try await handle.read(offset: range.lowerBound, length: Int(range.count))
                    present += Int64(bytes.count)
                    if bytes != keyedBytes(entry.key, range) {
                        violations += 1
                        Issue.record("\(snapshot): '\(entry.key)' claims \(range) but reads other bytes")
                    }
                }
                try await handle.release()
                if untouched.contains(entry.key), present != length {
                    violations += 1
                    Issue.record("\(snapshot): '\(entry.key)' was never evicted from but holds \(present) of \(length) bytes")
                }
            }
            let listed = Set(await reopened.summary().entries.map(\.key))
            if !untouched.isSubset(of: listed) {
                violations += 1
                Issue.record("\(snapshot): resources never evicted from are gone: \(untouched.subtracting(listed).sorted())")
            }
            try await reopened.close()
        }
        reportCounts("store sfifo eviction crashes", ["snapshots": points, "violations": violations])
        #expect(points >= 4, "the eviction made no recorded call")
        #expect(violations == 0)
    }
}
