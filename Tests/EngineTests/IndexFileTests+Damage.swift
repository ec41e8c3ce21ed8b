// The index file: checkpoints, and recovery from a truncated index, a future version, damaged
// superblocks and damaged checkpoints. Part of the IndexFile suite (IndexFileTests.swift).
import SeededRandom
import Testing

@_spi(Locking) @testable import SparseCacheEngine
import TestSupport

extension IndexFileTests {
    @Test("checkpoints fold the journal, alternate slots and placement, and survive reopen")
    func checkpoints() throws {
        let seed = testSeed(0xC4EC_4901)
        var generator = SplitMix64(seed: seed)
        let directory = try TemporaryDirectory("index")
        let path = directory.file("c.scidx")
        var model = IndexState(segmentShift: 12, length: nil)
        var index = try IndexFile.create(path: path, state: model)
        var generation: UInt64 = 1
        var placements = (front: 0, back: 0)
        for round in 0..<12 {
            for _ in 0..<Int.random(in: 0...6, using: &generator) {
                // The length stays unknown here, so bursts of new segments can grow the state.
                var change = randomChange(for: model, &generator)
                change.length = nil
                if round % 4 == 1 {
                    // Now and then a burst of segments, so the checkpoint outgrows the front area.
                    let start = model.present.count
                    var segments = Set(change.added.map(\.segment))
                    for segment in start..<(start + 1500) where !segments.contains(segment) {
                        change.added.append((segment: segment, checksum: UInt32(truncatingIfNeeded: segment &* 7)))
                        segments.insert(segment)
                    }
                    change.added.sort { $0.segment < $1.segment }
                }
                try index.append(change, committed: model)
                model.apply(change)
            }
            // Regular checkpoints go to the front only with room for a journal there (never in
            // these small journals); compacting ones whenever the checkpoint fits.
            // An append may have checkpointed on its own (its record would have run into the
            // other copy's checkpoint).
            generation = index.superblock.generation
            let folded = (start: index.superblock.checkpointOffset, end: index.journalEnd)
            try index.checkpoint(model, compacting: round % 2 == 0)
            generation += 1
            #expect(index.superblock.generation == generation)
            #expect(index.nextSequence == 0 && index.journalBytes == 0)
            if index.superblock.checkpointOffset == IndexFormat.firstRegionOffset {
                // Written at the front: the folded region (the other copy now) is kept whole,
                // everything past it dropped, and the journal may not grow into it.
                placements.front += 1
                #expect(try RawFile.size(path) == max(index.superblock.journalOffset, folded.end), "seed \(seed), round \(round)")
                #expect(index.fallbackStart == folded.start)
            } else {
                placements.back += 1
                let size = try RawFile.size(path)
                #expect(index.fallbackStart == nil && size == index.superblock.journalOffset, "seed \(seed), round \(round)")
            }
            // Appends after the checkpoint belong to the new generation's journal, or to the
            // next one's when the record would have run into the other copy's checkpoint.
            var after = randomChange(for: model, &generator)
            after.length = nil
            try index.append(after, committed: model)
            generation = index.superblock.generation
            if let fallbackStart = index.fallbackStart { #expect(index.journalEnd <= fallbackStart, "seed \(seed), round \(round)") }
            model.apply(after)
            let (recovered, report) = try recover(path)
            let matches = recovered.sameContent(as: model)
            #expect(matches, "seed \(seed), round \(round): \(recovered.summary) vs \(model.summary)")
            #expect(report.generation == generation && report.usedSlot == Int(generation % 2), "seed \(seed): \(report)")
            #expect(report.recordsReplayed == 1, "seed \(seed)")
            if round % 3 == 2 {
                index.close()
                let (reopened, state, _) = try IndexFile.open(path: path, access: .readWrite)
                let matches2 = state.sameContent(as: model)
                #expect(matches2, "seed \(seed), round \(round)")
                index = reopened
            }
        }
        index.close()
        #expect(placements.front > 0 && placements.back > 0, "seed \(seed): both placements exercised: \(placements)")
    }

    @Test("an empty or truncated index is .corruptIndex; one that still holds slot 0 is rebuilt from it or falls back to it")
    func emptyAndTruncated() throws {
        let directory = try TemporaryDirectory("index")
        let path = directory.file("e.scidx")
        let index = try IndexFile.create(path: path, state: initialState())
        try index.append(adding([7]))
        index.close()
        let full = try RawFile.read(path)
        // Slot 0 (generation 0) has its checkpoint at 8192; slot 1 at 12288.
        for length in [0, 1, 100, 4096, 8191, 8192, 9000, 12287] {
            try RawFile.replace(path, with: Array(full.prefix(length)))
            expectErrorSync(.corruptIndex, "length \(length)") { try recover(path) }
        }
        // Generation 1's checkpoint is cut away whole; generation 0's state is exactly what it
        // was folded from (creation writes both from one state: the CRC32C slot 1 names says
        // so), so that is generation 1 with its journal gone.
        try RawFile.replace(path, with: Array(full.prefix(12288)))
        let (state, report) = try recover(path)
        let matches = state.sameContent(as: initialState())
        #expect(matches, "generation 0's state")
        #expect(report.usedSlot == 1 && report.rebuiltCheckpoint != nil && report.recordsReplayed == 0, "\(report)")
        // Once slot 0's checkpoint no longer matches what slot 1 names (here: another valid state
        // in slot 0), the cut index falls back to slot 0.
        var other = initialState()
        other.checksums[40] &+= 1
        let otherBlob = Checkpoint.encode(other, generation: 0)
        guard case .success(var slot0) = Superblock.decode(full[0..<4096]) else {
            Issue.record("slot 0 does not decode")
            return
        }
        slot0.checkpointChecksum = crc32c(otherBlob)
        var cut = Array(full.prefix(12288))
        cut.replaceSubrange(0..<4096, with: slot0.encoded())
        cut.replaceSubrange(8192..<(8192 + otherBlob.count), with: otherBlob)
        try RawFile.replace(path, with: cut)
        let (fallen, fallenReport) = try recover(path)
        let matchesOther = fallen.sameContent(as: other)
        #expect(matchesOther, "generation 0's state")
        #expect(fallenReport.usedSlot == 0 && fallenReport.fellBack && fallenReport.rebuiltCheckpoint == nil, "\(fallenReport)")

        let missing = directory.file("none.scidx")
        expectErrorSync(.notFound) { try recover(missing) }
    }

    @Test("an index whose slots both say a future version is .unsupportedVersion")
    func futureVersion() throws {
        let directory = try TemporaryDirectory("index")
        let path = directory.file("v.scidx")
        try IndexFile.create(path: path, state: initialState()).close()
        let full = try RawFile.read(path)
        func withVersion(_ version: UInt32, slots: [Int]) throws {
            var bytes = full
            for slot in slots {
                var block = Array(bytes[(slot * 4096)..<(slot * 4096 + 4096)])
                withUnsafeBytes(of: version.littleEndian) { block.replaceSubrange(8..<12, with: $0) }
                bytes.replaceSubrange((slot * 4096)..<(slot * 4096 + 4096), with: resealed(block))
            }
            try RawFile.replace(path, with: bytes)
        }
        try withVersion(2, slots: [0, 1])
        let error = expectErrorSync(.unsupportedVersion) { try recover(path) }
        #expect(error?.detail?.contains("2") == true, "\(String(describing: error))")

        // One future slot: the other one is used and the future one is named.
        try withVersion(3, slots: [1])
        let (state, report) = try recover(path)
        let matches = state.sameContent(as: initialState())
        #expect(matches)
        #expect(report.usedSlot == 0)
        #expect(report.slotProblems[1]?.contains("version 3") == true, "\(report.slotProblems)")

        // A future version in one slot and garbage in the other: the version is what to report.
        try withVersion(2, slots: [0])
        try RawFile.write(path, offset: 4096, [UInt8](repeating: 0x55, count: 4096))
        expectErrorSync(.unsupportedVersion) { try recover(path) }
    }

    @Test("a superblock copied into the wrong slot is refused")
    func wrongSlot() throws {
        let directory = try TemporaryDirectory("index")
        let path = directory.file("w.scidx")
        try IndexFile.create(path: path, state: initialState()).close()
        let slot1 = try RawFile.read(path, offset: 4096, count: 4096)
        try RawFile.write(path, offset: 0, slot1)
        let (state, report) = try recover(path)
        let matches = state.sameContent(as: initialState())
        #expect(matches)
        #expect(report.usedSlot == 1)
        #expect(report.slotProblems[0] != nil && report.slotProblems[1] == nil, "\(report.slotProblems)")
    }

    /// The 32,768 bits are split in four parts that run in parallel, each on its own file.
    @Test("every single-bit flip in the superblock slot in use is corrected: nothing committed is lost (issue 14, item 3)", arguments: 0..<4)
    func everySuperblockBitFlip(part: Int) throws {
        let created = sectorFillingState()
        let directory = try TemporaryDirectory("index")
        let path = directory.file("f.scidx")
        let index = try IndexFile.create(path: path, state: created)
        try index.append(adding([8, 9]))
        index.close()
        var committed = created
        committed.apply(adding([8, 9]))
        let (intact, intactReport) = try recover(path)
        let matches = intact.sameContent(as: committed)
        #expect(matches && intactReport.usedSlot == 1)

        let slot = try RawFile.read(path, offset: 4096, count: 4096)
        var wrong: [String] = []
        for bit in stride(from: part, to: 4096 * 8, by: 4) {
            var flipped = slot
            flipped[bit / 8] ^= 1 << UInt8(bit % 8)
            try RawFile.write(path, offset: 4096, flipped)
            do {
                let (state, report) = try recover(path)
                // Before: every flip fell back to slot 0's older state and lost [8, 9].
                if report.usedSlot != 1 || report.correctedSlots != [1] || report.slotProblems[1] == nil || !state.sameContent(as: committed) {
                    wrong.append("bit \(bit): slot \(report.usedSlot), problems \(report.slotProblems), \(state.summary)")
                }
            } catch {
                wrong.append("bit \(bit): \(error)")
            }
        }
        try RawFile.write(path, offset: 4096, slot)
        #expect(wrong.isEmpty, "\(wrong.count) flips mishandled; first: \(wrong.prefix(3))")
        let matches2 = try recover(path).0.sameContent(as: committed)
        #expect(matches2, "restored")

        // Two flipped bits are not corrected: the older copy is used, as before.
        var twice = slot
        twice[100] ^= 0x01
        twice[200] ^= 0x10
        try RawFile.write(path, offset: 4096, twice)
        let (fallback, report) = try recover(path)
        #expect(report.usedSlot == 0 && report.correctedSlots.isEmpty && fallback.sameContent(as: created))
        try RawFile.write(path, offset: 4096, slot)
    }

    @Test("a bit flip in the live slot after a checkpoint is corrected, though the other slot is stale")
    func superblockFlipAfterCheckpoint() throws {
        let directory = try TemporaryDirectory("index")
        let path = directory.file("g.scidx")
        let index = try IndexFile.create(path: path, state: initialState())
        var model = initialState()
        try index.append(adding([8, 9]))
        model.apply(adding([8, 9]))
        try index.checkpoint(model)  // generation 2 in slot 0, after the journal (no room at the front)
        try index.append(adding([30]))
        model.apply(adding([30]))
        index.close()
        let matches = try recover(path).0.sameContent(as: model)
        #expect(matches)
        let slot = try RawFile.read(path, offset: 0, count: 4096)
        var generator = SplitMix64(seed: 3)
        let bits = Array(0..<(64 * 8)) + Array((4092 * 8)..<(4096 * 8)) + (0..<200).map { _ in Int.random(in: 0..<(4096 * 8), using: &generator) }
        var wrong: [String] = []
        for bit in bits {
            var flipped = slot
            flipped[bit / 8] ^= 1 << UInt8(bit % 8)
            try RawFile.write(path, offset: 0, flipped)
            do {
                let (state, report) = try recover(path)
                // One flipped bit is corrected: the live state, nothing lost.
                if !state.sameContent(as: model) || report.correctedSlots != [0] {
                    wrong.append("bit \(bit): opened \(state.summary), \(report)")
                }
            } catch {
                wrong.append("bit \(bit): \(error)")
            }
        }
        #expect(wrong.isEmpty, "\(wrong.count) flips mishandled; first: \(wrong.prefix(3))")
    }

    @Test("a damaged newest checkpoint: rebuilt from the older one and both journals, or the loss counted exactly (issue 14, item 3)")
    func damagedCheckpoint() throws {
        let created = sectorFillingState()
        let directory = try TemporaryDirectory("index")
        let path = directory.file("k.scidx")
        let index = try IndexFile.create(path: path, state: created)
        try index.append(adding([8, 9]))
        index.close()
        var committed = created
        committed.apply(adding([8, 9]))
        let live = try recover(path).1
        #expect(live.usedSlot == 1)
        let checkpointOffset = Int64(12288)
        let original = try RawFile.read(path, offset: checkpointOffset, count: 4096)
        // Generation 1 was folded from generation 0's state: whatever byte of its checkpoint is
        // hit (its header included), that state encoded as generation 1 has the length and
        // CRC32C slot 1 names, so it is rebuilt and its journal applies on top.
        var wrong: [String] = []
        for byte in 0..<4096 {
            var flipped = original
            flipped[byte] ^= 1 << UInt8(byte % 8)
            try RawFile.write(path, offset: checkpointOffset, flipped)
            do {
                let (state, report) = try recover(path)
                if report.rebuiltCheckpoint == nil || !state.sameContent(as: committed) || report.usedSlot != 1 || report.fellBack {
                    wrong.append("byte \(byte): \(state.summary), \(report)")
                }
            } catch {
                wrong.append("byte \(byte): \(error)")
            }
        }
        #expect(wrong.isEmpty, "\(wrong.count) flips mishandled; first: \(wrong.prefix(3))")

        // The older copy is a valid state, but not the one generation 1 was folded from: one
        // segment's CRC32C differs, so its checkpoint header is the same as the folded state's
        // (before, that header match was taken as proof, and generation 1's journal was replayed
        // on the wrong base: a state the index never held). Now recovery falls back to it and
        // counts what is lost: the two segments of generation 1's journal.
        var other = created
        other.checksums[40] &+= 1
        let otherBlob = Checkpoint.encode(other, generation: 0)
        #expect(Checkpoint.Header(otherBlob) == Checkpoint.Header(Checkpoint.encode(created, generation: 0)))
        guard case .success(var slot0) = Superblock.decode(try RawFile.read(path, offset: 0, count: 4096)[...]) else {
            Issue.record("slot 0 does not decode")
            return
        }
        slot0.checkpointChecksum = crc32c(otherBlob)
        try RawFile.write(path, offset: slot0.checkpointOffset, otherBlob)
        try RawFile.write(path, offset: 0, slot0.encoded())
        for byte in [0, 20, 44, 100, 3000, 4095] {
            var flipped = original
            flipped[byte] ^= 1 << UInt8(byte % 8)
            try RawFile.write(path, offset: checkpointOffset, flipped)
            let (state, report) = try recover(path)
            let lost = report.newestLost != nil && (report.lost?.segments ?? 0) >= 2
            #expect(
                state.sameContent(as: other) && report.usedSlot == 0 && report.fellBack && report.rebuiltCheckpoint == nil
                    && !report.damage.isEmpty && lost,
                "byte \(byte): \(state.summary), \(report)")
        }
        try RawFile.write(path, offset: checkpointOffset, original)

        // Both checkpoints damaged: nothing usable, and the report names both.
        try RawFile.flip(path, at: 8192 + 20)
        try RawFile.flip(path, at: checkpointOffset + 20)
        let error = expectErrorSync(.corruptIndex) { try recover(path) }
        #expect(error?.detail?.contains("checkpoint") == true, "\(String(describing: error))")
    }
}
