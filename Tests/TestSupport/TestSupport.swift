// Shared helpers for the test suite: the test seed, temporary directories, raw file
// surgery (bit flips, truncation) and an error expectation that checks the error code.
import CShim
import Foundation
import SeededRandom
import Testing

@_spi(Locking) import SparseCacheEngine

// MARK: - Seeded randomness

/// The seed for a test: `SPARSECACHE_TEST_SEED` when set, else the test's own default.
package func testSeed(_ defaultSeed: UInt64) -> UInt64 {
    if let text = ProcessInfo.processInfo.environment["SPARSECACHE_TEST_SEED"], let seed = UInt64(text) {
        return seed
    }
    return defaultSeed
}

// MARK: - Hang guards

/// How many times longer a hang guard lasts in this build: 4 when the build is sanitized for
/// threads (`swift test --sanitize=thread`: about ten times slower, and the first tests of the
/// suites wait behind the Concurrency suite's load; see docs/TESTING.md), else 1. A hang guard is
/// a suite's time limit or the longest a test waits before it reports a hang: never a timing
/// assertion, only what keeps a hung test from hanging the run.
package let hangGuardScale = sc_tsan_enabled() == 1 ? 4 : 1

extension Duration {
    /// This bound as a hang guard of this build (``hangGuardScale``).
    package var asHangGuard: Duration { self * hangGuardScale }
}

// MARK: - Deterministic resource content

// MARK: - Temporary directories

/// A directory a test owns (``TemporaryDirectory``, ``CLIScratch``): paths in it, and
/// directories made in it.
package protocol ScratchDirectory {
    var path: String { get }
}

extension ScratchDirectory {
    /// A path inside the directory.
    package func file(_ name: String) -> String { path + "/" + name }

    /// Makes the directory `name` inside this one and returns its path.
    package func directory(_ name: String) throws -> String {
        let made = file(name)
        try FileManager.default.createDirectory(atPath: made, withIntermediateDirectories: false)
        return made
    }
}

/// A unique directory under the system temporary directory, removed by `remove()` (or when
/// the value is released).
package final class TemporaryDirectory: ScratchDirectory, Sendable {
    package let path: String

    package init(_ label: String = "test") throws {
        let base = FileManager.default.temporaryDirectory.path
        let name = "sparsecache-\(label)-\(getpid())-\(UUID().uuidString)"
        path = (base.hasSuffix("/") ? base : base + "/") + name
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
    }

    package func remove() { try? FileManager.default.removeItem(atPath: path) }

    deinit { remove() }
}

/// Runs `body` with a fresh temporary directory and removes it afterwards.
package func withTemporaryDirectory<T>(
    _ label: String = "test", _ body: (TemporaryDirectory) async throws -> T
) async throws -> T {
    let directory = try TemporaryDirectory(label)
    defer { directory.remove() }
    return try await body(directory)
}

// MARK: - Origin files

/// Writes `count` seeded bytes as `name` under `root` and returns them.
package func originFile(_ root: String, _ name: String, count: Int, seed: UInt64) throws -> [UInt8] {
    var random = SplitMix64(seed: seed)
    let bytes = random.bytes(count)
    try Data(bytes).write(to: URL(fileURLWithPath: root + "/" + name))
    return bytes
}

/// The small-object store's log files (`*.sco`) in `directory`, in name order.
package func smallObjectLogFiles(_ directory: String) throws -> [String] {
    try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasSuffix(".sco") }.sorted().map { directory + "/" + $0 }
}

// MARK: - Raw file surgery

