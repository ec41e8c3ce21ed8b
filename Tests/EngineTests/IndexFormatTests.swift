// The on-disk format in memory: superblock, checkpoint, journal record and metadata encodings,
// their round trips, and how each rejects damaged bytes. IndexFileTests covers the files.
import SeededRandom
import Testing

@_spi(Locking) @testable import SparseCacheEngine
import TestSupport

// MARK: - Random values

func randomString(_ generator: inout SplitMix64, maxLength: Int = 24) -> String {
    let alphabet = Array("abcXYZ019 -_/:.é☃️🎬\u{0}\n")
    let length = Int.random(in: 0...maxLength, using: &generator)
    return String((0..<length).map { _ in alphabet.randomElement(using: &generator)! })
}

func randomMetadata(_ generator: inout SplitMix64) -> ResourceMetadata {
    func maybe(_ generator: inout SplitMix64) -> String? {
        Bool.random(using: &generator) ? randomString(&generator) : nil
    }
    var user: [String: String] = [:]
    for _ in 0..<Int.random(in: 0...4, using: &generator) {
        user[randomString(&generator, maxLength: 8)] = randomString(&generator)
    }
    return ResourceMetadata(
        key: maybe(&generator), contentType: maybe(&generator), etag: maybe(&generator),
        lastModified: maybe(&generator), user: user)
}

/// A state with a random present set (dense runs and scattered segments) and checksums.
func randomState(_ generator: inout SplitMix64, shift: Int = 12, lengthKnown: Bool? = nil, maxSegments: Int = 600) -> IndexState {
    let segments = Int.random(in: 0...maxSegments, using: &generator)
    let known = lengthKnown ?? Bool.random(using: &generator)
    var length: Int64?
    if known {
        let size = Int64(1) << shift
        length = segments == 0 ? 0 : Int64(segments - 1) * size + Int64.random(in: 1...size, using: &generator)
    }
    var state = IndexState(segmentShift: shift, length: length, metadata: randomMetadata(&generator))
    var segment = 0
    while segment < segments {
        if Int.random(in: 0..<3, using: &generator) == 0 {
            let run = Int.random(in: 1...40, using: &generator)
            for s in segment..<min(segments, segment + run) {
                state.present.insert(s)
                state.checksums[s] = UInt32.random(in: .min ... .max, using: &generator)
            }
            segment += run
        }
        segment += Int.random(in: 1...30, using: &generator)
    }
    return state
}

/// A change that can apply to `state`: adds inside the resource, drops of present segments,
/// sometimes new metadata, and a length when none is set yet.
func randomChange(for state: IndexState, _ generator: inout SplitMix64) -> IndexChange {
    var change = IndexChange()
    let limit = state.length.map { IndexState.segmentCount(length: $0, shift: state.segmentShift) } ?? (state.present.count + 64)
    var added = Set<Int>()
    if limit > 0 {
        for _ in 0..<Int.random(in: 0...24, using: &generator) { added.insert(Int.random(in: 0..<limit, using: &generator)) }
        if Bool.random(using: &generator) {
            let start = Int.random(in: 0..<limit, using: &generator)
            for segment in start..<min(limit, start + Int.random(in: 1...50, using: &generator)) { added.insert(segment) }
        }
    }
    let present = state.present.setRuns.flatMap { $0 }
    var dropped = Set<Int>()
    for _ in 0..<Int.random(in: 0...4, using: &generator) {
        if let segment = present.randomElement(using: &generator), !added.contains(segment) { dropped.insert(segment) }
    }
    change.added = added.sorted().map { (segment: $0, checksum: UInt32.random(in: .min ... .max, using: &generator)) }
    change.dropped = dropped.sorted()
    if Int.random(in: 0..<4, using: &generator) == 0 { change.metadata = randomMetadata(&generator) }
    if state.length == nil, Int.random(in: 0..<6, using: &generator) == 0 {
        // Past every present and added segment, so the change stays applicable.
        let highest = max(state.present.setRuns.last.map { $0.upperBound - 1 } ?? -1, added.max() ?? -1)
        let size = Int64(1) << state.segmentShift
        change.length = Int64(highest + 1) * size + Int64.random(in: 0...(3 * size), using: &generator)
    }
    return change
}

