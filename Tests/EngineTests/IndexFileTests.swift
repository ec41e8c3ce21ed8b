// The index file and its commit protocol on real files: create, journal appends, checkpoints,
// recovery from torn writes and damaged superblocks or checkpoints.
import SeededRandom
import Testing

@_spi(Locking) @testable import SparseCacheEngine
import TestSupport

/// Opens the index read-only, returns its state and report, and closes it.
private func recover(_ path: String) throws -> (IndexState, IndexFile.RecoveryReport) {
    let (index, state, report) = try IndexFile.open(path: path, access: .readOnly)
    index.close()
    return (state, report)
}

/// A small starting state: 64 segments of 4 KiB, a few present, some metadata.
private func initialState() -> IndexState {
    var state = IndexState(segmentShift: 12, length: 64 * 4096 - 100, metadata: ResourceMetadata(key: "initial"))
    for segment in [0, 1, 2, 40] {
        state.present.insert(segment)
        state.checksums[segment] = UInt32(segment) &* 0x0101_0101 &+ 7
    }
    return state
}

/// The initial state with metadata that fills its checkpoint's sector almost to the end: a
/// debug build checks the zero padding byte by byte, and the 32,768 reopens of the bit-flip test
/// would spend most of their time there.
private func sectorFillingState() -> IndexState {
    var state = initialState()
    state.metadata.key = String(repeating: "k", count: 3950)
    #expect(Checkpoint.encode(state, generation: 0).count == 4096)
    return state
}

/// A change adding `segments` with checksums derived from `tag`.
private func adding(_ segments: [Int], tag: UInt32 = 1) -> IndexChange {
    var change = IndexChange()
    change.added = segments.sorted().map { (segment: $0, checksum: UInt32($0) &* 31 &+ tag) }
    return change
}

extension IndexFile {
    /// An append for tests whose journals stay small: the state before the change is needed only
    /// when the record would run into the other copy's checkpoint, which these tests never reach.
    fileprivate func append(_ change: IndexChange) throws {
        precondition(fallbackStart.map { journalEnd + (1 << 20) < $0 } ?? true, "this test's journal nears the other copy")
        try append(change, committed: IndexState(segmentShift: superblock.segmentShift, length: nil))
    }
}

@Suite("IndexFile")
struct IndexFileTests {
    @Test("create then open gives the created state from the newest slot")
    func createThenOpen() throws {
        let seed = testSeed(0x1DF1_0001)
        var generator = SplitMix64(seed: seed)
        let directory = try TemporaryDirectory("index")
        for round in 0..<10 {
            let path = directory.file("r\(round).scidx")
            let state = randomState(&generator, shift: [12, 16, 20][round % 3], maxSegments: round * 300)
            let created = try IndexFile.create(path: path, state: state)
            #expect(created.superblock.generation == 1)
            #expect(created.nextSequence == 0)
            created.close()
            let exists = try FileSystem.exists(path + ".tmp")
            #expect(!exists, "the temporary file was renamed away")
            let (recovered, report) = try recover(path)
            let matches = recovered.sameContent(as: state)
            #expect(matches, "seed \(seed), round \(round): \(recovered.summary) vs \(state.summary)")
            #expect(report.slotProblems == [nil, nil], "seed \(seed): \(report)")
            #expect(report.usedSlot == 1 && report.generation == 1)
            #expect(report.recordsReplayed == 0 && report.journalTail == nil && report.damage.isEmpty && !report.fellBack)
        }
    }

    @Test("create replaces a leftover temporary file and never leaves one behind")
    func leftoverTemporary() throws {
        let directory = try TemporaryDirectory("index")
        let path = directory.file("a.scidx")
        try RawFile.replace(path + ".tmp", with: Array("junk from a crash".utf8))
        let index = try IndexFile.create(path: path, state: initialState())
        index.close()
        let exists = try FileSystem.exists(path + ".tmp")
        #expect(!exists)
        let matches = try recover(path).0.sameContent(as: initialState())
        #expect(matches)
    }

