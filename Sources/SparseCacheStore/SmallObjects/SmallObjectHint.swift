import SparseCacheEngine

/// The hint file of a sealed small-object log (`log-XXXXXXXX.sch` beside `log-XXXXXXXX.sco`):
/// every valid record of the log (key, offset, sizes, sequence, kind) without the metadata and
/// bodies, so open rebuilds its index from a few bytes per object instead of reading every
/// body (Bitcask's hint files, Squid rock's index). docs/FORMAT.md, "Hint files", describes it.
///
/// ```
/// Header (64 bytes):
/// 0   8  magic "SPCOBJHT"
/// 8   4  version (1)
/// 12  4  log file id
/// 16  4  the log's salt (from the log's header)
/// 20  4  record count N
/// 24  8  the log's size in bytes when the hint was made
/// 32  8  end of the log's last valid record
/// 40  8  damaged bytes the log's scan skipped
/// 48  4  entry bytes E
/// 52  4  CRC32C of bytes 0..<52
/// 56  8  zero
///
/// N entries (E bytes, back to back):
/// 0   1  kind: 1 object, 2 tombstone
/// 1   1  zero
/// 2   2  key bytes K (1...8192)
/// 4   4  record bytes (header, key, metadata, body, trailer)
/// 8   4  body bytes
/// 12  8  offset of the record in the log
/// 20  8  sequence number
/// 28  K  key (UTF-8)
///
/// end 4  CRC32C of the entries, seeded with the log's salt
/// ```
///
/// A hint is only a faster way to the result of scanning its log: it is written (to a
/// temporary name, fdatasync'ed, renamed, directory synced) only for a log that will never be
/// appended to again and whose every write was synced, from a scan of that log. Open uses it
/// only when its checksums hold and its id, salt and size match the log's; otherwise it scans
/// the log. A record a hint names is still checked at every read (both CRC32Cs, key,
/// sequence), so a hint can cost a miss, never a wrong answer.
enum SmallObjectHint {
    static let magic: [UInt8] = Array("SPCOBJHT".utf8)
    static let version: UInt32 = 1
    static let headerSize = 64
    static let entryHeaderSize = 28
    static let fileExtension = ".sch"
    static let temporaryExtension = ".sch.tmp"

    static func fileName(id: UInt32) -> String {
        String(SmallObjectFormat.fileName(id: id).dropLast(SmallObjectFormat.fileExtension.count)) + fileExtension
    }

    /// The log id of a hint file name (a temporary one too), or nil for another name.
    static func logID(fromName name: String) -> UInt32? {
        for suffix in [fileExtension, temporaryExtension] where name.hasSuffix(suffix) {
            return SmallObjectFormat.fileID(fromName: String(name.dropLast(suffix.count)) + SmallObjectFormat.fileExtension)
        }
        return nil
    }

    /// The hint of `scan`, a scan of a whole log file of `size` bytes.
    static func encode(_ scan: SmallObjectLogScan, size: Int64) -> [UInt8] {
        var entries = ByteWriter(capacity: scan.records.reduce(0) { $0 + entryHeaderSize + $1.key.utf8.count })
        for record in scan.records {
            let key = Array(record.key.utf8)
            entries.append(record.kind.rawValue)
            entries.append(UInt8(0))
            entries.append(UInt16(key.count))
            entries.append(UInt32(record.recordCount))
            entries.append(UInt32(record.bodyCount))
            entries.append(UInt64(record.offset))
            entries.append(record.sequence)
            entries.append(bytes: key)
        }
        var writer = ByteWriter(capacity: headerSize + entries.bytes.count + 4)
        writer.append(bytes: magic)
        writer.append(version)
        writer.append(scan.id)
        writer.append(scan.salt)
        writer.append(UInt32(scan.records.count))
        writer.append(UInt64(size))
        writer.append(UInt64(scan.validEnd))
        writer.append(UInt64(scan.damagedBytes))
        writer.append(UInt32(entries.bytes.count))
        writer.append(crc32c(writer.bytes))
        writer.append(bytes: repeatElement(0, count: headerSize - writer.bytes.count))
        writer.append(bytes: entries.bytes)
        writer.append(crc32c(entries.bytes, seed: scan.salt))
        return writer.bytes
    }

