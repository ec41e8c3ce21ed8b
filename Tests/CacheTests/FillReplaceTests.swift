// Issue 14, item 1: two fetches of one resource that both learn the origin changed. Each used
// to start a replacement that waited for the other fetch to end: the key was wedged for the life
// of the process (every reader and shutdown() hung).
import Dispatch
import Foundation
import SeededRandom
import Testing

import CShim
@testable import HTTPCache
@_spi(Locking) @testable import SparseCacheEngine
@testable import SparseCacheStore
@testable import SparseHTTP
import TestSupport

/// A resource that changes on its origin while requests are in flight. First contact gets
/// version 1 at once; every later request waits until ``swap()`` and is then answered from
/// version 2 (a new ETag, as when `If-Range` fails). With `ignoresCancellation` a waiting request
/// returns only after the swap, however often it is cancelled, as some real origin clients do.
final class SwappingSource: RangeSource, Sendable {
    let key = "swapping://resource"
    let versions: [[UInt8]]
    let ignoresCancellation: Bool
    private let state = Lock((requests: 0, swapped: false))

    init(_ first: [UInt8], _ second: [UInt8], ignoresCancellation: Bool) {
        versions = [first, second]
        self.ignoresCancellation = ignoresCancellation
    }

    var requests: Int { state.withLock { $0.requests } }

    func swap() { state.withLock { $0.swapped = true } }

    private var swapped: Bool { state.withLock { $0.swapped } }

    func fetch(_ range: Range<Int64>?, validator: ContentValidator?) async throws -> RangeResponse {
        let isFirst = state.withLock { state in
            state.requests += 1
            return state.requests == 1
        }
        if !isFirst, ignoresCancellation {
            while !swapped {
                // Not a cancellable sleep: a cancel does not end the wait.
                await withCheckedContinuation { continuation in
                    DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(2)) { continuation.resume() }
                }
            }
        } else if !isFirst {
            // A cancel ends the wait (it throws).
            try await waitUntil(timeout: .seconds(600), interval: .milliseconds(2), "the source was never swapped") { swapped }
        }
        let version = isFirst ? 0 : 1
        let bytes = versions[version]
        let range = range ?? 0..<Int64(bytes.count)
        let body = Array(bytes[Int(range.lowerBound)..<Int(min(range.upperBound, Int64(bytes.count)))])
        let stream = AsyncThrowingStream<[UInt8], Error> { continuation in
            for start in stride(from: 0, to: body.count, by: 64 << 10) {
                continuation.yield(Array(body[start..<min(body.count, start + (64 << 10))]))
            }
            continuation.finish()
        }
        let info = ContentInfo(length: Int64(bytes.count), validator: ContentValidator(etag: "\"v\(version + 1)\""))
        return RangeResponse(info: info, offset: range.lowerBound, body: stream, cancel: {})
    }
}

/// What the readers of ``FillReplaceTests/readersAttachDuringReplacement()`` saw.
private final class ReadersTally: Sendable {
    struct Counts {
        var old = 0
        var new = 0
        var changed = 0
        var problems: [String] = []
        var stop = false
    }

    let counts = Lock(Counts())
}

@Suite("fill: the origin changes while several fetches are in flight")
struct FillReplaceTests {
    /// Runs `work` and waits for it at most `limit` (a hang guard, scaled as ``eventually``
    /// scales it): a wedged key never finishes, and awaiting it would hang the test run instead
    /// of failing it.
    static func finishes(within limit: Duration, _ work: @escaping @Sendable () async throws -> Void) async -> Bool {
        let done = Lock(false)
        let task = Task {
            try? await work()
            done.withLock { $0 = true }
        }
        _ = try? await eventually(timeout: limit) { done.withLock { $0 } }
        task.cancel()
        return done.withLock { $0 }
    }

