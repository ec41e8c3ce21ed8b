// The index file and its commit protocol on real files: create, journal appends, checkpoints,
// recovery from torn writes and damaged superblocks or checkpoints.
import SeededRandom
import Testing

@_spi(Locking) @testable import SparseCacheEngine
import TestSupport

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
}
