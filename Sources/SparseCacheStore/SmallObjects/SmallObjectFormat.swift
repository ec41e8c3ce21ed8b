import SparseCacheEngine

/// The byte layout of a small-object log file, in one place (docs/FORMAT.md, "Small-object
/// logs", describes it for readers of the disk).
///
/// ```
/// File header (64 bytes, written and synced before any record):
/// 0   8  magic "SPCOBJLG"
/// 8   4  version (1)
/// 12  4  file id (the number in the file name)
/// 16  4  salt: seeds every record checksum of this file
/// 20  4  CRC32C of bytes 0..<20
/// 24  40 zero
///
/// Record (appended after the header, back to back):
/// 0   4  record magic "SOR1"
/// 4   1  kind: 1 object, 2 tombstone (the key was removed)
/// 5   3  zero
/// 8   8  sequence number (store-wide; the highest one of a key wins at open)
/// 16  4  key bytes K (1...8192)
/// 20  4  metadata bytes M (at most 64 KiB; 0 for a tombstone)
/// 24  4  body bytes B (at most 1 MiB; 0 for a tombstone)
/// 28  4  CRC32C of bytes 0..<28, seeded with the salt
/// 32  K  key (UTF-8), M metadata (ResourceMetadata encoding), B body
/// end 4  CRC32C of key, metadata and body, seeded with the salt
/// ```
///
/// The header checksum lets open trust a record's lengths before reading its payload; the
/// payload checksum decides whether the record is served. The salt is drawn anew for every
/// file, so bytes copied from another log never validate here.
enum SmallObjectFormat {
    static let magic: [UInt8] = Array("SPCOBJLG".utf8)
    static let version: UInt32 = 1
    static let headerSize = 64
    static let recordMagic: UInt32 = 0x3152_4F53  // "SOR1" little-endian
    static let recordHeaderSize = 32
    static let trailerSize = 4
    /// The largest body a record holds: a bound for open's scan, far above any threshold used.
    static let maximumBody = 1 << 20
    static let maximumMetadata = ResourceMetadata.maximumEncodedSize
    static let fileExtension = ".sco"

    enum Kind: UInt8 {
        case object = 1
        case tombstone = 2
    }

    /// The lengths and identity of a record, as its checked header gives them.
    struct RecordHeader: Equatable {
        var kind: Kind
        var sequence: UInt64
        var keyCount: Int
        var metadataCount: Int
        var bodyCount: Int

        var payloadCount: Int { keyCount + metadataCount + bodyCount }
        var recordCount: Int { recordHeaderSize + payloadCount + trailerSize }
    }

    /// Why a file header or record was refused.
    enum Damage: Error, Equatable {
        case magic, version, checksum, lengths, kind, truncated, key
    }

    static func fileName(id: UInt32) -> String {
        "log-" + String(id, radix: 16).leftPadded(to: 8) + fileExtension
    }

    /// The id in a log file name, or nil for a name this store does not make.
    static func fileID(fromName name: String) -> UInt32? {
        guard name.hasPrefix("log-"), name.hasSuffix(fileExtension) else { return nil }
        let digits = name.dropFirst(4).dropLast(fileExtension.count)
        guard digits.count == 8 else { return nil }
        return UInt32(digits, radix: 16)
    }

    static func encodeFileHeader(id: UInt32, salt: UInt32) -> [UInt8] {
        var writer = ByteWriter(capacity: headerSize)
        writer.append(bytes: magic)
        writer.append(version)
        writer.append(id)
        writer.append(salt)
        writer.append(crc32c(writer.bytes))
        writer.append(bytes: repeatElement(0, count: headerSize - writer.bytes.count))
        return writer.bytes
    }

    /// The id and salt of a file header; which check failed otherwise.
    static func decodeFileHeader(_ bytes: [UInt8]) -> Result<(id: UInt32, salt: UInt32), Damage> {
        guard bytes.count >= headerSize else { return .failure(.truncated) }
        guard bytes.starts(with: magic) else { return .failure(.magic) }
        let stored = load(UInt32.self, bytes[...], at: 20)
        guard crc32c(bytes[0..<20]) == stored else { return .failure(.checksum) }
        guard load(UInt32.self, bytes[...], at: 8) == version else { return .failure(.version) }
        return .success((load(UInt32.self, bytes[...], at: 12), load(UInt32.self, bytes[...], at: 16)))
    }

    /// The size of a whole record of these parts.
    static func recordSize(keyCount: Int, metadataCount: Int, bodyCount: Int) -> Int {
        recordHeaderSize + keyCount + metadataCount + bodyCount + trailerSize
    }

