// serve with the small-object store (issue 21): a small complete answer goes to the logs (no
// sparse file, no index), hits come from its record with every caching rule as before (Range,
// conditionals, PURGE, restarts, the budget), and a large answer stays a sparse resource.
import Foundation
import LoopbackOrigins
import Testing

@testable import HTTPCache
@_spi(Locking) @testable import SparseCacheEngine
@testable import SparseCacheStore
@testable import SparseHTTP
import TestSupport
import StoreTestSupport

@Suite("serve: small objects", .tags(.external), .unlessSkippingExternal, .serialized, .timeLimit(.minutes(8)))
struct SmallObjectServeTests {
    /// A store, cache, proxy and server on `directory`, in front of `origin`.
    struct Rig {
        let store: SparseStore
        let cache: ProgressiveCache
        let proxy: CachingProxy
        let server: HTTPServer

        init(directory: String, origin: URL, budget: Int64 = .max, groupCommitDelay: Duration? = nil) async throws {
            var options = StoreOptions(budget: budget)
            if let groupCommitDelay { options.smallObjects.groupCommitDelay = groupCommitDelay }
            store = try await SparseStore.open(directory: directory, options: options)
            cache = ProgressiveCache(store: store, options: .testing)
            let proxy = CachingProxy(cache: cache, origin: origin)
            self.proxy = proxy
            server = try HTTPServer.start(options: ProxyFixture.defaultOptions, log: { _ in }) { request, body, response in
                try await proxy.handle(request, body, response)
            }
        }

        var base: String { "http://127.0.0.1:\(server.port)" }

        func stop() async throws {
            await server.shutdown(grace: .seconds(1))
            await proxy.shutdown()
            await cache.shutdown()
            try await store.close()
        }

        /// Waits until `key`'s object is durable in the logs (it is written after the answer).
        func waitStored(_ key: String) async throws {
            try await waitUntil("'\(key)' was never stored as a small object") { await store.smallObjects.contains(key) }
        }
    }

    /// An nginx origin (`expires 1h`) of `count` 4 KiB files named `<prefix><index>.bin`, with
    /// their bodies; the directory lives as long as the caller holds it.
    static func smallFilesOrigin(_ label: String, prefix: String, count: Int, seed: UInt64) async throws -> (
        files: TemporaryDirectory, bodies: [[UInt8]], origin: OriginServer
    ) {
        let files = try TemporaryDirectory(label)
        let bodies = try (0..<count).map { try originFile(files.path, "\(prefix)\($0).bin", count: 4096, seed: seed + UInt64($0)) }
        return (files, bodies, try await OriginServer.nginx(root: files.path, locations: "expires 1h;"))
    }

