// Cut-through delivery (docs/DURABILITY.md, "Delivery is not a claim"): readers get the bytes of a fetch from memory as
// they arrive; the write-back makes them durable behind them; what is delivered is never claimed
// before it is committed; the memory a fill holds is bounded; a reader that stops early leaves
// little fetched past it.
import Foundation
import SeededRandom
import SparseCacheTesting
import Testing

@testable import HTTPCache
@_spi(Locking) @testable import SparseCacheEngine
@testable import SparseCacheStore
import TestSupport

/// A resource whose first answer sends its first `hold` bytes at once and the rest only after
/// ``release()``; later requests are answered at once. Counts requests, and the bytes sent as a
/// loopback origin counts them: a whole answer once it answers (a small answer goes into the
/// socket buffers at once, whether or not the cache reads all of it).
final class HoldingSource: RangeSource, Sendable {
    let key = "holding://resource"
    private let bytes: [UInt8]
    private let hold: Int
    private let state = Lock((requests: [Range<Int64>?](), released: false, sent: 0))

    init(_ bytes: [UInt8], hold: Int) {
        self.bytes = bytes
        self.hold = hold
    }

    var requests: [Range<Int64>?] { state.withLock { $0.requests } }

    var sent: Int { state.withLock { $0.sent } }

    func release() {
        state.withLock { $0.released = true }
    }

    private var isReleased: Bool { state.withLock { $0.released } }

    func fetch(_ range: Range<Int64>?, validator: ContentValidator?) async throws -> RangeResponse {
        let first = state.withLock { state in
            state.requests.append(range)
            return state.requests.count == 1
        }
        let wanted = range ?? 0..<Int64(bytes.count)
        let body = Array(bytes[Int(wanted.lowerBound)..<Int(min(wanted.upperBound, Int64(bytes.count)))])
        state.withLock { $0.sent += body.count }
        let (stream, continuation) = AsyncThrowingStream<[UInt8], Error>.makeStream()
        let hold = first ? min(self.hold, body.count) : body.count
        let producer = Task {
            for start in stride(from: 0, to: hold, by: 16 << 10) {
                continuation.yield(Array(body[start..<min(hold, start + (16 << 10))]))
            }
            do {
                // A cancel ends the wait (it throws).
                try await waitUntil(timeout: .seconds(600), interval: .milliseconds(5), "never released") { self.isReleased }
            } catch {
                return continuation.finish(throwing: error)
            }
            for start in stride(from: hold, to: body.count, by: 64 << 10) {
                continuation.yield(Array(body[start..<min(body.count, start + (64 << 10))]))
            }
            continuation.finish()
        }
        let info = ContentInfo(length: Int64(bytes.count), validator: ContentValidator(etag: "\"v1\""))
        return RangeResponse(info: info, offset: wanted.lowerBound, body: stream, cancel: { producer.cancel() })
    }
}

/// What each of several readers received so far.
final class Received: Sendable {
    private let state: Lock<[[UInt8]]>

    init(readers: Int) {
        state = Lock(Array(repeating: [], count: readers))
    }

    func withLock<T>(_ body: (inout [[UInt8]]) -> T) -> T { state.withLock { body(&$0) } }
}

@Suite("Cut-through delivery and adaptive read-ahead", .serialized, .timeLimit(.minutes(8 * hangGuardScale)))
struct CutThroughTests {
    /// A test's seed (``testSeed(_:)`` of `defaultSeed`) and `count` bytes made from it.
    private static func seededBytes(_ defaultSeed: UInt64, count: Int) -> (seed: UInt64, bytes: [UInt8]) {
        let seed = testSeed(defaultSeed)
        var random = SplitMix64(seed: seed)
        return (seed, random.bytes(count))
    }

