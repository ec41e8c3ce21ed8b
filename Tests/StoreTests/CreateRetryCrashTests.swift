// Issue 14, item 2: the directory fsync that makes a new index's name durable fails, the caller
// retries, and commits are acknowledged. Those commits used to live in a file whose name was
// never made durable: a power cut could take the name away, and with it every acknowledged
// commit (29 of 40 simulated cuts). Since issue 18 that fsync is the first commit's. Power-loss recording is one per process, so this lives in the serialized
// power-loss suite.
import Foundation
import SparseCacheTesting
import Testing

@_spi(Locking) @testable import SparseCacheEngine
@testable import SparseCacheStore
import TestSupport
import StoreTestSupport

#if canImport(Glibc)
    import Glibc
#endif

extension StorePowerLossTests {
    /// Creation syncs no directory (DURABILITY.md rule 6): the first commit fsyncs it before its
    /// journal record. When that fsync fails, the commit fails, and the caller reopens and
    /// commits again: the reopened index must make its name durable before it acknowledges.
    @Test("the directory fsync of the first commit fails, the caller reopens and retries: every commit acknowledged after it survives a power cut")
    func directorySyncFailsAtFirstCommit() async throws {
        let base = try TemporaryDirectory("create-retry")
        defer { base.remove() }
        let live = try base.directory("live")
        let path = live + "/r.bin"
        let model = ContentModel(segmentSize: 4096, length: 12 * 4096, salt: 0xD1)
        var options = SparseFileOptions.testing(length: model.length)
        options.commitPolicy = .manual

        try PowerLoss.begin(directory: live)
        defer { PowerLoss.end() }
        // Creating the resource fsyncs nothing but the index (fdatasync): the first fsync under
        // `live` is the directory's, at the first commit.
        let syncRule = try FaultInjection.add(.fail([.fsync], errno: EIO, trigger: .nth(1), pathContains: live))
        let first = try await SparseFile.open(path, options: options)
        try await first.write(model.bytes(0, version: 0), at: model.range(0).lowerBound)
        do {
            try await first.commit()
            Issue.record("the first commit did not fail")
        } catch let error as SparseCacheError {
            #expect(error.errno == EIO, "\(error)")
        }
        FaultInjection.remove(syncRule)
        try? await first.close()

        // The caller reopens, then writes and commits segment by segment.
        let file = try await SparseFile.open(path, options: options)
        let versions = [Int](repeating: 0, count: model.segments)
        for segment in 0..<model.segments {
            try await file.write(model.bytes(segment, version: 0), at: model.range(segment).lowerBound)
            try await file.commit()
        }
        let acknowledged = Set(0..<model.segments)

        // A power cut now, many ways.
        var lost = 0
        let cuts = 40
        for seed in 0..<cuts {
            let cut = try base.directory("cut-\(seed)")
            try PowerLoss.snapshot(into: cut, seed: UInt64(seed) &* 0x9E37_79B9 &+ 7)
            var present = Set<Int>()
            if let reopened = try? await SparseFile.open(cut + "/r.bin", mode: .readOnly) {
                for run in await reopened.presentSegments() { present.formUnion(run) }
                for segment in present {
                    let bytes = try await reopened.read(offset: model.range(segment).lowerBound, length: Int(model.range(segment).count))
                    #expect(
                        bytes == model.bytes(model.range(segment), versions: versions), "cut \(seed): segment \(segment) has wrong bytes")
                }
                try await reopened.close()
            }
            if present != acknowledged { lost += 1 }
        }
        try await file.close()
        reportCounts("first commit's directory fsync fails, reopen, retry", ["power cuts": cuts, "lost commits": lost])
        #expect(lost == 0, "acknowledged commits lost in \(lost) of \(cuts) power cuts")
    }
}