/// Recomputes a superblock's trailing CRC32C after its bytes were edited.
func resealed(_ slot: [UInt8]) -> [UInt8] {
    var bytes = slot
    let checksum = crc32c(bytes[0..<4092])
    withUnsafeBytes(of: checksum.littleEndian) { raw in
        for i in 0..<4 { bytes[4092 + i] = raw[i] }
    }
    return bytes
}

private func sampleSuperblock(generation: UInt64 = 7) -> Superblock {
    Superblock(
        segmentShift: 16, generation: generation, checkpointOffset: 8192 * 3, checkpointLength: 4096 * 5,
        checkpointChecksum: 0xA5A5_1234, journalSalt: 0x0BAD_F00D, journalOffset: 8192 * 3 + 4096 * 5)
}

// MARK: - Superblock

@Suite("Superblock encoding")
struct SuperblockTests {
    @Test("encode then decode gives the same superblock")
    func roundTrip() {
        let seed = testSeed(0x5B10_0001)
        var generator = SplitMix64(seed: seed)
        for _ in 0..<200 {
            let offset = Int64.random(in: 2...100_000, using: &generator) * 4096
            let length = Int64.random(in: 1...10_000, using: &generator) * 4096
            let block = Superblock(
                segmentShift: Int.random(in: IndexFormat.segmentShifts, using: &generator),
                generation: UInt64.random(in: 0 ... .max, using: &generator), checkpointOffset: offset,
                checkpointLength: length, checkpointChecksum: UInt32.random(in: .min ... .max, using: &generator),
                journalSalt: UInt32.random(in: .min ... .max, using: &generator), journalOffset: offset + length)
            let bytes = block.encoded()
            #expect(bytes.count == IndexFormat.sectorSize, "seed \(seed)")
            #expect(Superblock.decode(bytes[...]) == .success(block), "seed \(seed): \(block)")
            #expect(block.slot == Int(block.generation % 2))
        }
    }

    @Test("the layout matches the documented offsets")
    func layout() {
        let block = sampleSuperblock()
        let bytes = block.encoded()
        #expect(Array(bytes[0..<8]) == Array("SPCINDEX".utf8))
        func u32(_ at: Int) -> UInt32 { bytes[at..<(at + 4)].reversed().reduce(0) { $0 << 8 | UInt32($1) } }
        func u64(_ at: Int) -> UInt64 { bytes[at..<(at + 8)].reversed().reduce(0) { $0 << 8 | UInt64($1) } }
        #expect(u32(8) == IndexFormat.version)
        #expect(u32(12) == 16)
        #expect(u64(16) == 7)
        #expect(u64(24) == 8192 * 3)
        #expect(u64(32) == 4096 * 5)
        #expect(u32(40) == 0xA5A5_1234)
        #expect(u32(44) == 0x0BAD_F00D)
        #expect(u64(48) == 8192 * 3 + 4096 * 5)
        #expect(bytes[56..<4092].allSatisfy { $0 == 0 })
        #expect(u32(4092) == crc32c(bytes[0..<4092]))
    }

    @Test("every single-bit flip is rejected with the check that guards its field")
    func everyBitFlip() {
        let original = sampleSuperblock().encoded()
        var bytes = original
        var wrong: [String] = []
        for bit in 0..<(original.count * 8) {
            let byte = bit / 8
            let mask = UInt8(1) << UInt8(bit % 8)
            bytes[byte] ^= mask
            let expected: Superblock.Rejection
            switch byte {
            case 0..<8:
                expected = .badMagic
            case 8..<12:
                // The version is checked before the checksum, so a flip that makes it look newer
                // is reported as a future version; one that makes it 0 fails the checksum.
                let version = IndexFormat.version ^ (UInt32(1) << UInt32(bit - 64))
                expected = version > IndexFormat.version ? .futureVersion(version) : .badChecksum
            default:
                expected = .badChecksum
            }
            let result = Superblock.decode(bytes[...])
            if result != .failure(expected) { wrong.append("bit \(bit): \(result), expected \(expected)") }
            bytes[byte] ^= mask
        }
        #expect(wrong.isEmpty, "\(wrong.count) flips misjudged, first: \(wrong.prefix(5))")
        #expect(bytes == original)
    }