    /// Copies the store's directory as it is on disk now (what a process crash leaves) and
    /// opens the copy: the present bytes of `key` there, each checked against `expected`.
    /// The copy is made while no catalog save is due or running: a save writes `catalog.tmp`
    /// and renames it, and a copy that listed the file before the rename cannot open it after.
    private static func presentAfterCrash(_ fixture: FillFixture, key: String, expected: [UInt8]) async throws -> Int64 {
        let copy = try TemporaryDirectory("cut-through-crash")
        try await waitUntil("the store's catalog save never settled") {
            guard await fixture.store.catalogQuiet else { return false }
            try? FileManager.default.removeItem(atPath: copy.path)
            do {
                try FileManager.default.copyItem(atPath: fixture.directory.file("cache"), toPath: copy.path)
                return true
            } catch {
                // A save that began during the copy: copy again once it is over.
                if await fixture.store.catalogQuiet { throw error }
                return false
            }
        }
        let store = try await SparseStore.open(directory: copy.path, options: StoreOptions(budget: 1 << 40))
        var present: Int64 = 0
        if await store.entry(for: key) != nil {
            let handle = try await store.open(key: key)
            for range in await handle.file.presentRanges() {
                let bytes = try await handle.file.read(offset: range.lowerBound, length: Int(range.count))
                #expect(bytes == Array(expected[Int(range.lowerBound)..<Int(range.upperBound)]), "claimed bytes differ at \(range)")
                present += Int64(range.count)
            }
            try await handle.release()
        }
        try await store.close()
        copy.remove()
        return present
    }

    /// A reader of `range` that hangs up after 16 KiB while the answer arrives (its bytes
    /// checked); once the fetch runs on with nobody waiting on it (it learns so before the rest
    /// of its answer is read), the origin sends the rest.
    private static func leaveEarly(
        _ cache: ProgressiveCache, _ source: HoldingSource, range: Range<Int64>?, bytes: [UInt8], seed: UInt64
    ) async throws {
        var read: [UInt8] = []
        for try await chunk in cache.read(source, range: range) {
            read += chunk
            if read.count >= 16 << 10 { break }
        }
        #expect(read == Array(bytes[0..<read.count]), "seed \(seed)")
        try await waitUntil(timeout: .seconds(120), interval: .milliseconds(5), "the fetch was never left alone") { await cache.fetchesUnwanted(key: source.key) }
        source.release()
    }

    @Test("a reader gets bytes as they arrive, before they are durable; other readers join; delivered is not claimed until committed")
    func deliveryIsNotAClaim() async throws {
        let (seed, bytes) = Self.seededBytes(181, count: 1 << 20)
        // Three whole 64 KiB segments and a part of the fourth, then the origin holds.
        let hold = 3 * (64 << 10) + 20_000
        let source = HoldingSource(bytes, hold: hold)
        let fixture = try await FillFixture("cut-through", options: .testing)
        let cache = fixture.cache
        let got = Received(readers: 2)
        let readers = (0..<2).map { index in
            Task {
                // The whole resource: first contact asks for it (one answer, which holds).
                for try await chunk in cache.read(source) { got.withLock { $0[index] += chunk } }
            }
        }
        // Both readers get everything that arrived while the origin still holds the rest:
        // nothing of it is durable (no commit is due before 1 MiB), so this only happens by
        // cut-through. (The old path handed bytes over only after their commit.)
        // A liveness bound, not a duration: alone this takes well under a second, but in a full
        // parallel run on 2 cores the fetch and the readers wait long for a thread of the
        // cooperative pool (twice, after 30 s, the readers had [131072, 131072] and [180224,
        // 196608] bytes). On failure `received` tells starvation from a lost wake-up: the
        // fetch, which waits on nothing but an answer buffered whole, has all of it while a
        // reader is still behind.
        let arrived = try await eventually(timeout: .seconds(300), interval: .milliseconds(5)) { got.withLock { $0.map(\.count) } == [hold, hold] }
        if !arrived {
            let counts = got.withLock { $0.map(\.count) }, received = cache.statistics.bytesReceived
            Issue.record("seed \(seed): readers got \(counts) of the \(hold) bytes that arrived (the fetch received \(received))")
        }
        #expect(got.withLock { $0.allSatisfy { $0 == Array(bytes[0..<hold]) } }, "seed \(seed): the bytes delivered from memory are right")
        #expect(source.requests.count == 1, "the second reader joined the first one's fetch: \(source.requests)")
        // Delivered, not claimed: the index names none of it, neither here nor after a crash now.
        #expect(try await cache.progress(key: source.key).presentBytes == 0)
        #expect(try await Self.presentAfterCrash(fixture, key: source.key, expected: bytes) == 0, "a crash claims nothing delivered")
        #expect(cache.statistics.bytesCutThrough >= Int64(2 * hold))

        source.release()
        for reader in readers { try await reader.value }
        #expect(got.withLock { $0.allSatisfy { $0 == bytes } }, "seed \(seed): every byte, in order")
        try await fixture.settled()
        // Behind the readers, the write-back made all of it durable and committed.
        #expect(try await cache.progress(key: source.key).presentBytes == Int64(bytes.count))
        #expect(try await Self.presentAfterCrash(fixture, key: source.key, expected: bytes) == Int64(bytes.count))
        try await fixture.close()
    }

