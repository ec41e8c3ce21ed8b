import SeededRandom
import SparseCache

/// A complete, committed resource written through SparseFile, read by scenarios 3, 4 and 6.
struct ReadResource: Sendable {
    var path: String
    var length: Int64
    var segmentSize: Int

    /// Writes `length` bytes of random data (an 8 MiB pattern repeated) in 64 KiB segments
    /// and commits them.
    static func prepare(in scratch: Scratch, length: Int64) async throws -> ReadResource {
        let directory = try scratch.directory("read-resource")
        let path = directory + "/resource.bin"
        var options = SparseFileOptions()
        options.length = length
        options.commitPolicy = .manual
        let file = try await SparseFile.open(path, options: options)
        var random = SplitMix64(seed: 3)
        let pattern = random.bytes(Int(min(length, 8 << 20)))
        var offset: Int64 = 0
        while offset < length {
            let count = Int(min(Int64(pattern.count), length - offset))
            try await file.write(count == pattern.count ? pattern : Array(pattern.prefix(count)), at: offset)
            offset += Int64(count)
            if offset % (64 << 20) == 0 { try await file.commit() }
        }
        try await file.commit()
        guard await file.isComplete else { throw BenchError("read resource is incomplete after writing it") }
        let segmentSize = file.segmentSize
        try await file.close()
        return ReadResource(path: path, length: length, segmentSize: segmentSize)
    }

    /// Opens the resource read-only for reading.
    func open(verifyReads: Bool, pageCacheFirst: Bool = true) async throws -> SparseFile {
        var options = SparseFileOptions()
        options.create = false
        options.verifyReads = verifyReads
        options.readsFromPageCacheFirst = pageCacheFirst
        return try await SparseFile.open(path, mode: .readOnly, options: options)
    }
}