    @Test("truncated slots are rejected as truncated", arguments: [0, 1, 7, 8, 12, 56, 2048, 4091, 4095, 4097, 8192])
    func truncated(length: Int) {
        var bytes = sampleSuperblock().encoded()
        if length > bytes.count { bytes += [UInt8](repeating: 0, count: length - bytes.count) }
        #expect(Superblock.decode(bytes[0..<length]) == .failure(.truncated(length)))
    }

    @Test("a slice that does not start at index 0 decodes the same")
    func sliceOffset() {
        let block = sampleSuperblock()
        let bytes = [UInt8](repeating: 0xEE, count: 100) + block.encoded() + [1, 2, 3]
        #expect(Superblock.decode(bytes[100..<(100 + 4096)]) == .success(block))
    }

    @Test("wrong magic, future version, version 0 and bad fields are told apart")
    func rejections() {
        let original = sampleSuperblock().encoded()

        var magic = original
        magic.replaceSubrange(0..<8, with: Array("SQLITE3\0".utf8))
        #expect(Superblock.decode(resealed(magic)[...]) == .failure(.badMagic))

        var future = original
        future[8] = 2
        #expect(Superblock.decode(resealed(future)[...]) == .failure(.futureVersion(2)))
        #expect(Superblock.decode(future[...]) == .failure(.futureVersion(2)), "version is checked before the checksum")

        var zero = original
        zero[8] = 0
        #expect(Superblock.decode(resealed(zero)[...]) == .failure(.badField("version 0")))

        var allZero = [UInt8](repeating: 0, count: 4096)
        #expect(Superblock.decode(allZero[...]) == .failure(.badMagic))
        allZero.replaceSubrange(0..<8, with: IndexFormat.superblockMagic)
        #expect(Superblock.decode(allZero[...]) == .failure(.badChecksum))

        var block = sampleSuperblock()
        for shift in [0, 11, 25, 64] {
            block.segmentShift = shift
            #expect(Superblock.decode(block.encoded()[...]) == .failure(.badField("segment shift \(shift)")))
        }
        let location = Superblock.Rejection.badField("checkpoint or journal location")
        block = sampleSuperblock()
        block.checkpointOffset = 4096
        block.journalOffset = 4096 + block.checkpointLength
        #expect(Superblock.decode(block.encoded()[...]) == .failure(location), "checkpoint over the slots")
        block = sampleSuperblock()
        block.checkpointOffset += 1
        block.journalOffset += 1
        #expect(Superblock.decode(block.encoded()[...]) == .failure(location), "unaligned checkpoint")
        block = sampleSuperblock()
        block.checkpointLength = 0
        block.journalOffset = block.checkpointOffset
        #expect(Superblock.decode(block.encoded()[...]) == .failure(location), "empty checkpoint")
        block = sampleSuperblock()
        block.journalOffset += 4096
        #expect(Superblock.decode(block.encoded()[...]) == .failure(location), "journal not right after the checkpoint")
        block = sampleSuperblock()
        block.checkpointLength = 4096 * (1 << 20)
        block.journalOffset = block.checkpointOffset + block.checkpointLength
        #expect(Superblock.decode(block.encoded()[...]) == .failure(location), "checkpoint over 2 GiB")
        // A checkpoint offset with the top bit set reads as negative.
        var negative = sampleSuperblock().encoded()
        withUnsafeBytes(of: UInt64(bitPattern: -8192).littleEndian) { negative.replaceSubrange(24..<32, with: $0) }
        withUnsafeBytes(of: UInt64(bitPattern: -8192 + 4096 * 5).littleEndian) { negative.replaceSubrange(48..<56, with: $0) }
        #expect(Superblock.decode(resealed(negative)[...]) == .failure(location), "negative offset")
    }

    @Test("rejections describe which check failed")
    func rejectionText() {
        #expect(Superblock.Rejection.badMagic.description == "wrong magic")
        #expect(Superblock.Rejection.badChecksum.description == "checksum mismatch")
        #expect(Superblock.Rejection.truncated(12).description.contains("12 of 4096"))
        #expect(Superblock.Rejection.futureVersion(9).description.contains("version 9"))
    }
}

// MARK: - Checkpoint

