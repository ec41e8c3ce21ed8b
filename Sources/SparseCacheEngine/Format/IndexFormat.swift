/// The on-disk layout of a sparsecache index, in one place. docs/FORMAT.md shows it as tables.
///
/// ```
/// offset 0      superblock slot 0 (4 KiB)   written by even generations
/// offset 4096   superblock slot 1 (4 KiB)   written by odd generations
/// offset 8192+  checkpoint (4 KiB-aligned)  the full state as of the superblock's generation
///               journal records (each 4 KiB-aligned) appended after the checkpoint
/// ```
///
/// All integers are little-endian. Every byte written is covered by a CRC32C: each superblock by
/// its last four bytes, the checkpoint by the superblock, each journal record by its own header.
/// A commit appends one record into sectors no committed byte shares, so a torn write can only
/// damage the record being written. Replay ends at a record that does not validate unless an
/// intact record of the same journal with a later sequence number follows it (then the record
/// was damaged after its commit, and replay goes on: ``IndexFile``).
enum IndexFormat {
    static let version: UInt32 = 1
    static let sectorSize = 4096
    static let superblockMagic: [UInt8] = Array("SPCINDEX".utf8)
    static let checkpointMagic: [UInt8] = Array("SPCCHKPT".utf8)
    static let recordMagic: [UInt8] = Array("SPJR".utf8)
    static let superblockOffsets: [Int64] = [0, 4096]
    static let firstRegionOffset: Int64 = 8192
    /// Segment sizes from 4 KiB to 16 MiB.
    static let segmentShifts: ClosedRange<Int> = 12...24
    /// The logical length field's value while the length is unknown.
    static let unknownLength = UInt64.max
    /// A single journal record never exceeds this (a commit of 64 GiB of new 64 KiB segments).
    static let maximumRecordSize = 64 << 20
    static let recordHeaderSize = 24
    /// At most 2^32 segments (16 TiB at 4 KiB, 256 TiB at 64 KiB): bounds what a hostile index
    /// can make the decoder allocate.
    static let maximumSegmentCount = 1 << 32

    static func alignUp(_ value: Int64) -> Int64 {
        (value + Int64(sectorSize) - 1) & ~Int64(sectorSize - 1)
    }

    static func corrupt(_ detail: String, path: String? = nil) -> SparseCacheError {
        SparseCacheError(.corruptIndex, operation: "read index", path: path, detail: detail)
    }
}

// MARK: - Superblock

/// One of the two superblock slots: where the live checkpoint and journal are.
///
/// ```
/// 0     8  magic "SPCINDEX"
/// 8     4  format version (1)
/// 12    4  segment shift (12...24)
/// 16    8  generation (slot = generation % 2)
/// 24    8  checkpoint offset (4 KiB-aligned, >= 8192)
/// 32    8  checkpoint length (multiple of 4096)
/// 40    4  checkpoint CRC32C over its whole length
/// 44    4  journal salt (random, new at every checkpoint)
/// 48    8  journal offset (first record; checkpoint offset + length)
/// 56    ..  zero
/// 4092  4  CRC32C of bytes 0..<4092
/// ```
struct Superblock: Sendable, Equatable {
    var segmentShift: Int
    var generation: UInt64
    var checkpointOffset: Int64
    var checkpointLength: Int64
    var checkpointChecksum: UInt32
    var journalSalt: UInt32
    var journalOffset: Int64

    var slot: Int { Int(generation % 2) }

    func encoded() -> [UInt8] {
        var writer = ByteWriter(capacity: IndexFormat.sectorSize)
        writer.append(bytes: IndexFormat.superblockMagic)
        writer.append(IndexFormat.version)
        writer.append(UInt32(segmentShift))
        writer.append(generation)
        writer.append(UInt64(checkpointOffset))
        writer.append(UInt64(checkpointLength))
        writer.append(checkpointChecksum)
        writer.append(journalSalt)
        writer.append(UInt64(journalOffset))
        var bytes = writer.bytes
        bytes.append(contentsOf: repeatElement(0, count: IndexFormat.sectorSize - 4 - bytes.count))
        let checksum = crc32c(bytes)
        withUnsafeBytes(of: checksum.littleEndian) { bytes.append(contentsOf: $0) }
        return bytes
    }