package enum RawFile {
    package struct Failure: Error, CustomStringConvertible {
        package var description: String
        package init(description: String) { self.description = description }
    }

    package static func withDescriptor<T>(_ path: String, writable: Bool, _ body: (Int32) throws -> T) throws -> T {
        let fd = sc_open(path, writable ? Int32(SC_O_RDWR) : Int32(SC_O_RDONLY), 0)
        guard fd >= 0 else { throw Failure(description: "open '\(path)': errno \(errno)") }
        defer { _ = sc_close(fd) }
        return try body(fd)
    }

    package static func size(_ path: String) throws -> Int64 {
        var status = sc_stat()
        guard sc_stat_path(path, &status) == 0 else { throw Failure(description: "stat '\(path)': errno \(errno)") }
        return status.size
    }

    package static func read(_ path: String) throws -> [UInt8] {
        let count = Int(try size(path))
        return try withDescriptor(path, writable: false) { fd in
            var bytes = [UInt8](repeating: 0, count: count)
            let got = bytes.withUnsafeMutableBytes { sc_pread(fd, $0.baseAddress, count, 0) }
            guard got == count else { throw Failure(description: "short read of '\(path)'") }
            return bytes
        }
    }

    package static func read(_ path: String, offset: Int64, count: Int) throws -> [UInt8] {
        try withDescriptor(path, writable: false) { fd in
            var bytes = [UInt8](repeating: 0, count: count)
            let got = bytes.withUnsafeMutableBytes { sc_pread(fd, $0.baseAddress, count, offset) }
            guard got >= 0 else { throw Failure(description: "pread '\(path)': errno \(errno)") }
            return Array(bytes.prefix(got))
        }
    }

    package static func write(_ path: String, offset: Int64, _ bytes: [UInt8]) throws {
        try withDescriptor(path, writable: true) { fd in
            let done = bytes.withUnsafeBytes { sc_pwrite(fd, $0.baseAddress, bytes.count, offset) }
            guard done == bytes.count else { throw Failure(description: "short write to '\(path)'") }
        }
    }

    /// Replaces the whole file's contents, creating the file when needed.
    package static func replace(_ path: String, with bytes: [UInt8]) throws {
        let fd = sc_open(path, Int32(SC_O_RDWR) | Int32(SC_O_CREAT) | Int32(SC_O_TRUNC), 0o644)
        guard fd >= 0 else { throw Failure(description: "create '\(path)': errno \(errno)") }
        _ = sc_close(fd)
        if !bytes.isEmpty { try write(path, offset: 0, bytes) }
    }

    package static func truncate(_ path: String, to length: Int64) throws {
        try withDescriptor(path, writable: true) { fd in
            guard sc_ftruncate(fd, length) == 0 else { throw Failure(description: "ftruncate '\(path)': errno \(errno)") }
        }
    }

    /// The offsets of the journal records in the bytes of an index file: the journal starts
    /// at 8192 and each record starts on a 4 KiB boundary with the magic `SPJR` (docs/FORMAT.md).
    package static func journalRecordOffsets(_ index: [UInt8]) -> [Int] {
        stride(from: 8192, to: index.count, by: 4096).filter { index[$0...].starts(with: Array("SPJR".utf8)) }
    }

    /// Drops the file's clean pages from the page cache, so the next reads come from the device.
    package static func dropPageCache(_ path: String) throws {
        try withDescriptor(path, writable: false) { fd in
            let result = posix_fadvise(fd, 0, 0, Int32(POSIX_FADV_DONTNEED))
            guard result == 0 else { throw Failure(description: "posix_fadvise: \(result)") }
        }
    }

    /// XORs `mask` into the byte at `offset`.
    package static func flip(_ path: String, at offset: Int64, mask: UInt8 = 0x01) throws {
        let old = try read(path, offset: offset, count: 1)
        guard old.count == 1 else { throw Failure(description: "no byte at \(offset) in '\(path)'") }
        try write(path, offset: offset, [old[0] ^ mask])
    }
}

// MARK: - Error expectations

/// Runs `body`, expecting it to throw a ``SparseCacheError`` with `code`. Records an issue
/// (with `comment`) otherwise and returns the error when it matched.
@discardableResult
package func expectError<T>(
    _ code: SparseCacheError.Code, _ comment: @autoclosure () -> String = "",
    sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () async throws -> T
) async -> SparseCacheError? {
    let outcome: Result<T, any Error>
    do { outcome = .success(try await body()) } catch { outcome = .failure(error) }
    return expected(code, of: outcome, comment(), sourceLocation)
}

/// Synchronous variant of ``expectError(_:_:sourceLocation:_:)``.
@discardableResult
package func expectErrorSync<T>(
    _ code: SparseCacheError.Code, _ comment: @autoclosure () -> String = "",
    sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () throws -> T
) -> SparseCacheError? {
    expected(code, of: Result { try body() }, comment(), sourceLocation)
}

/// The error when `outcome` failed with `code`; otherwise records what it was instead.
private func expected<T>(
    _ code: SparseCacheError.Code, of outcome: Result<T, any Error>, _ comment: String, _ sourceLocation: SourceLocation
) -> SparseCacheError? {
    switch outcome {
    case .success(let value):
        Issue.record("expected \(code), got a result: \(value). \(comment)", sourceLocation: sourceLocation)
    case .failure(let error as SparseCacheError) where error.code == code:
        return error
    case .failure(let error as SparseCacheError):
        Issue.record("expected \(code), got \(error.code): \(error). \(comment)", sourceLocation: sourceLocation)
    case .failure(let error):
        Issue.record("expected \(code), got \(type(of: error)): \(error). \(comment)", sourceLocation: sourceLocation)
    }
    return nil
}

/// Expects two byte arrays to be equal; on failure reports the sizes and the first differing
/// offset instead of dumping both arrays.
package func expectBytes(
    _ actual: [UInt8], equal expected: [UInt8], _ comment: @autoclosure () -> String = "",
    sourceLocation: SourceLocation = #_sourceLocation
) {
    guard actual != expected else { return }
    let firstDifference = zip(actual, expected).enumerated().first { $0.element.0 != $0.element.1 }?.offset
        ?? min(actual.count, expected.count)
    Issue.record(
        "bytes differ: got \(actual.count), expected \(expected.count), first difference at \(firstDifference). \(comment())",
        sourceLocation: sourceLocation)
}

// MARK: - Opening resources

extension SparseFileOptions {
    /// Small segments, manual commits: the usual test configuration.
    package static func testing(segmentSize: Int = 4096, length: Int64? = nil, create: Bool = true) -> SparseFileOptions {
        var options = SparseFileOptions()
        options.segmentSize = segmentSize
        options.length = length
        options.create = create
        options.commitPolicy = .manual
        return options
    }
}