    @Test("a reader that leaves while a short range answer arrives: the fetch reads that answer to its end, nothing is sent twice")
    func answerInFlightIsTaken() async throws {
        let (seed, bytes) = Self.seededBytes(184, count: 8 << 16)
        // First contact asks for two segments (an open range); the origin has sent them both,
        // but the cache has read 16 KiB of the first when its reader hangs up.
        let source = HoldingSource(bytes, hold: 16 << 10)
        let fixture = try await FillFixture("cut-through-in-flight", options: .testing)
        let cache = fixture.cache
        try await Self.leaveEarly(cache, source, range: 0..<Int64.max, bytes: bytes, seed: seed)
        try await fixture.settled()
        #expect(try await collect(cache.read(source)) == bytes, "seed \(seed)")
        // Cut at the end of its first segment, the fetch dropped the second one, which the
        // next reader then asked for again.
        #expect(source.sent == bytes.count, "the origin sent \(source.sent) bytes for \(bytes.count): \(source.requests)")
        try await fixture.close()
    }

    @Test("a reader that leaves while a short whole answer (200) arrives: the fetch reads it to the resource's end, nothing is sent twice")
    func wholeAnswerInFlightIsTaken() async throws {
        // A segment of a stream, prefetched as a whole 200 and given up on (the session moved)
        // while it arrived: the origin has sent all of it.
        let (seed, bytes) = Self.seededBytes(186, count: 3 << 16 + 4321)
        let source = HoldingSource(bytes, hold: 16 << 10)
        let fixture = try await FillFixture("cut-through-whole-in-flight", options: .testing)
        let cache = fixture.cache
        try await Self.leaveEarly(cache, source, range: nil, bytes: bytes, seed: seed)
        try await fixture.settled()
        #expect(try await collect(cache.read(source)) == bytes, "seed \(seed)")
        #expect(source.requests == [nil], "one request, the first: \(source.requests)")
        #expect(source.sent == bytes.count, "the origin sent \(source.sent) bytes for \(bytes.count): \(source.requests)")
        try await fixture.close()
    }

    @Test("the memory a fill holds is bounded: an origin faster than the disk waits for the write-back")
    func boundedMemory() async throws {
        let (seed, bytes) = Self.seededBytes(182, count: 6 << 20)
        var options = FillOptions.testing
        options.arrivedLimit = 512 << 10
        options.commitEvery = 256 << 10
        let fixture = try await FillFixture("cut-through-bounded", options: options)
        // Answered at once from memory: always faster than writes, fdatasyncs and commits.
        let source = GatedSource(bytes)
        source.release()
        #expect(try await collect(fixture.cache.read(source)) == bytes, "seed \(seed)")
        try await fixture.settled()
        let statistics = fixture.cache.statistics
        // At most the limit plus the one network chunk that crossed it.
        #expect(statistics.mostArrived <= options.arrivedLimit + (64 << 10), "\(statistics)")
        #expect(statistics.mostArrived >= options.commitEvery, "the bound was reached: \(statistics)")
        #expect(try await fixture.cache.progress(key: source.key).presentBytes == Int64(bytes.count))
        try await fixture.close()
    }