    @Test("journal records replay on reopen, and appends continue the sequence after it")
    func journalReplay() throws {
        let seed = testSeed(0x10_4A11)
        var generator = SplitMix64(seed: seed)
        let directory = try TemporaryDirectory("index")
        let path = directory.file("j.scidx")
        var model = IndexState(segmentShift: 12, length: nil)
        var index = try IndexFile.create(path: path, state: model)
        var appended = 0
        for round in 0..<3 {
            for step in 0..<15 {
                let change = randomChange(for: model, &generator)
                try index.append(change)
                model.apply(change)
                appended += 1
                if step % 5 == 4 {
                    let (recovered, report) = try recover(path)
                    let matches = recovered.sameContent(as: model)
                    #expect(matches, "seed \(seed), round \(round), step \(step): \(recovered.summary) vs \(model.summary)")
                    #expect(report.recordsReplayed == appended, "seed \(seed)")
                    #expect(report.journalTail == nil && report.damage.isEmpty, "seed \(seed): \(report)")
                }
            }
            // Reopen for writing: the next record must follow the replayed ones.
            index.close()
            let (reopened, state, report) = try IndexFile.open(path: path, access: .readWrite)
            let matches2 = state.sameContent(as: model)
            #expect(matches2, "seed \(seed), round \(round)")
            #expect(reopened.nextSequence == UInt64(appended), "seed \(seed)")
            #expect(report.recordsReplayed == appended)
            index = reopened
        }
        index.close()
        let matches3 = try recover(path).0.sameContent(as: model)
        #expect(matches3, "seed \(seed)")
    }

    @Test("a torn last record leaves the previous committed state, and later appends still work")
    func tornLastRecord() throws {
        let directory = try TemporaryDirectory("index")
        let path = directory.file("t.scidx")
        var index = try IndexFile.create(path: path, state: initialState())
        var model = initialState()
        for change in [adding([3, 4]), adding([10, 11, 12], tag: 2)] {
            try index.append(change)
            model.apply(change)
        }
        let committedEnd = try RawFile.size(path)
        let stateBefore = model
        // The last record spans several sectors (the metadata alone is over 9 KB).
        var large = IndexChange()
        large.added = Array(stride(from: 0, to: 63, by: 2)).map { (segment: $0, checksum: UInt32($0) &+ 1000) }
        large.metadata = ResourceMetadata(key: "x", user: ["pad": String(repeating: "p", count: 9000)])
        try index.append(large)
        index.close()
        let full = try RawFile.read(path)
        let recordEnd = Int64(full.count)
        #expect(recordEnd - committedEnd >= 3 * 4096, "the record spans at least three sectors")
        model.apply(large)
        let matches = try recover(path).0.sameContent(as: model)
        #expect(matches, "the intact record replays")

        // Truncation at many points inside the last record.
        var cuts: [Int64] = [1, 23, 24, 25, 100, 4095, 4096, 4097, 8192, 8193]
        cuts = cuts.map { committedEnd + $0 } + [recordEnd - 1]
        for cut in cuts where cut < recordEnd {
            try RawFile.replace(path, with: Array(full.prefix(Int(cut))))
            let (state, report) = try recover(path)
            let matches2 = state.sameContent(as: stateBefore)
            #expect(matches2, "cut at \(cut): \(state.summary)")
            #expect(report.recordsReplayed == 2, "cut at \(cut)")
            #expect(report.damage.isEmpty, "a torn tail is not damage: \(report.damage)")
            if cut - committedEnd >= 24 {
                #expect(report.journalTail != nil, "cut at \(cut): the torn record is named")
            }
        }

        // Sectors that never reached the disk (zeros), or garbage, inside the last record.
        let damages: [(String, Int64, [UInt8])] = [
            ("second sector zero", committedEnd + 4096, [UInt8](repeating: 0, count: 4096)),
            ("last sector garbage", recordEnd - 4096, [UInt8](repeating: 0xA7, count: 4096)),
            ("one byte in the body", committedEnd + 30, [full[Int(committedEnd) + 30] ^ 0x40]),
            ("header sector zero", committedEnd, [UInt8](repeating: 0, count: 4096)),
        ]
        for (label, offset, bytes) in damages {
            try RawFile.replace(path, with: full)
            try RawFile.write(path, offset: offset, bytes)
            let (state, report) = try recover(path)
            let matches3 = state.sameContent(as: stateBefore)
            #expect(matches3, "\(label): \(state.summary)")
            #expect(report.recordsReplayed == 2, "\(label)")
            #expect(report.damage.isEmpty, "\(label): \(report.damage)")
        }

        // After recovery from the torn tail, new records go where the torn one was and replay.
        try RawFile.replace(path, with: Array(full.prefix(Int(committedEnd + 8192))))
        let (reopened, state, _) = try IndexFile.open(path: path, access: .readWrite)
        let matches4 = state.sameContent(as: stateBefore)
        #expect(matches4)
        index = reopened
        model = stateBefore
        for change in [adding([20]), adding([21, 22], tag: 9)] {
            try index.append(change)
            model.apply(change)
        }
        index.close()
        let (final, report) = try recover(path)
        let matches5 = final.sameContent(as: model)
        #expect(matches5, "\(final.summary) vs \(model.summary)")
        #expect(report.recordsReplayed == 4)
    }