    static func resourceFiles(_ cache: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: cache + "/resources")) ?? []).sorted()
    }

    @Test("a 4 KiB answer is one log record: hit, Range (206), If-None-Match (304), PURGE, and a hit again after a restart")
    func smallAnswerLifecycle() async throws {
        let files = try TemporaryDirectory("smallobj-serve-origin")
        let small = try originFile(files.path, "small.bin", count: 4096, seed: 7)
        let origin = try await OriginServer.nginx(root: files.path, locations: "expires 1h;")
        defer { origin.stop() }
        let directory = try TemporaryDirectory("smallobj-serve")
        let cacheDir = directory.file("cache")
        var rig = try await Rig(directory: cacheDir, origin: origin.baseURL)
        let key = origin.baseURL.absoluteString + "/small.bin"

        let miss = try await Curl.run(rig.base + "/small.bin")
        #expect(miss.status == 200 && miss.body == small, "\(miss)")
        #expect(miss.headers["cache-status"]?.contains("fwd=uri-miss") == true, "\(miss)")
        try await rig.waitStored(key)
        #expect(await rig.store.smallObjects.contains(key))
        #expect(await rig.store.entry(for: key) == nil, "a small answer made a sparse resource too")
        #expect(Self.resourceFiles(cacheDir).isEmpty, "files in resources/: \(Self.resourceFiles(cacheDir))")

        let hit = try await Curl.run(rig.base + "/small.bin")
        #expect(hit.status == 200 && hit.body == small && hit.headers["cache-status"]?.contains("hit") == true, "\(hit)")
        #expect(hit.headers["etag"] != nil && hit.headers["accept-ranges"] == "bytes", "\(hit)")

        // RFC 9110 14.2: one range of a stored small object.
        let part = try await Curl.run(rig.base + "/small.bin", ["-r", "1000-1999"])
        #expect(part.status == 206 && part.body == Array(small[1000..<2000]), "\(part)")
        #expect(part.headers["content-range"] == "bytes 1000-1999/4096" && part.headers["cache-status"]?.contains("hit") == true)
        // RFC 9110 13.1.2: a matching If-None-Match is answered 304 from storage.
        let etag = hit.headers["etag"] ?? ""
        let notModified = try await Curl.run(rig.base + "/small.bin", ["-H", "If-None-Match: \(etag)"])
        #expect(notModified.status == 304 && notModified.body.isEmpty, "\(notModified)")

        // A restart serves it from the log.
        try await rig.stop()
        rig = try await Rig(directory: cacheDir, origin: origin.baseURL)
        let afterRestart = try await Curl.run(rig.base + "/small.bin")
        #expect(afterRestart.body == small && afterRestart.headers["cache-status"]?.contains("hit") == true, "\(afterRestart)")
        // ls lists it while the server owns the directory.
        let listed = try await SparseStore.inspect(directory: cacheDir)
        #expect(listed.entries.contains { $0.key == key && $0.length == 4096 && $0.name.hasPrefix("objects/") }, "\(listed.entries)")

        // PURGE drops it, durably: a miss now, and after a restart too.
        let purge = try await Curl.run(rig.base + "/small.bin", ["-X", "PURGE"])
        #expect(purge.status == 200, "\(purge)")
        #expect(await rig.store.smallObjects.contains(key) == false)
        try await rig.stop()
        rig = try await Rig(directory: cacheDir, origin: origin.baseURL)
        #expect(await rig.store.smallObjects.contains(key) == false, "a purged object came back after a restart")
        let again = try await Curl.run(rig.base + "/small.bin")
        #expect(again.body == small && again.headers["cache-status"]?.contains("fwd=uri-miss") == true, "\(again)")
        try await rig.stop()
        let verify = try await StoreVerifier.verify(directory: cacheDir)
        #expect(verify.isClean && !verify.smallObjectLogs.isEmpty, "\(verify)")
    }

    @Test("the first hit after a miss reads only the body: it is told what the record's metadata says, as decoding it would")
    func firstHitKnowsTheHead() async throws {
        let files = try TemporaryDirectory("smallobj-known-origin")
        _ = try originFile(files.path, "known.bin", count: 3000, seed: 9)
        let origin = try await OriginServer.nginx(root: files.path, locations: "expires 1h; add_header Vary Accept-Language;")
        defer { origin.stop() }
        let directory = try TemporaryDirectory("smallobj-known")
        let rig = try await Rig(directory: directory.file("cache"), origin: origin.baseURL)
        let key = origin.baseURL.absoluteString + "/known.bin"
        let miss = try await Curl.run(rig.base + "/known.bin", ["-H", "Accept-Language: de"])
        #expect(miss.status == 200 && miss.body.count == 3000, "\(miss)")
        // Known once the record is durable, before any hit decoded it.
        _ = try await eventually { await rig.cache.smallInfos[key] != nil }
        let known = try #require(await rig.cache.smallInfos[key], "the miss left nothing known of its record")
        let object = try #require(try await rig.store.smallObjects.object(for: key))
        #expect(known.sequence == object.sequence)
        let decoded = ProgressiveCache.smallInfo(length: object.body.count, metadata: object.metadata, head: StoredHead(object.metadata))
        #expect(known.info == decoded, "what the miss stored differs from what the record decodes to")
        #expect(known.info.stored?.headers["vary"] == "Accept-Language" && known.info.stored?.varyRequest["accept-language"] == "de")
        let hit = try await Curl.run(rig.base + "/known.bin", ["-H", "Accept-Language: de"])
        #expect(hit.body == miss.body && hit.headers["cache-status"]?.contains("hit") == true, "\(hit)")
        try await rig.stop()
    }

    @Test("objects waiting for their batch: answered from memory, a PURGE waits for the batch and wins, a shutdown writes them")
    func arrivingObjects() async throws {
        let (files, bodies, origin) = try await Self.smallFilesOrigin("smallobj-arriving-origin", prefix: "a", count: 12, seed: 300)
        defer { withExtendedLifetime(files) { origin.stop() } }
        let directory = try TemporaryDirectory("smallobj-arriving")
        let cacheDir = directory.file("cache")
        // A long delay keeps the objects in memory, waiting for their batch, for the whole test.
        var rig = try await Rig(directory: cacheDir, origin: origin.baseURL, groupCommitDelay: .seconds(3))
        let key = { (index: Int) in origin.baseURL.absoluteString + "/a\(index).bin" }
        let batchesBefore = await rig.store.smallObjects.batches
        let base = rig.base, expected = bodies
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<12 {
                group.addTask {
                    let miss = try await Curl.run(base + "/a\(index).bin")
                    #expect(miss.status == 200 && miss.body == expected[index], "a\(index): \(miss)")
                }
            }
            try await group.waitForAll()
        }
        #expect(await rig.store.smallObjects.count == 0, "written before the group commit's delay")
        // A second reader gets the bytes from memory: no second origin request.
        let again = try await Curl.run(rig.base + "/a3.bin")
        #expect(again.body == bodies[3], "\(again)")
        #expect(origin.requests().filter { $0.path == "/a3.bin" }.count == 1, "a3 was asked for again while it was being written")
        // A PURGE of an object still waiting: it waits for the batch, then removes it.
        let purge = try await Curl.run(rig.base + "/a5.bin", ["-X", "PURGE"])
        #expect(purge.status == 200, "\(purge)")
        #expect(await rig.store.smallObjects.contains(key(5)) == false, "the purged object was written after the purge")
        await rig.cache.settleAllSmall()
        for index in 0..<12 where index != 5 { #expect(await rig.store.smallObjects.contains(key(index)), "a\(index) was not written") }
        // The first object's batch, the others' (they queued while it waited), the tombstone's.
        let batches = await rig.store.smallObjects.batches - batchesBefore
        #expect(batches <= 3, "12 misses and a purge within the delay took \(batches) batches")
        // Misses after the purge, still waiting at shutdown: written before the store closes.
        for index in [5, 11] { _ = try await Curl.run(rig.base + "/a\(index).bin", ["-H", "Cache-Control: no-cache"]) }
        try await rig.stop()
        rig = try await Rig(directory: cacheDir, origin: origin.baseURL)
        for index in 0..<12 {
            let hit = try await Curl.run(rig.base + "/a\(index).bin")
            #expect(hit.body == bodies[index] && hit.headers["cache-status"]?.contains("hit") == true, "a\(index) after a restart: \(hit)")
        }
        try await rig.stop()
        let verify = try await StoreVerifier.verify(directory: cacheDir)
        #expect(verify.isClean, "\(verify)")
    }

    @Test("a large answer stays a sparse resource, and one just over the threshold too")
    func largeStaysSparse() async throws {
        let files = try TemporaryDirectory("smallobj-serve-large")
        let large = try originFile(files.path, "large.bin", count: 300_000, seed: 8)
        let edge = try originFile(files.path, "edge.bin", count: 64 * 1024 + 1, seed: 9)
        let fits = try originFile(files.path, "fits.bin", count: 64 * 1024, seed: 10)
        let origin = try await OriginServer.nginx(root: files.path, locations: "expires 1h;")
        defer { origin.stop() }
        let directory = try TemporaryDirectory("smallobj-serve-l")
        let rig = try await Rig(directory: directory.file("cache"), origin: origin.baseURL)
        for (name, bytes, isSmall) in [("large.bin", large, false), ("edge.bin", edge, false), ("fits.bin", fits, true)] {
            let key = origin.baseURL.absoluteString + "/" + name
            let miss = try await Curl.run(rig.base + "/" + name)
            #expect(miss.status == 200 && miss.body == bytes, "\(name): \(miss)")
            if isSmall { try await rig.waitStored(key) }
            await rig.cache.closeIdle()
            #expect(await rig.store.smallObjects.contains(key) == isSmall, "\(name)")
            #expect((await rig.store.entry(for: key) != nil) == !isSmall, "\(name)")
            let hit = try await Curl.run(rig.base + "/" + name)
            #expect(hit.body == bytes && hit.headers["cache-status"]?.contains("hit") == true, "\(name): \(hit)")
        }
        try await rig.stop()
    }

    @Test(
        "a miss the proxy asks the origin for itself is shared: clients that come while its body arrives get it from the one request, kept small or sparse; an answer not to store goes to each client from a request of its own"
    )
    func claimedMissIsShared() async throws {
        let files = try TemporaryDirectory("smallobj-serve-shared")
        let origin = try await OriginServer.scripted(root: files.path)
        defer { origin.stop() }
        // Bodies that trickle in after their heads: the first client's request is still
        // arriving when the others ask.
        let cases: [(name: String, size: Int, seed: Int, cacheControl: String, small: Bool?)] = [
            ("trickle", 8000, 31, "max-age=3600", true), ("large", 300_000, 32, "max-age=3600", false), ("private", 3000, 33, "no-store", nil),
        ]
        for item in cases {
            var script = OriginScript(headers: [("Cache-Control", item.cacheControl), ("ETag", "\"\(item.name)-1\"")])
            script.bodySize = item.size
            script.bodySeed = item.seed
            script.chunkSize = item.size / 8
            script.chunkDelayMs = 40
            try script.write(root: files.path, name: item.name)
        }
        let directory = try TemporaryDirectory("smallobj-serve-s")
        let rig = try await Rig(directory: directory.file("cache"), origin: origin.baseURL)
        for item in cases {
            let body = OriginScript.pattern(count: item.size, seed: item.seed)
            let answers = try await withThrowingTaskGroup(of: CurlResult.self) { group in
                for client in 0..<4 {
                    group.addTask {
                        try await Task.sleep(for: .milliseconds(client * 40))  // pacing: clients 40 ms apart
                        return try await Curl.run(rig.base + "/" + item.name)
                    }
                }
                return try await group.reduce(into: [CurlResult]()) { $0.append($1) }
            }
            for answer in answers {
                #expect(answer.status == 200 && answer.body == body, "\(item.name): \(answer)")
            }
            let asked = origin.requestLog().filter { $0.path == "/" + item.name }
            let key = origin.baseURL.absoluteString + "/" + item.name
            switch item.small {
            case true?:
                #expect(asked.count == 1, "\(item.name): one origin request for the four clients: \(asked)")
                try await rig.waitStored(key)
                #expect(await rig.store.smallObjects.contains(key), "\(item.name) is a small object")
            case false?:
                #expect(asked.count == 1, "\(item.name): one origin request for the four clients: \(asked)")
                #expect(await rig.store.entry(for: key) != nil, "\(item.name) is a sparse resource")
            case nil:
                #expect(asked.count == 4, "\(item.name): a request per client: \(asked)")
                for answer in answers {
                    #expect(answer.headers["cache-status"]?.contains("; stored") == false, "\(item.name): \(answer.headers)")
                }
                await rig.cache.closeIdle()
                #expect(await rig.store.smallObjects.contains(key) == false, "nothing of it is stored")
                #expect(await rig.store.entry(for: key) == nil, "nothing of it is stored")
            }
        }
        try await rig.stop()
    }

    @Test(
        "a small miss is answered with the fields its hit gets (Age, Date and Cache-Status aside); a conditional miss is answered 304, and a playlist rewritten, from what it stored"
    )
    func claimedMissAnswers() async throws {
        let files = try TemporaryDirectory("smallobj-serve-answers")
        let body = try originFile(files.path, "plain.bin", count: 4096, seed: 51)
        _ = try originFile(files.path, "cond.bin", count: 4096, seed: 52)
        try "#EXTM3U\n#EXT-X-TARGETDURATION:4\n#EXTINF:4,\nseg0.ts\n#EXT-X-ENDLIST\n".write(
            toFile: files.path + "/list.m3u8", atomically: true, encoding: .utf8)
        let origin = try await OriginServer.nginx(root: files.path, locations: "expires 1h;")
        defer { origin.stop() }
        let directory = try TemporaryDirectory("smallobj-serve-a")
        let rig = try await Rig(directory: directory.file("cache"), origin: origin.baseURL)
        let miss = try await Curl.run(rig.base + "/plain.bin")
        let hit = try await Curl.run(rig.base + "/plain.bin")
        #expect(miss.body == body && hit.body == body, "\(miss) \(hit)")
        #expect(miss.headers["cache-status"] == "sparsecache; fwd=uri-miss; fwd-status=200; stored", "\(miss.headers)")
        let perAnswer: Set<String> = ["age", "cache-status", "date"]
        #expect(
            miss.headers.filter { !perAnswer.contains($0.key) } == hit.headers.filter { !perAnswer.contains($0.key) },
            "miss \(miss.headers)\nhit \(hit.headers)")

        let etag = try #require(try await Curl.run(origin.baseURL.absoluteString + "/cond.bin").headers["etag"])
        let notModified = try await Curl.run(rig.base + "/cond.bin", ["-H", "If-None-Match: \(etag)"])
        #expect(notModified.status == 304 && notModified.body.isEmpty, "\(notModified)")
        #expect(notModified.headers["cache-status"]?.contains("fwd=uri-miss") == true, "\(notModified.headers)")

        let playlist = try await Curl.run(rig.base + "/list.m3u8")
        #expect(playlist.status == 200, "\(playlist)")
        #expect(playlist.headers["etag"]?.hasPrefix("W/") == true, "a rewritten playlist's tag is weak: \(playlist.headers)")
        try await rig.stop()
    }

    @Test("a revalidation answered 304 while the object is still on its way to the log freshens it once it is there: no second fetch")
    func revalidatedWhileArriving() async throws {
        let files = try TemporaryDirectory("smallobj-serve-reval")
        let origin = try await OriginServer.scripted(root: files.path)
        defer { origin.stop() }
        var script = OriginScript(headers: [("Cache-Control", "no-cache"), ("ETag", "\"r1\"")], body: "revalidated every time")
        script.conditional = true
        try script.write(root: files.path, name: "page")
        let directory = try TemporaryDirectory("smallobj-serve-r")
        // The batch waits two seconds for company: the object stays on its way meanwhile.
        let rig = try await Rig(directory: directory.file("cache"), origin: origin.baseURL, groupCommitDelay: .seconds(2))
        let key = origin.baseURL.absoluteString + "/page"
        let body = Array("revalidated every time".utf8)
        let miss = try await Curl.run(rig.base + "/page")
        #expect(miss.status == 200 && miss.body == body, "\(miss)")
        #expect(await rig.store.smallObjects.contains(key) == false, "the object is still on its way to the log")
        let again = try await Curl.run(rig.base + "/page")
        #expect(again.status == 200 && again.body == body, "\(again)")
        #expect(again.headers["cache-status"]?.contains("fwd-status=304") == true, "\(again.headers)")
        let asked = origin.requestLog().filter { $0.path == "/page" }
        #expect(asked.count == 2 && asked.last?.status == 304, "one revalidation, no second fetch: \(asked)")
        #expect(await rig.store.smallObjects.contains(key), "the freshened object is in the log")
        try await rig.stop()
    }

    @Test("a claimed first contact dropped without an answer sends the readers that waited to ask for themselves: the key still becomes a small object")
    func droppedClaimSendsWaitersOn() async throws {
        let directory = try TemporaryDirectory("smallobj-claim-drop")
        let store = try await SparseStore.open(directory: directory.file("cache"), options: .testing(budget: 10 << 20))
        let cache = ProgressiveCache(store: store, options: .testing)
        let source = StoredSmallSource(key: "http://origin.test/page", bytes: Array(repeating: 7, count: 3000))
        let claim = try #require(await cache.claimContact(key: source.key))
        // A reader that finds the claim at its small-object first contact (inside `open`, after
        // its own lookup's awaits) waits for it there.
        let waiter = Task { try await cache.firstContactSmall(source, first: .whole) }
        _ = try await eventually(timeout: .seconds(30), interval: .milliseconds(5)) { await cache.waitingForContact(source.key) > 0 }
        #expect(await cache.waitingForContact(source.key) == 1, "the reader waits for the claimed contact")
        // The claimer's request failed before any answer: nothing was handed over.
        await cache.dropClaimed(claim, failure: nil)
        // Nil would tell it the answer went to the sparse first contact: it would make a sparse
        // resource for a small answer.
        let reader = try await waiter.value
        #expect(reader?.isSmallObject == true && reader?.length == 3000, "the waiter made its own first contact and kept a small object")
        await reader?.close()
        await cache.settleAllSmall()
        #expect(await store.smallObjects.contains(source.key))
        #expect(await store.entry(for: source.key) == nil, "no sparse resource was made for it")
        await cache.shutdown()
        try await store.close()
    }

    @Test("a small answer cut off after its head is completed by range; an origin that cannot be reached leaves no claim behind")
    func claimedMissFailures() async throws {
        let files = try TemporaryDirectory("smallobj-serve-cut")
        let body = try originFile(files.path, "cut.bin", count: 40_000, seed: 41)
        try "cut=1000 times=1".write(toFile: files.path + "/cut.bin.faults", atomically: true, encoding: .utf8)
        // Modified a day ago: fresh for hours by the heuristic (the origin sends no lifetime).
        try FileManager.default.setAttributes([.modificationDate: Date(timeIntervalSinceNow: -86_400)], ofItemAtPath: files.path + "/cut.bin")
        let origin = try await OriginServer.faulty(root: files.path)
        defer { origin.stop() }
        let directory = try TemporaryDirectory("smallobj-serve-f")
        let rig = try await Rig(directory: directory.file("cache"), origin: origin.baseURL)
        let miss = try await Curl.run(rig.base + "/cut.bin")
        #expect(miss.status == 200 && miss.body == body, "\(miss)")
        let ranges = origin.requests().filter { $0.path == "/cut.bin" }.map(\.range)
        #expect(ranges.count == 2 && ranges[0].isEmpty && ranges[1].hasPrefix("bytes="), "the whole, cut, then the rest by range: \(ranges)")
        let hit = try await Curl.run(rig.base + "/cut.bin")
        #expect(hit.body == body && hit.headers["cache-status"]?.contains("hit") == true, "\(hit.headers)")
        try await rig.stop()

        // Nothing listens there: each miss fails (after the cache's retries), and none waits
        // for a first contact the one before left claimed.
        let closed = URL(string: "http://127.0.0.1:\(try Loopback.freePort())")!
        let unreachable = try await Rig(directory: directory.file("cache-2"), origin: closed)
        for _ in 0..<2 {
            let failed = try await Curl.run(unreachable.base + "/cut.bin", timeout: 30)
            #expect(failed.status == 502, "\(failed)")
        }
        try await unreachable.stop()
    }

    @Test("under a budget the least recently used small objects go, and the store stays within it")
    func budgetEvicts() async throws {
        let (files, bodies, origin) = try await Self.smallFilesOrigin("smallobj-serve-budget", prefix: "b", count: 40, seed: 100)
        defer { withExtendedLifetime(files) { origin.stop() } }
        let directory = try TemporaryDirectory("smallobj-serve-b")
        let budget: Int64 = 96 * 1024
        let rig = try await Rig(directory: directory.file("cache"), origin: origin.baseURL, budget: budget)
        for index in 0..<40 {
            let answer = try await Curl.run(rig.base + "/b\(index).bin")
            #expect(answer.body == bodies[index], "b\(index): \(answer)")
            try await rig.waitStored(origin.baseURL.absoluteString + "/b\(index).bin")
        }
        try await rig.store.enforceBudget()
        let allocated = await rig.store.allocatedBytes
        #expect(allocated <= budget, "\(allocated) bytes allocated for a budget of \(budget)")
        #expect(await rig.store.smallObjects.contains(origin.baseURL.absoluteString + "/b0.bin") == false, "the oldest stayed")
        #expect(await rig.store.smallObjects.contains(origin.baseURL.absoluteString + "/b39.bin"), "the newest went")
        let newest = try await Curl.run(rig.base + "/b39.bin")
        #expect(newest.body == bodies[39] && newest.headers["cache-status"]?.contains("hit") == true, "\(newest)")
        try await rig.stop()
    }

    @Test(
        "an answer without a length that ends small becomes a small object once nobody reads it; a large one stays a sparse resource; both answer ranges from storage, also after a restart"
    )
    func lengthlessEndsSmall() async throws {
        let files = try TemporaryDirectory("smallobj-serve-chunked")
        let origin = try await OriginServer.scripted(root: files.path)
        defer { origin.stop() }
        for (name, size, seed) in [("page", 5000, 21), ("big", 200_000, 22)] {
            var script = OriginScript(headers: [("Cache-Control", "max-age=3600"), ("ETag", "\"\(name)-1\"")])
            script.bodySize = size
            script.bodySeed = seed
            script.framing = "chunked"
            script.chunkSize = 1000
            try script.write(root: files.path, name: name)
        }
        let directory = try TemporaryDirectory("smallobj-serve-c")
        let cacheDir = directory.file("cache")
        var rig = try await Rig(directory: cacheDir, origin: origin.baseURL)
        for (name, size, seed, isSmall) in [("page", 5000, 21, true), ("big", 200_000, 22, false)] {
            let key = origin.baseURL.absoluteString + "/" + name
            let body = OriginScript.pattern(count: size, seed: seed)
            let miss = try await Curl.run(rig.base + "/" + name)
            #expect(miss.status == 200 && miss.body == body, "\(name): \(miss)")
            #expect(miss.headers["transfer-encoding"] == "chunked", "\(name) arrives without a length: \(miss.headers)")
            // Once the answer has ended and nobody reads it, the resource is released: a small one
            // moves to the logs then.
            _ = try await eventually(timeout: .seconds(20), interval: .milliseconds(20)) {
                await rig.cache.closeIdle()
                let moved = await rig.store.smallObjects.contains(key)
                let complete = await rig.store.entry(for: key)?.length == Int64(size)
                return isSmall ? moved : complete
            }
            #expect(await rig.store.smallObjects.contains(key) == isSmall, "\(name): small object")
            #expect((await rig.store.entry(for: key) != nil) == !isSmall, "\(name): sparse resource")
            let part = try await Curl.run(rig.base + "/" + name, ["-r", "1000-1999"])
            #expect(part.status == 206 && part.body == Array(body[1000..<2000]), "\(name): \(part)")
            #expect(part.headers["cache-status"]?.contains("hit") == true, "\(name): \(part.headers)")
            #expect(part.headers["etag"] == "\"\(name)-1\"", "the stored head moved with the body: \(part.headers)")
            let asked = origin.requestLog().filter { $0.path == "/" + name }
            #expect(asked.count == 1, "\(name): one origin request: \(asked)")
        }
        #expect(Self.resourceFiles(cacheDir).count == 2, "only the large resource's data file and index: \(Self.resourceFiles(cacheDir))")
        try await rig.stop()
        rig = try await Rig(directory: cacheDir, origin: origin.baseURL)
        let again = try await Curl.run(rig.base + "/page")
        #expect(again.body == OriginScript.pattern(count: 5000, seed: 21) && again.headers["cache-status"]?.contains("hit") == true, "\(again)")
        try await rig.stop()
        let verify = try await StoreVerifier.verify(directory: cacheDir)
        #expect(verify.isClean, "\(verify)")
    }
}

/// A small whole answer with a stored head (what a proxy's source gives), answered at once.
struct StoredSmallSource: RangeSource {
    let key: String
    let bytes: [UInt8]

    func fetch(_ range: Range<Int64>?, validator: ContentValidator?) async throws -> RangeResponse {
        let head = StoredHead(headers: HTTPHeaders([("Cache-Control", "max-age=60")]), requestTime: 0, responseTime: 0)
        let bytes = self.bytes
        let stream = AsyncThrowingStream<[UInt8], Error> { continuation in
            continuation.yield(bytes)
            continuation.finish()
        }
        return RangeResponse(
            info: ContentInfo(length: Int64(bytes.count), stored: head), offset: 0, body: stream, cancel: {}, arrived: bytes)
    }
}

extension ProgressiveCache {
    /// How many readers wait for the small-object first contact of `key` in flight.
    func waitingForContact(_ key: String) -> Int { smallContacts[key]?.waiters.count ?? 0 }
}
