import CShim
import Foundation
import SparseCache

/// A fill workload: writes in order, each a buffer at an offset, and a commit (or save, or
/// fdatasync) after every `commitEvery` bytes written and once at the end.
struct FillPlan: Sendable {
    struct Write: Sendable {
        var offset: Int64
        /// Index into `buffers`.
        var buffer: Int
    }

    var length: Int64
    var writes: [Write]
    var buffers: [[UInt8]]
    var commitEvery: Int64
}

/// The four ways to fill a resource durably that scenarios 1 and 2 compare.
enum FillContender: Int, CaseIterable, Sendable {
    /// The physical limit: the engine's data syscalls and nothing else.
    case raw
    /// The floor of sparsecache's commit protocol: raw, plus at each commit a 4 KiB record
    /// appended to a second file and a second fdatasync (data first, index second).
    case protocolFloor
    case sparseFile
    /// The design sparsecache replaced: FileHandle seek/write plus a JSON file of ranges.
    case fileHandleJSON
    /// The other design it replaced: one file per 512 KiB chunk plus a metadata file.
    case chunkPerFile

    var name: String {
        switch self {
        case .raw: "raw pwrite + fdatasync"
        case .protocolFloor: "raw + 4 KiB record + 2nd fdatasync"
        case .sparseFile: "SparseFile (write + commit)"
        case .fileHandleJSON: "FileHandle + JSON ranges"
        case .chunkPerFile: "chunk-per-file (512 KiB)"
        }
    }

    static let chunkSize = 512 << 10

    /// Fills a fresh resource in `directory` and returns the seconds from the first open to
    /// the last sync (everything written is durable when the clock stops).
    func run(_ plan: FillPlan, in directory: String) async throws -> Double {
        switch self {
        case .raw: try await BlockingExecutor.shared.run { try Self.raw(plan, directory, record: false) }
        case .protocolFloor: try await BlockingExecutor.shared.run { try Self.raw(plan, directory, record: true) }
        case .sparseFile: try await Self.sparseFile(plan, directory)
        case .fileHandleJSON: try await BlockingExecutor.shared.run { try Self.fileHandleJSON(plan, directory) }
        case .chunkPerFile: try await BlockingExecutor.shared.run { try Self.chunkPerFile(plan, directory) }
        }
    }

    // MARK: Contenders

    /// pwrite each buffer, fdatasync at the commit cadence, through the engine's own shim. Like
    /// SparseFile with a known length, the file is first sized with ftruncate. With `record`,
    /// each sync is followed by a 4 KiB pwrite at the end of a second file and its fdatasync.
    private static func raw(_ plan: FillPlan, _ directory: String, record: Bool) throws -> Double {
        let path = directory + "/raw.bin"
        let recordPath = directory + "/raw.records"
        let flags = Int32(SC_O_RDWR) | Int32(SC_O_CREAT) | Int32(SC_O_TRUNC)
        let recordBytes = [UInt8](repeating: 0x5A, count: 4096)
        let start = Monotonic.now()
        let fd = try Raw.open(path, flags: flags)
        defer { _ = sc_close(fd) }
        let recordFD = record ? try Raw.open(recordPath, flags: flags) : -1
        defer { if recordFD >= 0 { _ = sc_close(recordFD) } }
        var recordEnd: Int64 = 0
        func sync() throws {
            try Raw.fdatasync(fd, path: path)
            guard record else { return }
            try Raw.writeAll(recordFD, recordBytes, at: recordEnd, path: recordPath)
            recordEnd += Int64(recordBytes.count)
            try Raw.fdatasync(recordFD, path: recordPath)
        }
        try Raw.check(sc_ftruncate(fd, plan.length), "ftruncate", path)
        var sinceSync: Int64 = 0
        for write in plan.writes {
            let bytes = plan.buffers[write.buffer]
            try Raw.writeAll(fd, bytes, at: write.offset, path: path)
            sinceSync += Int64(bytes.count)
            if sinceSync >= plan.commitEvery {
                try sync()
                sinceSync = 0
            }
        }
        try sync()
        return Monotonic.seconds(since: start)
    }

