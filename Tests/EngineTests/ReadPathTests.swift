// Reads take two paths: the page cache on the caller's task (preadv2 with RWF_NOWAIT, which
// never waits for the device) and the DispatchIO channel for whatever is not cached. Both must
// return the same bytes and catch the same damage, alone and when one read is split between
// them.
import CShim
import Foundation
import SeededRandom
import Testing

@_spi(Locking) @testable import SparseCacheEngine

#if canImport(Glibc)
import Glibc
import SparseCacheTesting
import TestSupport
#endif

@Suite("Read paths: page cache first, DispatchIO for the rest")
struct ReadPathTests {
    static let segment = 16384
    static let length = Int64(64 * segment) - 777

    /// A complete resource with a short last segment.
    static func makeResource(_ path: String, salt: UInt64) async throws {
        let file = try await SparseFile.open(path, options: .testing(segmentSize: segment, length: length))
        try await file.write(sourceBytes(0..<length, salt: salt), at: 0)
        try await file.close()
    }

    static func randomReads(_ file: SparseFile, salt: UInt64, seed: UInt64, count: Int) async throws -> Int {
        var random = SplitMix64(seed: seed)
        var wrong = 0
        for _ in 0..<count {
            let start = Int64.random(in: 0..<length, using: &random)
            let end = min(length, start + Int64(Int.random(in: 1...(5 * segment), using: &random)))
            let bytes = try await file.read(offset: start, length: Int(end - start))
            if bytes != sourceBytes(start..<end, salt: salt) { wrong += 1 }
        }
        return wrong
    }

    @Test("cached bytes come from the page cache; the same reads with the fast path off come through the channel")
    func bothPathsSameBytes() async throws {
        try await withTemporaryDirectory("read-paths") { directory in
            let path = directory.file("r.bin")
            try await Self.makeResource(path, salt: 5)
            for pageCacheFirst in [true, false] {
                var options = SparseFileOptions()
                options.readsFromPageCacheFirst = pageCacheFirst
                let file = try await SparseFile.open(path, mode: .readOnly, options: options)
                let wrong = try await Self.randomReads(file, salt: 5, seed: 77, count: 300)
                #expect(wrong == 0, "page cache first: \(pageCacheFirst)")
                let statistics = await file.readStatistics
                if pageCacheFirst {
                    // Not all: the kernel may evict a few pages, or RWF_NOWAIT may find one
                    // locked, while other suites run (a CI run sent 96 KiB of 16 MiB through the
                    // channel). Those bytes fall back to the channel, which is the design.
                    #expect(statistics.fromPageCache > 0, "\(statistics)")
                    #expect(statistics.fromPageCache >= 9 * statistics.throughChannel, "most bytes from the page cache: \(statistics)")
                } else {
                    #expect(statistics.fromPageCache == 0 && statistics.throughChannel > 0, "\(statistics)")
                }
                try await file.close()
            }
        }
    }

    @Test("bytes not in the page cache go through the channel, and a read split between the paths is whole")
    func uncachedAndSplitReads() async throws {
        try await withTemporaryDirectory("read-split") { directory in
            let path = directory.file("r.bin")
            try await Self.makeResource(path, salt: 9)
            try RawFile.dropPageCache(path)
            let file = try await SparseFile.open(path, mode: .readOnly)
            // Bring only the middle into the cache, so reads across its edges are split.
            let middle = Int64(20 * Self.segment)..<Int64(40 * Self.segment)
            _ = try await file.read(offset: middle.lowerBound, length: Int(middle.count))
            let across = Int64(10 * Self.segment)..<Int64(50 * Self.segment)
            let bytes = try await file.read(offset: across.lowerBound, length: Int(across.count))
            #expect(bytes == sourceBytes(across, salt: 9))
            let statistics = await file.readStatistics
            #expect(statistics.throughChannel > 0, "dropped pages must come through the channel: \(statistics)")
            #expect(try await Self.randomReads(file, salt: 9, seed: 3, count: 200) == 0)
            try await file.close()
        }
    }