    @Test("a fill writes on while its commit syncs, and the next commit covers every batch written meanwhile (one sync for many)")
    func writesBesideACommit() async throws {
        // The write-back used to commit each megabyte inline, its next write queued behind
        // the sync: a cold download ran at one fdatasync per megabyte. Here the first commit's
        // sync is held 8 s; the fill's next batches go to the data file meanwhile.
        let (seed, bytes) = Self.seededBytes(185, count: 8 << 20)
        let fixture = try await FillFixture("cut-through-write-beside-commit", options: .testing)
        let resources = fixture.directory.file("cache") + "/resources/"
        let held = try FaultInjection.add(FaultRule([.fdatasync], pathContains: resources, maxFires: 1, delay: .seconds(8)))
        defer { FaultInjection.remove(held) }
        // Counts writes (no effect). While a commit is held in its data sync, the index is
        // not written: every write it sees then is the fill's data.
        let writes = try FaultInjection.add(FaultRule([.pwrite], pathContains: resources))
        defer { FaultInjection.remove(writes) }
        let source = GatedSource(bytes)
        source.release()
        let cache = fixture.cache
        let reader = Task { try await collect(cache.read(source)) }

        var writesBeforeHold = -1
        var writtenWhileHeld = false
        // Until a write came while the sync was held, or the sync returned first.
        _ = try await eventually(timeout: .seconds(120), interval: .milliseconds(2)) {
            let written = FaultInjection.matches(writes)
            // Read before the look at the rule: the sync (fired once) had not returned then.
            guard FaultInjection.fired(held) == 1 else { return false }
            guard FaultInjection.delaying(held) == 1 else { return true }
            if writesBeforeHold < 0 { writesBeforeHold = written }
            writtenWhileHeld = written > writesBeforeHold
            return writtenWhileHeld
        }
        #expect(writtenWhileHeld, "the fill wrote to the data file while its first commit synced (\(writesBeforeHold) writes before)")
        #expect(try await cache.progress(key: source.key).presentBytes == 0, "nothing is present before that commit")
        #expect(try await reader.value == bytes, "seed \(seed): every byte, in order")
        try await fixture.settled()
        let batches = bytes.count / ProgressiveCache.writeBatch
        // A commit is two syncs (data, index): a commit per batch made at least 16.
        #expect(FaultInjection.matches(held) < 2 * batches, "\(FaultInjection.matches(held)) syncs for \(batches) batches")
        #expect(try await cache.progress(key: source.key).presentBytes == Int64(bytes.count))
        #expect(try await Self.presentAfterCrash(fixture, key: source.key, expected: bytes) == Int64(bytes.count))
        try await fixture.close()
    }

    @Test("a reader that stops early leaves little fetched past it (the fast-drop seek): at most 1.1x of what it read")
    func stopEarly() async throws {
        let (seed, bytes) = Self.seededBytes(183, count: 32 << 20)
        let fixture = try await FillFixture("cut-through-drop", options: .testing)
        let source = GatedSource(bytes)
        source.release()
        var read: [UInt8] = []
        // A player's seek: `bytes=8388608-`, 4 MiB read, then it hangs up.
        let start = 8 << 20
        for try await chunk in fixture.cache.read(source, range: Int64(start)..<Int64.max) {
            read += chunk
            if read.count >= 4 << 20 { break }
        }
        #expect(read == Array(bytes[start..<(start + read.count)]), "seed \(seed)")
        try await fixture.settled()
        let asked = source.requests.map { Int($0.clamped(to: 0..<Int64(bytes.count)).count) }.reduce(0, +)
        // The old fill asked for 16 MiB spans and one more ahead: 8x what was read.
        #expect(
            asked >= 4 << 20 && Double(asked) <= 1.1 * Double(read.count),
            "asked \(asked) bytes for \(read.count) read: \(source.requests)")
        try await fixture.close()
    }
}

