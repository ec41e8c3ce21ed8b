// Housekeeping that fails while the operation that set it off succeeds (issue 14, item 10):
// the budget pass after a write, a release after the caller's own error, a release the fill
// runs in the background. Each must be counted where `serve` and the summary show it and
// logged through the store's log, never swallowed.
import Foundation
import SeededRandom
import Testing

@testable import HTTPCache
@_spi(Locking) @testable import SparseCacheEngine
@testable import SparseCacheStore

#if canImport(Glibc)
import Glibc
import SparseCacheTesting
import TestSupport
import StoreTestSupport
#endif

/// The lines a store logs.
private final class LogLines: Sendable {
    private let lines = Lock<[String]>([])
    var all: [String] { lines.withLock { $0 } }
    func append(_ line: String) { lines.withLock { $0.append(line) } }
}

private struct BodyFailure: Error {}

@Suite("Housekeeping failures are counted and logged")
struct HousekeepingFailureTests {
    /// A store over its budget once `new` is written, with a closed resource `old` to evict,
    /// and every unlink in it failing with EIO: eviction cannot delete anything.
    private static func storeWithFailingEviction(
        _ directory: String, log: LogLines
    ) async throws -> (SparseStore, FaultInjection.RuleID) {
        var options = StoreOptions.testing(budget: 256 << 10)
        options.log = { log.append($0) }
        let store = try await SparseStore.open(directory: directory, options: options)
        try await fill(store, key: "old", length: 128 << 10)
        let rule = try FaultInjection.add(.fail([.unlink], errno: EIO, pathContains: directory))
        return (store, rule)
    }

    @Test("an eviction that fails after a write: the write succeeds, the failure is counted, logged and in the summary")
    func evictionAfterWrite() async throws {
        try await withTemporaryDirectory("housekeeping-evict") { directory in
            let log = LogLines()
            let (store, rule) = try await Self.storeWithFailingEviction(directory.path, log: log)
            defer { FaultInjection.remove(rule) }
            let handle = try await store.open(key: "new", length: 192 << 10)
            try await handle.write(keyedBytes("new", 0..<(192 << 10)), at: 0)
            #expect(FaultInjection.fired(rule) > 0, "the budget pass tried to evict 'old'")
            let failures = await store.housekeepingFailures
            #expect(failures.evictions >= 1 && failures.releases == 0, "\(failures)")
            let line = try #require(failures.recent.last)
            #expect(line.contains("eviction after a write to 'new' failed") && line.contains("unlink"), "\(line)")
            #expect(line.contains("errno \(EIO)"), "\(line)")
            #expect(log.all.count == failures.total, "every failure is logged once")
            #expect(Array(log.all.suffix(HousekeepingFailures.recentLimit)) == failures.recent)
            #expect(await store.summary().housekeepingFailures == failures)
            #expect(await store.entry(for: "old") != nil, "nothing was evicted")

            FaultInjection.remove(rule)
            try await handle.file.commit()
            try await handle.release()
            #expect(await store.entry(for: "old") == nil, "the next pass evicts once unlink works")
            try await store.close()
        }
    }

    @Test("withResource: the body's error is thrown, and a release failing after it is counted and logged")
    func releaseAfterBodyError() async throws {
        try await withTemporaryDirectory("housekeeping-release") { directory in
            let log = LogLines()
            let (store, rule) = try await Self.storeWithFailingEviction(directory.path, log: log)
            defer { FaultInjection.remove(rule) }
            await #expect(throws: BodyFailure.self) {
                try await store.withResource(key: "new", length: 192 << 10) { handle in
                    try await handle.write(keyedBytes("new", 0..<(192 << 10)), at: 0)
                    throw BodyFailure()
                }
            }
            let failures = await store.housekeepingFailures
            #expect(failures.releases == 1, "\(failures)")
            #expect(failures.recent.contains { $0.contains("release of 'new' failed") && $0.contains("unlink") }, "\(failures.recent)")
            #expect(log.all.count == failures.total)
            #expect(Array(log.all.suffix(HousekeepingFailures.recentLimit)) == failures.recent)
            FaultInjection.remove(rule)
            try await store.close()
        }
    }

    @Test("the fill's background release fails: counted in its statistics and reported to the store's log")
    func fillReleaseInBackground() async throws {
        try await withTemporaryDirectory("housekeeping-fill") { directory in
            let log = LogLines()
            let (store, rule) = try await Self.storeWithFailingEviction(directory.path, log: log)
            defer { FaultInjection.remove(rule) }
            let cache = ProgressiveCache(store: store, options: .testing)
            let source = GatedSource(sourceBytes(0..<(192 << 10), salt: 3))
            source.release()
            try await cache.prefetch(source)
            #expect(cache.statistics.releaseFailures == 0, "the resource is kept open for the next reader")
            // Shutdown releases it in the background: its budget pass cannot evict 'old'.
            await cache.shutdown()
            #expect(cache.statistics.releaseFailures == 1)
            let failures = await store.housekeepingFailures
            #expect(failures.releases == 1, "\(failures)")
            #expect(
                failures.recent.contains { $0.contains("release of '\(source.key)' failed") && $0.contains("unlink") }, "\(failures.recent)")
            #expect(log.all.count == failures.total)
            #expect(Array(log.all.suffix(HousekeepingFailures.recentLimit)) == failures.recent)
            FaultInjection.remove(rule)
            try await store.close()
        }
    }
}
