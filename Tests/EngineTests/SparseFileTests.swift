// SparseFile on real files in a temporary directory: writes of any alignment, read semantics,
// durability across reopen, argument checking, locking, and damage on disk.
import Foundation
import SeededRandom
import SparseCacheTesting
import Testing

@_spi(Locking) @testable import SparseCacheEngine
import TestSupport

private let segment = 4096

/// Writes the deterministic source bytes of `range`.
@discardableResult
private func put(_ file: SparseFile, _ range: Range<Int64>, salt: UInt64 = 0) async throws -> WriteResult {
    try await file.write(sourceBytes(range, salt: salt), at: range.lowerBound)
}

private func seg(_ index: Int) -> Int64 { Int64(index * segment) }

@Suite("SparseFile")
struct SparseFileTests {
    // MARK: Writes

    @Test("unaligned writes: incomplete segments are buffered, never present; WriteResult says what happened")
    func unalignedWrites() async throws {
        try await withTemporaryDirectory { directory in
            let length = seg(5) + 1000
            let file = try await SparseFile.open(directory.file("a.bin"), options: .testing(length: length))
            var result = try await put(file, 10..<110)
            #expect(result.completed.isEmpty)
            #expect(result.bufferedBytes == 100)
            #expect(result.alreadyPresentBytes == 0 && result.dropped.isEmpty)
            #expect(await file.incompleteRanges() == [10..<110])
            try await file.commit()
            #expect(await file.presentRanges().isEmpty, "buffered bytes are never present")
            let missing = await expectError(.notPresent) { try await file.read(offset: 10, length: 100) }
            #expect(missing?.missing == [10..<110])

            result = try await put(file, 0..<10)
            #expect(result.completed.isEmpty && result.bufferedBytes == 10)
            result = try await put(file, 110..<seg(1))
            #expect(result.completed == [0..<seg(1)], "the write that completes a segment reports it")
            #expect(result.bufferedBytes == 0)
            #expect(await file.incompleteRanges().isEmpty)
            #expect(await file.uncommittedByteCount == Int64(segment))
            await expectError(.notPresent, "complete but not committed") { try await file.read(offset: 0, length: 1) }
            try await file.commit()
            #expect(await file.uncommittedByteCount == 0)
            let bytes = try await file.read(offset: 0, length: segment)
            expectBytes(bytes, equal: sourceBytes(0..<seg(1)))

            // Across three segments: the middle one completes, the ends are buffered.
            result = try await put(file, (seg(1) + 5)..<(seg(3) + 7))
            #expect(result.completed == [seg(2)..<seg(3)])
            #expect(result.bufferedBytes == (segment - 5) + 7)
            #expect(await file.incompleteRanges() == [(seg(1) + 5)..<seg(2), seg(3)..<(seg(3) + 7)])
            result = try await put(file, seg(1)..<(seg(1) + 5))
            #expect(result.completed == [seg(1)..<seg(2)])
            result = try await put(file, (seg(3) + 7)..<seg(4))
            #expect(result.completed == [seg(3)..<seg(4)])

            // Bytes over segments already present (or written) are skipped and counted.
            result = try await put(file, 100..<(seg(1) + 50))
            #expect(result.alreadyPresentBytes == segment - 100 + 50)
            #expect(result.completed.isEmpty && result.bufferedBytes == 0)

            // The short last segment completes with exactly its 1,000 bytes.
            result = try await put(file, seg(5)..<length)
            #expect(result.completed == [seg(5)..<length])
            // Contiguous complete segments of one write are reported as one range.
            result = try await put(file, seg(4)..<seg(5))
            #expect(result.completed == [seg(4)..<seg(5)])
            try await file.commit()
            #expect(await file.isComplete)
            let bytes2 = try await file.read(offset: 0, length: Int(length))
            expectBytes(bytes2, equal: sourceBytes(0..<length))

            await expectError(.invalidArgument, "past the length") { try await put(file, (length - 1)..<(length + 1)) }
            try await file.close()
        }
    }

    @Test("a write covering many whole segments reports one merged range")
    func wholeWrite() async throws {
        try await withTemporaryDirectory { directory in
            let length = seg(20) + 1
            let file = try await SparseFile.open(directory.file("a.bin"), options: .testing(length: length))
            let result = try await put(file, 0..<length)
            #expect(result.completed == [0..<length])
            #expect(result.bufferedBytes == 0 && result.alreadyPresentBytes == 0)
            try await file.commit()
            #expect(await file.presentBytes == length)
            #expect(await file.presentSegments() == [0..<21])
            try await file.close()
        }
    }