    @Test("damage is caught on both paths", arguments: [true, false])
    func damageOnBothPaths(pageCacheFirst: Bool) async throws {
        try await withTemporaryDirectory("read-damage") { directory in
            let path = directory.file("r.bin")
            try await Self.makeResource(path, salt: 11)
            let victim = 7
            let offset = Int64(victim * Self.segment + 123)
            var byte = try RawFile.read(path, offset: offset, count: 1)
            byte[0] ^= 0x10
            try RawFile.write(path, offset: offset, byte)
            var options = SparseFileOptions()
            options.readsFromPageCacheFirst = pageCacheFirst
            let file = try await SparseFile.open(path, mode: .readOnly, options: options)
            let error = await expectError(.corruptData) { try await file.read(offset: 0, length: 10 * Self.segment) }
            #expect(error?.segments == [victim])
            #expect(try await file.read(offset: 0, length: victim * Self.segment) == sourceBytes(0..<Int64(victim * Self.segment), salt: 11))
            await expectError(.notPresent) { try await file.read(offset: offset, length: 1) }
            try await file.close()
        }
    }

    @Test("an I/O error on the page-cache read is reported; a slow device sends the read to the channel")
    func faultsOnTheFastPath() async throws {
        let directory = try faultScopedDirectory("read-faults")
        defer { directory.remove() }
        let path = directory.file("r.bin")
        try await Self.makeResource(path, salt: 13)
        let file = try await SparseFile.open(path, mode: .readOnly)

        let failing = try FaultInjection.add(.fail([.pread], errno: EIO, trigger: .nth(1), pathContains: path))
        let error = await expectError(.io) { try await file.read(offset: 0, length: 1000) }
        #expect(error?.errno == EIO && error?.operation == "pread", "\(String(describing: error))")
        FaultInjection.remove(failing)

        // A delay rule stands for a slow device: the read that may not wait reports the data
        // uncached instead of sleeping on the cooperative pool, and the channel serves it (after
        // the delay, on the channel's queue: DispatchIO reads go through the fault table too).
        let slow = try FaultInjection.add(FaultRule([.pread], pathContains: path, delay: .milliseconds(500)))
        let before = await file.readStatistics
        let bytes = try await file.read(offset: 5000, length: 3 * Self.segment)
        FaultInjection.remove(slow)
        #expect(bytes == sourceBytes(5000..<Int64(5000 + 3 * Self.segment), salt: 13))
        let after = await file.readStatistics
        #expect(after.fromPageCache == before.fromPageCache && after.throughChannel > before.throughChannel, "\(before) -> \(after)")
        #expect(FaultInjection.fired(slow) >= 1)
        try await file.close()
    }

    /// Descriptors of this process open on `path` (read from /proc/self/fd: other suites'
    /// files never name this one).
    static func descriptors(on path: String) throws -> Int {
        let entries = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")
        return entries.filter { (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + $0)) == path }.count
    }

    @Test("the channel is made at the first read that needs it, on the data file itself even after its name went to another file")
    func channelMadeWhenNeeded() async throws {
        try await withTemporaryDirectory("read-channel") { directory in
            let path = directory.file("r.bin")
            try await Self.makeResource(path, salt: 17)
            var options = SparseFileOptions()
            options.readsFromPageCacheFirst = false
            let file = try await SparseFile.open(path, mode: .readOnly, options: options)
            // Opening holds the data file once (the index is another file): no read channel yet.
            #expect(try Self.descriptors(on: path) == 1, "a read channel was made at open")

            // The name now belongs to another file: the channel still reads the resource's own.
            let moved = directory.file("moved.bin")
            try FileManager.default.moveItem(atPath: path, toPath: moved)
            try Data(repeating: 0xEE, count: Int(Self.length)).write(to: URL(fileURLWithPath: path))
            let bytes = try await file.read(offset: 1000, length: 5 * Self.segment)
            #expect(bytes == sourceBytes(1000..<Int64(1000 + 5 * Self.segment), salt: 17))
            #expect(try Self.descriptors(on: moved) == 2, "the read went through a channel on a duplicate of the data file")
            #expect(await file.readStatistics.throughChannel > 0)
            try await file.close()
            // The channel closes its descriptor in its cleanup handler, on libdispatch's queue.
            var left = try Self.descriptors(on: moved)
            _ = try await eventually {
                left = try Self.descriptors(on: moved)
                return left == 0
            }
            #expect(left == 0, "descriptors left open on the data file after close")
        }
    }

}