@Suite("Checkpoint encoding")
struct CheckpointTests {
    @Test("encode then decode gives the same state", arguments: [12, 16, 24])
    func roundTrip(shift: Int) throws {
        let seed = testSeed(0xC7E0_0000) &+ UInt64(shift)
        var generator = SplitMix64(seed: seed)
        for round in 0..<40 {
            let state = randomState(&generator, shift: shift, maxSegments: round == 0 ? 0 : 2000)
            let generation = UInt64.random(in: 0...1000, using: &generator)
            let bytes = Checkpoint.encode(state, generation: generation)
            #expect(bytes.count % IndexFormat.sectorSize == 0 && !bytes.isEmpty, "seed \(seed)")
            let decoded = try Checkpoint.decode(bytes, generation: generation, segmentShift: shift)
            let matches = decoded.sameContent(as: state)
            #expect(matches, "seed \(seed), round \(round): \(decoded.summary) vs \(state.summary)")
        }
    }

    @Test("an unknown length survives the round trip as nil; an empty resource as 0")
    func lengths() throws {
        var state = IndexState(segmentShift: 12, length: nil)
        state.present.insert(40)
        state.checksums[40] = 9
        var decoded = try Checkpoint.decode(Checkpoint.encode(state, generation: 3), generation: 3, segmentShift: 12)
        #expect(decoded.length == nil)
        #expect(decoded.present.count == 41)
        let matches = decoded.sameContent(as: state)
        #expect(matches)

        state = IndexState(segmentShift: 12, length: 0)
        decoded = try Checkpoint.decode(Checkpoint.encode(state, generation: 3), generation: 3, segmentShift: 12)
        #expect(decoded.length == 0)
        #expect(decoded.present.count == 0)
    }

    @Test("a checkpoint of another generation, or with the wrong magic, is refused")
    func wrongGenerationOrMagic() {
        var generator = SplitMix64(seed: 5)
        let state = randomState(&generator)
        let bytes = Checkpoint.encode(state, generation: 4)
        expectErrorSync(.corruptIndex) { try Checkpoint.decode(bytes, generation: 5, segmentShift: 12) }
        var magic = bytes
        magic[0] ^= 0x20
        expectErrorSync(.corruptIndex) { try Checkpoint.decode(magic, generation: 4, segmentShift: 12) }
        expectErrorSync(.corruptIndex) { try Checkpoint.decode([], generation: 4, segmentShift: 12) }
    }

    @Test("damaged bytes never trap: decode throws .corruptIndex or yields some state")
    func damagedBytes() {
        let seed = testSeed(0xDA3A_6ED0)
        var generator = SplitMix64(seed: seed)
        var accepted = 0
        var refused = 0
        for round in 0..<300 {
            let state = randomState(&generator, maxSegments: 300)
            let original = Checkpoint.encode(state, generation: 2)
            var bytes = original
            // Mostly the header and run table, where a bad value could make the decoder
            // allocate or index wildly.
            for _ in 0..<Int.random(in: 1...3, using: &generator) {
                let limit = Bool.random(using: &generator) ? min(bytes.count, 128) : bytes.count
                let index = Int.random(in: 0..<limit, using: &generator)
                if Bool.random(using: &generator) {
                    bytes[index] ^= 1 << UInt8.random(in: 0..<8, using: &generator)
                } else {
                    bytes[index] = [0x00, 0xFF, 0x7F, 0x80].randomElement(using: &generator)!
                }
            }
            do {
                _ = try Checkpoint.decode(bytes, generation: 2, segmentShift: 12)
                accepted += 1
            } catch let error as SparseCacheError {
                #expect(error.code == .corruptIndex, "seed \(seed), round \(round): \(error)")
                refused += 1
            } catch {
                Issue.record("seed \(seed), round \(round): unexpected error \(error)")
            }
            // Truncation anywhere: refused, or (when only padding was cut) the same state.
            let cut = Int.random(in: 0..<original.count, using: &generator)
            do {
                let decoded = try Checkpoint.decode(Array(original.prefix(cut)), generation: 2, segmentShift: 12)
                let matches = decoded.sameContent(as: state)
                #expect(matches, "seed \(seed), round \(round): cut at \(cut) decoded to another state")
            } catch let error as SparseCacheError {
                #expect(error.code == .corruptIndex, "seed \(seed), round \(round): \(error)")
            } catch {
                Issue.record("seed \(seed), round \(round): unexpected error \(error)")
            }
        }
        #expect(refused > 0, "seed \(seed): some damage must be detected by decode alone")
        _ = accepted
    }

