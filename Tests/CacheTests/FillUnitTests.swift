// The pieces of the fill layer that need no server: Content-Range parsing, validators, the
// connection limiter; and prefetch, progress and cancellation against a slow origin.
import Foundation
import TestSupport
#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif
import Synchronization
import Testing

@testable import HTTPCache
@_spi(Locking) @testable import SparseCacheEngine
@testable import SparseCacheStore
@testable import SparseHTTP

@Suite("Fill layer pieces")
struct FillUnitTests {
    @Test("Content-Range: the three forms parse; malformed ones are refused")
    func contentRange() {
        #expect(ContentRange("bytes 0-99/1000")?.range == 0..<100)
        #expect(ContentRange("bytes 0-99/1000")?.total == 1000)
        #expect(ContentRange("bytes 5-5/*")?.range == 5..<6)
        #expect(ContentRange("bytes 5-5/*")?.total == nil)
        #expect(ContentRange("bytes */1000")?.total == 1000)
        #expect(ContentRange("bytes */1000")?.range == nil)
        #expect(ContentRange("BYTES 1-2/3")?.range == 1..<3)
        for bad in [
            "", "bytes", "bytes 9-3/10", "bytes 0-10/10", "bytes -1-3/10", "items 0-1/2", "bytes 0-1", "bytes */*", "bytes a-b/c",
            "bytes 0-9223372036854775807/9223372036854775807",
        ] {
            #expect(ContentRange(bad) == nil, "'\(bad)' parsed")
        }
    }

    @Test("validators: strong and weak ETags, Last-Modified, and what If-Range may carry")
    func validators() {
        let strong = ContentValidator(etag: "\"abc\"", lastModified: "Sun, 22 Nov 2026 10:00:00 GMT")
        #expect(strong.matches(ContentValidator(etag: "\"abc\"")))
        #expect(strong.matches(ContentValidator(etag: "W/\"abc\"")))
        #expect(!strong.matches(ContentValidator(etag: "\"abd\"")))
        #expect(!strong.matches(ContentValidator(lastModified: "Mon, 23 Nov 2026 10:00:00 GMT")))
        #expect(strong.matches(ContentValidator()))
        #expect(HTTPRangeSource.ifRange(strong) == "\"abc\"")
        // RFC 9110 13.1.5: a weak ETag may not go in If-Range, and with an entity tag of any
        // kind a date may not either; a date alone only when it is a strong validator (a second
        // or more before the Date of the answer that carried it, 8.8.2.2).
        let modified = "Sun, 22 Nov 2026 10:00:00 GMT"
        #expect(
            HTTPRangeSource.ifRange(ContentValidator(etag: "W/\"abc\"", lastModified: modified, date: "Mon, 23 Nov 2026 10:00:00 GMT"))
                == nil)
        #expect(HTTPRangeSource.ifRange(ContentValidator(etag: "W/\"abc\"")) == nil)
        #expect(HTTPRangeSource.ifRange(ContentValidator(lastModified: modified, date: "Sun, 22 Nov 2026 10:00:01 GMT")) == modified)
        #expect(HTTPRangeSource.ifRange(ContentValidator(lastModified: modified, date: modified)) == nil)
        #expect(HTTPRangeSource.ifRange(ContentValidator(lastModified: modified)) == nil)
        #expect(HTTPRangeSource.ifRange(ContentValidator(lastModified: "not a date", date: "Mon, 23 Nov 2026 10:00:00 GMT")) == nil)
        // The date is not part of the version.
        #expect(ContentValidator(etag: "\"abc\"", date: "x") == ContentValidator(etag: "\"abc\"", date: "y"))
        let cached = ContentInfo(length: 100, validator: strong)
        #expect(ProgressiveCache.isDifferentVersion(ContentInfo(length: 101, validator: strong), than: cached))
        #expect(ProgressiveCache.isDifferentVersion(ContentInfo(length: 100, validator: ContentValidator(etag: "\"zzz\"")), than: cached))
        #expect(!ProgressiveCache.isDifferentVersion(ContentInfo(length: 100), than: cached))
    }

    @Test("responses: 206 gives the offset and total, 200 starts at 0, 416 and 404 are origin errors, 5xx may pass")
    func interpretResponses() throws {
        let url = URL(string: "http://127.0.0.1/x")!
        func response(_ status: Int, _ headers: [String: String]) -> HTTPURLResponse {
            HTTPURLResponse(url: url, statusCode: status, httpVersion: "HTTP/1.1", headerFields: headers)!
        }
        func interpret(_ response: HTTPURLResponse, requested: Range<Int64>?, key: String) throws -> (ContentInfo, Int64) {
            let length = response.expectedContentLength >= 0 ? response.expectedContentLength : nil
            return try HTTPRangeSource.interpret(
                status: response.statusCode, headers: HTTPHeaders(response), contentLength: length, requested: requested, key: key)
        }
        let partial = try interpret(
            response(206, ["Content-Range": "bytes 100-199/1000", "ETag": "\"v1\"", "Content-Type": "video/mp4"]), requested: 100..<200,
            key: "k")
        #expect(partial.1 == 100 && partial.0.length == 1000)
        #expect(partial.0.validator.etag == "\"v1\"" && partial.0.contentType == "video/mp4")
        let whole = try interpret(response(200, ["Content-Length": "1000"]), requested: 100..<200, key: "k")
        #expect(whole.1 == 0)
        #expect(throws: OriginError.self) {
            _ = try interpret(response(206, ["Content-Range": "bytes 0-99/1000"]), requested: 100..<200, key: "k")
        }
        #expect(throws: OriginError.self) { _ = try interpret(response(206, [:]), requested: 0..<1, key: "k") }
        do {
            _ = try interpret(response(416, ["Content-Range": "bytes */1000"]), requested: 5000..<6000, key: "k")
            Issue.record("416 was accepted")
        } catch let error as OriginError {
            #expect(error.kind == .badAnswer && error.status == 416 && error.description.contains("416") && error.description.contains("1000"), "\(error)")
        }
        for (status, code) in [(404, OriginError.Kind.badAnswer), (403, .badAnswer), (503, .unavailable), (500, .unavailable)] {
            do {
                _ = try interpret(response(status, [:]), requested: 0..<1, key: "k")
                Issue.record("\(status) was accepted")
            } catch let error as OriginError {
                #expect(error.kind == code && error.status == status && error.description.contains(String(status)), "\(error)")
            }
        }
    }

    @Test("the connection limiter: never more holders than the limit, waiters suspend, a cancelled waiter leaves")
    func limiter() async throws {
        let limiter = ConnectionLimiter(limit: 2)
        let holders = HolderCounts()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<12 {
                group.addTask {
                    try await limiter.acquire()
                    let now = holders.current.add(1, ordering: .relaxed).newValue
                    _ = holders.peak.max(now, ordering: .relaxed)
                    try await Task.sleep(for: .milliseconds(5))  // holds its place a while
                    holders.current.subtract(1, ordering: .relaxed)
                    limiter.release()
                }
            }
            try await group.waitForAll()
        }
        #expect(holders.peak.load(ordering: .relaxed) == 2)
        #expect(limiter.inUse == 0)

        try await limiter.acquire()
        try await limiter.acquire()
        let waiter = Task { try await limiter.acquire() }
        try await waitUntil("the third acquire never queued") { limiter.queued == 1 }
        waiter.cancel()
        await #expect(throws: CancellationError.self) { try await waiter.value }
        limiter.release()
        limiter.release()
        #expect(limiter.inUse == 0, "the cancelled waiter took no place")
    }
}