    /// Why a slot was rejected; the checks run in this order.
    enum Rejection: Error, Equatable, Sendable, CustomStringConvertible {
        case truncated(Int)
        case badMagic
        case futureVersion(UInt32)
        case badChecksum
        case badField(String)

        var description: String {
            switch self {
            case .truncated(let count): "truncated (\(count) of 4096 bytes)"
            case .badMagic: "wrong magic"
            case .futureVersion(let version): "format version \(version) is newer than this build reads (\(IndexFormat.version))"
            case .badChecksum: "checksum mismatch"
            case .badField(let field): "invalid \(field)"
            }
        }
    }

    static func decode(_ bytes: ArraySlice<UInt8>) -> Result<Superblock, Rejection> {
        guard bytes.count == IndexFormat.sectorSize else { return .failure(.truncated(bytes.count)) }
        guard bytes.prefix(8).elementsEqual(IndexFormat.superblockMagic) else { return .failure(.badMagic) }
        var reader = ByteReader(bytes.dropFirst(8)) { IndexFormat.corrupt($0) }
        // The reads below cannot run out: the slot is 4096 bytes.
        let version = (try? reader.read(UInt32.self, "version")) ?? 0
        if version > IndexFormat.version { return .failure(.futureVersion(version)) }
        let stored = bytes.suffix(4).withUnsafeBytes { $0.loadUnaligned(as: UInt32.self) }.littleEndian
        guard crc32c(bytes.dropLast(4)) == stored else { return .failure(.badChecksum) }
        guard version == IndexFormat.version else { return .failure(.badField("version \(version)")) }
        do {
            let shift = Int(try reader.read(UInt32.self, "segment shift"))
            let block = Superblock(
                segmentShift: shift,
                generation: try reader.read(UInt64.self, "generation"),
                checkpointOffset: Int64(bitPattern: try reader.read(UInt64.self, "checkpoint offset")),
                checkpointLength: Int64(bitPattern: try reader.read(UInt64.self, "checkpoint length")),
                checkpointChecksum: try reader.read(UInt32.self, "checkpoint checksum"),
                journalSalt: try reader.read(UInt32.self, "journal salt"),
                journalOffset: Int64(bitPattern: try reader.read(UInt64.self, "journal offset")))
            guard IndexFormat.segmentShifts.contains(shift) else { return .failure(.badField("segment shift \(shift)")) }
            let sector = Int64(IndexFormat.sectorSize)
            guard block.checkpointOffset >= IndexFormat.firstRegionOffset, block.checkpointOffset % sector == 0,
                block.checkpointLength > 0, block.checkpointLength % sector == 0,
                block.checkpointLength <= Int64(Int32.max),
                block.journalOffset == block.checkpointOffset + block.checkpointLength
            else { return .failure(.badField("checkpoint or journal location")) }
            return .success(block)
        } catch {
            return .failure(.truncated(bytes.count))
        }
    }
}

// MARK: - Checkpoint

/// The full state at one generation, padded to whole sectors.
///
/// ```
/// 0   8  magic "SPCCHKPT"
/// 8   8  generation (must equal the superblock's)
/// 16  8  logical length (2^64-1 while unknown)
/// 24  8  segments covered by the bitmap
/// 32  4  metadata byte count M
/// 36  4  present run count R
/// 40  8  present segment count P
/// 48  M  metadata (see ResourceMetadata encoding)
/// ..  16R runs: (first segment u64, segment count u64), ascending, disjoint
/// ..  4P  CRC32C of each present segment, in segment order
/// ..  zero padding to a multiple of 4096
/// ```
enum Checkpoint {
    static func encode(_ state: IndexState, generation: UInt64) -> [UInt8] {
        let metadata = MetadataCoding.encode(state.metadata)
        let runs = state.present.setRuns
        var writer = ByteWriter(capacity: 48 + metadata.count + runs.count * 16 + state.present.setCount * 4)
        writer.append(bytes: IndexFormat.checkpointMagic)
        writer.append(generation)
        writer.append(state.length.map { UInt64($0) } ?? IndexFormat.unknownLength)
        writer.append(UInt64(state.present.count))
        writer.append(UInt32(metadata.count))
        writer.append(UInt32(runs.count))
        writer.append(UInt64(state.present.setCount))
        writer.append(bytes: metadata)
        for run in runs {
            writer.append(UInt64(run.lowerBound))
            writer.append(UInt64(run.count))
        }
        for run in runs {
            for segment in run { writer.append(state.checksums[segment]) }
        }
        writer.pad(toMultipleOf: IndexFormat.sectorSize)
        return writer.bytes
    }