    @Test("a length too large for the bitmap is refused, not a trap")
    func hugeLength() {
        for raw: UInt64 in [UInt64(Int64.max), UInt64(Int64.max) - 4095, UInt64(1) << 62, (UInt64(1) << 44) + 1] {
            var bytes = Checkpoint.encode(IndexState(segmentShift: 12, length: nil), generation: 1)
            withUnsafeBytes(of: raw.littleEndian) { bytes.replaceSubrange(16..<24, with: $0) }
            expectErrorSync(.corruptIndex, "length \(raw)") { try Checkpoint.decode(bytes, generation: 1, segmentShift: 12) }
        }
    }

    @Test("non-zero bytes after the last checksum are refused")
    func trailingGarbage() {
        var state = IndexState(segmentShift: 12, length: 4096 * 3)
        state.present.insert(1)
        state.checksums[1] = 77
        var bytes = Checkpoint.encode(state, generation: 1)
        bytes[bytes.count - 1] = 1
        expectErrorSync(.corruptIndex) { try Checkpoint.decode(bytes, generation: 1, segmentShift: 12) }
        let padded = Checkpoint.encode(state, generation: 1) + [UInt8](repeating: 0, count: 4096)
        expectErrorSync(.corruptIndex, "a whole extra sector") { try Checkpoint.decode(padded, generation: 1, segmentShift: 12) }
    }
}

// MARK: - Journal records

@Suite("Journal record encoding")
struct JournalRecordTests {
    @Test("encode then decode gives the same change")
    func roundTrip() throws {
        let seed = testSeed(0x1E_C0D0)
        var generator = SplitMix64(seed: seed)
        var state = IndexState(segmentShift: 12, length: nil)
        for sequence in UInt64(0)..<300 {
            let change = randomChange(for: state, &generator)
            let salt = UInt32.random(in: .min ... .max, using: &generator)
            let generation = UInt64.random(in: 0...10, using: &generator)
            let bytes = JournalRecord.encode(change, sequence: sequence, salt: salt, generation: generation)
            #expect(bytes.count % IndexFormat.sectorSize == 0, "seed \(seed)")
            #expect(JournalRecord.paddedLength(ofHeader: bytes[...]) == bytes.count, "seed \(seed)")
            let decoded = try JournalRecord.decode(
                bytes[...], expectedSequence: sequence, salt: salt, generation: generation, segmentShift: 12)
            #expect(decoded == change, "seed \(seed), sequence \(sequence)")
            state.apply(change)
        }
    }

    @Test("an empty change encodes to one sector and decodes back")
    func empty() throws {
        let bytes = JournalRecord.encode(IndexChange(), sequence: 0, salt: 1, generation: 1)
        #expect(bytes.count == 4096)
        let decoded = try JournalRecord.decode(bytes[...], expectedSequence: 0, salt: 1, generation: 1, segmentShift: 12)
        #expect(decoded?.isEmpty == true)
    }

    @Test("a large add spans several sectors and keeps every checksum")
    func large() throws {
        var change = IndexChange()
        change.added = (0..<5000).map { (segment: $0 * 2 % 7919, checksum: UInt32($0) &* 2_654_435_761) }
        change.added.sort { $0.segment < $1.segment }
        let bytes = JournalRecord.encode(change, sequence: 9, salt: 3, generation: 4)
        #expect(bytes.count > 4096 * 4)
        let decoded = try JournalRecord.decode(bytes[...], expectedSequence: 9, salt: 3, generation: 4, segmentShift: 12)
        #expect(decoded == change)
    }

    @Test("another salt, generation or sequence does not validate")
    func staleRecords() throws {
        var change = IndexChange()
        change.added = [(segment: 3, checksum: 99)]
        let bytes = JournalRecord.encode(change, sequence: 5, salt: 0x1234, generation: 8)
        #expect(try JournalRecord.decode(bytes[...], expectedSequence: 5, salt: 0x1234, generation: 8, segmentShift: 12) == change)
        #expect(try JournalRecord.decode(bytes[...], expectedSequence: 5, salt: 0x1235, generation: 8, segmentShift: 12) == nil)
        #expect(try JournalRecord.decode(bytes[...], expectedSequence: 5, salt: 0x1234, generation: 6, segmentShift: 12) == nil)
        #expect(try JournalRecord.decode(bytes[...], expectedSequence: 4, salt: 0x1234, generation: 8, segmentShift: 12) == nil)
        #expect(try JournalRecord.decode(bytes[0..<4095], expectedSequence: 5, salt: 0x1234, generation: 8, segmentShift: 12) == nil)
        #expect(JournalRecord.paddedLength(ofHeader: [UInt8](repeating: 0, count: 4096)[...]) == nil)
        #expect(JournalRecord.paddedLength(ofHeader: bytes[0..<23]) == nil)
    }