    @Test(
        "a fetch and its read-ahead both see the new version: one replacement, never a wedged key; readers and shutdown finish",
        arguments: [true, false])
    func twoFetchesSeeTheChange(ignoresCancellation: Bool) async throws {
        let length = 1 << 20
        var random = SplitMix64(seed: 1414)
        let first = random.bytes(length)
        let second = random.bytes(length)
        for round in 0..<3 {
            var options = FillOptions.testing
            // First contact brings the first 256 KiB; the reader's read-ahead then asks for the
            // next two 64 KiB spans (the distance is at most one span), which wait on the origin.
            options.maximumFetch = 64 << 10
            options.readAheadMinimum = 128 << 10
            options.readAhead = true
            options.readAheadLimit = 3
            let fixture = try await FillFixture("fill-replace", options: options, segmentSize: 16 << 10)
            let cache = fixture.cache
            let source = SwappingSource(first, second, ignoresCancellation: ignoresCancellation)
            let outcome = Lock<String?>(nil)
            let reader = Task {
                do {
                    // Open-ended, as a player asks: first contact asks for a window, not all.
                    let bytes = try await collect(cache.read(source, range: 0..<Int64.max))
                    outcome.withLock { $0 = bytes == second ? "second version" : "wrong bytes" }
                } catch let error as OriginError where error.kind == .changed {
                    outcome.withLock { $0 = "originChanged" }
                } catch {
                    outcome.withLock { $0 = "\(error)" }
                }
            }
            // First contact, the reader's span and the span read ahead: two fetches wait on the
            // origin, then both are answered with the new version.
            _ = try await eventually(timeout: .seconds(60), interval: .milliseconds(2)) { source.requests >= 3 }
            #expect(source.requests >= 3, "round \(round): only \(source.requests) requests came")
            source.swap()

            let readerEnded = await Self.finishes(within: .seconds(240)) { await reader.value }
            #expect(readerEnded, "round \(round), ignores cancellation \(ignoresCancellation): the reader hangs (the key is wedged)")
            guard readerEnded else { return }
            // The reader had bytes of version 1 (first contact's segment): it is stopped, never
            // handed version 2 after them.
            #expect(outcome.withLock { $0 } == "originChanged", "round \(round)")

            let again = Lock<[UInt8]?>(nil)
            let readAgain = await Self.finishes(within: .seconds(240)) {
                again.withLock { $0 = nil }; let bytes = try await collect(cache.read(source)); again.withLock { $0 = bytes }
            }
            #expect(readAgain && again.withLock { $0 } == second, "round \(round): a new reader gets the new version")
            #expect(cache.statistics.invalidations == 1, "round \(round): one replacement, not one per fetch")
            let stopped = await Self.finishes(within: .seconds(240)) { await cache.shutdown() }
            #expect(stopped, "round \(round): shutdown hangs")
            guard stopped else { return }
            try await fixture.close()
        }
    }

    @Test(
        "readers attach while a replacement opens the new version: the resource is written only on the cache's actor (no ThreadSanitizer report), and each reader gets one version whole or OriginError .changed"
    )
    func readersAttachDuringReplacement() async throws {
        let reportsBefore = sc_tsan_reports()
        let length = 1 << 20
        let probe = 4096
        var random = SplitMix64(seed: 4646)
        let first = random.bytes(length)
        let second = random.bytes(length)
        for round in 0..<4 {
            var options = FillOptions.testing
            options.maximumFetch = 64 << 10
            let fixture = try await FillFixture("fill-replace-attach", options: options, segmentSize: 16 << 10)
            let cache = fixture.cache
            let source = SwappingSource(first, second, ignoresCancellation: false)
            // First contact answers version 1 at once (a window: the read is open-ended, as a
            // player's); the reader's next fetch waits for the swap, is answered with version 2,
            // and replaces the resource.
            let whole = Task { try? await collect(cache.read(source, range: 0..<Int64.max)) }
            #expect(
                try await eventually(timeout: .seconds(120), interval: .milliseconds(2)) { source.requests >= 2 },
                "round \(round): the reader's second fetch never asked")

            // Readers of the first bytes, a new one every 0.1 ms across the replacement: those that
            // attach while it removes the old files and opens the new ones look at the resource
            // (on the cache's actor) while the replacement writes it.
            let tally = ReadersTally()
            let spawner = Task {
                var readers: [Task<Void, Never>] = []
                while !tally.counts.withLock({ $0.stop }) {
                    readers.append(
                        Task {
                            do {
                                let bytes = try await collect(cache.read(source, range: 0..<Int64(probe)))
                                tally.counts.withLock { tally in
                                    if bytes[...] == first[..<probe] {
                                        tally.old += 1
                                    } else if bytes[...] == second[..<probe] {
                                        tally.new += 1
                                    } else {
                                        tally.problems.append("\(bytes.count) bytes of neither version")
                                    }
                                }
                            } catch let error as OriginError where error.kind == .changed {
                                tally.counts.withLock { $0.changed += 1 }
                            } catch {
                                tally.counts.withLock { $0.problems.append("\(error)") }
                            }
                        })
                    try? await Task.sleep(for: .microseconds(100))  // pacing: a new reader every 0.1 ms
                }
                return readers
            }
            _ = try await eventually(timeout: .seconds(120), interval: .milliseconds(1)) { tally.counts.withLock { $0.old } >= 12 }
            source.swap()
            _ = await whole.value
            // Readers go on until they have read the new version a few times.
            _ = try await eventually(timeout: .seconds(120), interval: .milliseconds(2)) {
                tally.counts.withLock { $0.new >= 24 || !$0.problems.isEmpty }
            }
            tally.counts.withLock { $0.stop = true }
            for reader in await spawner.value { await reader.value }
            let seen = tally.counts.withLock { $0 }
            #expect(seen.problems.isEmpty, "round \(round): \(seen.problems.count) readers failed, first: \(seen.problems.prefix(3))")
            #expect(
                seen.new >= 24, "round \(round): readers read the new version \(seen.new) times (old \(seen.old), changed \(seen.changed))")
            #expect(cache.statistics.invalidations == 1, "round \(round): one replacement")
            try await fixture.close()
        }
        // In a sanitized build, a write to the resource off the cache's actor (while these
        // readers look at it on the actor) is reported as a data race.
        let reports = sc_tsan_reports() - reportsBefore
        #expect(reports == 0, "ThreadSanitizer reported \(reports) races while this test ran (see above: a test beside it may have caused them)")
    }
}