extension StorePowerLossTests {
    /// Issue 14, item 6: blocks written but never committed held disk space for good after a
    /// crash (28 MiB after a kill during `write`).
    @Test("after a crash, a writable open gives back the blocks of segments written but never committed; verify --repair says how much")
    func reclaimAfterCrash() async throws {
        let base = try TemporaryDirectory("reclaim")
        defer { base.remove() }
        let live = try base.directory("live")
        let model = ContentModel(segmentSize: 4096, length: 64 * 4096, salt: 0xEC)
        let versions = [Int](repeating: 0, count: model.segments)
        var options = SparseFileOptions.testing(length: model.length)
        options.commitPolicy = .manual
        try PowerLoss.begin(directory: live)
        defer { PowerLoss.end() }
        let file = try await SparseFile.open(live + "/r.bin", options: options)
        try await file.write(model.bytes(0..<(16 * 4096), versions: versions), at: 0)
        try await file.commit()
        // 32 more segments written, never committed: then the process dies.
        try await file.write(model.bytes((16 * 4096)..<(48 * 4096), versions: versions), at: 16 * 4096)
        let crashed = try base.directory("crashed")
        try PowerLoss.snapshot(into: crashed, seed: 1, processCrash: true)
        try await file.close()

        let path = crashed + "/r.bin"
        func allocated() throws -> Int64 {
            var status = stat()
            guard stat(path, &status) == 0 else { throw RawFile.Failure(description: "stat '\(path)': errno \(errno)") }
            return Int64(status.st_blocks) * 512
        }
        let before = try allocated()
        #expect(before >= 48 * 4096, "the crash left the uncommitted blocks allocated: \(before)")
        let repaired = try await CLI.run(["verify", path, "--repair"])
        #expect(repaired.status == 0 && repaired.out.contains("reclaimed: "), "\(repaired)")
        let after = try allocated()
        #expect(after <= 16 * 4096 && after < before, "allocated \(before) -> \(after)")
        // What was committed is all there; what was not is simply missing.
        let reopened = try await SparseFile.open(path, options: .testing())
        #expect(await reopened.presentBytes == 16 * 4096 && reopened.recovery.reclaimedBytes == 0)
        #expect(try await reopened.read(offset: 0, length: 16 * 4096) == model.bytes(0..<(16 * 4096), versions: versions))
        try await reopened.close()
    }
}

extension StorePowerLossTests {
    /// Creation syncs no directory; a process that created a resource and ended before any
    /// commit leaves names that a power cut may take away. The next open that acknowledges a
    /// commit (even one with nothing pending) or a close must make them durable first.
    @Test("a resource created by an earlier open that never committed: commit() with nothing pending, and close(), leave an index a power cut cannot take away")
    func reopenedBeforeAnyCommit() async throws {
        for closing in [false, true] {
            let base = try TemporaryDirectory("reopen-uncommitted")
            defer { base.remove() }
            let live = try base.directory("live")
            let path = live + "/r.bin"
            var options = SparseFileOptions.testing(length: 64 * 4096)
            options.commitPolicy = .manual
            var reopen = options
            reopen.length = nil
            try PowerLoss.begin(directory: live)
            defer { PowerLoss.end() }
            // The first process creates the resource and ends before any commit.
            var first: SparseFile? = try await SparseFile.open(path, options: options)
            #expect(first != nil)
            first = nil
            let second = try await SparseFile.open(path, options: reopen)
            #expect(second.recovery.created == false && second.recovery.neverCommitted)
            if closing { try await second.close() } else { try await second.commit() }
            var missing = 0
            for seed in 0..<40 {
                let cut = try base.directory("cut-\(seed)")
                try PowerLoss.snapshot(into: cut, seed: UInt64(seed) &* 0x9E37_79B9 &+ 7)
                if !FileManager.default.fileExists(atPath: SparseFile.indexPath(for: cut + "/r.bin")) { missing += 1 }
            }
            if !closing { try await second.close() }
            #expect(missing == 0, "\(closing ? "close()" : "commit()") returned, then the index was missing in \(missing) of 40 power cuts")
        }
    }
}