    // MARK: Reads

    @Test("read returns all bytes or throws .notPresent naming exactly the missing ranges")
    func readSemantics() async throws {
        try await withTemporaryDirectory { directory in
            let length = seg(8)
            let file = try await SparseFile.open(directory.file("r.bin"), options: .testing(length: length))
            for index in [0, 1, 2, 4, 5] { try await put(file, seg(index)..<seg(index + 1)) }
            try await file.commit()

            let bytes = try await file.read(offset: 0, length: 3 * segment)
            expectBytes(bytes, equal: sourceBytes(0..<seg(3)))
            let bytes2 = try await file.read(offset: 100, length: 3 * segment - 200)
            expectBytes(bytes2, equal: sourceBytes(100..<(seg(3) - 100)))
            let bytes3 = try await file.read(offset: seg(4) + 1, length: segment)
            expectBytes(bytes3, equal: sourceBytes((seg(4) + 1)..<(seg(5) + 1)))

            var error = await expectError(.notPresent) { try await file.read(offset: seg(2) + 10, length: 5000) }
            #expect(error?.missing == [seg(3)..<(seg(2) + 10 + 5000)])
            error = await expectError(.notPresent) { try await file.read(offset: 0, length: Int(length)) }
            #expect(error?.missing == [seg(3)..<seg(4), seg(6)..<seg(8)])
            #expect(error?.description.contains("missing [\(seg(3)), \(seg(4))), [\(seg(6)), \(seg(8)))") == true, "\(String(describing: error))")

            #expect(try await file.read(offset: 0, length: 0) == [])
            #expect(try await file.read(offset: length, length: 0) == [])
            await expectError(.invalidArgument) { try await file.read(offset: length, length: 1) }
            await expectError(.invalidArgument) { try await file.read(offset: length - 1, length: 2) }
            await expectError(.invalidArgument) { try await file.read(offset: -1, length: 10) }
            await expectError(.invalidArgument) { try await file.read(offset: 0, length: -1) }
            await expectError(.invalidArgument) { try await file.read(offset: .max, length: 10) }
            await expectError(.invalidArgument) { try await file.read(offset: .max - 5, length: 10) }
            try await file.close()
        }
    }

    @Test("readAvailable returns the contiguous present prefix, possibly empty")
    func readAvailable() async throws {
        try await withTemporaryDirectory { directory in
            let length = seg(8) - 10
            let file = try await SparseFile.open(directory.file("r.bin"), options: .testing(length: length))
            for index in [0, 1, 2, 4, 5, 7] {
                try await put(file, seg(index)..<min(seg(index + 1), length))
            }
            try await file.commit()
            let bytes = try await file.readAvailable(from: 0, maxLength: 1 << 20)
            expectBytes(bytes, equal: sourceBytes(0..<seg(3)))
            let bytes2 = try await file.readAvailable(from: 100, maxLength: 50)
            expectBytes(bytes2, equal: sourceBytes(100..<150))
            #expect(try await file.readAvailable(from: seg(3), maxLength: 1 << 20) == [])
            let bytes3 = try await file.readAvailable(from: seg(3) - 1, maxLength: 1 << 20)
            expectBytes(bytes3, equal: sourceBytes((seg(3) - 1)..<seg(3)))
            let bytes4 = try await file.readAvailable(from: seg(4) + 1, maxLength: 1 << 20)
            expectBytes(bytes4, equal: sourceBytes((seg(4) + 1)..<seg(6)))
            let bytes5 = try await file.readAvailable(from: seg(7) + 5, maxLength: 1 << 20)
            expectBytes(bytes5, equal: sourceBytes((seg(7) + 5)..<length), "ends at the length")
            #expect(try await file.readAvailable(from: length, maxLength: 10) == [])
            #expect(try await file.readAvailable(from: length + 100_000, maxLength: 10) == [])
            #expect(try await file.readAvailable(from: 0, maxLength: 0) == [])
            await expectError(.invalidArgument) { try await file.readAvailable(from: -1, maxLength: 10) }
            await expectError(.invalidArgument) { try await file.readAvailable(from: 0, maxLength: -1) }
            try await file.close()
        }
    }

