// SparseFile: damage on disk, queries, lifecycle and policies. Part of the SparseFile suite
// (SparseFileTests.swift).
import Foundation
import SeededRandom
import SparseCacheTesting
import Testing

@_spi(Locking) @testable import SparseCacheEngine
import TestSupport

extension SparseFileTests {
    // MARK: Damage on disk

    @Test("a flipped byte in a present segment: .corruptData, and the segment stops being present")
    func corruptSegment() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.file("x.bin")
            let length = seg(6)
            let file = try await SparseFile.open(path, options: .testing(length: length))
            try await put(file, 0..<length)
            try await file.commit()
            try RawFile.flip(path, at: seg(2) + 1234, mask: 0x08)

            let bytes = try await file.read(offset: 0, length: 2 * segment)
            expectBytes(bytes, equal: sourceBytes(0..<seg(2)), "other segments still read")
            let error = await expectError(.corruptData) { try await file.read(offset: seg(1) + 10, length: 2 * segment) }
            #expect(error?.segments == [2])
            #expect(await file.presentRanges() == [0..<seg(2), seg(3)..<length])
            let missing = await expectError(.notPresent, "dropped, so now missing") { try await file.read(offset: seg(2), length: 10) }
            #expect(missing?.missing == [seg(2)..<(seg(2) + 10)])
            let bytes2 = try await file.readAvailable(from: 0, maxLength: Int(length))
            expectBytes(bytes2, equal: sourceBytes(0..<seg(2)))

            // Written again, it is present again.
            let result = try await put(file, seg(2)..<seg(3))
            #expect(result.completed == [seg(2)..<seg(3)])
            try await file.commit()
            let bytes3 = try await file.read(offset: 0, length: Int(length))
            expectBytes(bytes3, equal: sourceBytes(0..<length))