extension StorePowerLossTests {
    /// A store's resource is made without a sync (DURABILITY.md rule 6): its index keeps a
    /// temporary name until the first commit through it, or its close. Serialized with the
    /// other fault tests: the rules below count every sync under the store's directory.
    @Test("a store's new resource: made with no sync, its index named at the first commit or the close; a poisoned one leaves no file once removed")
    func storeResourceNamedAtFirstCommit() async throws {
        let base = try TemporaryDirectory("store-naming")
        defer { base.remove() }
        let store = try await SparseStore.open(directory: base.file("cache"), options: .testing(budget: 1 << 30))
        let resources = base.file("cache") + "/resources/"
        func exists(_ name: String) -> Bool { FileManager.default.fileExists(atPath: resources + name) }
        let syncs = try FaultInjection.add(.fail([.fsync, .fdatasync], errno: EIO, trigger: .nth(1 << 30), pathContains: resources))
        defer { FaultInjection.remove(syncs) }

        let committed = try await store.open(key: "committed", length: 64 << 10)
        #expect(FaultInjection.matches(syncs) == 0, "making the resource synced \(FaultInjection.matches(syncs)) times")
        let name = try #require(await store.entry(for: "committed")).name
        #expect(exists(name + ".scidx.tmp") && !exists(name + ".scidx"), "the index is named before any commit")
        _ = try await committed.write(keyedBytes("committed", 0..<(64 << 10)), at: 0)
        try await committed.file.commit()
        #expect(!exists(name + ".scidx.tmp") && exists(name + ".scidx"))
        try await committed.release()

        // Closed before any commit: the index is named at the close, and the next open finds
        // the resource (its length with it).
        let quiet = try await store.open(key: "quiet", length: 1000)
        let quietName = try #require(await store.entry(for: "quiet")).name
        try await quiet.release()
        #expect(!exists(quietName + ".scidx.tmp") && exists(quietName + ".scidx"))
        let again = try await store.open(key: "quiet")
        #expect(await again.file.length == 1000)
        try await again.release()

        // Poisoned before its first commit (the index's sync fails): the index never takes its
        // name, and removing the resource removes its temporary index too.
        let poisoned = try await store.open(key: "poisoned", length: 64 << 10)
        let poisonedName = try #require(await store.entry(for: "poisoned")).name
        _ = try await poisoned.write(keyedBytes("poisoned", 0..<(64 << 10)), at: 0)
        let failing = try FaultInjection.add(.fail([.fdatasync], errno: EIO, trigger: .nth(1), pathContains: poisonedName))
        await #expect(throws: SparseCacheError.self) { try await poisoned.file.commit() }
        FaultInjection.remove(failing)
        try? await poisoned.release()
        #expect(exists(poisonedName + ".scidx.tmp") && !exists(poisonedName + ".scidx"))
        try await store.remove(key: "poisoned")
        let left = try FileManager.default.contentsOfDirectory(atPath: resources).filter { $0.hasPrefix(poisonedName) }
        #expect(left.isEmpty, "left behind: \(left)")
        try await store.close()
    }
}

extension StorePowerLossTests {
    /// The length a first contact learns is set before the first bytes reach the client: it
    /// waits for no I/O. The commit that names it extends the data file first.
    @Test("setLength does no I/O; the commit that names the length extends the data file before its record")
    func setLengthWaitsForTheCommit() async throws {
        let base = try TemporaryDirectory("set-length")
        defer { base.remove() }
        let path = base.file("r.bin")
        var options = SparseFileOptions.testing(length: nil)
        options.commitPolicy = .manual
        let file = try await SparseFile.open(path, options: options)
        let calls = try FaultInjection.add(.fail(FaultOperation.mutating, errno: EIO, trigger: .nth(1 << 30), pathContains: path))
        defer { FaultInjection.remove(calls) }
        let length: Int64 = 10 * 4096 + 100
        try await file.setLength(length)
        #expect(FaultInjection.matches(calls) == 0, "setLength made \(FaultInjection.matches(calls)) calls")
        #expect(try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int64 == 0)
        try await file.commit()
        #expect(try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int64 == length)
        try await file.close()
        let reopened = try await SparseFile.open(path, options: SparseFileOptions.testing(length: nil))
        #expect(await reopened.length == length)
        try await reopened.close()
    }
}