    @Test("a record that validates but cannot apply is reported as damage and replay stops")
    func unappliableRecord() throws {
        let directory = try TemporaryDirectory("index")
        let path = directory.file("d.scidx")
        let index = try IndexFile.create(path: path, state: initialState())
        try index.append(adding([5]))
        try index.append(adding([64 + 10]))  // past the 64 segments of the resource
        try index.append(adding([6]))
        index.close()
        var expected = initialState()
        expected.apply(adding([5]))
        let (state, report) = try recover(path)
        let matches = state.sameContent(as: expected)
        #expect(matches, "\(state.summary)")
        #expect(report.recordsReplayed == 1)
        #expect(report.damage.count == 1, "\(report.damage)")
    }

    @Test("a journal longer than replay's first reads is replayed whole, and a torn record far in still stops it")
    func longJournalReplay() throws {
        let directory = try TemporaryDirectory("index")
        let path = directory.file("long.scidx")
        var model = initialState()
        let index = try IndexFile.create(path: path, state: model)
        // 200 records of a sector or more each: replay reads 16 KiB first and doubles from there.
        for record in 0..<200 {
            let change = adding([record % 64], tag: UInt32(record))
            try index.append(change)
            model.apply(change)
        }
        let end = index.journalEnd
        index.close()
        #expect(end - index.superblock.journalOffset > 256 << 10, "the journal spans several windows")
        let (state, report) = try recover(path)
        #expect(report.recordsReplayed == 200 && report.journalTail == nil, "\(report)")
        #expect(state.sameContent(as: model))
        // Damage the last record past its magic (a torn write): the 199 before it still replay.
        let file = try FileDescriptor.open(path, access: .readWrite)
        let last = end - Int64(IndexFormat.sectorSize)
        try file.write(toAbsoluteOffset: last + Int64(IndexFormat.recordMagic.count), [UInt8](repeating: 0xEE, count: 16))
        file.close()
        let (_, torn) = try recover(path)
        #expect(torn.recordsReplayed == 199, "\(torn)")
        #expect(torn.journalTail != nil)
    }