private final class HolderCounts: Sendable {
    let current = Atomic<Int>(0)
    let peak = Atomic<Int>(0)
}

@Suite("Fill: prefetch, progress, cancellation", .tags(.external), .unlessSkippingExternal, .serialized, .timeLimit(.minutes(8 * hangGuardScale)))
struct FillBehaviourTests {
    @Test("prefetch brings a range in and reports progress; progress survives a restart")
    func prefetchAndProgress() async throws {
        let files = try TemporaryDirectory("origin-files")
        let source = try originFile(files.path, "feed.mp4", count: 2_000_000, seed: 9)
        let origin = try await OriginServer.nginx(root: files.path)
        defer { origin.stop() }
        let directory = try TemporaryDirectory("fill-prefetch")
        var storeOptions = StoreOptions(budget: 1 << 40)
        storeOptions.segmentSize = 16 << 10
        var store = try await SparseStore.open(directory: directory.file("cache"), options: storeOptions)
        var cache = ProgressiveCache(store: store, options: .testing)
        let http = try HTTPRangeSource(url: origin.url("feed.mp4"))
        let reports = Lock<[FillProgress]>([])
        try await cache.prefetch(http, range: 0..<500_000) { progress in reports.withLock { $0.append(progress) } }
        let seen = reports.withLock { $0 }
        #expect(!seen.isEmpty)
        #expect(seen.map(\.presentBytes) == seen.map(\.presentBytes).sorted(), "progress never goes back")
        let now = try await cache.progress(key: http.key)
        #expect(now.contiguousBytes >= 500_000 && now.presentBytes < Int64(source.count), "\(now)")
        #expect(now.length == Int64(source.count))
        try await store.close()

        store = try await SparseStore.open(directory: directory.file("cache"), options: storeOptions)
        cache = ProgressiveCache(store: store, options: .testing)
        let restarted = try await cache.progress(key: http.key)
        #expect(restarted == now, "progress after a restart: \(restarted) vs \(now)")
        let updates = try await cache.progressUpdates(key: http.key)
        var iterator = updates.makeAsyncIterator()
        #expect(await iterator.next() == now)
        #expect(try await collect(cache.read(http, range: 400_000..<900_000)) == Array(source[400_000..<900_000]))
        let next = await iterator.next()
        #expect((next?.presentBytes ?? 0) > now.presentBytes, "an update after the fetch committed: \(String(describing: next))")
        try await store.close()
    }