extension SparseStore {
    /// Whether no catalog save is due (its timer armed) or running.
    var catalogQuiet: Bool { saveTask == nil && catalogSaving == nil }
}

extension ProgressiveCache {
    /// Whether every fetch of `key` runs on with nobody waiting on it (at least one runs).
    func fetchesUnwanted(key: String) -> Bool {
        guard let fetches = resources[key]?.fetches, !fetches.isEmpty else { return false }
        return fetches.values.allSatisfy { $0.unwanted && $0.interest <= 0 }
    }
}

@Suite("Arrived bytes held for cut-through")
struct ArrivedBytesTests {
    @Test("any offset and limit gives the right bytes, never more than asked; a whole chunk is handed over without a copy")
    func piecesAndWholeChunks() async throws {
        // CPU-bound in a debug build (byte-by-byte copies and compares): on a thread of its own,
        // and small (a first version of 6 MB and 2,000 reads of up to 2 MiB held a pool thread
        // for minutes and starved the rest of a full run).
        try await offPool("arrived-bytes") { Self.check(seed: testSeed(0xA881_7ED)) }
    }

    private static func check(seed: UInt64) {
        var generator = SplitMix64(seed: seed)
        let base: Int64 = 3 << 20
        let arrived = ArrivedBytes(at: base)
        var expected: [UInt8] = []
        var chunks: [(offset: Int64, size: Int)] = []
        // Chunks as a socket gives them: some of at least the piece size, runs of small ones.
        for _ in 0..<24 {
            let small = generator.next() % 3 == 0
            let size = small ? Int(generator.next() % 3000) + 1 : ArrivedBytes.smallestPiece + Int(generator.next() % 8192)
            let chunk = (0..<size).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
            chunks.append((base + Int64(expected.count), size))
            arrived.append(chunk[...])
            expected += chunk
        }
        for _ in 0..<300 {
            let offset = base + Int64(generator.next() % UInt64(expected.count))
            let limit = Int64(generator.next() % UInt64(3 * ArrivedBytes.smallestPiece)) + 1
            let got = arrived.bytes(at: offset, limit: limit)
            let from = Int(offset - base)
            #expect(!got.isEmpty && Int64(got.count) <= limit, "seed \(seed): offset \(offset), limit \(limit)")
            #expect(got[...] == expected[from..<(from + got.count)], "seed \(seed): offset \(offset), limit \(limit)")
        }
        #expect(arrived.bytes(at: base - 1, limit: 10).isEmpty && arrived.bytes(at: base + Int64(expected.count), limit: 10).isEmpty)
        // A small piece is gathered with the small chunks after it, never into a large one.
        for (small, large) in zip(chunks, chunks.dropFirst()) where small.size < ArrivedBytes.smallestPiece && large.size >= ArrivedBytes.smallestPiece {
            let got = arrived.bytes(at: small.offset, limit: 1 << 20)
            #expect(small.offset + Int64(got.count) <= large.offset, "seed \(seed): the piece at \(small.offset) ran into the large chunk after it")
        }
        // Reading on from a chunk's start, whole chunks at a time: each is the held array itself.
        for (start, size) in chunks where size >= ArrivedBytes.smallestPiece {
            let first = arrived.bytes(at: start, limit: 1 << 20)
            let second = arrived.bytes(at: start, limit: 1 << 20)
            #expect(first.count == size, "seed \(seed): the chunk at \(start) is handed over whole")
            let same = first.withUnsafeBufferPointer { a in second.withUnsafeBufferPointer { b in a.baseAddress == b.baseAddress } }
            #expect(same, "seed \(seed): the chunk at \(start) was copied")
        }
    }
}
