import SparseCacheEngine

/// The store's catalog: one record per resource (key, file name, sizes, last access), so a
/// store with thousands of resources starts without reading their indexes. It is a cache of
/// facts whose truth lives in each resource's index: a stale or missing catalog costs only
/// access-time precision and a few index reads at start-up, never data.
///
/// ```
/// 0   8  magic "SPCCATLG"
/// 8   4  version (2; version 1 is read too: it has no runs)
/// 12  4  entry count N
/// 16  .. N entries: key (u32 count + UTF-8), name (same), length (u64, 2^64-1 unknown),
///        present bytes u64, allocated bytes u64, last access i64 (ns since 1970),
///        pinned prefix u64, then (version 2) the eviction policy's runs: u16 count R and
///        R times first segment u32, end segment u32, queue u8, use count u8, position u64
/// end 4  CRC32C of everything before it
/// ```
/// The runs are the ``EvictionPolicy/sfifo`` state (``SegmentQueues``), at most
/// ``SegmentQueues/maximumRunsPerResource`` per resource.
/// Saved by writing `catalog.tmp`, syncing it, renaming it over `catalog` and syncing the
/// directory, so a crash leaves the old catalog or the new one.
enum StoreCatalog {
    static let magic: [UInt8] = Array("SPCCATLG".utf8)
    static let version: UInt32 = 2
    static let fileName = "catalog"
    /// The length field of a resource whose length is not known yet.
    static let unknownLength = UInt64.max

    static func encode(_ entries: [StoreEntry], runs: [String: [SegmentQueues.Run]] = [:]) -> [UInt8] {
        var writer = ByteWriter(capacity: 16 + entries.count * 96)
        writer.append(bytes: magic)
        writer.append(version)
        writer.append(UInt32(entries.count))
        for entry in entries {
            writer.append(string: entry.key)
            writer.append(string: entry.name)
            writer.append(entry.length.map { UInt64($0) } ?? Self.unknownLength)
            writer.append(UInt64(entry.presentBytes))
            writer.append(UInt64(entry.allocatedBytes))
            writer.append(entry.lastAccess)
            writer.append(UInt64(entry.pinnedPrefix))
            let saved = (runs[entry.key] ?? []).prefix(Int(UInt16.max))
            writer.append(UInt16(saved.count))
            for run in saved {
                writer.append(UInt32(clamping: run.segments.lowerBound))
                writer.append(UInt32(clamping: run.segments.upperBound))
                writer.append(run.queue.rawValue)
                writer.append(run.frequency)
                writer.append(run.sequence)
            }
        }
        var bytes = writer.bytes
        withUnsafeBytes(of: crc32c(bytes).littleEndian) { bytes.append(contentsOf: $0) }
        return bytes
    }

    static func decode(_ bytes: [UInt8], path: String) throws -> [StoreEntry] {
        try decodeWithRuns(bytes, path: path).entries
    }

    /// The entries and, per key, the eviction policy's runs (none from a version 1 catalog).
    static func decodeWithRuns(_ bytes: [UInt8], path: String) throws -> (entries: [StoreEntry], runs: [String: [SegmentQueues.Run]]) {
        @Sendable func fail(_ detail: String) -> SparseCacheError {
            SparseCacheError(.corruptIndex, operation: "read catalog", path: path, detail: detail)
        }
        guard bytes.count >= 20, bytes.starts(with: magic) else { throw fail("wrong magic or too short") }
        let stored = bytes.suffix(4).withUnsafeBytes { $0.loadUnaligned(as: UInt32.self) }.littleEndian
        guard crc32c(bytes.dropLast(4)) == stored else { throw fail("checksum mismatch") }
        var reader = ByteReader(bytes[8..<(bytes.count - 4)]) { fail($0) }
        let version = try reader.read(UInt32.self, "version")
        guard version == 1 || version == Self.version else { throw fail("catalog version \(version) is not 1 or \(Self.version)") }
        let count = Int(try reader.read(UInt32.self, "entry count"))
        guard count <= reader.remaining / 48 else { throw fail("entry count \(count) exceeds the file") }
        var entries: [StoreEntry] = []
        var runs: [String: [SegmentQueues.Run]] = [:]
        entries.reserveCapacity(count)
        for _ in 0..<count {
            let key = try reader.readString("key", limit: SparseStore.maximumKeyLength)
            let name = try reader.readString("name", limit: 256)
            let length = try reader.read(UInt64.self, "length")
            entries.append(StoreEntry(
                key: key, name: name, length: length == Self.unknownLength ? nil : Int64(clamping: length),
                presentBytes: Int64(clamping: try reader.read(UInt64.self, "present bytes")),
                allocatedBytes: Int64(clamping: try reader.read(UInt64.self, "allocated bytes")),
                lastAccess: try reader.read(Int64.self, "last access"),
                pinnedPrefix: Int64(clamping: try reader.read(UInt64.self, "pinned prefix")), isOpen: false))
            guard version >= 2 else { continue }
            let runCount = Int(try reader.read(UInt16.self, "run count"))
            var list: [SegmentQueues.Run] = []
            for _ in 0..<runCount {
                let lower = Int(try reader.read(UInt32.self, "run start"))
                let upper = Int(try reader.read(UInt32.self, "run end"))
                let queue = try reader.read(UInt8.self, "run queue")
                let frequency = try reader.read(UInt8.self, "run use count")
                let sequence = try reader.read(UInt64.self, "run position")
                guard lower < upper, let queue = SegmentQueues.Queue(rawValue: queue) else { throw fail("run \(lower)..<\(upper) is malformed") }
                list.append(SegmentQueues.Run(segments: lower..<upper, queue: queue, frequency: frequency, sequence: sequence))
            }
            if !list.isEmpty { runs[key] = list }
        }
        return (entries, runs)
    }

    /// Loads the catalog; nil when there is none. A damaged catalog is reported as nil too:
    /// the store then rebuilds what it needs from the indexes.
    static func load(directory: String) throws -> [StoreEntry]? {
        try loadWithRuns(directory: directory)?.entries
    }

    /// ``load(directory:)`` with the eviction policy's runs per key.
    static func loadWithRuns(directory: String) throws -> (entries: [StoreEntry], runs: [String: [SegmentQueues.Run]])? {
        let path = directory + "/" + fileName
        guard try FileSystem.exists(path) else { return nil }
        let fd = try FileDescriptor.open(path, access: .readOnly)
        defer { fd.close() }
        let bytes = try fd.read(fromAbsoluteOffset: 0, count: Int(try fd.status().size))
        return try? decodeWithRuns(bytes, path: path)
    }

    static func save(_ entries: [StoreEntry], runs: [String: [SegmentQueues.Run]] = [:], directory: String) throws {
        let path = directory + "/" + fileName
        let temporary = path + ".tmp"
        if try FileSystem.exists(temporary) { try FileSystem.unlink(temporary) }
        let fd = try FileDescriptor.open(temporary, access: .readWrite, create: true, exclusive: true)
        do {
            try fd.write(toAbsoluteOffset: 0, encode(entries, runs: runs))
            try fd.dataSync()
            fd.close()
        } catch {
            fd.close()
            try? FileSystem.unlink(temporary)
            throw error
        }
        try FileSystem.rename(temporary, to: path)
        try FileSystem.syncParentDirectory(of: path)
    }
}