    @Test("a reader that goes away stops its fetch; one still needed by another reader goes on")
    func cancellation() async throws {
        let (files, origin, fixture) = try await FillFixture.withOrigin(.faulty, "fill-cancel")
        defer { origin.stop() }
        let source = try originFile(files.path, "long.bin", count: 4_000_000, seed: 10)
        // About 2.5 s for the whole file.
        try "delay_ms=10".write(toFile: files.path + "/long.bin.faults", atomically: true, encoding: .utf8)
        let http = try HTTPRangeSource(url: origin.url("long.bin"))

        // One reader alone, cancelled early: the origin stops sending long before the end.
        let lone = Task { try await collect(fixture.cache.read(http)) }
        try await waitUntil("the fill received nothing") { fixture.cache.statistics.bytesReceived > 0 }
        lone.cancel()
        _ = try? await lone.value
        // Every request the origin got has ended (it logs one when it stops sending).
        try await fixture.settled()
        try await waitUntil("the origin is still sending") {
            origin.requests().filter { $0.path == "/long.bin" }.count == origin.arrived("long.bin").count
        }
        let afterCancel = await origin.bytesSent("long.bin")
        #expect(afterCancel < Int64(source.count) / 2, "the origin sent \(afterCancel) bytes after the only reader left")

        // Two readers of the same bytes; one leaves, the other still gets everything.
        let cache = fixture.cache
        let leaving = Task { try await collect(cache.read(http)) }
        let staying = Task { try await collect(cache.read(http)) }
        // Each running fetch holds the resource too, so it counts among `readers`.
        try await waitUntil("the two readers never attached") {
            let activity = await cache.activity
            return activity.readers - activity.fetchesInFlight == 2
        }
        leaving.cancel()
        #expect(try await staying.value == source)
        try await fixture.close()
    }

    @Test("read hands over a chunk only when asked: a slow consumer holds back the reads; leaving early releases the resource")
    func backPressure() async throws {
        let files = try TemporaryDirectory("origin-files")
        let source = try originFile(files.path, "whole.bin", count: 6 << 20, seed: 11)
        let origin = try await OriginServer.nginx(root: files.path)
        defer { origin.stop() }
        var options = FillOptions.testing
        options.keepOpen = .milliseconds(200)
        let fixture = try await FillFixture("fill-pressure", options: options)
        let http = try HTTPRangeSource(url: origin.url("whole.bin"))
        try await fixture.cache.prefetch(http)
        let before = fixture.cache.statistics.bytesFromCache

        // Take one chunk, then dawdle: at most one more chunk may be read meanwhile (the one
        // waiting to be handed over), not the other 5 MiB.
        var iterator = fixture.cache.read(http).makeAsyncIterator()
        let first = try await iterator.next()
        #expect(first.map { Array(source.prefix($0.count)) == $0 } == true)
        try await Task.sleep(for: .milliseconds(300))  // a window for reads to run ahead
        let read = fixture.cache.statistics.bytesFromCache - before
        #expect(read <= 2 * Int64(FillOptions.testing.readChunk), "read \(read) bytes ahead of a consumer that took one chunk")
        var rest: [UInt8] = first ?? []
        while let chunk = try await iterator.next() { rest += chunk }
        #expect(rest == source)

        // Leaving after one chunk: the reader lets the resource go (the store may evict it
        // once `keepOpen` has passed).
        do {
            var partial = fixture.cache.read(http).makeAsyncIterator()
            _ = try await partial.next()
        }
        #expect(
            try await eventually { await fixture.store.entry(for: http.key)?.isOpen != true },
            "the resource is released once the iterator is gone")
        try await fixture.close()
    }

    @Test("shutdown closes the resources kept open for reuse before it returns, so the store can close after it")
    func shutdownReleases() async throws {
        let (files, origin, fixture) = try await FillFixture.withOrigin(.nginx, "fill-shutdown")
        defer { origin.stop() }
        _ = try originFile(files.path, "kept.bin", count: 300_000, seed: 12)
        let http = try HTTPRangeSource(url: origin.url("kept.bin"))
        try await fixture.cache.prefetch(http)
        #expect(await fixture.store.entry(for: http.key)?.isOpen == true, "kept open for the next reader")
        await fixture.cache.shutdown()
        #expect(await fixture.store.entry(for: http.key)?.isOpen == false, "closed by the time shutdown returns")
        try await fixture.close()
        let reopened = try await FillFixture(reopening: fixture, options: .testing)
        let entry = await reopened.store.entry(for: http.key)
        #expect(entry?.length == 300_000 && entry?.presentBytes == 300_000, "\(String(describing: entry))")
        try await reopened.close()
    }
}