    /// The fixed 48 bytes that open a checkpoint, as stored (nothing checked but the magic).
    struct Header: Equatable {
        var generation: UInt64
        var rawLength: UInt64
        var covered: UInt64
        var metadataCount: UInt32
        var runCount: UInt32
        var presentCount: UInt64

        static let size = 48

        /// The header of `bytes`, or nil when they do not start with a checkpoint's magic.
        init?(_ bytes: [UInt8]) {
            guard bytes.count >= Self.size, bytes.starts(with: IndexFormat.checkpointMagic) else { return nil }
            var reader = ByteReader(bytes[8..<Self.size]) { IndexFormat.corrupt("checkpoint: \($0)") }
            // The reads cannot run out: the slice is the header's 40 bytes.
            guard let generation = try? reader.read(UInt64.self, "generation"), let rawLength = try? reader.read(UInt64.self, "length"),
                let covered = try? reader.read(UInt64.self, "bitmap size"),
                let metadataCount = try? reader.read(UInt32.self, "metadata size"),
                let runCount = try? reader.read(UInt32.self, "run count"),
                let presentCount = try? reader.read(UInt64.self, "present count")
            else { return nil }
            self.generation = generation
            self.rawLength = rawLength
            self.covered = covered
            self.metadataCount = metadataCount
            self.runCount = runCount
            self.presentCount = presentCount
        }
    }

    /// Whether a checkpoint of `state` at `generation` is exactly `length` bytes with CRC32C
    /// `checksum`: the proof that a checkpoint whose stored bytes are damaged was folded from
    /// `state`, from what its intact superblock says of it. The encoding is deterministic (runs
    /// in order, user metadata keys sorted, zero padding), so only the very state it was
    /// written from (or a 2^-32 collision) passes. The damaged bytes themselves are never used.
    static func encodes(_ state: IndexState, generation: UInt64, length: Int64, checksum: UInt32) -> Bool {
        let blob = encode(state, generation: generation)
        return Int64(blob.count) == length && crc32c(blob) == checksum
    }

    /// The present segment count a damaged checkpoint's header lists, when its generation is
    /// intact and the count fits the blob (4 bytes of checksum per segment).
    static func listedPresentCount(_ bytes: [UInt8], generation: UInt64) -> Int? {
        guard let header = Header(bytes), header.generation == generation,
            header.presentCount <= UInt64((bytes.count - Header.size) / 4)
        else { return nil }
        return Int(header.presentCount)
    }