    /// Two unreadable records with intact ones after each. Everything an intact record names
    /// stays; a segment the first unreadable record rewrote (its bytes no longer match the
    /// checkpoint's CRC32C) is dropped; the segments only the unreadable records named hold
    /// data and are counted, never claimed. Without the data file, the segments in doubt (named
    /// by no intact record after the last damage) are not claimed.
    @Test("two damaged records amid intact ones: rebuilt from every intact record, settled by CRC32C against the data")
    func damagedRecordsSettledByData() throws {
        let directory = try TemporaryDirectory("index-settle")
        let path = directory.file("r.scidx")
        let segment = 4096
        let length = 64 * segment - 100
        func content(_ index: Int, version: Int) -> [UInt8] {
            (0..<segment).map { UInt8(truncatingIfNeeded: ($0 &* 2_654_435_761) >> 7 ^ (index &* 31 &+ version &* 97)) }
        }
        var data = [UInt8](repeating: 0, count: length)
        func store(_ index: Int, version: Int = 0) -> UInt32 {
            let bytes = content(index, version: version)
            let end = min((index + 1) * segment, length)
            data.replaceSubrange((index * segment)..<end, with: bytes[0..<(end - index * segment)])
            return crc32c(data[(index * segment)..<end])
        }
        var state = IndexState(segmentShift: 12, length: Int64(length))
        for index in [0, 1, 2, 40] {
            state.present.insert(index)
            state.checksums[index] = store(index)
        }
        let index = try IndexFile.create(path: path, state: state)
        let journal = Int(index.superblock.journalOffset)
        func add(_ segments: [Int], version: Int = 0, drop: [Int] = []) throws {
            var change = IndexChange()
            change.dropped = drop
            change.added = segments.map { ($0, store($0, version: version)) }
            try index.append(change)
        }
        try add([3, 4])
        try add([0, 5], version: 1)  // unreadable below: rewrites segment 0, adds 5
        try add([6], drop: [1])
        try add([7])  // unreadable below
        try add([8])
        try add([9])
        index.close()
        // Segment 1 was dropped and its blocks punched: a hole.
        for i in segment..<(2 * segment) { data[i] = 0 }
        let extents: [Range<Int64>] = [0..<4096, 8192..<40960, 163_840..<167_936]
        var bytes = try RawFile.read(path)
        for record in [1, 3] { bytes[journal + record * 4096 + 100] ^= 0x04 }

        let (settled, report) = try IndexFile.recover(bytes: bytes, evidence: .memory(data, extents: extents))
        #expect(settled.present.setRuns == [2..<5, 6..<7, 8..<10, 40..<41], "\(settled.summary)")
        let damage = try #require(report.journalDamage, "\(report)")
        #expect(damage.unreadable == [1, 3] && damage.intactAfter == 3 && damage.settled, "\(damage)")
        #expect(damage.checked == 8 && damage.inDoubt == 6 && damage.dropped == 1 && damage.unnamed == 2, "\(damage) \(report)")
        #expect(report.lost == .init(segments: 3, bytes: 3 * 4096) && report.journalTail == nil, "\(report)")
        #expect(report.recordsReplayed == 4)

        let (unsettled, plain) = try IndexFile.recover(bytes: bytes)
        #expect(unsettled.present.setRuns == [8..<10], "\(unsettled.summary)")
        #expect(plain.journalDamage?.settled == false && plain.journalDamage?.dropped == 6, "\(plain)")

        // Appends go after the last intact record, with the next sequence number.
        try RawFile.write(path, offset: 0, bytes)
        let (reopened, _, _) = try IndexFile.open(path: path, access: .readWrite, evidence: .memory(data, extents: extents))
        #expect(reopened.nextSequence == 6 && reopened.journalEnd == Int64(journal + 6 * 4096))
        try reopened.append(IndexChange(added: [(10, store(10))]))
        reopened.close()
        let (after, afterReport) = try IndexFile.recover(bytes: RawFile.read(path), evidence: .memory(data, extents: extents))
        #expect(after.present.setRuns == [2..<5, 6..<7, 8..<11, 40..<41] && afterReport.recordsReplayed == 5, "\(after.summary)")
    }

    /// A read-only open takes no lock: it can read a record while a writer is writing it, and
    /// the next record once that one is synced. That record was whole by then, not damaged.
    @Test("a record read mid-write with a later record after it is read again: a racing writer is not media damage")
    func recordReadMidWrite() throws {
        let directory = try TemporaryDirectory("index-race")
        let path = directory.file("r.scidx")
        var model = initialState()
        let index = try IndexFile.create(path: path, state: model)
        let journal = Int(index.superblock.journalOffset)
        for record in 0..<3 {
            let change = adding([10 + record])
            try index.append(change)
            model.apply(change)
        }
        index.close()

        /// The file as a reader racing the writer sees it: the first read over record 1 gets
        /// only its header (its body not written yet), every later read the whole record.
        final class RacingSource: IndexByteSource {
            let bytes: [UInt8]
            let torn: Range<Int>
            var tornReads = 0
            init(bytes: [UInt8], torn: Range<Int>) {
                self.bytes = bytes
                self.torn = torn
            }
            var path: String { "<racing>" }
            func status() throws -> FileDescriptor.Status {
                FileDescriptor.Status(size: Int64(bytes.count), allocatedBytes: Int64(bytes.count), isRegular: true, isDirectory: false)
            }
            func read(fromAbsoluteOffset offset: Int64, count: Int) throws -> [UInt8] {
                let range = Int(offset)..<min(bytes.count, Int(offset) + count)
                var out = Array(bytes[range])
                if tornReads == 0, range.overlaps(torn) {
                    tornReads += 1
                    for i in max(range.lowerBound, torn.lowerBound + 24)..<min(range.upperBound, torn.upperBound) { out[i - range.lowerBound] = 0 }
                }
                return out
            }
        }
        let source = RacingSource(bytes: try RawFile.read(path), torn: (journal + 4096)..<(journal + 8192))
        let (state, report) = try IndexFile.recover(source: source)
        #expect(source.tornReads == 1)
        #expect(state.sameContent(as: model) && report.recordsReplayed == 3, "\(state.summary)")
        #expect(report.journalDamage == nil && report.damage.isEmpty && report.journalTail == nil, "\(report)")
    }

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
