// A reader of `sparsecache serve` (ProxyCLITests.boundedMemory in IntegrationTests, under load) got part of its range
// and then nothing for 90 s. It had seen its segment missing and joined the fetch bringing it;
// while its read-ahead looked at the rest of the range (an await on the resource), that fetch
// committed the segment, ended and woke the waiting readers. The reader then parked, waiting for
// a change that had already happened, and nothing was left to change.
import Foundation
import SeededRandom
import Testing

@testable import HTTPCache
@_spi(Locking) @testable import SparseCacheEngine
@testable import SparseCacheStore
@testable import SparseHTTP
import TestSupport

/// A resource in memory whose requests are answered at once until ``hold()``; from then on a
/// request sends its body only after ``release()``.
final class HeldSource: RangeSource, Sendable {
    let key = "held://resource"
    let bytes: [UInt8]
    private let state = Lock((holding: false, requests: [Range<Int64>]()))

    init(_ bytes: [UInt8]) {
        self.bytes = bytes
    }

    var requests: [Range<Int64>] { state.withLock { $0.requests } }

    func hold() { state.withLock { $0.holding = true } }

    func release() { state.withLock { $0.holding = false } }

    func fetch(_ range: Range<Int64>?, validator: ContentValidator?) async throws -> RangeResponse {
        let range = range ?? 0..<Int64(bytes.count)
        state.withLock { $0.requests.append(range) }
        let body = Array(bytes[Int(range.lowerBound)..<Int(min(range.upperBound, Int64(bytes.count)))])
        let (stream, continuation) = AsyncThrowingStream<[UInt8], Error>.makeStream()
        let producer = Task {
            do {
                // A cancel ends the wait (it throws).
                try await waitUntil(timeout: .seconds(600), interval: .milliseconds(2), "never released") { !state.withLock { $0.holding } }
            } catch {
                return continuation.finish(throwing: error)
            }
            continuation.yield(body)
            continuation.finish()
        }
        let info = ContentInfo(length: Int64(bytes.count), validator: ContentValidator(etag: "\"v1\""))
        return RangeResponse(info: info, offset: range.lowerBound, body: stream, cancel: { producer.cancel() })
    }
}

/// Runs its action the first time it is called, and tells when that has finished.
final class FirstCall: Sendable {
    private let state = Lock((called: false, finished: false))

    var finished: Bool { state.withLock { $0.finished } }

    func run(_ action: () async -> Void) async {
        guard
            state.withLock({ state in
                defer { state.called = true }; return !state.called
            })
        else { return }
        await action()
        state.withLock { $0.finished = true }
    }
}

extension ProgressiveCache {
    /// Fetches that have ended for `key`, and whether any runs now.
    func fetchState(key: String) -> (ended: Int, running: Int) {
        (resources[key]?.fetchesEnded ?? 0, resources[key]?.fetches.count ?? 0)
    }

    /// The cache's state for `key` now (for a failure message).
    func stallReport(key: String) async -> String {
        guard let resource = resources[key], let file = resource.handle?.file else { return "no resource" }
        let missing = await file.missingRanges(in: 0..<(await file.length ?? 0))
        return "waiters \(resource.waiters.mapValues(\.segment)), owner \(resource.owner), "
            + "fetches \(resource.fetches.mapValues(\.segments)), missing \(missing)"
    }
}

@Suite("Fill-through: a reader never waits for a change that already happened", .serialized, .timeLimit(.minutes(8 * hangGuardScale)))
struct FillStallTests {
    @Test("the fetch a reader joined ends while its read-ahead looks further: the reader still gets its bytes")
    func fetchEndsWhileReadAheadLooks() async throws {
        let segment = 4096
        let firstCall = FirstCall()
        let stash = Lock<(ProgressiveCache, HeldSource)?>(nil)
        var options = FillOptions.testing
        // The seam sits where the race was: the reader has joined the fetch of segment 1 and
        // awaits its look at segments 2 and 3. Meanwhile that fetch brings segment 1, commits
        // it, ends, and wakes the readers waiting, none yet.
        options.afterReadAheadLook = {
            await firstCall.run {
                guard let (cache, source) = stash.withLock({ $0 }) else { return }
                let before = await cache.fetchState(key: source.key)
                source.release()
                _ = try? await eventually(timeout: .seconds(60), interval: .milliseconds(2)) {
                    let now = await cache.fetchState(key: source.key)
                    return now.ended > before.ended && now.running == 0
                }
            }
        }
        let fixture = try await FillFixture("fill-stall", options: options, segmentSize: segment)
        let cache = fixture.cache
        var random = SplitMix64(seed: 91)
        let bytes = random.bytes(4 * segment)
        let source = HeldSource(bytes)
        // Segments 2 and 3 are cached before the reader comes (first contact asks for the
        // prefetch's own range), so its read-ahead looks at them (an await) and finds nothing
        // to fetch.
        try await cache.prefetch(source, range: Int64(2 * segment)..<Int64(4 * segment))
        #expect(source.requests.count == 1, "\(source.requests)")
        source.hold()
        stash.withLock { $0 = (cache, source) }
        let done = Lock(false)
        let reader = Task {
            defer { done.withLock { $0 = true } }
            return try await collect(cache.read(source))
        }
        _ = try await eventually(timeout: .seconds(60), interval: .milliseconds(5)) { firstCall.finished }
        #expect(firstCall.finished, "the reader's read-ahead never looked at segments 2 and 3")
        // Nothing changes in the resource from here on: a reader still waiting waits forever.
        _ = try await eventually(interval: .milliseconds(5)) { done.withLock { $0 } }
        let finished = done.withLock { $0 }
        let report = await cache.stallReport(key: source.key)
        #expect(finished, "the reader waits for a change that already happened: \(report)")
        if !finished { reader.cancel() }
        let result = try? await reader.value
        if finished { #expect(result == bytes) }
        #expect(source.requests.count == 2, "one fetch per byte: \(source.requests)")
        await cache.shutdown()
        try await fixture.close()
    }
}