    static func decode(_ bytes: [UInt8], generation: UInt64, segmentShift: Int) throws -> IndexState {
        func fail(_ detail: String) -> SparseCacheError { IndexFormat.corrupt("checkpoint: \(detail)") }
        guard let header = Header(bytes) else { throw fail(bytes.count < Header.size ? "truncated header" : "wrong magic") }
        guard header.generation == generation else { throw fail("generation does not match the superblock") }
        let rawLength = header.rawLength, covered = header.covered, presentCount = header.presentCount
        let metadataCount = Int(header.metadataCount), runCount = Int(header.runCount)
        var reader = ByteReader(bytes[Header.size...]) { IndexFormat.corrupt("checkpoint: \($0)") }
        let length: Int64? = rawLength == IndexFormat.unknownLength ? nil : Int64(exactly: rawLength)
        if rawLength != IndexFormat.unknownLength, length == nil { throw fail("length \(rawLength) out of range") }
        if let length, length > IndexState.maximumLength(shift: segmentShift) { throw fail("length \(length) out of range") }
        guard covered <= UInt64(IndexFormat.maximumSegmentCount), presentCount <= covered else { throw fail("segment counts out of range") }
        if let length, IndexState.segmentCount(length: length, shift: segmentShift) != Int(covered) {
            throw fail("bitmap size \(covered) does not match length \(length)")
        }
        guard metadataCount <= ResourceMetadata.maximumEncodedSize else { throw fail("metadata too large") }
        var state = IndexState(segmentShift: segmentShift, length: length)
        state.present.grow(to: Int(covered))
        state.metadata = try MetadataCoding.decode(try reader.readBytes(metadataCount, "metadata"))
        guard runCount <= reader.remaining / 16 else { throw fail("run count \(runCount) exceeds the checkpoint") }
        var runs: [Range<Int>] = []
        runs.reserveCapacity(runCount)
        var previousEnd = -1
        var total: UInt64 = 0
        for _ in 0..<runCount {
            let start = try reader.read(UInt64.self, "run start")
            let count = try reader.read(UInt64.self, "run length")
            guard count > 0, start <= covered, count <= covered - start, Int(start) > previousEnd else {
                throw fail("run [\(start), +\(count)) is empty, out of order or past the bitmap")
            }
            runs.append(Int(start)..<Int(start + count))
            previousEnd = Int(start + count)
            total += count
        }
        guard total == presentCount else { throw fail("runs hold \(total) segments, header says \(presentCount)") }
        for run in runs {
            for segment in run {
                state.present.insert(segment)
                state.checksums[segment] = try reader.read(UInt32.self, "segment checksum")
            }
        }
        guard reader.remaining < IndexFormat.sectorSize, allZero(reader.bytes[reader.position...]) else {
            throw fail("unexpected bytes after the last checksum")
        }
        return state
    }
}

// MARK: - Journal records

/// One commit, appended after the checkpoint at a 4 KiB boundary.
///
/// ```
/// 0   4  magic "SPJR"
/// 4   4  CRC32C of (salt u32, generation u64) then bytes 8..<padded length
/// 8   8  sequence (0 for the first record after the checkpoint)
/// 16  4  body length B
/// 20  4  padded length (24 + B rounded up to 4096)
/// 24  B  body: operations, applied in order
/// ..     zero padding
/// ```
/// Operations: `1` set length (u64); `2` set metadata (u32 M, M bytes); `3` drop segments
/// (u64 first, u32 count); `4` add segments (u64 first, u32 count, count x u32 CRC32C).
/// The salt and generation in the checksum make records left over from an earlier journal in
/// the same bytes fail validation.
enum JournalRecord {
    enum Operation: UInt8 {
        case setLength = 1, setMetadata = 2, drop = 3, add = 4
    }

    static func encode(_ change: IndexChange, sequence: UInt64, salt: UInt32, generation: UInt64) -> [UInt8] {
        var body = ByteWriter()
        if let length = change.length {
            body.append(Operation.setLength.rawValue)
            body.append(UInt64(length))
        }
        if let metadata = change.metadata {
            let encoded = MetadataCoding.encode(metadata)
            body.append(Operation.setMetadata.rawValue)
            body.append(UInt32(encoded.count))
            body.append(bytes: encoded)
        }
        for run in runs(of: change.dropped) {
            body.append(Operation.drop.rawValue)
            body.append(UInt64(run.lowerBound))
            body.append(UInt32(run.count))
        }
        var index = 0
        let added = change.added
        while index < added.count {
            var end = index + 1
            while end < added.count, added[end].segment == added[end - 1].segment + 1, end - index < Int(UInt32.max) {
                end += 1
            }
            body.append(Operation.add.rawValue)
            body.append(UInt64(added[index].segment))
            body.append(UInt32(end - index))
            for entry in added[index..<end] { body.append(entry.checksum) }
            index = end
        }
        let padded = Int(IndexFormat.alignUp(Int64(IndexFormat.recordHeaderSize + body.bytes.count)))
        var writer = ByteWriter(capacity: padded)
        writer.append(bytes: IndexFormat.recordMagic)
        writer.append(UInt32(0))
        writer.append(sequence)
        writer.append(UInt32(body.bytes.count))
        writer.append(UInt32(padded))
        writer.append(bytes: body.bytes)
        writer.pad(toMultipleOf: IndexFormat.sectorSize)
        var bytes = writer.bytes
        let checksum = checksum(bytes[...], salt: salt, generation: generation)
        withUnsafeBytes(of: checksum.littleEndian) { raw in
            for i in 0..<4 { bytes[4 + i] = raw[i] }
        }
        return bytes
    }