    @Test("every single-bit flip makes the record not validate (never a wrong change, never a throw)")
    func everyBitFlip() {
        var change = IndexChange()
        change.length = 123_456
        change.metadata = ResourceMetadata(key: "k", etag: "\"e\"")
        change.dropped = [1, 2, 3, 10]
        change.added = [(segment: 5, checksum: 0xFEED), (segment: 6, checksum: 0xBEEF), (segment: 20, checksum: 1)]
        let original = JournalRecord.encode(change, sequence: 2, salt: 77, generation: 3)
        var bytes = original
        var problems: [String] = []
        for bit in 0..<(bytes.count * 8) {
            bytes[bit / 8] ^= 1 << UInt8(bit % 8)
            do {
                if let decoded = try JournalRecord.decode(bytes[...], expectedSequence: 2, salt: 77, generation: 3, segmentShift: 12) {
                    problems.append("bit \(bit) accepted as \(decoded)")
                }
            } catch {
                problems.append("bit \(bit) threw \(error)")
            }
            bytes[bit / 8] ^= 1 << UInt8(bit % 8)
        }
        #expect(problems.isEmpty, "\(problems.count) flips not rejected: \(problems.prefix(5))")
    }

    @Test("an authentic record setting a length too large for the bitmap is corruption, not a trap")
    func hugeLength() {
        for length: Int64 in [.max, .max - 4095, (Int64(1) << 44) + 1] {
            var change = IndexChange()
            change.length = length
            let bytes = JournalRecord.encode(change, sequence: 0, salt: 1, generation: 1)
            expectErrorSync(.corruptIndex, "length \(length)") {
                try JournalRecord.decode(bytes[...], expectedSequence: 0, salt: 1, generation: 1, segmentShift: 12)
            }
        }
    }

    @Test("an authentic record with a malformed body is corruption, not a torn tail")
    func malformedBody() {
        var change = IndexChange()
        change.added = [(segment: 3, checksum: 99)]
        func sealed(_ edit: (inout [UInt8]) -> Void) -> [UInt8] {
            var bytes = JournalRecord.encode(change, sequence: 0, salt: 5, generation: 1)
            edit(&bytes)
            let checksum = JournalRecord.checksum(bytes[...], salt: 5, generation: 1)
            withUnsafeBytes(of: checksum.littleEndian) { raw in
                for i in 0..<4 { bytes[4 + i] = raw[i] }
            }
            return bytes
        }
        let unknownOperation = sealed { $0[24] = 9 }
        expectErrorSync(.corruptIndex, "unknown operation") {
            try JournalRecord.decode(unknownOperation[...], expectedSequence: 0, salt: 5, generation: 1, segmentShift: 12)
        }
        let dirtyPadding = sealed { $0[4000] = 1 }
        expectErrorSync(.corruptIndex, "non-zero padding") {
            try JournalRecord.decode(dirtyPadding[...], expectedSequence: 0, salt: 5, generation: 1, segmentShift: 12)
        }
        // An add run of 0 segments.
        let emptyRun = sealed { bytes in
            for i in 0..<4 { bytes[24 + 9 + i] = 0 }
        }
        expectErrorSync(.corruptIndex, "empty add run") {
            try JournalRecord.decode(emptyRun[...], expectedSequence: 0, salt: 5, generation: 1, segmentShift: 12)
        }
        // An add run past the largest supported segment number.
        let farRun = sealed { bytes in
            for i in 0..<8 { bytes[24 + 1 + i] = 0xFF }
        }
        expectErrorSync(.corruptIndex, "add run out of range") {
            try JournalRecord.decode(farRun[...], expectedSequence: 0, salt: 5, generation: 1, segmentShift: 12)
        }
    }