    /// SparseFile with a manual commit policy and an explicit commit at the cadence. The
    /// partial-segment budget covers the whole resource so a random order drops nothing.
    private static func sparseFile(_ plan: FillPlan, _ directory: String) async throws -> Double {
        let path = directory + "/resource.bin"
        var options = SparseFileOptions()
        options.length = plan.length
        options.commitPolicy = .manual
        options.partialSegmentBudget = max(options.partialSegmentBudget, Int(plan.length))
        let start = Monotonic.now()
        let file = try await SparseFile.open(path, options: options)
        var sinceCommit: Int64 = 0
        for write in plan.writes {
            let bytes = plan.buffers[write.buffer]
            try await file.write(bytes, at: write.offset)
            sinceCommit += Int64(bytes.count)
            if sinceCommit >= plan.commitEvery {
                try await file.commit()
                sinceCommit = 0
            }
        }
        try await file.commit()
        let complete = await file.isComplete
        try await file.close()
        let seconds = Monotonic.seconds(since: start)
        guard complete else { throw BenchError("SparseFile fill did not complete: segments were dropped") }
        return seconds
    }

    /// FileHandle seek + write; each save fsyncs the data (FileHandle.synchronize), writes the
    /// merged ranges as JSON to a temporary file, fsyncs it, renames it over the old one and
    /// fsyncs the directory: the least this design needs to be crash-safe.
    private static func fileHandleJSON(_ plan: FillPlan, _ directory: String) throws -> Double {
        struct RangeFile: Codable {
            var length: Int64
            var ranges: [[Int64]]
        }
        let path = directory + "/resource.bin"
        let jsonPath = directory + "/resource.ranges.json"
        let temporary = jsonPath + ".tmp"
        let start = Monotonic.now()
        guard FileManager.default.createFile(atPath: path, contents: nil) else {
            throw BenchError("cannot create \(path)")
        }
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path))
        defer { try? handle.close() }
        var ranges = MergedRanges()
        let encoder = JSONEncoder()
        func save() throws {
            try handle.synchronize()
            let json = try encoder.encode(RangeFile(length: plan.length, ranges: ranges.ranges.map { [$0.lowerBound, $0.upperBound] }))
            guard FileManager.default.createFile(atPath: temporary, contents: json) else {
                throw BenchError("cannot create \(temporary)")
            }
            let side = try FileHandle(forWritingTo: URL(fileURLWithPath: temporary))
            try side.synchronize()
            try side.close()
            try Raw.check(rename(temporary, jsonPath), "rename", temporary)
            try Raw.syncDirectory(directory)
        }
        var sinceSave: Int64 = 0
        for write in plan.writes {
            let bytes = plan.buffers[write.buffer]
            try handle.seek(toOffset: UInt64(write.offset))
            try handle.write(contentsOf: bytes)
            ranges.insert(write.offset..<(write.offset + Int64(bytes.count)))
            sinceSave += Int64(bytes.count)
            if sinceSave >= plan.commitEvery {
                try save()
                sinceSave = 0
            }
        }
        try save()
        return Monotonic.seconds(since: start)
    }

    /// Each 512 KiB chunk is its own file, written whole once all its bytes arrived (partial
    /// chunks wait in memory, like the engine's partial segments). Each save fdatasyncs the
    /// chunk files written since the last one, writes the metadata (the list of chunks) to a
    /// temporary file, fdatasyncs it, renames it and fsyncs the directory. System calls go
    /// through the shim: this is the design at its best, not Foundation's overhead.
    private static func chunkPerFile(_ plan: FillPlan, _ directory: String) throws -> Double {
        struct Metadata: Codable {
            var length: Int64
            var chunkSize: Int
            var chunks: [Int]
        }
        let chunkSize = Self.chunkSize
        let metadataPath = directory + "/metadata.json"
        let temporary = metadataPath + ".tmp"
        let writeFlags = Int32(SC_O_WRONLY) | Int32(SC_O_CREAT) | Int32(SC_O_TRUNC)
        let start = Monotonic.now()
        var partial: [Int: (buffer: [UInt8], filled: Int)] = [:]
        var unsynced: [(fd: Int32, path: String)] = []
        defer { for file in unsynced { _ = sc_close(file.fd) } }
        var durable: [Int] = []
        var written: [Int] = []
        let encoder = JSONEncoder()

        func chunkLength(_ chunk: Int) -> Int { Int(min(Int64(chunkSize), plan.length - Int64(chunk) * Int64(chunkSize))) }
        func writeChunk(_ chunk: Int, _ bytes: UnsafeRawBufferPointer) throws {
            let path = directory + "/chunk-\(chunk)"
            let fd = try Raw.open(path, flags: writeFlags)
            unsynced.append((fd, path))
            try Raw.writeAll(fd, bytes, at: 0, path: path)
            written.append(chunk)
        }
        func save() throws {
            for file in unsynced {
                try Raw.fdatasync(file.fd, path: file.path)
                _ = sc_close(file.fd)
            }
            unsynced.removeAll()
            durable.append(contentsOf: written)
            written.removeAll()
            let json = try encoder.encode(Metadata(length: plan.length, chunkSize: chunkSize, chunks: durable.sorted()))
            let fd = try Raw.open(temporary, flags: writeFlags)
            defer { _ = sc_close(fd) }
            try Raw.writeAll(fd, Array(json), at: 0, path: temporary)
            try Raw.fdatasync(fd, path: temporary)
            try Raw.check(rename(temporary, metadataPath), "rename", temporary)
            try Raw.syncDirectory(directory)
        }

        var sinceSave: Int64 = 0
        for write in plan.writes {
            let bytes = plan.buffers[write.buffer]
            let end = write.offset + Int64(bytes.count)
            var position = write.offset
            while position < end {
                let chunk = Int(position / Int64(chunkSize))
                let chunkStart = Int64(chunk) * Int64(chunkSize)
                let length = chunkLength(chunk)
                let pieceEnd = min(end, chunkStart + Int64(length))
                let source = Int(position - write.offset)..<Int(pieceEnd - write.offset)
                if position == chunkStart, source.count == length {
                    try bytes.withUnsafeBytes { try writeChunk(chunk, UnsafeRawBufferPointer(rebasing: $0[source])) }
                } else {
                    var entry = partial.removeValue(forKey: chunk) ?? ([UInt8](repeating: 0, count: length), 0)
                    let target = Int(position - chunkStart)
                    entry.buffer.withUnsafeMutableBytes { destination in
                        bytes.withUnsafeBytes { from in
                            UnsafeMutableRawBufferPointer(rebasing: destination[target..<(target + source.count)])
                                .copyMemory(from: UnsafeRawBufferPointer(rebasing: from[source]))
                        }
                    }
                    entry.filled += source.count
                    if entry.filled == length {
                        try entry.buffer.withUnsafeBytes { try writeChunk(chunk, $0) }
                    } else {
                        partial[chunk] = entry
                    }
                }
                position = pieceEnd
            }
            sinceSave += Int64(bytes.count)
            if sinceSave >= plan.commitEvery {
                try save()
                sinceSave = 0
            }
        }
        try save()
        let seconds = Monotonic.seconds(since: start)
        guard partial.isEmpty else { throw BenchError("chunk-per-file fill left \(partial.count) chunks incomplete") }
        return seconds
    }
}