    /// The header facts a hint must share with its log before it is used.
    struct Header: Equatable {
        var id: UInt32
        var salt: UInt32
        var count: Int
        var size: Int64
        var validEnd: Int64
        var damagedBytes: Int64
        var entryBytes: Int
    }

    /// Why a hint was refused (open then scans the log).
    enum Damage: Error, Equatable {
        case truncated, magic, version, checksum, entries, mismatch
    }

    /// The scan a hint stands for; which check failed otherwise. Every entry is checked for
    /// bounds (lengths, offsets inside the valid part, in increasing order, not overlapping)
    /// as well as the checksums, so even a hint that is wrong but well formed names only
    /// places inside its log.
    static func decode(_ bytes: [UInt8]) -> Result<(SmallObjectLogScan, size: Int64), Damage> {
        bytes.withUnsafeBytes { raw -> Result<(SmallObjectLogScan, size: Int64), Damage> in
            func load<T: FixedWidthInteger>(_: T.Type, _ offset: Int) -> T {
                T(littleEndian: raw.loadUnaligned(fromByteOffset: offset, as: T.self))
            }
            guard raw.count >= headerSize + 4 else { return .failure(.truncated) }
            guard bytes.starts(with: magic) else { return .failure(.magic) }
            guard crc32c(UnsafeRawBufferPointer(rebasing: raw[0..<52])) == load(UInt32.self, 52) else { return .failure(.checksum) }
            guard load(UInt32.self, 8) == version else { return .failure(.version) }
            guard load(UInt64.self, 56) == 0 else { return .failure(.entries) }
            let header = Header(
                id: load(UInt32.self, 12), salt: load(UInt32.self, 16), count: Int(load(UInt32.self, 20)),
                size: Int64(clamping: load(UInt64.self, 24)), validEnd: Int64(clamping: load(UInt64.self, 32)),
                damagedBytes: Int64(clamping: load(UInt64.self, 40)), entryBytes: Int(load(UInt32.self, 48)))
            guard raw.count == headerSize + header.entryBytes + 4 else { return .failure(.truncated) }
            let entries = UnsafeRawBufferPointer(rebasing: raw[headerSize..<(headerSize + header.entryBytes)])
            guard crc32c(entries, seed: header.salt) == load(UInt32.self, headerSize + header.entryBytes) else {
                return .failure(.checksum)
            }
            guard header.validEnd <= header.size, header.validEnd >= Int64(SmallObjectFormat.headerSize),
                header.count <= header.entryBytes / (entryHeaderSize + 1)
            else { return .failure(.entries) }
            var scan = SmallObjectLogScan(id: header.id, salt: header.salt, validEnd: header.validEnd, size: header.size)
            scan.damagedBytes = header.damagedBytes
            scan.records.reserveCapacity(header.count)
            var position = headerSize
            let end = headerSize + header.entryBytes
            var previousEnd = Int64(SmallObjectFormat.headerSize)
            for _ in 0..<header.count {
                guard position + entryHeaderSize <= end, let kind = SmallObjectFormat.Kind(rawValue: raw[position]) else {
                    return .failure(.entries)
                }
                let keyCount = Int(load(UInt16.self, position + 2))
                let recordCount = Int(load(UInt32.self, position + 4))
                let bodyCount = Int(load(UInt32.self, position + 8))
                let offset = Int64(clamping: load(UInt64.self, position + 12))
                let sequence = load(UInt64.self, position + 20)
                let keyStart = position + entryHeaderSize
                let minimum = SmallObjectFormat.recordHeaderSize + keyCount + bodyCount + SmallObjectFormat.trailerSize
                guard (1...SparseStore.maximumKeyLength).contains(keyCount), keyStart + keyCount <= end,
                    bodyCount <= SmallObjectFormat.maximumBody, recordCount >= minimum,
                    recordCount <= minimum + SmallObjectFormat.maximumMetadata, kind == .object || bodyCount == 0,
                    offset >= previousEnd, offset + Int64(recordCount) <= header.validEnd
                else { return .failure(.entries) }
                let key = String(decoding: UnsafeRawBufferPointer(rebasing: raw[keyStart..<(keyStart + keyCount)]), as: UTF8.self)
                scan.records.append(
                    SmallObjectLogScan.Record(
                        kind: kind, sequence: sequence, key: key, offset: offset, recordCount: recordCount, bodyCount: bodyCount))
                previousEnd = offset + Int64(recordCount)
                position = keyStart + keyCount
            }
            guard position == end else { return .failure(.entries) }
            return .success((scan, header.size))
        }
    }

