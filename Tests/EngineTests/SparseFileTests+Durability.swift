// SparseFile: durability across reopen. Part of the SparseFile suite (SparseFileTests.swift).
import Foundation
import SeededRandom
import SparseCacheTesting
import Testing

@_spi(Locking) @testable import SparseCacheEngine
import TestSupport

extension SparseFileTests {
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
        try await withNewFile("c.bin", .testing(length: seg(4))) { file, path, directory in
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
        try await withNewFile("u.bin") { file, path, directory in
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
        _ = try await eventually(timeout: .seconds(60), interval: .milliseconds(1)) { FaultInjection.delaying(rule) > 0 }
        return FaultInjection.delaying(rule) == 1
    }

    /// Starts a commit of `file` whose data sync (the first fdatasync under `directory`) is held
    /// for `delay`, and waits until it is held. The caller removes the rule.
    static func heldCommit(
        _ file: SparseFile, in directory: TemporaryDirectory, for delay: Duration = .seconds(8)
    ) async throws -> (rule: FaultInjection.RuleID, commit: Task<Void, Error>) {
        let rule = try FaultInjection.add(FaultRule([.fdatasync], pathContains: directory.path, maxFires: 1, delay: delay))
        let committing = Task { try await file.commit() }
        #expect(try await isHeld(rule), "the commit is held in its fdatasync")
        return (rule, committing)
    }

    @Test("setLength completes the last segment while a commit that took the length is in flight")
    func setLengthDuringItsCommit() async throws {
        // An answer without a length (ProgressiveCache.runStream): its short tail is buffered,
        // then setLength suspends (it used to in its ftruncate; now in the write of the tail it
        // completes); a commit starting meanwhile (the interval timer, another caller) takes
        // the length with it. The length was then invisible until that commit landed: setLength
        // took the last segment for a full one, left the tail buffered for ever, and the proxy
        // fetched it from the origin again.
        try await withNewFile("u.bin") { file, path, directory in
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
        try await withNewFile("k.bin") { file, path, directory in
            let total = seg(2) + 300
            try await file.setLength(total)
            try await put(file, 0..<seg(2))
            let (rule, committing) = try await Self.heldCommit(file, in: directory)
            defer { FaultInjection.remove(rule) }
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
        try await withNewFile("w.bin") { file, path, directory in
            try await put(file, 0..<seg(2))
            let (rule, committing) = try await Self.heldCommit(file, in: directory)
            defer { FaultInjection.remove(rule) }
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
        try await withNewFile("d.bin", committing: 0..<seg(4)) { file, path, directory in
            try await put(file, seg(4)..<seg(5))
            let (rule, committing) = try await Self.heldCommit(file, in: directory, for: .seconds(3))
            defer { FaultInjection.remove(rule) }
            let discarding = Task { try await file.discard(segments: [1]) }
            // A chance for the discard to reach its wait on the commit before the close starts
            // (not observable from outside; the outcome must hold in either order).
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
        try await withNewFile("u.bin", committing: seg(5)..<seg(6)) { file, path, directory in
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
        // With the length unknown, segment 1 is stored as a full 4 KiB segment.
        try await withNewFile("u.bin", committing: 0..<seg(2)) { file, path, directory in
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
        try await withNewFile("d.bin") { file, path, directory in
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
        try await withNewFile("f.bin") { file, path, directory in
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
}