            // Damage found and not repaired is committed as a drop: it survives reopen.
            try RawFile.flip(path, at: seg(4))
            await expectError(.corruptData) { try await file.read(offset: seg(4), length: 1) }
            try await file.close()
            let reopened = try await SparseFile.open(path, options: .testing())
            #expect(await reopened.presentRanges() == [0..<seg(4), seg(5)..<length])
            try await reopened.close()
        }
    }

    @Test("a read-only open drops damaged segments from memory only")
    func corruptSegmentReadOnly() async throws {
        try await withNewFile("x.bin", .testing(length: seg(3))) { file, path, directory in
            try await put(file, 0..<seg(3))
            try await file.close()
            try RawFile.flip(path, at: seg(1) + 7)
            let reader = try await SparseFile.open(path, mode: .readOnly, options: .testing())
            let error = await expectError(.corruptData) { try await reader.read(offset: 0, length: 3 * segment) }
            #expect(error?.segments == [1])
            #expect(await reader.presentRanges() == [0..<seg(1), seg(2)..<seg(3)])
            try await reader.close()
            let again = try await SparseFile.open(path, mode: .readOnly, options: .testing())
            #expect(await again.presentRanges() == [0..<seg(3)], "nothing was committed")
            try await again.close()
        }
    }

    @Test("with verifyReads off, damage is not detected (the option really turns the check off)")
    func verifyReadsOff() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.file("x.bin")
            var options = SparseFileOptions.testing(length: seg(2))
            options.verifyReads = false
            let file = try await SparseFile.open(path, options: options)
            try await put(file, 0..<seg(2))
            try await file.commit()
            try RawFile.flip(path, at: 5, mask: 0xFF)
            var expected = sourceBytes(0..<10)
            expected[5] ^= 0xFF
            #expect(try await file.read(offset: 0, length: 10) == expected)
            try await file.close()
        }
    }

    @Test("a data file shorter than the index says: writable open is .corruptData, read-only reads report it")
    func truncatedDataFile() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.file("t.bin")
            let length = seg(5)
            let file = try await SparseFile.open(path, options: .testing(length: length))
            try await put(file, 0..<length)
            try await file.close()
            try RawFile.truncate(path, to: seg(2) + 10)

            let error = await expectError(.corruptData) { try await SparseFile.open(path, options: .testing()) }
            #expect(error?.segments == [2, 3, 4], "\(String(describing: error))")
            // The refused open released its lock.
            let reader = try await SparseFile.open(path, mode: .readOnly, options: .testing())
            let bytes = try await reader.read(offset: 0, length: 2 * segment)
            expectBytes(bytes, equal: sourceBytes(0..<seg(2)))
            let short = await expectError(.corruptData) { try await reader.read(offset: seg(3), length: 10) }
            #expect(short?.segments.isEmpty == false)
            try await reader.close()
        }
    }

    // MARK: Queries

    @Test("presentBytes, fractionPresent, isComplete, presentRanges and missingRanges")
    func queries() async throws {
        try await withTemporaryDirectory { directory in
            let length = seg(10) + 100
            let file = try await SparseFile.open(directory.file("q.bin"), options: .testing(length: length))
            #expect(await file.presentBytes == 0)
            #expect(await file.fractionPresent == 0)
            #expect(!(await file.isComplete))
            #expect(await file.presentRanges().isEmpty)
            #expect(await file.missingRanges(in: 0..<length) == [0..<length])
            #expect(await file.segmentCount == 11)

            for index in [0, 1, 5] { try await put(file, seg(index)..<seg(index + 1)) }
            try await put(file, seg(10)..<length)
            #expect(await file.presentBytes == 0, "nothing counts before the commit")
            try await file.commit()
            let present = 3 * Int64(segment) + 100
            #expect(await file.presentBytes == present)
            #expect(await file.fractionPresent == Double(present) / Double(length))
            #expect(!(await file.isComplete))
            #expect(await file.presentRanges() == [0..<seg(2), seg(5)..<seg(6), seg(10)..<length])
            #expect(await file.presentSegments() == [0..<2, 5..<6, 10..<11])
            #expect(await file.missingRanges(in: 100..<30_000) == [seg(2)..<seg(5), seg(6)..<30_000])
            #expect(await file.missingRanges(in: 0..<length) == [seg(2)..<seg(5), seg(6)..<seg(10)])
            #expect(await file.missingRanges(in: 10..<20).isEmpty)
            #expect(await file.missingRanges(in: 5..<5).isEmpty)
            #expect(await file.missingRanges(in: seg(3)..<(seg(3) + 1)) == [seg(3)..<(seg(3) + 1)])

            for index in [2, 3, 4, 6, 7, 8, 9] { try await put(file, seg(index)..<seg(index + 1)) }
            try await file.commit()
            #expect(await file.isComplete)
            #expect(await file.fractionPresent == 1)
            #expect(await file.presentBytes == length)
            #expect(await file.presentRanges() == [0..<length])
            #expect(await file.missingRanges(in: 0..<length).isEmpty)
            try await file.close()
        }
    }

    @Test("an empty resource is complete")
    func emptyResource() async throws {
        try await withNewFile("e.bin", .testing(length: 0)) { file, path, directory in
            #expect(await file.isComplete)
            #expect(await file.fractionPresent == 1)
            #expect(await file.segmentCount == 0)
            #expect(try await file.read(offset: 0, length: 0) == [])
            await expectError(.invalidArgument) { try await file.read(offset: 0, length: 1) }
            await expectError(.invalidArgument) { try await file.write([1], at: 0) }
            try await file.close()
        }
    }

    // MARK: Lifecycle and policies

    @Test("after close every operation throws .closed; close again is harmless; queries still answer")
    func afterClose() async throws {
        try await withNewFile("c.bin", .testing(length: seg(2))) { file, path, directory in
            try await put(file, 0..<seg(1))
            try await file.close()
            try await file.close()
            await expectError(.closed) { try await file.read(offset: 0, length: 1) }
            await expectError(.closed) { try await file.readAvailable(from: 0, maxLength: 1) }
            await expectError(.closed) { try await put(file, seg(1)..<seg(2)) }
            await expectError(.closed) { try await file.commit() }
            await expectError(.closed) { try await file.setLength(seg(2)) }
            await expectError(.closed) { try await file.setMetadata(ResourceMetadata()) }
            #expect(await file.presentRanges() == [0..<seg(1)], "close committed the write")
        }
    }

    @Test("the byte threshold commits inside write")
    func commitPolicyBytes() async throws {
        try await withTemporaryDirectory { directory in
            var options = SparseFileOptions.testing(length: seg(8))
            options.commitPolicy = CommitPolicy(bytes: Int64(2 * segment), interval: nil)
            let file = try await SparseFile.open(directory.file("p.bin"), options: options)
            try await put(file, 0..<seg(1))
            #expect(await file.presentRanges().isEmpty, "below the threshold")
            try await put(file, seg(1)..<seg(2))
            #expect(await file.presentRanges() == [0..<seg(2)], "the threshold was reached")
            #expect(await file.uncommittedByteCount == 0)
            try await file.close()
        }
    }

    @Test("the interval commits on its own")
    func commitPolicyInterval() async throws {
        try await withTemporaryDirectory { directory in
            var options = SparseFileOptions.testing(length: seg(2))
            options.commitPolicy = CommitPolicy(bytes: nil, interval: .milliseconds(20))
            let file = try await SparseFile.open(directory.file("p.bin"), options: options)
            try await put(file, 0..<seg(1))
            // Wait for the commit; the bound is only there to end a broken run.
            _ = try await eventually { await !file.presentRanges().isEmpty }
            #expect(await file.presentRanges() == [0..<seg(1)], "no automatic commit")
            try await file.close()
        }
    }

    @Test("the partial-segment budget drops the coldest incomplete segment and reports it")
    func partialBudget() async throws {
        try await withTemporaryDirectory { directory in
            var options = SparseFileOptions.testing(length: seg(8))
            options.partialSegmentBudget = 2 * segment
            let file = try await SparseFile.open(directory.file("b.bin"), options: options)
            var result = try await put(file, 0..<10)
            #expect(result.dropped.isEmpty)
            result = try await put(file, seg(1)..<(seg(1) + 10))
            #expect(result.dropped.isEmpty)
            result = try await put(file, seg(2)..<(seg(2) + 10))
            #expect(result.dropped == [0..<10])
            #expect(await file.incompleteRanges() == [seg(1)..<(seg(1) + 10), seg(2)..<(seg(2) + 10)])
            // Touching segment 1 makes segment 2 the coldest.
            try await put(file, (seg(1) + 10)..<(seg(1) + 20))
            result = try await put(file, seg(3)..<(seg(3) + 5))
            #expect(result.dropped == [seg(2)..<(seg(2) + 10)])
            // Completing segment 1 frees its buffer: two incomplete segments fit again (the
            // budget is kept as a running total, which must go down here).
            result = try await put(file, (seg(1) + 20)..<seg(2))
            #expect(result.dropped.isEmpty && result.completed == [seg(1)..<seg(2)])
            result = try await put(file, seg(4)..<(seg(4) + 5))
            #expect(result.dropped.isEmpty, "segments 3 and 4 are within the budget of two")
            #expect(await file.incompleteRanges() == [seg(3)..<(seg(3) + 5), seg(4)..<(seg(4) + 5)])
            try await file.close()
        }
    }

    @Test("preallocation reserves blocks and changes nothing visible")
    func preallocate() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.file("p.bin")
            var options = SparseFileOptions.testing(length: seg(4) - 1)
            options.preallocate = true
            let file = try await SparseFile.open(path, options: options)
            try await put(file, 0..<(seg(4) - 1))
            try await file.commit()
            let bytes = try await file.read(offset: 0, length: 4 * segment - 1)
            expectBytes(bytes, equal: sourceBytes(0..<(seg(4) - 1)))
            try await file.close()
            #expect(try RawFile.size(path) == seg(4) - 1, "fallocate must not grow the file past its length")
        }
    }

    @Test("dropping segments past a later length, then enough commits for a checkpoint, reopens cleanly")
    func checkpointAfterLengthBelowBitmap() async throws {
        try await withNewFile("k.bin") { file, path, directory in
            // Length unknown: segments 0..<5 and 10 are written, so the bitmap covers 11.
            try await put(file, 0..<seg(5))
            try await put(file, seg(10)..<seg(11))
            try await file.commit()
            // Segment 10 turns out damaged and is dropped; then the real length is learned.
            try RawFile.flip(path, at: seg(10) + 1)
            await expectError(.corruptData) { try await file.read(offset: seg(10), length: 1) }
            try await file.commit()
            try await file.setLength(seg(5))
            try await file.commit()
            // Large metadata commits fill the journal past 1 MiB, which folds it into a checkpoint.
            for round in 0..<20 {
                try await file.setMetadata(ResourceMetadata(key: "\(round)", user: ["pad": String(repeating: "p", count: 60_000)]))
                try await file.commit()
            }
            #expect(file.index.superblock.generation > 1, "a checkpoint was written")
            try await file.close()

            let reopened = try await SparseFile.open(path, mode: .readOnly, options: .testing())
            #expect(await reopened.length == seg(5))
            #expect(await reopened.presentRanges() == [0..<seg(5)])
            #expect(!reopened.recovery.fellBack && reopened.recovery.damage.isEmpty, "\(reopened.recovery)")
            #expect(await reopened.metadata.key == "19")
            try await reopened.close()
        }
    }
}