    /// Appends one whole record to `buffer`: header, key, metadata, body, trailer. (A batch is
    /// encoded straight into the bytes its one pwrite sends.)
    static func appendRecord(
        to buffer: inout [UInt8], kind: Kind, sequence: UInt64, key: String, metadata: [UInt8], body: [UInt8], salt: UInt32
    ) {
        let keyCount = key.utf8.count
        var header = ByteWriter(capacity: recordHeaderSize)
        header.append(recordMagic)
        header.append(kind.rawValue)
        header.append(bytes: [0, 0, 0])
        header.append(sequence)
        header.append(UInt32(keyCount))
        header.append(UInt32(metadata.count))
        header.append(UInt32(body.count))
        header.append(crc32c(header.bytes, seed: salt))
        buffer.append(contentsOf: header.bytes)
        let keyStart = buffer.count
        buffer.append(contentsOf: key.utf8)
        buffer.append(contentsOf: metadata)
        buffer.append(contentsOf: body)
        // Key, metadata and body lie side by side: one checksum over the three.
        let payloadCRC = crc32c(buffer[keyStart...], seed: salt)
        withUnsafeBytes(of: payloadCRC.littleEndian) { buffer.append(contentsOf: $0) }
    }

    /// The header at the start of `bytes` (at least ``recordHeaderSize`` of them), checked:
    /// magic, checksum, kind and lengths within their bounds.
    static func decodeRecordHeader(_ bytes: ArraySlice<UInt8>, salt: UInt32) -> Result<RecordHeader, Damage> {
        bytes.withUnsafeBytes { decodeRecordHeader(raw: $0, salt: salt) }
    }

    /// ``decodeRecordHeader(_:salt:)`` of raw bytes.
    static func decodeRecordHeader(raw bytes: UnsafeRawBufferPointer, salt: UInt32) -> Result<RecordHeader, Damage> {
        guard bytes.count >= recordHeaderSize else { return .failure(.truncated) }
        guard load(UInt32.self, bytes, at: 0) == recordMagic else { return .failure(.magic) }
        guard crc32c(UnsafeRawBufferPointer(rebasing: bytes[0..<28]), seed: salt) == load(UInt32.self, bytes, at: 28) else {
            return .failure(.checksum)
        }
        guard let kind = Kind(rawValue: bytes[4]), bytes[5] == 0, bytes[6] == 0, bytes[7] == 0 else { return .failure(.kind) }
        let header = RecordHeader(
            kind: kind, sequence: load(UInt64.self, bytes, at: 8), keyCount: Int(load(UInt32.self, bytes, at: 16)),
            metadataCount: Int(load(UInt32.self, bytes, at: 20)), bodyCount: Int(load(UInt32.self, bytes, at: 24)))
        guard (1...SparseStore.maximumKeyLength).contains(header.keyCount), header.metadataCount <= maximumMetadata,
            header.bodyCount <= maximumBody, kind == .object || header.metadataCount + header.bodyCount == 0
        else { return .failure(.lengths) }
        return .success(header)
    }

    /// Checks a whole record (`bytes` holds exactly it) and returns its parts.
    static func decodeRecord(_ bytes: ArraySlice<UInt8>, salt: UInt32) -> Result<
        (RecordHeader, key: String, metadata: ArraySlice<UInt8>, body: ArraySlice<UInt8>), Damage
    > {
        let checked = bytes.withUnsafeBytes { checkRecord($0, salt: salt) }
        switch checked {
        case .failure(let damage):
            return .failure(damage)
        case .success(let parts):
            let base = bytes.startIndex
            guard let key = String(validating: bytes[(base + parts.key.lowerBound)..<(base + parts.key.upperBound)], as: UTF8.self) else {
                return .failure(.key)
            }
            return .success(
                (parts.header, key, bytes[(base + parts.metadata.lowerBound)..<(base + parts.metadata.upperBound)],
                    bytes[(base + parts.body.lowerBound)..<(base + parts.body.upperBound)]))
        }
    }

    /// Checks a whole record (`bytes` holds exactly it): its header, and the checksum of its
    /// key, metadata and body, whose places in `bytes` it returns.
    static func checkRecord(_ bytes: UnsafeRawBufferPointer, salt: UInt32) -> Result<
        (header: RecordHeader, key: Range<Int>, metadata: Range<Int>, body: Range<Int>), Damage
    > {
        let header: RecordHeader
        switch decodeRecordHeader(raw: bytes, salt: salt) {
        case .success(let found): header = found
        case .failure(let damage): return .failure(damage)
        }
        guard bytes.count == header.recordCount else { return .failure(.truncated) }
        let keyStart = recordHeaderSize
        let metadataStart = keyStart + header.keyCount
        let bodyStart = metadataStart + header.metadataCount
        let end = bodyStart + header.bodyCount
        guard crc32c(UnsafeRawBufferPointer(rebasing: bytes[keyStart..<end]), seed: salt) == load(UInt32.self, bytes, at: end) else {
            return .failure(.checksum)
        }
        return .success((header, keyStart..<metadataStart, metadataStart..<bodyStart, bodyStart..<end))
    }

    /// A little-endian integer at absolute index `offset` of `bytes`.
    static func load<T: FixedWidthInteger & UnsignedInteger>(_: T.Type, _ bytes: ArraySlice<UInt8>, at offset: Int) -> T {
        bytes.withUnsafeBytes { load(T.self, $0, at: offset - bytes.startIndex) }
    }

    /// A little-endian integer at `offset` of `bytes`.
    static func load<T: FixedWidthInteger & UnsignedInteger>(_: T.Type, _ bytes: UnsafeRawBufferPointer, at offset: Int) -> T {
        T(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: T.self))
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
