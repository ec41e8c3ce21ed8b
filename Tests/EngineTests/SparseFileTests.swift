// SparseFile on real files in a temporary directory: writes of any alignment, read semantics,
// durability across reopen, argument checking, locking, and damage on disk.
import Foundation
import SeededRandom
import SparseCacheTesting
import Testing

@_spi(Locking) @testable import SparseCacheEngine
import TestSupport

@Suite("SparseFile")
struct SparseFileTests {
    /// The segment size of every resource in this suite.
    var segment: Int { 4096 }

    /// Writes the deterministic source bytes of `range`.
    @discardableResult
    func put(_ file: SparseFile, _ range: Range<Int64>, salt: UInt64 = 0) async throws -> WriteResult {
        try await file.write(sourceBytes(range, salt: salt), at: range.lowerBound)
    }

    /// The offset of segment `index`.
    func seg(_ index: Int) -> Int64 { Int64(index * segment) }

    /// The usual start of a test: a new resource `name` in a fresh temporary directory, opened
    /// with `options`. `body` gets the open file, its path and the directory, which is removed
    /// afterwards; closing the file is the body's (it is what most tests check).
    func withNewFile(
        _ name: String, _ options: SparseFileOptions = .testing(), committing committed: Range<Int64>? = nil,
        _ body: (_ file: SparseFile, _ path: String, _ directory: TemporaryDirectory) async throws -> Void
    ) async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.file(name)
            let file = try await SparseFile.open(path, options: options)
            if let committed {
                try await put(file, committed)
                try await file.commit()
            }
            try await body(file, path, directory)
        }
    }

    // MARK: Writes

    @Test("unaligned writes: incomplete segments are buffered, never present; WriteResult says what happened")
    func unalignedWrites() async throws {
        try await withTemporaryDirectory { directory in
            let length = seg(5) + 1000
            let file = try await SparseFile.open(directory.file("a.bin"), options: .testing(length: length))
            var result = try await put(file, 10..<110)
            #expect(result.completed.isEmpty)
            #expect(result.bufferedBytes == 100)
            #expect(result.alreadyPresentBytes == 0 && result.dropped.isEmpty)
            #expect(await file.incompleteRanges() == [10..<110])
            try await file.commit()
            #expect(await file.presentRanges().isEmpty, "buffered bytes are never present")
            let missing = await expectError(.notPresent) { try await file.read(offset: 10, length: 100) }
            #expect(missing?.missing == [10..<110])

            result = try await put(file, 0..<10)
            #expect(result.completed.isEmpty && result.bufferedBytes == 10)
            result = try await put(file, 110..<seg(1))
            #expect(result.completed == [0..<seg(1)], "the write that completes a segment reports it")
            #expect(result.bufferedBytes == 0)
            #expect(await file.incompleteRanges().isEmpty)
            #expect(await file.uncommittedByteCount == Int64(segment))
            await expectError(.notPresent, "complete but not committed") { try await file.read(offset: 0, length: 1) }
            try await file.commit()
            #expect(await file.uncommittedByteCount == 0)
            let bytes = try await file.read(offset: 0, length: segment)
            expectBytes(bytes, equal: sourceBytes(0..<seg(1)))

            // Across three segments: the middle one completes, the ends are buffered.
            result = try await put(file, (seg(1) + 5)..<(seg(3) + 7))
            #expect(result.completed == [seg(2)..<seg(3)])
            #expect(result.bufferedBytes == (segment - 5) + 7)
            #expect(await file.incompleteRanges() == [(seg(1) + 5)..<seg(2), seg(3)..<(seg(3) + 7)])
            result = try await put(file, seg(1)..<(seg(1) + 5))
            #expect(result.completed == [seg(1)..<seg(2)])
            result = try await put(file, (seg(3) + 7)..<seg(4))
            #expect(result.completed == [seg(3)..<seg(4)])

            // Bytes over segments already present (or written) are skipped and counted.
            result = try await put(file, 100..<(seg(1) + 50))
            #expect(result.alreadyPresentBytes == segment - 100 + 50)
            #expect(result.completed.isEmpty && result.bufferedBytes == 0)

            // The short last segment completes with exactly its 1,000 bytes.
            result = try await put(file, seg(5)..<length)
            #expect(result.completed == [seg(5)..<length])
            // Contiguous complete segments of one write are reported as one range.
            result = try await put(file, seg(4)..<seg(5))
            #expect(result.completed == [seg(4)..<seg(5)])
            try await file.commit()
            #expect(await file.isComplete)
            let bytes2 = try await file.read(offset: 0, length: Int(length))
            expectBytes(bytes2, equal: sourceBytes(0..<length))

            await expectError(.invalidArgument, "past the length") { try await put(file, (length - 1)..<(length + 1)) }
            try await file.close()
        }
    }

    @Test("a write covering many whole segments reports one merged range")
    func wholeWrite() async throws {
        try await withTemporaryDirectory { directory in
            let length = seg(20) + 1
            let file = try await SparseFile.open(directory.file("a.bin"), options: .testing(length: length))
            let result = try await put(file, 0..<length)
            #expect(result.completed == [0..<length])
            #expect(result.bufferedBytes == 0 && result.alreadyPresentBytes == 0)
            try await file.commit()
            #expect(await file.presentBytes == length)
            #expect(await file.presentSegments() == [0..<21])
            try await file.close()
        }
    }

    // MARK: Reads

    @Test("read returns all bytes or throws .notPresent naming exactly the missing ranges")
    func readSemantics() async throws {
        try await withTemporaryDirectory { directory in
            let length = seg(8)
            let file = try await SparseFile.open(directory.file("r.bin"), options: .testing(length: length))
            for index in [0, 1, 2, 4, 5] { try await put(file, seg(index)..<seg(index + 1)) }
            try await file.commit()

            let bytes = try await file.read(offset: 0, length: 3 * segment)
            expectBytes(bytes, equal: sourceBytes(0..<seg(3)))
            let bytes2 = try await file.read(offset: 100, length: 3 * segment - 200)
            expectBytes(bytes2, equal: sourceBytes(100..<(seg(3) - 100)))
            let bytes3 = try await file.read(offset: seg(4) + 1, length: segment)
            expectBytes(bytes3, equal: sourceBytes((seg(4) + 1)..<(seg(5) + 1)))

            var error = await expectError(.notPresent) { try await file.read(offset: seg(2) + 10, length: 5000) }
            #expect(error?.missing == [seg(3)..<(seg(2) + 10 + 5000)])
            error = await expectError(.notPresent) { try await file.read(offset: 0, length: Int(length)) }
            #expect(error?.missing == [seg(3)..<seg(4), seg(6)..<seg(8)])
            #expect(error?.description.contains("missing [\(seg(3)), \(seg(4))), [\(seg(6)), \(seg(8)))") == true, "\(String(describing: error))")

            #expect(try await file.read(offset: 0, length: 0) == [])
            #expect(try await file.read(offset: length, length: 0) == [])
            await expectError(.invalidArgument) { try await file.read(offset: length, length: 1) }
            await expectError(.invalidArgument) { try await file.read(offset: length - 1, length: 2) }
            await expectError(.invalidArgument) { try await file.read(offset: -1, length: 10) }
            await expectError(.invalidArgument) { try await file.read(offset: 0, length: -1) }
            await expectError(.invalidArgument) { try await file.read(offset: .max, length: 10) }
            await expectError(.invalidArgument) { try await file.read(offset: .max - 5, length: 10) }
            try await file.close()
        }
    }

    @Test("readAvailable returns the contiguous present prefix, possibly empty")
    func readAvailable() async throws {
        try await withTemporaryDirectory { directory in
            let length = seg(8) - 10
            let file = try await SparseFile.open(directory.file("r.bin"), options: .testing(length: length))
            for index in [0, 1, 2, 4, 5, 7] {
                try await put(file, seg(index)..<min(seg(index + 1), length))
            }
            try await file.commit()
            let bytes = try await file.readAvailable(from: 0, maxLength: 1 << 20)
            expectBytes(bytes, equal: sourceBytes(0..<seg(3)))
            let bytes2 = try await file.readAvailable(from: 100, maxLength: 50)
            expectBytes(bytes2, equal: sourceBytes(100..<150))
            #expect(try await file.readAvailable(from: seg(3), maxLength: 1 << 20) == [])
            let bytes3 = try await file.readAvailable(from: seg(3) - 1, maxLength: 1 << 20)
            expectBytes(bytes3, equal: sourceBytes((seg(3) - 1)..<seg(3)))
            let bytes4 = try await file.readAvailable(from: seg(4) + 1, maxLength: 1 << 20)
            expectBytes(bytes4, equal: sourceBytes((seg(4) + 1)..<seg(6)))
            let bytes5 = try await file.readAvailable(from: seg(7) + 5, maxLength: 1 << 20)
            expectBytes(bytes5, equal: sourceBytes((seg(7) + 5)..<length), "ends at the length")
            #expect(try await file.readAvailable(from: length, maxLength: 10) == [])
            #expect(try await file.readAvailable(from: length + 100_000, maxLength: 10) == [])
            #expect(try await file.readAvailable(from: 0, maxLength: 0) == [])
            await expectError(.invalidArgument) { try await file.readAvailable(from: -1, maxLength: 10) }
            await expectError(.invalidArgument) { try await file.readAvailable(from: 0, maxLength: -1) }
            try await file.close()
        }
    }

    @Test("negative and overflowing offsets are .invalidArgument for writes too")
    func writeArguments() async throws {
        try await withNewFile("w.bin") { file, path, directory in
            await expectError(.invalidArgument) { try await file.write([1], at: -1) }
            await expectError(.invalidArgument) { try await file.write([1, 2], at: .max) }
            let limit = Int64(IndexFormat.maximumSegmentCount) << 12
            await expectError(.invalidArgument, "past the largest offset") { try await file.write([1], at: limit) }
            await expectError(.invalidArgument, "ends past the largest offset") { try await file.write([1, 2], at: limit - 1) }
            let empty = try await file.write([], at: 5)
            #expect(empty == WriteResult())
            try await file.close()
        }
    }

    // MARK: Metadata

    @Test("metadata is stored at creation, replaced by setMetadata, and kept across reopen")
    func metadata() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.file("m.bin")
            var options = SparseFileOptions.testing(length: 100)
            let first = ResourceMetadata(key: "https://example.com/a.mp4", contentType: "video/mp4", etag: "\"v1\"")
            options.metadata = first
            let file = try await SparseFile.open(path, options: options)
            #expect(await file.metadata == first)
            try await file.close()

            var reopened = try await SparseFile.open(path, options: .testing())
            #expect(await reopened.metadata == first)
            let second = ResourceMetadata(key: "k", lastModified: "Wed, 21 Oct 2015 07:28:00 GMT", user: ["a": "1", "b": "2"])
            try await reopened.setMetadata(second)
            #expect(await reopened.metadata == second, "pending metadata is visible at once")
            let oversized = ResourceMetadata(user: ["big": String(repeating: "x", count: ResourceMetadata.maximumEncodedSize)])
            await expectError(.invalidArgument) { try await reopened.setMetadata(oversized) }
            #expect(await reopened.metadata == second)
            try await reopened.close()

            reopened = try await SparseFile.open(path, mode: .readOnly, options: .testing())
            #expect(await reopened.metadata == second)
            try await reopened.close()

            var big = SparseFileOptions.testing()
            big.metadata = oversized
            await expectError(.invalidArgument) { try await SparseFile.open(directory.file("big.bin"), options: big) }
        }
    }

    // MARK: Opening

    @Test("segment size and length must agree with the stored ones on reopen")
    func reopenMismatches() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.file("s.bin")
            try await SparseFile.open(path, options: .testing(segmentSize: 4096, length: 50_000)).close()
            await expectError(.invalidArgument) { try await SparseFile.open(path, options: .testing(segmentSize: 8192)) }
            await expectError(.invalidArgument) { try await SparseFile.open(path, options: .testing(length: 50_001)) }
            var options = SparseFileOptions.testing()
            options.segmentSize = nil
            let file = try await SparseFile.open(path, options: options)
            #expect(file.segmentSize == 4096)
            #expect(await file.length == 50_000)
            try await file.close()

            // A length given on reopen of a resource without one is adopted and committed.
            let unknown = directory.file("u.bin")
            try await SparseFile.open(unknown, options: .testing()).close()
            let adopting = try await SparseFile.open(unknown, options: .testing(length: 9000))
            #expect(await adopting.length == 9000)
            try await adopting.close()
            let later = try await SparseFile.open(unknown, mode: .readOnly, options: .testing())
            #expect(await later.length == 9000)
            try await later.close()
        }
    }

    @Test("bad segment sizes, lengths and paths are .invalidArgument", arguments: [0, 2048, 3000, 4097, 6144, 32 << 20])
    func badSegmentSize(size: Int) async throws {
        try await withTemporaryDirectory { directory in
            await expectError(.invalidArgument, "segment size \(size)") {
                try await SparseFile.open(directory.file("x.bin"), options: .testing(segmentSize: size))
            }
            let exists = try FileSystem.exists(directory.file("x.bin"))
            #expect(!exists, "nothing is created")
        }
    }

    @Test("negative length and empty path are .invalidArgument")
    func badOpenArguments() async throws {
        try await withTemporaryDirectory { directory in
            await expectError(.invalidArgument) { try await SparseFile.open(directory.file("x.bin"), options: .testing(length: -1)) }
            await expectError(.invalidArgument) { try await SparseFile.open("", options: .testing()) }
        }
    }

    @Test("opening a missing resource without create is .notFound")
    func missing() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.file("none.bin")
            await expectError(.notFound) { try await SparseFile.open(path, options: .testing(create: false)) }
            await expectError(.notFound) { try await SparseFile.open(path, mode: .readOnly, options: .testing()) }
            let exists = try FileSystem.exists(path)
            #expect(!exists, "nothing is created")
            // A plain file without an index is not a resource.
            try RawFile.replace(path, with: [1, 2, 3])
            let error = await expectError(.notFound) { try await SparseFile.open(path, options: .testing(create: false)) }
            #expect(error?.detail?.contains("index") == true, "\(String(describing: error))")
            await expectError(.notFound, "missing directory") {
                try await SparseFile.open(directory.file("no/such/dir/x.bin"), options: .testing())
            }
        }
    }

    @Test("a directory where the data file should be is .invalidArgument")
    func directoryInPlace() async throws {
        try await withTemporaryDirectory { directory in
            let path = try directory.directory("dir.bin")
            await expectError(.invalidArgument, "read-write") { try await SparseFile.open(path, options: .testing()) }
            let exists = try FileSystem.exists(SparseFile.indexPath(for: path))
            #expect(!exists, "no index is left behind")
        }
    }

    @Test("a second read-write open is .locked while read-only opens still work")
    func locking() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.file("l.bin")
            let writer = try await SparseFile.open(path, options: .testing(length: seg(2)))
            try await put(writer, 0..<seg(1))
            try await writer.commit()
            let error = await expectError(.locked) { try await SparseFile.open(path, options: .testing()) }
            #expect(error?.path == path)
            // The failed open must not have released the writer's lock.
            await expectError(.locked, "still locked") { try await SparseFile.open(path, options: .testing()) }

            let reader = try await SparseFile.open(path, mode: .readOnly, options: .testing())
            let firstSegment = try await reader.read(offset: 0, length: segment)
            #expect(firstSegment == sourceBytes(0..<seg(1)))
            await expectError(.invalidArgument, "read-only") { try await put(reader, seg(1)..<seg(2)) }
            await expectError(.invalidArgument, "read-only") { try await reader.commit() }
            await expectError(.invalidArgument, "read-only") { try await reader.setLength(seg(2)) }
            await expectError(.invalidArgument, "read-only") { try await reader.setMetadata(ResourceMetadata()) }

            try await writer.close()
            let second = try await SparseFile.open(path, options: .testing())
            #expect(await second.presentRanges() == [0..<seg(1)])
            try await second.close()
            try await reader.close()
        }
    }
}