/// Sorted, disjoint, non-adjacent byte ranges (what the JSON range file stores).
struct MergedRanges {
    private(set) var ranges: [Range<Int64>] = []

    mutating func insert(_ range: Range<Int64>) {
        guard !range.isEmpty else { return }
        // The first range that ends at or after the new one starts: it may touch it.
        var low = 0
        var high = ranges.count
        while low < high {
            let middle = (low + high) / 2
            if ranges[middle].upperBound < range.lowerBound { low = middle + 1 } else { high = middle }
        }
        var merged = range
        var end = low
        while end < ranges.count, ranges[end].lowerBound <= merged.upperBound {
            merged = min(merged.lowerBound, ranges[end].lowerBound)..<max(merged.upperBound, ranges[end].upperBound)
            end += 1
        }
        ranges.replaceSubrange(low..<end, with: [merged])
    }
}

/// Runs the four fill contenders interleaved and returns one measurement each, in MB/s,
/// with the ratio to the raw baseline.
enum FillBench {
    static func measure(
        plan: FillPlan, scenario: Int, scenarioName: String, workload: String, scratch: Scratch, repetitions: Int
    ) async throws -> [Measurement] {
        let contenders = FillContender.allCases
        let samples = try await interleaved(contenders: contenders.count, repetitions: repetitions) { index, repetition in
            let directory = try scratch.directory("fill-\(scenario)-\(index)")
            defer { scratch.remove(directory) }
            // The previous run's deleted files (and, on a file system mounted with `discard`,
            // their discards) are flushed now rather than inside the next run's first sync.
            try await settleDisk()
            let seconds = try await contenders[index].run(plan, in: directory)
            return Sample(value: Double(plan.length) / seconds / 1e6)
        }
        var measurements = contenders.enumerated().map { index, contender in
            Measurement(
                scenario: scenario, scenarioName: scenarioName, workload: workload, contender: contender.name,
                unit: "MB/s", samples: samples[index])
        }
        for index in measurements.indices { measurements[index].compare(to: measurements[0]) }
        return measurements
    }
}

/// Flushes everything dirty (sync(2)) off the clock, so one run's leftovers never land in
/// the next run's timing.
func settleDisk() async throws {
    try await BlockingExecutor.shared.run { sync() }
}

/// An error with a plain message.
struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
