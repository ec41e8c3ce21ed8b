/// What recovery may read of a resource's data file when its journal is damaged in the
/// middle: the CRC32C of a segment's bytes, and where the file holds data.
///
/// A journal record that does not validate while intact records with later sequence numbers
/// follow it was committed (the next commit starts only after its record is synced), but what
/// it named cannot be read. Recovery then rebuilds the state from every intact record and
/// settles each segment it would claim against these bytes: present only when they match the
/// CRC32C a record gives. Blocking: recovery runs on an I/O queue.
struct DataEvidence {
    /// CRC32C of the data file's bytes in `range`, or nil when they cannot be read whole (the
    /// file ends before, or a read error: bytes that cannot be read prove nothing).
    var checksum: (Range<Int64>) throws -> UInt32?
    /// The byte ranges of the data file that hold data (not holes), ascending.
    var dataExtents: () throws -> [Range<Int64>]

    /// The evidence of the data file open at `data`.
    static func reading(_ data: FileDescriptor) -> DataEvidence {
        DataEvidence(
            checksum: { range in
                let bytes: [UInt8]
                do {
                    bytes = try data.read(fromAbsoluteOffset: range.lowerBound, count: range.count)
                } catch let error as SparseCacheError where error.code == .io {
                    return nil
                }
                return bytes.count == range.count ? crc32c(bytes) : nil
            },
            dataExtents: {
                let size = try data.status().size
                var extents: [Range<Int64>] = []
                var position: Int64 = 0
                while position < size, let start = try data.seekData(from: position), start < size {
                    let end = min(try data.seekHole(from: start) ?? size, size)
                    extents.append(start..<end)
                    position = end
                }
                return extents
            })
    }

    /// The evidence of a data file held in memory, with the extents that hold data.
    static func memory(_ bytes: [UInt8], extents: [Range<Int64>]) -> DataEvidence {
        DataEvidence(
            checksum: { range in
                guard range.upperBound <= Int64(bytes.count) else { return nil }
                return crc32c(bytes[Int(range.lowerBound)..<Int(range.upperBound)])
            },
            dataExtents: { extents })
    }
}