    // MARK: Files

    /// Writes the hint of `scan` for the log in `directory`: to a temporary name, synced,
    /// renamed over the hint's name, directory synced when `syncDirectory` (open syncs it once
    /// for all the hints it writes). A failure leaves no hint (the log is scanned next time).
    static func write(_ scan: SmallObjectLogScan, size: Int64, directory: String, syncDirectory: Bool) throws {
        let path = directory + "/" + fileName(id: scan.id)
        let temporary =
            directory + "/" + SmallObjectFormat.fileName(id: scan.id).dropLast(SmallObjectFormat.fileExtension.count)
            + temporaryExtension
        if try FileSystem.exists(temporary) { try FileSystem.unlink(temporary) }
        let descriptor = try FileDescriptor.open(temporary, access: .readWrite, create: true, exclusive: true)
        do {
            try descriptor.write(toAbsoluteOffset: 0, encode(scan, size: size))
            try descriptor.dataSync()
            descriptor.close()
            try FileSystem.rename(temporary, to: path)
        } catch {
            descriptor.close()
            try? FileSystem.unlink(temporary)
            throw error
        }
        if syncDirectory { try FileSystem.syncParentDirectory(of: path) }
    }

    /// Reads a sealed log whole (it is never appended to again), scans it and writes its hint.
    /// For a log just sealed: run off the actor, never on the cooperative pool.
    static func make(for log: SmallObjectLog, directory: String) throws {
        let file = try log.file()
        let size = try file.descriptor.status().size
        let bytes = try file.descriptor.read(fromAbsoluteOffset: 0, count: Int(size))
        guard case .success(let scan) = SmallObjectLogScan.scan(bytes), scan.id == log.id, scan.salt == log.salt else { return }
        try write(scan, size: size, directory: directory, syncDirectory: true)
    }

    /// The scan the hint of log `id` stands for, when the hint is usable for `log` (a log of
    /// `size` bytes whose header holds `salt`); nil when there is no hint or it is refused.
    static func load(directory: String, id: UInt32, salt: UInt32, size: Int64) -> SmallObjectLogScan? {
        let path = directory + "/" + fileName(id: id)
        guard let descriptor = try? FileDescriptor.open(path, access: .readOnly) else { return nil }
        defer { descriptor.close() }
        guard let hintSize = try? descriptor.status().size, hintSize <= Int64(Int32.max),
            let bytes = try? descriptor.read(fromAbsoluteOffset: 0, count: Int(hintSize)),
            case .success(let decoded) = decode(bytes), decoded.0.id == id, decoded.0.salt == salt, decoded.size == size
        else { return nil }
        return decoded.0
    }

    /// The record count a hint's header gives (not checked further: for sizing the index
    /// before the hints are read), nil without a hint. Starts reading the whole hint in the
    /// background too, so the disk reads of the hints overlap open's work on the ones before.
    static func recordCount(directory: String, id: UInt32) -> Int? {
        guard let descriptor = try? FileDescriptor.open(directory + "/" + fileName(id: id), access: .readOnly) else { return nil }
        defer { descriptor.close() }
        descriptor.adviseWillNeed()
        guard let header = try? descriptor.read(fromAbsoluteOffset: 0, count: 24), header.count == 24, header.starts(with: magic) else {
            return nil
        }
        return Int(SmallObjectFormat.load(UInt32.self, header[...], at: 20))
    }

    /// Deletes the hint of log `id` (if any): before its log goes, so no hint outlives it.
    static func remove(directory: String, id: UInt32) throws {
        let path = directory + "/" + fileName(id: id)
        do {
            try FileSystem.unlink(path)
        } catch let error as SparseCacheError where error.code == .notFound {
        }
    }
}