    static func checksum(_ record: ArraySlice<UInt8>, salt: UInt32, generation: UInt64) -> UInt32 {
        var seedBytes = ByteWriter(capacity: 12)
        seedBytes.append(salt)
        seedBytes.append(generation)
        let seed = crc32c(seedBytes.bytes)
        return crc32c(record.dropFirst(8), seed: seed)
    }

    /// The padded length of a record header that starts `header`, or nil when the header does
    /// not look like a record (the normal end of a journal).
    static func paddedLength(ofHeader header: ArraySlice<UInt8>) -> Int? {
        guard header.count >= IndexFormat.recordHeaderSize, header.starts(with: IndexFormat.recordMagic) else { return nil }
        var reader = ByteReader(header.dropFirst(16)) { IndexFormat.corrupt($0) }
        guard let bodyLength = try? reader.read(UInt32.self, "body length"),
            let padded = try? reader.read(UInt32.self, "padded length"),
            Int(padded) <= IndexFormat.maximumRecordSize,
            Int64(padded) == IndexFormat.alignUp(Int64(IndexFormat.recordHeaderSize) + Int64(bodyLength))
        else { return nil }
        return Int(padded)
    }

    /// Validates a whole record and decodes its change; nil when it does not validate (a torn
    /// write, a stale record, or the end of the journal).
    ///
    /// `segmentLimit` is how many segments the state the record applies to covers: a drop run
    /// past it names segments that cannot be present, and only the part below it is kept (a run
    /// is 12 bytes on disk however long it is; spelling out 2^32 segments would take 32 GiB).
    static func decode(
        _ record: ArraySlice<UInt8>, expectedSequence: UInt64, salt: UInt32, generation: UInt64,
        segmentShift: Int, segmentLimit: Int = IndexFormat.maximumSegmentCount
    ) throws -> IndexChange? {
        guard let padded = paddedLength(ofHeader: record), padded == record.count else { return nil }
        var reader = ByteReader(record.dropFirst(4)) { IndexFormat.corrupt("journal record: \($0)") }
        let stored = try reader.read(UInt32.self, "checksum")
        guard checksum(record, salt: salt, generation: generation) == stored else { return nil }
        guard try reader.read(UInt64.self, "sequence") == expectedSequence else { return nil }
        let bodyLength = Int(try reader.read(UInt32.self, "body length"))
        _ = try reader.read(UInt32.self, "padded length")
        // From here on the record is authentic: a malformed body is corruption, not a torn tail.
        var body = ByteReader(try reader.readBytes(bodyLength, "body")) {
            IndexFormat.corrupt("journal record \(expectedSequence): \($0)")
        }
        let maxSegment = UInt64(IndexFormat.maximumSegmentCount)
        var change = IndexChange()
        while body.remaining > 0 {
            let rawOperation = try body.read(UInt8.self, "operation")
            switch Operation(rawValue: rawOperation) {
            case .setLength:
                let length = try body.read(UInt64.self, "length")
                guard let value = Int64(exactly: length), value <= IndexState.maximumLength(shift: segmentShift) else {
                    throw body.failure("length \(length) out of range")
                }
                change.length = value
            case .setMetadata:
                let count = Int(try body.read(UInt32.self, "metadata size"))
                guard count <= ResourceMetadata.maximumEncodedSize else { throw body.failure("metadata too large") }
                change.metadata = try MetadataCoding.decode(try body.readBytes(count, "metadata"))
            case .drop:
                let first = try body.read(UInt64.self, "drop start")
                let count = try body.read(UInt32.self, "drop count")
                guard count > 0, first <= maxSegment, UInt64(count) <= maxSegment - first else {
                    throw body.failure("drop run out of range")
                }
                let end = min(Int(first) + Int(count), segmentLimit)
                if Int(first) < end { change.dropped.append(contentsOf: Int(first)..<end) }
            case .add:
                let first = try body.read(UInt64.self, "add start")
                let count = try body.read(UInt32.self, "add count")
                guard count > 0, first <= maxSegment, UInt64(count) <= maxSegment - first else {
                    throw body.failure("add run out of range")
                }
                for segment in Int(first)..<(Int(first) + Int(count)) {
                    change.added.append((segment, try body.read(UInt32.self, "segment checksum")))
                }
            case nil:
                throw body.failure("unknown operation \(rawOperation)")
            }
        }
        guard allZero(record[(record.startIndex + IndexFormat.recordHeaderSize + bodyLength)...]) else {
            throw IndexFormat.corrupt("journal record \(expectedSequence): non-zero padding")
        }
        return change
    }

