// A real full disk: a 2 MiB tmpfs mounted for the test (the suite runs as root on CI and on
// developer machines here). No fault injection: the kernel says ENOSPC.
import Foundation
import LoopbackOrigins
import SeededRandom
import Testing

@_spi(Locking) @testable import SparseCacheEngine

#if canImport(Glibc)
import Glibc
#endif
import TestSupport

/// A small tmpfs mounted on a fresh directory, unmounted by `unmount()`.
final class SmallFileSystem {
    let path: String

    init(bytes: Int) throws {
        let directory = try TemporaryDirectory("fulldisk")
        path = directory.path + "/mnt"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        try Self.run("/bin/mount", ["-t", "tmpfs", "-o", "size=\(bytes)", "tmpfs", path])
        keepAlive = directory
    }

    private let keepAlive: TemporaryDirectory

    func unmount() { try? Self.run("/bin/umount", [path]) }

    static func run(_ tool: String, _ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = arguments
        process.standardError = FileHandle.nullDevice
        try ProcessLaunch.runBlocking(process)
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw RawFile.Failure(description: "\(tool) \(arguments.joined(separator: " ")) exited \(process.terminationStatus)")
        }
    }

    /// Whether this machine lets the tests mount a tmpfs (it needs root).
    static let available: Bool = geteuid() == 0
}

@Suite("A real full disk")
struct FullDiskTests {
    /// A 2 MiB file system holding `movie.bin` (1.5 MiB, 64 KiB segments, nothing written) and
    /// `filler`, 1 MiB of something else that takes the room until the test removes it. The
    /// caller unmounts the disk.
    /// Removes `filler`, writes the rest of the resource from `position` and commits it: the
    /// reopened resource is whole and verifies clean.
    static func freeAndFinish(_ file: SparseFile, path: String, filler: String, from position: Int64, length: Int64) async throws {
        try FileManager.default.removeItem(atPath: filler)
        var position = position
        while position < length {
            let end = min(length, position + 65536)
            try await file.write(sourceBytes(position..<end), at: position)
            position = end
        }
        try await file.commit()
        try await file.close()
        let reopened = try await SparseFile.open(path, mode: .readOnly)
        #expect(await reopened.isComplete)
        #expect(try await reopened.read(offset: 0, length: Int(length)) == sourceBytes(0..<length))
        try await reopened.close()
        let report = try await Verifier.verify(path: path)
        #expect(report.isClean, "\(report)")
    }

    static func movieBesideFiller() async throws -> (disk: SmallFileSystem, length: Int64, file: SparseFile, filler: String) {
        let disk = try SmallFileSystem(bytes: 2 << 20)
        do {
            let length: Int64 = 1536 << 10
            let file = try await SparseFile.open(disk.path + "/movie.bin", options: .testing(segmentSize: 65536, length: length))
            let filler = disk.path + "/filler"
            try #require(FileManager.default.createFile(atPath: filler, contents: Data(count: 1 << 20)))
            return (disk, length, file, filler)
        } catch {
            disk.unmount()
            throw error
        }
    }

    @Test("ENOSPC is a clear error, committed data survives, writing resumes once space is freed",
          .enabled(if: SmallFileSystem.available, "mounting a tmpfs needs root"))
    func fullDisk() async throws {
        // Room taken by something else, freed later.
        let (disk, length, file, filler) = try await Self.movieBesideFiller()
        defer { disk.unmount() }
        let path = disk.path + "/movie.bin"

        try await file.write(sourceBytes(0..<(512 << 10)), at: 0)
        try await file.commit()

        // Fill until the disk is full.
        var position: Int64 = 512 << 10
        var failure: SparseCacheError?
        while position < length {
            do {
                try await file.write(sourceBytes(position..<(position + 65536)), at: position)
                try await file.commit()
                position += 65536
            } catch let error as SparseCacheError {
                failure = error
                break
            }
        }
        let error = try #require(failure, "the 2 MiB disk (1 MiB taken) never filled while writing 1.5 MiB")
        #expect(error.code == .io)
        #expect(error.errno == ENOSPC)
        #expect(error.description.contains("No space left on device"), "\(error)")
        #expect(error.description.contains("movie.bin"), "\(error)")

        // Everything committed is still there and readable; the resource is not poisoned.
        let committedEnd = position
        #expect(try await file.read(offset: 0, length: Int(committedEnd)) == sourceBytes(0..<committedEnd))
        #expect(await file.presentBytes == committedEnd)

        // Free space, then finish the resource.
        try await Self.freeAndFinish(file, path: path, filler: filler, from: position, length: length)
    }

    @Test("a full disk: segments that reached the data file still commit, their record goes to the journal's reserved room",
          .enabled(if: SmallFileSystem.available, "mounting a tmpfs needs root"))
    func commitOnFullDisk() async throws {
        let (disk, length, file, filler) = try await Self.movieBesideFiller()
        defer { disk.unmount() }
        let path = disk.path + "/movie.bin"
        try await file.write(sourceBytes(0..<65536), at: 0)
        try await file.commit()

        // Write without committing until the data file cannot take a segment: the disk is full
        // to the last page, and the segments before the failing one are in the data file.
        var position: Int64 = 65536
        var failure: SparseCacheError?
        while position < length {
            do {
                try await file.write(sourceBytes(position..<(position + 65536)), at: position)
                position += 65536
            } catch let error as SparseCacheError {
                failure = error
                break
            }
        }
        let error = try #require(failure, "the 2 MiB disk (1 MiB taken) never filled")
        #expect(error.errno == ENOSPC && error.description.contains("No space left on device"), "\(error)")
        #expect(position > 65536, "some segments reached the data file before the disk filled")
        var stats = statvfs()
        #expect(statvfs(disk.path, &stats) == 0 && stats.f_bavail == 0, "the disk is full")

        // Those segments commit: the journal record needs no new block. (Before the reserve, the
        // record's pwrite past the end of the index failed with ENOSPC.)
        try await file.commit()
        #expect(await file.presentBytes == position)
        #expect(try await file.read(offset: 0, length: Int(position)) == sourceBytes(0..<position))

        // Once space is freed, the rest is written and the resource completes.
        try await Self.freeAndFinish(file, path: path, filler: filler, from: position, length: length)
    }

    @Test("a writer keeps journal room reserved past the end of its index, and a closed resource gives it back")
    func journalReserveLifecycle() async throws {
        try await withTemporaryDirectory("journal-reserve") { directory in
            let path = directory.file("r.bin")
            let file = try await SparseFile.open(path, options: .testing(segmentSize: 4096, length: 64 << 10))
            func index() throws -> FileDescriptor.Status { try #require(try FileSystem.status(ofPath: file.indexPath)) }
            for segment in 0..<6 {
                let start = Int64(segment) << 12
                try await file.write(sourceBytes(start..<(start + 4096)), at: start)
                try await file.commit()
                let status = try index()
                // Blocks past the end: at least half the reserve is left after every commit.
                #expect(status.allocatedBytes >= status.size + IndexFile.journalReserve / 2, "\(status) after commit \(segment)")
                #expect(status.allocatedBytes <= status.size + IndexFile.journalReserve + 4096, "\(status) after commit \(segment)")
            }
            try await file.close()
            let closed = try index()
            #expect(closed.allocatedBytes <= (closed.size + 4095) / 4096 * 4096, "released at close: \(closed)")
            let reopened = try await SparseFile.open(path, mode: .readOnly)
            #expect(await reopened.presentBytes == 6 * 4096)
            try await reopened.close()
        }
    }
}
