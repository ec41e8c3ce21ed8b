import SparseCacheEngine

/// What reading one log file found: its records (checked whole), the damaged bytes it
/// skipped, and where the valid part ends. A hint file (``SmallObjectHint``) holds the same
/// facts for a sealed log, so open rebuilds this without reading the log's bodies.
struct SmallObjectLogScan {
    /// One valid record: what the in-memory index and replay need of it.
    struct Record {
        var kind: SmallObjectFormat.Kind
        var sequence: UInt64
        var key: String
        var offset: Int64
        /// Bytes of the whole record (header, key, metadata, body, trailer).
        var recordCount: Int
        var bodyCount: Int
    }

    var id: UInt32
    var salt: UInt32
    var records: [Record] = []
    /// Bytes between valid records that hold no valid record (a damaged record, torn
    /// garbage): skipped, never served.
    var damagedBytes: Int64 = 0
    /// The end of the last valid record (the header's end when there is none): what follows
    /// is a torn tail, cut when the file is the one appended to.
    var validEnd: Int64
    var size: Int64

    /// Reads and checks every record of `bytes` (a whole file). Returns the header's damage
    /// when the header itself is unusable (no record can be checked without its salt).
    static func scan(_ bytes: [UInt8]) -> Result<SmallObjectLogScan, SmallObjectFormat.Damage> {
        let header: (id: UInt32, salt: UInt32)
        switch SmallObjectFormat.decodeFileHeader(bytes) {
        case .success(let found): header = found
        case .failure(let damage): return .failure(damage)
        }
        var scan = SmallObjectLogScan(
            id: header.id, salt: header.salt, validEnd: Int64(SmallObjectFormat.headerSize), size: Int64(bytes.count))
        var position = SmallObjectFormat.headerSize
        while position < bytes.count {
            if let record = scan.record(at: position, in: bytes) {
                scan.records.append(record)
                position += record.recordCount
                scan.validEnd = Int64(position)
                continue
            }
            // Not a valid record: look for the next one (a damaged record in the middle must
            // not cost the acknowledged records after it). None: the rest is a torn tail.
            var next = position + 1
            var found: Record?
            while next + SmallObjectFormat.recordHeaderSize <= bytes.count {
                if SmallObjectFormat.load(UInt32.self, bytes[...], at: next) == SmallObjectFormat.recordMagic,
                    let record = scan.record(at: next, in: bytes)
                {
                    found = record
                    break
                }
                next += 1
            }
            guard let found else { break }
            scan.damagedBytes += Int64(next - position)
            scan.records.append(found)
            position = next + found.recordCount
            scan.validEnd = Int64(position)
        }
        return .success(scan)
    }

    private func record(at position: Int, in bytes: [UInt8]) -> Record? {
        guard position + SmallObjectFormat.recordHeaderSize <= bytes.count,
            case .success(let header) = SmallObjectFormat.decodeRecordHeader(bytes[position...], salt: salt),
            position + header.recordCount <= bytes.count,
            case .success(let decoded) = SmallObjectFormat.decodeRecord(
                bytes[position..<(position + header.recordCount)], salt: salt)
        else { return nil }
        return Record(
            kind: header.kind, sequence: header.sequence, key: decoded.key, offset: Int64(position), recordCount: header.recordCount,
            bodyCount: header.bodyCount)
    }
}