    private static func runs(of sorted: [Int]) -> [Range<Int>] {
        var result: [Range<Int>] = []
        for segment in sorted {
            if let last = result.last, last.upperBound == segment, last.count < Int(UInt32.max) {
                result[result.count - 1] = last.lowerBound..<(segment + 1)
            } else {
                result.append(segment..<(segment + 1))
            }
        }
        return result
    }
}

// MARK: - Metadata

/// ```
/// 1 byte  presence flags: 1 key, 2 content type, 4 ETag, 8 Last-Modified
/// ...     each present string: u32 byte count + UTF-8, in flag order
/// 4       user entry count N
/// ...     N x (key string, value string), keys ascending
/// ```
package enum MetadataCoding {
    package static func encode(_ metadata: ResourceMetadata) -> [UInt8] {
        let fields = [metadata.key, metadata.contentType, metadata.etag, metadata.lastModified]
        let user = metadata.user.sorted { $0.key < $1.key }
        // Sized once (every small object a proxy stores is encoded on its event loop).
        let size = fields.reduce(5) { $0 + ($1.map { 4 + $0.utf8.count } ?? 0) }
            + user.reduce(0) { $0 + 8 + $1.key.utf8.count + $1.value.utf8.count }
        var writer = ByteWriter(capacity: size)
        var flags: UInt8 = 0
        for (bit, field) in fields.enumerated() where field != nil { flags |= 1 << UInt8(bit) }
        writer.append(flags)
        for field in fields { if let field { writer.append(string: field) } }
        writer.append(UInt32(user.count))
        for (key, value) in user {
            writer.append(string: key)
            writer.append(string: value)
        }
        return writer.bytes
    }

    package static func decode(_ bytes: ArraySlice<UInt8>) throws -> ResourceMetadata {
        var reader = ByteReader(bytes) { IndexFormat.corrupt("metadata: \($0)") }
        let limit = ResourceMetadata.maximumEncodedSize
        let flags = try reader.read(UInt8.self, "flags")
        guard flags & 0xF0 == 0 else { throw reader.failure("unknown flags \(flags)") }
        var fields: [String?] = []
        for bit in 0..<4 {
            fields.append(flags & (1 << UInt8(bit)) != 0 ? try reader.readString("field \(bit)", limit: limit) : nil)
        }
        let count = Int(try reader.read(UInt32.self, "user entry count"))
        guard count <= reader.remaining / 8 else { throw reader.failure("user entry count \(count) exceeds the data") }
        var user: [String: String] = [:]
        for _ in 0..<count {
            let key = try reader.readString("user key", limit: limit)
            user[key] = try reader.readString("user value", limit: limit)
        }
        guard reader.remaining == 0 else { throw reader.failure("\(reader.remaining) bytes after the last field") }
        return ResourceMetadata(key: fields[0], contentType: fields[1], etag: fields[2], lastModified: fields[3], user: user)
    }
}