    @Test("negative and overflowing offsets are .invalidArgument for writes too")
    func writeArguments() async throws {
        try await withTemporaryDirectory { directory in
            let file = try await SparseFile.open(directory.file("w.bin"), options: .testing())
            await expectError(.invalidArgument) { try await file.write([1], at: -1) }
            await expectError(.invalidArgument) { try await file.write([1, 2], at: .max) }
            let limit = Int64(IndexFormat.maximumSegmentCount) << 12
            await expectError(.invalidArgument, "past the largest offset") { try await file.write([1], at: limit) }
            await expectError(.invalidArgument, "ends past the largest offset") { try await file.write([1, 2], at: limit - 1) }
            let empty = try await file.write([], at: 5)
            #expect(empty == WriteResult())
            try await file.close()
        }
    }

    // MARK: Durability across reopen

    @Test("closing folds a long journal into a checkpoint, so the next open replays nothing; a short one stays")
    func closeFoldsLongJournal() async throws {
        try await withTemporaryDirectory { directory in
            // One commit per segment: 40 records of a sector each, more than the 128 KiB that
            // make a close fold the journal; 3 commits are far fewer.
            for (name, commits, folds) in [("long.bin", 40, true), ("short.bin", 3, false)] {
                let path = directory.file(name)
                let file = try await SparseFile.open(path, options: .testing(length: seg(40)))
                for index in 0..<commits {
                    try await put(file, seg(index)..<seg(index + 1), salt: 7)
                    try await file.commit()
                }
                try await file.close()
                let (index, state, report) = try IndexFile.open(path: SparseFile.indexPath(for: path), access: .readOnly)
                index.close()
                #expect(report.recordsReplayed == (folds ? 0 : commits), "\(name): \(report)")
                #expect(state.present.setCount == commits, "\(name): every committed segment is in the state read back")
                let reopened = try await SparseFile.open(path, options: .testing(length: seg(40), create: false))
                #expect(try await reopened.read(offset: 0, length: Int(seg(commits))) == sourceBytes(0..<seg(commits), salt: 7))
                try await reopened.close()
            }
        }
    }