    @Test("an authentic drop run of 2^32 segments is cut to the segments the state covers, not spelled out (fuzz found 32 GiB)")
    func hugeDropRun() throws {
        var change = IndexChange()
        change.dropped = [5]
        var bytes = JournalRecord.encode(change, sequence: 0, salt: 5, generation: 1)
        // The drop's u32 count follows its code and u64 start.
        for (i, byte) in [UInt8(0x01), 0x00, 0xFF, 0xFF].enumerated() { bytes[24 + 1 + 8 + i] = byte }
        let checksum = JournalRecord.checksum(bytes[...], salt: 5, generation: 1)
        withUnsafeBytes(of: checksum.littleEndian) { raw in
            for i in 0..<4 { bytes[4 + i] = raw[i] }
        }
        let decoded = try JournalRecord.decode(bytes[...], expectedSequence: 0, salt: 5, generation: 1, segmentShift: 12, segmentLimit: 16)
        #expect(decoded?.dropped == Array(5..<16))
        let nothing = try JournalRecord.decode(bytes[...], expectedSequence: 0, salt: 5, generation: 1, segmentShift: 12, segmentLimit: 4)
        #expect(nothing?.dropped == [])
    }
}

// MARK: - Metadata

@Suite("Metadata encoding")
struct MetadataCodingTests {
    @Test("random metadata round trips")
    func roundTrip() throws {
        let seed = testSeed(0x3E7A_DA7A)
        var generator = SplitMix64(seed: seed)
        for _ in 0..<300 {
            let metadata = randomMetadata(&generator)
            let decoded = try MetadataCoding.decode(MetadataCoding.encode(metadata)[...])
            #expect(decoded == metadata, "seed \(seed)")
        }
    }

    @Test("edge values round trip: all nil, empty strings, non-ASCII")
    func edgeValues() throws {
        let values = [
            ResourceMetadata(),
            ResourceMetadata(key: "", contentType: "", etag: "", lastModified: "", user: ["": ""]),
            ResourceMetadata(key: "https://example.com/vidéo/🎬.mp4?x=1&y=2", contentType: "video/mp4",
                             etag: "W/\"abc\"", lastModified: "Wed, 21 Oct 2015 07:28:00 GMT",
                             user: ["ß": "∂", "z": String(repeating: "x", count: 10_000)]),
        ]
        for metadata in values {
            #expect(try MetadataCoding.decode(MetadataCoding.encode(metadata)[...]) == metadata)
        }
        #expect(MetadataCoding.encode(ResourceMetadata()) == [0, 0, 0, 0, 0], "flags byte plus a zero entry count")
    }

    @Test("the encoding does not depend on dictionary order")
    func canonical() {
        var a: [String: String] = [:]
        var b: [String: String] = [:]
        let keys = (0..<50).map { "key\($0)" }
        for key in keys { a[key] = key.uppercased() }
        for key in keys.reversed() { b[key] = key.uppercased() }
        #expect(MetadataCoding.encode(ResourceMetadata(user: a)) == MetadataCoding.encode(ResourceMetadata(user: b)))
    }

    @Test("malformed bytes are refused with .corruptIndex")
    func malformed() {
        let metadata = ResourceMetadata(key: "abc", contentType: "video/mp4", user: ["a": "b"])
        let bytes = MetadataCoding.encode(metadata)
        for cut in 0..<bytes.count {
            expectErrorSync(.corruptIndex, "cut at \(cut)") { try MetadataCoding.decode(bytes[0..<cut]) }
        }
        expectErrorSync(.corruptIndex, "trailing byte") { try MetadataCoding.decode((bytes + [0])[...]) }
        var flags = bytes
        flags[0] |= 0x10
        expectErrorSync(.corruptIndex, "unknown flag") { try MetadataCoding.decode(flags[...]) }
        var utf8 = bytes
        utf8[5] = 0xFF  // first byte of the key text
        expectErrorSync(.corruptIndex, "invalid UTF-8") { try MetadataCoding.decode(utf8[...]) }
        var huge = bytes
        huge.replaceSubrange(1..<5, with: [0xFF, 0xFF, 0xFF, 0x7F])
        expectErrorSync(.corruptIndex, "string longer than the data") { try MetadataCoding.decode(huge[...]) }
    }
}
