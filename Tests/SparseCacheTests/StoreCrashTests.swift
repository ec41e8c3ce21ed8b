// A crash or a power cut at every I/O call of a store eviction. Power-loss recording is one
// per process, so this lives in the serialized power-loss suite.
import Foundation
import SparseCacheTesting
import Testing

@testable import HTTPCache
@testable import SparseCacheEngine
@testable import SparseCacheStore
@testable import SparseHTTP

extension CrashPowerLossTests {
    @Test("a crash or power cut at any call of an eviction: no resource claims missing data")
    func crashDuringEviction() async throws {
        try await offPool("eviction-crash") { try await self.crashDuringEvictionOnItsThread() }
    }

    /// The body of ``crashDuringEviction()``, on a thread of its own (OffPool.swift).
    private func crashDuringEvictionOnItsThread() async throws {
        let directory = try TemporaryDirectory("store-evict-crash")
        defer { directory.remove() }
        let snapshots = try TemporaryDirectory("store-evict-snapshots")
        defer { snapshots.remove() }
        let length: Int64 = 40 << 10
        let keys = (0..<6).map { "video-\($0)" }
        let store = try await SparseStore.open(directory: directory.path, options: .testing(budget: 10 << 20))
        for key in keys { try await fill(store, key: key, length: length) }
        try await store.saveCatalog()
        let catalog = try Data(contentsOf: URL(fileURLWithPath: directory.path + "/catalog"))

        // Evict the three least recently used, recording every unsynced change to the files.
        let summary = await store.summary()
        let victims = summary.entries.prefix(3)
        let target = summary.allocatedBytes - victims.reduce(0) { $0 + $1.allocatedBytes }
        let resources = directory.path + "/resources"
        try PowerLoss.begin(directory: resources)
        let rule = try PowerLoss.snapshotBefore(pathContains: resources, into: snapshots.path, variants: 8, seed: 0xE71C)
        let evicted: [String]
        do {
            evicted = try await store.evict(toSize: target)
        } catch {
            FaultInjection.remove(rule)
            PowerLoss.end()
            throw error
        }
        FaultInjection.remove(rule)
        PowerLoss.end()
        try await store.close()
        #expect(evicted == victims.map(\.key))

        var points = 0
        var violations = 0
        for snapshot in try FileManager.default.contentsOfDirectory(atPath: snapshots.path).sorted() {
            points += 1
            // The snapshot as the resources directory of a store whose catalog predates the
            // eviction (its save after the eviction may not have happened either).
            let trial = try TemporaryDirectory("store-evict-trial")
            defer { trial.remove() }
            try FileManager.default.copyItem(atPath: snapshots.path + "/" + snapshot, toPath: trial.path + "/resources")
            try catalog.write(to: URL(fileURLWithPath: trial.path + "/catalog"))
            let reopened = try await SparseStore.open(directory: trial.path, options: .testing(budget: 10 << 20))
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
}