    @Test("a close after open met damage (here a wiped superblock copy) makes no checkpoint: the index keeps what verify reports")
    func closeKeepsEvidenceOfFallback() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.file("d.bin")
            let indexPath = SparseFile.indexPath(for: path)
            let file = try await SparseFile.open(path, options: .testing(length: seg(40)))
            for index in 0..<40 {
                try await put(file, seg(index)..<seg(index + 1), salt: 9)
                try await file.commit()
            }
            try await file.close()  // folds the 40 records: a new generation in the other slot
            let (index, _, _) = try IndexFile.open(path: indexPath, access: .readOnly)
            let newest = index.superblock.slot
            index.close()
            // Wipe the newest superblock slot: open takes the older one, whose long journal is
            // still whole (nothing is lost, but the damage is there for verify to report).
            let raw = try FileDescriptor.open(indexPath, access: .readWrite)
            try raw.write(toAbsoluteOffset: IndexFormat.superblockOffsets[newest], [UInt8](repeating: 0, count: 4096))
            raw.close()
            let reopened = try await SparseFile.open(path, options: .testing(length: seg(40), create: false))
            #expect(reopened.recovery.slotProblems[newest] != nil, "\(reopened.recovery)")
            #expect(try await reopened.read(offset: 0, length: Int(seg(40))) == sourceBytes(0..<seg(40), salt: 9))
            try await reopened.close()
            let (after, _, report) = try IndexFile.open(path: indexPath, access: .readOnly)
            after.close()
            #expect(report.slotProblems[newest] != nil, "the wiped slot was rewritten by the close: \(report)")
        }
    }

    @Test("commit, close and reopen keep every byte; the data file holds them too")
    func reopenKeepsBytes() async throws {
        let seed = testSeed(0x5EED_0FF1)
        var generator = SplitMix64(seed: seed)
        try await withTemporaryDirectory { directory in
            let path = directory.file("d.bin")
            let length = Int64.random(in: seg(10)...seg(40), using: &generator)
            let file = try await SparseFile.open(path, options: .testing(length: length))
            #expect(file.recovery.created)
            // Random unaligned chunks in random order cover everything.
            var cuts = Set<Int64>([0, length])
            for _ in 0..<60 { cuts.insert(Int64.random(in: 0..<length, using: &generator)) }
            let bounds = cuts.sorted()
            var chunks = zip(bounds, bounds.dropFirst()).map { $0..<$1 }
            chunks.shuffle(using: &generator)
            var commits = 0
            for (index, chunk) in chunks.enumerated() {
                try await put(file, chunk, salt: seed)
                if index % 9 == 0 {
                    try await file.commit()
                    commits += 1
                }
            }
            try await file.commit()
            #expect(await file.isComplete, "seed \(seed)")
            try await file.close()

            let onDisk = try RawFile.read(path)
            #expect(onDisk.count == Int(length), "seed \(seed)")
            expectBytes(onDisk, equal: sourceBytes(0..<length, salt: seed), "seed \(seed): data file content")

            let reopened = try await SparseFile.open(path, mode: .readOnly, options: .testing(create: false))
            #expect(!reopened.recovery.created)
            #expect(reopened.recovery.recordsReplayed >= 1, "seed \(seed)")
            #expect(await reopened.isComplete, "seed \(seed)")
            #expect(await reopened.length == length)
            let bytes = try await reopened.read(offset: 0, length: Int(length))
            expectBytes(bytes, equal: sourceBytes(0..<length, salt: seed), "seed \(seed)")
            try await reopened.close()
        }
    }

    @Test("close commits what was written; bytes of incomplete segments are discarded")
    func closeCommits() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.file("c.bin")
            let file = try await SparseFile.open(path, options: .testing(length: seg(4)))
            try await put(file, 0..<seg(2))
            try await put(file, seg(3)..<(seg(3) + 100))
            try await file.close()
            let reopened = try await SparseFile.open(path, options: .testing())
            #expect(await reopened.presentRanges() == [0..<seg(2)])
            #expect(await reopened.incompleteRanges().isEmpty)
            await expectError(.notPresent) { try await reopened.read(offset: seg(3), length: 100) }
            try await reopened.close()
        }
    }

    @Test("a short last segment with a known length")
    func shortLastSegment() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.file("s.bin")
            let length = seg(3) + 1
            let file = try await SparseFile.open(path, options: .testing(length: length))
            #expect(await file.segmentCount == 4)
            let result = try await put(file, 0..<length)
            #expect(result.completed == [0..<length])
            try await file.commit()
            #expect(await file.presentBytes == length)
            #expect(await file.isComplete)
            #expect(await file.presentRanges() == [0..<length])
            try await file.close()
            let reopened = try await SparseFile.open(path, options: .testing())
            let bytes = try await reopened.read(offset: length - 1, length: 1)
            expectBytes(bytes, equal: sourceBytes((length - 1)..<length))
            let bytes2 = try await reopened.read(offset: 0, length: Int(length))
            expectBytes(bytes2, equal: sourceBytes(0..<length))
            try await reopened.close()
        }
    }

    @Test("length unknown, then setLength completes the last segment")
    func setLengthCompletesLastSegment() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.file("u.bin")
            let file = try await SparseFile.open(path, options: .testing())
            #expect(await file.length == nil)
            let total = seg(2) + 300
            let result = try await put(file, 0..<total)
            #expect(result.completed == [0..<seg(2)])
            #expect(result.bufferedBytes == 300, "the last segment's size is not known yet")
            try await file.commit()
            #expect(await file.presentBytes == seg(2))
            #expect(await file.fractionPresent == 0, "0 while the length is unknown")
            #expect(!(await file.isComplete))

            try await file.setLength(total)
            #expect(await file.length == total)
            #expect(await file.incompleteRanges().isEmpty)
            try await file.setLength(total)  // the same length again is fine
            await expectError(.invalidArgument, "another length") { try await file.setLength(total + 1) }
            await expectError(.invalidArgument, "past the length") { try await put(file, total..<(total + 1)) }
            try await file.commit()
            #expect(await file.isComplete)
            #expect(await file.fractionPresent == 1)
            #expect(await file.segmentCount == 3)
            try await file.close()

            let reopened = try await SparseFile.open(path, options: .testing())
            #expect(await reopened.length == total)
            let bytes = try await reopened.read(offset: 0, length: Int(total))
            expectBytes(bytes, equal: sourceBytes(0..<total))
            try await reopened.close()
        }
    }

    /// Whether a call is held in `rule`'s delay, looked for often for up to 60 s: the holds are
    /// long (8 s), since a loaded machine may not run this loop for seconds.
    static func isHeld(_ rule: FaultInjection.RuleID) async throws -> Bool {
        let deadline = ContinuousClock.now + .seconds(60)
        while FaultInjection.delaying(rule) == 0, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(1)) }
        return FaultInjection.delaying(rule) == 1
    }

    @Test("setLength completes the last segment while a commit that took the length is in flight")
    func setLengthDuringItsCommit() async throws {
        // An answer without a length (ProgressiveCache.runStream): its short tail is buffered,
        // then setLength suspends (it used to in its ftruncate; now in the write of the tail it
        // completes); a commit starting meanwhile (the interval timer, another caller) takes
        // the length with it. The length was then invisible until that commit landed: setLength
        // took the last segment for a full one, left the tail buffered for ever, and the proxy
        // fetched it from the origin again.
        try await withTemporaryDirectory { directory in
            let file = try await SparseFile.open(directory.file("u.bin"), options: .testing())
            let total = seg(2) + 300
            try await put(file, 0..<total)
            let rule = try FaultInjection.add(
                FaultRule([.pwrite], pathContains: directory.path, maxFires: 1, delay: .seconds(8)))
            defer { FaultInjection.remove(rule) }
            let setting = Task { try await file.setLength(total) }
            #expect(try await Self.isHeld(rule), "setLength is held in the write of the tail")
            let committing = Task { try await file.commit() }
            try await setting.value
            try await committing.value
            try await file.commit()
            #expect(await file.incompleteRanges().isEmpty)
            #expect(await file.presentRanges() == [0..<total])
            try await file.close()
        }
    }

    @Test("a write while the commit that sets the length is in flight completes the last (short) segment")
    func writeDuringLengthCommit() async throws {
        // A fill with a known length sets it before its first commit and goes on writing while
        // that commit syncs: the last segment, written then, must be taken at its short size.
        try await withTemporaryDirectory { directory in
            let file = try await SparseFile.open(directory.file("k.bin"), options: .testing())
            let total = seg(2) + 300
            try await file.setLength(total)
            try await put(file, 0..<seg(2))
            let rule = try FaultInjection.add(
                FaultRule([.fdatasync], pathContains: directory.path, maxFires: 1, delay: .seconds(8)))
            defer { FaultInjection.remove(rule) }
            let committing = Task { try await file.commit() }
            #expect(try await Self.isHeld(rule), "the commit is held in its fdatasync")
            #expect(await file.length == total, "the length stays visible while its commit is in flight")
            let tail = try await put(file, seg(2)..<total)
            #expect(tail.completed == [seg(2)..<total], "\(tail)")
            try await committing.value
            try await file.commit()
            #expect(await file.presentRanges() == [0..<total])
            try await file.close()
        }
    }

    @Test("a write does not wait behind its resource's commit: it returns while the commit's fdatasync is held, and the next commit names it")
    func writeBesideACommit() async throws {
        // Writes and the commit line run on two queues: on one, a fill's next megabyte waited
        // for the previous one's fdatasync, and a cold download ran at the disk's sync speed.
        try await withTemporaryDirectory { directory in
            let file = try await SparseFile.open(directory.file("w.bin"), options: .testing())
            try await put(file, 0..<seg(2))
            let rule = try FaultInjection.add(
                FaultRule([.fdatasync], pathContains: directory.path, maxFires: 1, delay: .seconds(8)))
            defer { FaultInjection.remove(rule) }
            let committing = Task { try await file.commit() }
            #expect(try await Self.isHeld(rule), "the commit is held in its fdatasync")
            let later = try await put(file, seg(2)..<seg(4))
            #expect(FaultInjection.delaying(rule) == 1, "the write returned while the sync was still held")
            #expect(later.completed == [seg(2)..<seg(4)], "\(later)")
            try await committing.value
            // The held commit began before the second write: it names only the first.
            #expect(await file.presentRanges() == [0..<seg(2)])
            try await file.commit()
            #expect(await file.presentRanges() == [0..<seg(4)])
            try await file.close()
            let reopened = try await SparseFile.open(directory.file("w.bin"), options: .testing())
            #expect(await reopened.presentRanges() == [0..<seg(4)])
            #expect(try await reopened.read(offset: 0, length: Int(seg(4))) == sourceBytes(0..<seg(4)))
            try await reopened.close()
        }
    }

    @Test("close while a discard waits on a commit: close waits for the discard, whose drop is durable once it returned")
    func closeBesideADiscard() async throws {
        // A discard checks the lifecycle once, then waits on the commit line; a close that
        // started meanwhile released the descriptors (and cut the index back to its size
        // before the drop's record) beside the discard's own commit. Now a discard is an
        // operation that close drains.
        try await withTemporaryDirectory { directory in
            let path = directory.file("d.bin")
            let file = try await SparseFile.open(path, options: .testing())
            try await put(file, 0..<seg(4))
            try await file.commit()
            try await put(file, seg(4)..<seg(5))
            let rule = try FaultInjection.add(
                FaultRule([.fdatasync], pathContains: directory.path, maxFires: 1, delay: .seconds(3)))
            defer { FaultInjection.remove(rule) }
            let committing = Task { try await file.commit() }
            #expect(try await Self.isHeld(rule), "the commit is held in its fdatasync")
            let discarding = Task { try await file.discard(segments: [1]) }
            try await Task.sleep(for: .milliseconds(50))
            let closing = Task { try await file.close() }
            try await committing.value
            try await discarding.value
            try await closing.value
            let reopened = try await SparseFile.open(path, options: .testing())
            #expect(await reopened.presentRanges() == [0..<seg(1), seg(2)..<seg(5)], "the discard that returned is durable")
            #expect(try await reopened.read(offset: seg(2), length: Int(seg(3))) == sourceBytes(seg(2)..<seg(5)))
            try await reopened.close()
        }
    }

    @Test("setLength refuses a length that leaves present data outside")
    func setLengthRefusesShorter() async throws {
        try await withTemporaryDirectory { directory in
            let file = try await SparseFile.open(directory.file("u.bin"), options: .testing())
            try await put(file, seg(5)..<seg(6))
            try await file.commit()
            await expectError(.invalidArgument) { try await file.setLength(seg(3)) }
            await expectError(.invalidArgument) { try await file.setLength(-1) }
            // Written but not committed counts too.
            try await put(file, seg(9)..<seg(10))
            await expectError(.invalidArgument) { try await file.setLength(seg(8)) }
            // So do buffered bytes of a later segment.
            try await put(file, (seg(12) + 1)..<(seg(12) + 2))
            await expectError(.invalidArgument) { try await file.setLength(seg(11)) }
            try await file.close()
        }
    }

    @Test("setLength refuses a length that cuts a present segment short")
    func setLengthInsidePresentSegment() async throws {
        try await withTemporaryDirectory { directory in
            let file = try await SparseFile.open(directory.file("u.bin"), options: .testing())
            // With the length unknown, segment 1 is stored as a full 4 KiB segment.
            try await put(file, 0..<seg(2))
            try await file.commit()
            // A length inside segment 1 leaves present bytes past it: its CRC covers 4,096
            // bytes, of which only 1,000 would remain part of the resource.
            let error = await expectError(.invalidArgument) { try await file.setLength(seg(1) + 1000) }
            if error == nil {
                // What the accepted length leads to: the segment fails its own checksum.
                try? await file.commit()
                await expectError(.notPresent, "the cut segment must not be served as damaged data") {
                    try await file.read(offset: seg(1), length: 1000)
                }
            }
            try? await file.close()
        }
    }

    @Test("a length out of the supported range is .invalidArgument, never a trap")
    func lengthOutOfRange() async throws {
        try await withTemporaryDirectory { directory in
            let largest = Int64(IndexFormat.maximumSegmentCount) << 12
            for length in [Int64.max, Int64.max - 100, largest + 1] {
                await expectError(.invalidArgument, "open with length \(length)") {
                    try await SparseFile.open(directory.file("big.bin"), options: .testing(length: length))
                }
            }
            let file = try await SparseFile.open(directory.file("u.bin"), options: .testing())
            for length in [Int64.max, Int64.max - 100, largest + 1] {
                await expectError(.invalidArgument, "setLength(\(length))") { try await file.setLength(length) }
            }
            #expect(await file.length == nil)
            try await file.close()
            await expectError(.invalidArgument, "reopen with length") {
                try await SparseFile.open(directory.file("u.bin"), options: .testing(length: .max))
            }
        }
    }

    @Test("a length committed together with a drop of segments past it replays on reopen")
    func lengthAndDropInOneCommit() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.file("d.bin")
            let file = try await SparseFile.open(path, options: .testing())
            try await put(file, 0..<seg(2))
            try await put(file, seg(6)..<seg(7))
            try await file.commit()
            // Segment 6 is found damaged (the drop is pending), then the length is learned:
            // both go out in the same commit.
            try RawFile.flip(path, at: seg(6) + 3)
            await expectError(.corruptData) { try await file.read(offset: seg(6), length: 10) }
            try await file.setLength(seg(2))
            try await file.commit()
            // Later commits must survive too.
            try await file.setMetadata(ResourceMetadata(key: "after"))
            try await file.commit()
            try await file.close()

            let reopened = try await SparseFile.open(path, mode: .readOnly, options: .testing())
            #expect(reopened.recovery.damage.isEmpty, "\(reopened.recovery.damage)")
            #expect(await reopened.length == seg(2))
            #expect(await reopened.metadata.key == "after")
            #expect(await reopened.isComplete)
            try await reopened.close()
        }
    }

    @Test("setLength refuses to cut a segment written at full size while the length was unknown")
    func setLengthInsideInFlightSegment() async throws {
        try await withTemporaryDirectory { directory in
            let file = try await SparseFile.open(directory.file("f.bin"), options: .testing())
            try await put(file, 0..<seg(2))  // complete, not committed
            await expectError(.invalidArgument) { try await file.setLength(seg(1) + 1000) }
            // Buffered bytes past a length inside their segment are refused too.
            try await put(file, (seg(3) + 10)..<(seg(3) + 500))
            await expectError(.invalidArgument) { try await file.setLength(seg(3) + 200) }
            // A length at or after everything written is fine.
            try await file.setLength(seg(3) + 500)
            #expect(await file.incompleteRanges() == [(seg(3) + 10)..<(seg(3) + 500)])
            try await file.close()
        }
    }

    // MARK: Metadata

    @Test("metadata is stored at creation, replaced by setMetadata, and kept across reopen")
    func metadata() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.file("m.bin")
            var options = SparseFileOptions.testing(length: 100)
            let first = ResourceMetadata(key: "https://example.com/a.mp4", contentType: "video/mp4", etag: "\"v1\"")
            options.metadata = first
            let file = try await SparseFile.open(path, options: options)
            #expect(await file.metadata == first)
            try await file.close()

            var reopened = try await SparseFile.open(path, options: .testing())
            #expect(await reopened.metadata == first)
            let second = ResourceMetadata(key: "k", lastModified: "Wed, 21 Oct 2015 07:28:00 GMT", user: ["a": "1", "b": "2"])
            try await reopened.setMetadata(second)
            #expect(await reopened.metadata == second, "pending metadata is visible at once")
            let oversized = ResourceMetadata(user: ["big": String(repeating: "x", count: ResourceMetadata.maximumEncodedSize)])
            await expectError(.invalidArgument) { try await reopened.setMetadata(oversized) }
            #expect(await reopened.metadata == second)
            try await reopened.close()

            reopened = try await SparseFile.open(path, mode: .readOnly, options: .testing())
            #expect(await reopened.metadata == second)
            try await reopened.close()

            var big = SparseFileOptions.testing()
            big.metadata = oversized
            await expectError(.invalidArgument) { try await SparseFile.open(directory.file("big.bin"), options: big) }
        }
    }

    // MARK: Opening

    @Test("segment size and length must agree with the stored ones on reopen")
    func reopenMismatches() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.file("s.bin")
            try await SparseFile.open(path, options: .testing(segmentSize: 4096, length: 50_000)).close()
            await expectError(.invalidArgument) { try await SparseFile.open(path, options: .testing(segmentSize: 8192)) }
            await expectError(.invalidArgument) { try await SparseFile.open(path, options: .testing(length: 50_001)) }
            var options = SparseFileOptions.testing()
            options.segmentSize = nil
            let file = try await SparseFile.open(path, options: options)
            #expect(file.segmentSize == 4096)
            #expect(await file.length == 50_000)
            try await file.close()

            // A length given on reopen of a resource without one is adopted and committed.
            let unknown = directory.file("u.bin")
            try await SparseFile.open(unknown, options: .testing()).close()
            let adopting = try await SparseFile.open(unknown, options: .testing(length: 9000))
            #expect(await adopting.length == 9000)
            try await adopting.close()
            let later = try await SparseFile.open(unknown, mode: .readOnly, options: .testing())
            #expect(await later.length == 9000)
            try await later.close()
        }
    }

    @Test("bad segment sizes, lengths and paths are .invalidArgument", arguments: [0, 2048, 3000, 4097, 6144, 32 << 20])
    func badSegmentSize(size: Int) async throws {
        try await withTemporaryDirectory { directory in
            await expectError(.invalidArgument, "segment size \(size)") {
                try await SparseFile.open(directory.file("x.bin"), options: .testing(segmentSize: size))
            }
            let exists = try FileSystem.exists(directory.file("x.bin"))
            #expect(!exists, "nothing is created")
        }
    }

    @Test("negative length and empty path are .invalidArgument")
    func badOpenArguments() async throws {
        try await withTemporaryDirectory { directory in
            await expectError(.invalidArgument) { try await SparseFile.open(directory.file("x.bin"), options: .testing(length: -1)) }
            await expectError(.invalidArgument) { try await SparseFile.open("", options: .testing()) }
        }
    }

    @Test("opening a missing resource without create is .notFound")
    func missing() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.file("none.bin")
            await expectError(.notFound) { try await SparseFile.open(path, options: .testing(create: false)) }
            await expectError(.notFound) { try await SparseFile.open(path, mode: .readOnly, options: .testing()) }
            let exists = try FileSystem.exists(path)
            #expect(!exists, "nothing is created")
            // A plain file without an index is not a resource.
            try RawFile.replace(path, with: [1, 2, 3])
            let error = await expectError(.notFound) { try await SparseFile.open(path, options: .testing(create: false)) }
            #expect(error?.detail?.contains("index") == true, "\(String(describing: error))")
            await expectError(.notFound, "missing directory") {
                try await SparseFile.open(directory.file("no/such/dir/x.bin"), options: .testing())
            }
        }
    }

    @Test("a directory where the data file should be is .invalidArgument")
    func directoryInPlace() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.file("dir.bin")
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
            await expectError(.invalidArgument, "read-write") { try await SparseFile.open(path, options: .testing()) }
            let exists = try FileSystem.exists(SparseFile.indexPath(for: path))
            #expect(!exists, "no index is left behind")
        }
    }

    @Test("a second read-write open is .locked while read-only opens still work")
    func locking() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.file("l.bin")
            let writer = try await SparseFile.open(path, options: .testing(length: seg(2)))
            try await put(writer, 0..<seg(1))
            try await writer.commit()
            let error = await expectError(.locked) { try await SparseFile.open(path, options: .testing()) }
            #expect(error?.path == path)
            // The failed open must not have released the writer's lock.
            await expectError(.locked, "still locked") { try await SparseFile.open(path, options: .testing()) }

            let reader = try await SparseFile.open(path, mode: .readOnly, options: .testing())
            let firstSegment = try await reader.read(offset: 0, length: segment)
            #expect(firstSegment == sourceBytes(0..<seg(1)))
            await expectError(.invalidArgument, "read-only") { try await put(reader, seg(1)..<seg(2)) }
            await expectError(.invalidArgument, "read-only") { try await reader.commit() }
            await expectError(.invalidArgument, "read-only") { try await reader.setLength(seg(2)) }
            await expectError(.invalidArgument, "read-only") { try await reader.setMetadata(ResourceMetadata()) }

            try await writer.close()
            let second = try await SparseFile.open(path, options: .testing())
            #expect(await second.presentRanges() == [0..<seg(1)])
            try await second.close()
            try await reader.close()
        }
    }

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
        try await withTemporaryDirectory { directory in
            let path = directory.file("x.bin")
            let file = try await SparseFile.open(path, options: .testing(length: seg(3)))
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
        try await withTemporaryDirectory { directory in
            let file = try await SparseFile.open(directory.file("e.bin"), options: .testing(length: 0))
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
        try await withTemporaryDirectory { directory in
            let file = try await SparseFile.open(directory.file("c.bin"), options: .testing(length: seg(2)))
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
            // Wait for the commit by polling; the bound is only there to end a broken run.
            var polls = 0
            while await file.presentRanges().isEmpty, polls < 1000 {
                try await Task.sleep(for: .milliseconds(10))
                polls += 1
            }
            #expect(await file.presentRanges() == [0..<seg(1)], "no automatic commit after \(polls) polls")
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
        try await withTemporaryDirectory { directory in
            let path = directory.file("k.bin")
            let file = try await SparseFile.open(path, options: .testing())
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
