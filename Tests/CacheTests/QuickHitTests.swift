// Hits answered on the event loop (CachingProxy.answerQuickly over a CommittedView): the same
// answers the handler gives, never a byte that fails its CRC32C, never an answer the cache
// has dropped or freshened.
import Foundation
import SeededRandom
import Testing

@testable import HTTPCache
@_spi(Locking) @testable import SparseCacheEngine
@testable import SparseCacheStore
@testable import SparseHTTP

#if canImport(Glibc)
import Glibc
#endif
import TestSupport

@Suite("committed views", .timeLimit(.minutes(2 * hangGuardScale)))
struct CommittedViewTests {
    static let segment = 16384
    static let length = Int64(8 * segment) - 100

    @Test("a view reads committed segments from the page cache and checks each; segments committed later need a newer view")
    func readsAndChecks() async throws {
        try await withTemporaryDirectory("committed-view") { directory in
            let path = directory.file("r.bin")
            let file = try await SparseFile.open(path, options: .testing(segmentSize: Self.segment, length: Self.length))
            #expect(await file.committedView() == nil, "nothing is present: no view")
            let bytes = sourceBytes(0..<Self.length, salt: 9)
            try await file.write(Array(bytes[0..<(3 * Self.segment)]), at: 0)
            try await file.write(Array(bytes[(4 * Self.segment)..<(5 * Self.segment)]), at: Int64(4 * Self.segment))
            #expect(await file.committedView() == nil, "written, not committed: no view")
            try await file.commit()
            let committed = try #require(await file.committedView())
            #expect(!committed.isComplete && committed.presentBytes == Int64(4 * Self.segment))
            let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 4 * Self.segment, alignment: 16)
            defer { scratch.deallocate() }
            #expect(committed.read(100..<40000, into: scratch) == .read(at: 100))
            #expect(committed.read(Int64(4 * Self.segment)..<Int64(4 * Self.segment + 9), into: scratch) == .read(at: 0))
            #expect(committed.read(40000..<60000, into: scratch) == .unavailable, "segment 3 is missing")
            try await file.write(Array(bytes[(3 * Self.segment)..<(4 * Self.segment)]), at: Int64(3 * Self.segment))
            try await file.write(Array(bytes[(5 * Self.segment)...]), at: Int64(5 * Self.segment))
            try await file.commit()
            let view = try #require(await file.committedView())
            #expect(view.isComplete && committed.isCurrent, "added segments do not withdraw the older view")
            #expect(committed.read(40000..<60000, into: scratch) == .unavailable, "an older view knows nothing newer")
            #expect(view.read(40000..<60000, into: scratch) == .read(at: 40000 - 2 * Self.segment))
            #expect(await file.committedView() === view, "the same view while nothing changes")
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Int(Self.length), alignment: 16)
            defer { buffer.deallocate() }
            for range: Range<Int64> in [0..<1, 100..<5000, 16383..<16385, 40000..<Self.length, 0..<Self.length, (Self.length - 1)..<Self.length] {
                #expect(view.span(of: range).lowerBound % Int64(Self.segment) == 0)
                guard case .read(let at) = view.read(range, into: buffer) else {
                    Issue.record("\(range): \(view.read(range, into: buffer))")
                    continue
                }
                let got = Array(UnsafeRawBufferPointer(rebasing: buffer[at..<(at + Int(range.count))]))
                #expect(got == Array(bytes[Int(range.lowerBound)..<Int(range.upperBound)]), "\(range)")
            }
            #expect(view.read(0..<(Self.length + 1), into: buffer) == .unavailable, "past the end")

            // A flipped byte in segment 2 (through the page cache, as damage on disk reads).
            try RawFile.write(path, offset: Int64(2 * Self.segment + 7), [bytes[2 * Self.segment + 7] ^ 0x40])
            #expect(view.read(Int64(2 * Self.segment)..<Int64(2 * Self.segment + 10), into: buffer) == .damaged)
            #expect(view.read(Int64(5 * Self.segment)..<Int64(5 * Self.segment + 10), into: buffer) != .damaged, "other segments still read")

            // Pages not in the page cache are never read here.
            try RawFile.dropPageCache(path)
            #expect(view.read(Int64(6 * Self.segment)..<Int64(6 * Self.segment + 10), into: buffer) == .notResident)

            // The resource's own read finds the damage and drops the segment: the view goes first.
            await #expect(throws: SparseCacheError.self) { try await file.read(offset: Int64(2 * Self.segment), length: 10) }
            #expect(!view.isCurrent, "a dropped segment withdraws the view")
            #expect(view.read(0..<10, into: buffer) == .unavailable)
            #expect(await file.committedView()?.isComplete == false, "incomplete again")
            try await file.close()
        }
    }

    @Test("discard and close withdraw the view; its own descriptor keeps reading the bytes it names until released")
    func withdrawals() async throws {
        try await withTemporaryDirectory("committed-view") { directory in
            let path = directory.file("r.bin")
            let bytes = sourceBytes(0..<Self.length, salt: 11)
            let file = try await SparseFile.open(path, options: .testing(segmentSize: Self.segment, length: Self.length))
            try await file.write(bytes, at: 0)
            try await file.commit()
            let first = try #require(await file.committedView())
            try await file.discard(segments: [7])
            #expect(!first.isCurrent, "discard withdraws it")
            try await file.write(Array(bytes[(7 * Self.segment)...]), at: Int64(7 * Self.segment))
            try await file.commit()
            let second = try #require(await file.committedView())
            #expect(second !== first)
            try await file.close()
            #expect(!second.isCurrent, "close withdraws it")
            // The view's descriptor shares the data file's open file, and so its lock: the close
            // releases the lock outright, so the resource opens for writing again while the
            // view is still held.
            let reopened = try await SparseFile.open(path, options: .testing(segmentSize: Self.segment, length: Self.length))
            #expect(second.read(0..<10, into: UnsafeMutableRawBufferPointer(start: nil, count: 0)) == .unavailable)
            try await reopened.close()
        }
    }
}

@Suite("small-object views", .timeLimit(.minutes(2 * hangGuardScale)))
struct SmallObjectViewTests {
    @Test("a view reads its record from the page cache and checks it; a new record, a removal or damage of the key ends it")
    func readsAndEnds() async throws {
        let directory = try TemporaryDirectory("small-view")
        defer { directory.remove() }
        let store = try await SmallObjectStore.open(directory: directory.path)
        let body = sourceBytes(0..<3000, salt: 4)
        let sequence = try await store.put(key: "a", metadata: ResourceMetadata(), body: body)
        try await store.put(key: "b", metadata: ResourceMetadata(), body: Array(body.prefix(10)))
        #expect(await store.view(for: "a", sequence: sequence + 100) == nil, "another record's sequence")
        let view = try #require(await store.view(for: "a", sequence: sequence))
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: view.recordCount, alignment: 16)
        defer { buffer.deallocate() }
        guard case .read(let range) = view.read(into: buffer) else {
            Issue.record("\(view.read(into: buffer))")
            return
        }
        #expect(Array(UnsafeRawBufferPointer(rebasing: buffer[range])) == body)

        // The same record, damaged on disk (through the page cache): never read as the object.
        let log = try #require(smallObjectLogFiles(directory.path).first)
        let raw = try RawFile.read(log)
        let at = try #require((0..<(raw.count - body.count)).first { raw[$0..<($0 + 16)].elementsEqual(body.prefix(16)) })
        try RawFile.write(log, offset: Int64(at + 100), [raw[at + 100] ^ 0x08])
        #expect(view.read(into: buffer) == .damaged)
        try RawFile.write(log, offset: Int64(at + 100), [raw[at + 100]])
        #expect(view.read(into: buffer) != .damaged)

        // A new record for the key: the view is no longer its object, whatever its bytes say.
        try await store.put(key: "a", metadata: ResourceMetadata(), body: Array(body.reversed()))
        #expect(!view.isCurrent && view.read(into: buffer) == .unavailable)
        let current = try #require(try await store.object(for: "a"))
        let next = try #require(await store.view(for: "a", sequence: current.sequence))
        _ = try await store.remove(key: "a")
        #expect(!next.isCurrent, "a removal ends it")
        await store.close()
    }
}

@Suite("quick hits", .tags(.external), .unlessSkippingExternal, .serialized, .timeLimit(.minutes(6 * hangGuardScale)))
struct QuickHitTests {
    static let length = 1_000_003

    /// Scripts `/clip.bin` (fresh for ten minutes) and requests it until the event loop
    /// answers it (a miss stores it, the next hit makes it quick once it is complete).
    static func warmed(_ rig: ScriptedProxy, name: String = "clip.bin", maxAge: Int = 600) async throws -> [UInt8] {
        try rig.script(name, [("Cache-Control", "max-age=\(maxAge)"), ("ETag", "\"v1\""), ("Content-Type", "video/mp4")]) {
            $0.bodySize = length
            $0.bodySeed = 5
            $0.lastModifiedOffset = -86400
        }
        let body = OriginScript.pattern(count: length, seed: 5)
        let before = try await rig.quickAnswers
        let quick = try await eventually(interval: .milliseconds(50)) {
            let answer = try await rig.get(name)
            #expect(answer.status == 200 && sameBytes(answer.body, body[...]), "\(answer)")
            return try await rig.quickAnswers > before
        }
        if !quick { Issue.record("no request of \(name) was answered on the event loop: \(rig.proxy.cache.statistics)") }
        return body
    }

    /// The proxy under test, keeping resources open long after their last use: a resource is
    /// answered on the loop while it is open, and a loaded machine can take longer than the
    /// default two seconds between two requests of a test.
    static func rig() async throws -> ScriptedProxy {
        var options = FillOptions.testing
        options.keepOpen = .seconds(300)
        return try await ScriptedProxy(fill: options)
    }

    /// Asks for `arguments` until the event loop answers it (a commit, or the handler's
    /// refresh of the key's view, may come just after an answer).
    static func untilQuick(_ rig: ScriptedProxy, _ arguments: [String], name: String = "clip.bin", body: [UInt8]) async throws {
        let quick = try await eventually(interval: .milliseconds(50)) {
            let before = try await rig.quickAnswers
            let answer = try await rig.get(name, arguments)
            #expect(answer.exitCode == 0, "\(answer)")
            return try await rig.quickAnswers > before
        }
        if !quick { Issue.record("\(arguments) was never answered on the event loop") }
    }

    /// The fields that may differ between two answers of one stored response: when it was
    /// fetched (Date, Age) and the freshness left.
    static func comparable(_ headers: [String: String]) -> [String: String] {
        var kept = headers.filter { $0.key != "date" && $0.key != "age" }
        kept["cache-status"] = kept["cache-status"].map { $0.replacing(/; ttl=-?\d+/, with: "") }
        // Each proxy has a name of its own.
        kept["via"] = kept["via"].map { $0.replacing(/sparsecache-[0-9a-f]+/, with: "sparsecache") }
        return kept
    }

    @Test("a fresh hit is answered on the event loop with the handler's status, fields and bytes, for every Range form and conditional")
    func sameAnswers() async throws {
        let rig = try await Self.rig()
        var handlerOnly = FillOptions.testing
        handlerOnly.quickHits = false
        let slow = try await ProxyFixture(origin: rig.origin.baseURL, fill: handlerOnly)
        let body = try await Self.warmed(rig)
        for _ in 0..<3 { _ = try await Curl.run(slow.baseURL + "/clip.bin") }
        // (arguments, answered on the loop)
        let cases: [([String], Bool)] = [
            ([], true), (["-r", "100-199"], true), (["-r", "0-0"], true), (["-r", "-5"], true), (["-r", "999990-"], true),
            (["-r", "65530-200000"], true), (["-r", "0-9,100-199"], true), (["-I"], true), (["-I", "-r", "10-20"], true),
            (["-r", "500-600", "-H", "If-Range: \"v1\""], true), (["-r", "500-600", "-H", "If-Range: \"v0\""], true),
            (["-H", "If-None-Match: \"v1\""], false), (["-H", "If-Match: \"v0\""], false), (["-r", "2000000-"], false),
            (["-H", "Range: bytes=abc"], false), (["-H", "Cache-Control: max-age=0"], false), (["-H", "Pragma: no-cache"], false),
        ]
        for (arguments, quick) in cases {
            let before = try await rig.quickAnswers
            let answer = try await rig.get("clip.bin", arguments)
            let handled = try await Curl.run(slow.baseURL + "/clip.bin", arguments)
            let answeredOnLoop = try await rig.quickAnswers > before
            #expect(answeredOnLoop == quick, "\(arguments): answered on the loop \(answeredOnLoop), expected \(quick)")
            #expect(answer.status == handled.status, "\(arguments): \(answer.status), the handler \(handled.status)")
            #expect(
                Self.comparable(answer.headers) == Self.comparable(handled.headers),
                "\(arguments): \(answer.headers.sorted { $0.key < $1.key }) against the handler's \(handled.headers.sorted { $0.key < $1.key })")
            // (curl -I writes the head where the body would go: compared above.)
            if !arguments.contains("-I") {
                #expect(answer.body == handled.body, "\(arguments): \(answer.body.count) bytes, the handler's \(handled.body.count)")
            }
            if answer.status == 206, !arguments.contains("-I"), let range = answer.headers["content-range"]?.wholeMatch(of: /bytes (\d+)-(\d+)\/\d+/) {
                let lower = Int(range.1)!, upper = Int(range.2)!
                #expect(sameBytes(answer.body, body[lower...upper]), "\(arguments): the bytes of \(lower)-\(upper)")
            }
        }
        // Each proxy fetched it once and revalidated it twice (max-age=0, Pragma: no-cache).
        #expect(rig.count("clip.bin") == 6, "\(rig.requests("clip.bin"))")
        let logged = rig.proxy.log.all.filter { $0.cacheOutcome == "hit" && $0.cacheHitBytes > 0 }
        #expect(!logged.isEmpty, "quick answers are logged as hits with their bytes")
        await slow.stop()
        await rig.stop()
    }

    @Test("what a partly cached resource has committed is answered on the loop; the rest goes to the handler and the origin")
    func partlyCached() async throws {
        let rig = try await Self.rig()
        try rig.script("part.bin", [("Cache-Control", "max-age=600"), ("ETag", "\"p1\"")]) {
            $0.bodySize = Self.length
            $0.bodySeed = 8
        }
        let body = OriginScript.pattern(count: Self.length, seed: 8)
        let miss = try await rig.get("part.bin", ["-r", "100000-299999"])
        #expect(miss.status == 206 && sameBytes(miss.body, body[100000..<300000]), "\(miss)")
        // Its commit follows the answer: the same range is answered on the loop once it is in.
        let quick = try await eventually(interval: .milliseconds(50)) {
            let before = try await rig.quickAnswers
            let again = try await rig.get("part.bin", ["-r", "150000-249999"])
            #expect(again.status == 206 && sameBytes(again.body, body[150000..<250000]), "\(again)")
            return try await rig.quickAnswers > before
        }
        #expect(quick, "the committed part was never answered on the loop")
        let before = try await rig.quickAnswers
        let beyond = try await rig.get("part.bin", ["-r", "600000-600099"])
        #expect(beyond.status == 206 && sameBytes(beyond.body, body[600000..<600100]), "\(beyond)")
        #expect(try await rig.quickAnswers == before, "bytes never fetched were answered on the loop")
        #expect(rig.count("part.bin") == 2, "\(rig.requests("part.bin"))")
        await rig.stop()
    }

    @Test("small objects: fresh hits on the loop with the handler's answers; a replaced object is never answered from its old record")
    func smallObjects() async throws {
        let rig = try await Self.rig()
        var handlerOnly = FillOptions.testing
        handlerOnly.quickHits = false
        let slow = try await ProxyFixture(origin: rig.origin.baseURL, fill: handlerOnly)
        try rig.script("s.css", [("Cache-Control", "max-age=600"), ("ETag", "\"s1\""), ("Content-Type", "text/css")]) {
            $0.bodySize = 4096
            $0.bodySeed = 3
        }
        let body = OriginScript.pattern(count: 4096, seed: 3)
        try await Self.untilQuick(rig, [], name: "s.css", body: body)
        for _ in 0..<2 { _ = try await Curl.run(slow.baseURL + "/s.css") }
        for arguments in [[], ["-r", "10-99"], ["-r", "-1"], ["-I"], ["-r", "4000-9000"]] {
            let before = try await rig.quickAnswers
            let answer = try await rig.get("s.css", arguments)
            let handled = try await Curl.run(slow.baseURL + "/s.css", arguments)
            #expect(try await rig.quickAnswers == before + 1, "\(arguments) was not answered on the loop")
            #expect(answer.status == handled.status && Self.comparable(answer.headers) == Self.comparable(handled.headers), "\(arguments): \(answer) against \(handled)")
            if !arguments.contains("-I") { #expect(answer.body == handled.body, "\(arguments)") }
        }
        #expect(rig.count("s.css") == 2, "one fetch for each proxy: \(rig.requests("s.css"))")

        // A new version behind a purge: the new body, never the old record.
        try rig.script("s.css", [("Cache-Control", "max-age=600"), ("ETag", "\"s2\""), ("Content-Type", "text/css")]) {
            $0.bodySize = 4096
            $0.bodySeed = 4
        }
        _ = try await rig.get("s.css", ["-X", "PURGE"])
        let second = OriginScript.pattern(count: 4096, seed: 4)
        for _ in 0..<3 {
            let answer = try await rig.get("s.css")
            #expect(answer.headers["etag"] == "\"s2\"" && answer.body == second, "\(answer)")
        }
        await slow.stop()
        await rig.stop()
    }

    @Test("Vary is matched on the loop as the handler matches it; a served playlist leaves other keys on the loop and its segments to the handler")
    func varyAndPlaylists() async throws {
        let rig = try await Self.rig()
        try rig.script("v.bin", [("Cache-Control", "max-age=600"), ("ETag", "\"v\""), ("Vary", "Accept-Language")]) {
            $0.bodySize = Self.length
            $0.bodySeed = 9
        }
        let body = OriginScript.pattern(count: Self.length, seed: 9)
        try await Self.untilQuick(rig, ["-H", "Accept-Language: en"], name: "v.bin", body: body)
        var before = try await rig.quickAnswers
        let other = try await rig.get("v.bin", ["-H", "Accept-Language: fr"])
        #expect(other.status == 200 && sameBytes(other.body, body[...]), "\(other)")
        #expect(try await rig.quickAnswers == before, "another variant was answered from the stored one on the loop")
        #expect(rig.count("v.bin") == 2, "the other language is a variant of its own: \(rig.requests("v.bin"))")

        // A media playlist the segment prefetcher learns: its segments take the handler (they
        // tell the prefetcher where the player is); any other key stays on the loop.
        let playlist = "#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXT-X-VERSION:3\n#EXTINF:2.0,\nseg0.ts\n#EXTINF:2.0,\nseg1.ts\n#EXT-X-ENDLIST\n"
        try rig.script("index.m3u8", [("Cache-Control", "max-age=600"), ("Content-Type", "application/vnd.apple.mpegurl")], body: playlist)
        for segment in ["seg0.ts", "seg1.ts"] {
            try rig.script(segment, [("Cache-Control", "max-age=600"), ("Content-Type", "video/mp2t")]) {
                $0.bodySize = 200_000
                $0.bodySeed = 10
            }
        }
        let listed = try await rig.get("index.m3u8")
        #expect(listed.status == 200 && listed.text.contains("seg0.ts"), "\(listed)")
        #expect(!rig.proxy.proxy.streaming.prefetcher.isEmpty, "the prefetcher knows the playlist")
        try await Self.untilQuick(rig, ["-H", "Accept-Language: en"], name: "v.bin", body: body)
        before = try await rig.quickAnswers
        for _ in 0..<3 {
            let segment = try await rig.get("seg0.ts")
            #expect(segment.status == 200 && segment.body.count == 200_000, "\(segment)")
        }
        #expect(try await rig.quickAnswers == before, "a segment the prefetcher knows was answered on the loop")
        await rig.stop()
    }

    @Test("a purge, a stale answer and a replaced version are never answered on the loop")
    func droppedAnswers() async throws {
        let rig = try await Self.rig()
        _ = try await Self.warmed(rig)
        // PURGE takes it out of the cache: the next GET goes to the origin.
        let purged = try await rig.get("clip.bin", ["-X", "PURGE"])
        #expect(purged.status == 200 || purged.status == 204, "\(purged)")
        let before = try await rig.quickAnswers
        let afterPurge = try await rig.get("clip.bin", ["-r", "0-99"])
        #expect(try await rig.quickAnswers == before, "a purged answer was served from the loop")
        #expect(afterPurge.headers["cache-status"]?.contains("fwd=uri-miss") == true, "\(afterPurge.headers)")
        #expect(rig.count("clip.bin") == 2, "\(rig.requests("clip.bin"))")

        // A short lifetime: once stale, the loop leaves it to the handler, which revalidates.
        _ = try await Self.warmed(rig, name: "short.bin", maxAge: 1)
        try await Task.sleep(for: .milliseconds(2100))  // time must pass: stale after max-age=1
        let quickBefore = try await rig.quickAnswers
        let stale = try await rig.get("short.bin", ["-r", "0-99"])
        #expect(try await rig.quickAnswers == quickBefore, "a stale answer was served from the loop")
        #expect(stale.headers["cache-status"]?.contains("fwd=stale") == true, "\(stale.headers)")
        #expect(rig.requests("short.bin").last?.status == 304, "revalidated: \(rig.requests("short.bin"))")

        // A new version on the origin: after the purge of the old one, the new bytes.
        _ = try await Self.warmed(rig, name: "next.bin")
        try rig.script("next.bin", [("Cache-Control", "max-age=600"), ("ETag", "\"v2\"")]) {
            $0.bodySize = Self.length
            $0.bodySeed = 6
        }
        _ = try await rig.get("next.bin", ["-X", "PURGE"])
        let fresh = try await rig.get("next.bin")
        #expect(fresh.headers["etag"] == "\"v2\"" && sameBytes(fresh.body, OriginScript.pattern(count: Self.length, seed: 6)[...]), "\(fresh)")
        await rig.stop()
    }

    @Test("a byte damaged on disk is never sent from the loop: the handler drops the segment and fetches it again")
    func damagedBytes() async throws {
        let rig = try await Self.rig()
        let body = try await Self.warmed(rig)
        let key = try #require(rig.proxy.cache.quickHits.keys.first)
        let path = try #require(rig.proxy.cache.quickHits[key]?.view?.path)
        let offset = 70_000
        try RawFile.write(path, offset: Int64(offset), [body[offset] ^ 0x01])
        let before = try await rig.quickAnswers
        let answer = try await rig.get("clip.bin", ["-r", "65536-131071"])
        #expect(try await rig.quickAnswers == before, "damaged bytes were answered on the loop")
        #expect(answer.status == 206 && sameBytes(answer.body, body[65536...131071]), "\(answer)")
        #expect(rig.count("clip.bin") == 2, "the damaged segment was fetched again: \(rig.requests("clip.bin"))")

        // Damage past a range's first segment shows after the head went out: the answer is cut
        // (never a damaged byte), and the next request takes the handler.
        try await Self.untilQuick(rig, ["-r", "0-300000"], body: body)
        try RawFile.write(path, offset: 200_000, [body[200_000] ^ 0x01])
        let cut = try await rig.get("clip.bin", ["-r", "0-300000"])
        #expect(cut.exitCode != 0 && cut.body.count < 300_001, "a damaged answer was sent whole: \(cut)")
        #expect(sameBytes(cut.body, body[0..<cut.body.count]), "the bytes sent before the cut are the stored ones")
        let after = try await rig.get("clip.bin", ["-r", "0-300000"])
        #expect(after.status == 206 && sameBytes(after.body, body[0...300_000]), "\(after)")

        // Pages not in the page cache are the handler's to read (on its I/O threads).
        try await Self.untilQuick(rig, ["-r", "0-300000"], body: body)
        try RawFile.dropPageCache(try #require(rig.proxy.cache.quickHits[key]?.view?.path))
        let quickBefore = try await rig.quickAnswers
        let cold = try await rig.get("clip.bin", ["-r", "0-300000"])
        #expect(cold.status == 206 && sameBytes(cold.body, body[0...300_000]), "\(cold)")
        #expect(try await rig.quickAnswers == quickBefore, "pages not in memory were answered on the loop")
        await rig.stop()
    }
}

@Suite("quick heads", .tags(.external), .unlessSkippingExternal, .timeLimit(.minutes(2 * hangGuardScale)))
struct QuickHeadTests {
    /// The handler's head for a fresh hit of `stored` (CachingProxy.storedFields, then the range
    /// and what HTTPResponseWriter adds), as encoded bytes.
    static func handlerHead(
        _ proxy: CachingProxy, _ stored: HTTPHeaders, ttl: Int64, age: Int64, range: Range<Int64>?, of length: Int64, closes: Bool
    ) -> [UInt8] {
        var status = CacheStatus()
        status.hit = true
        status.fromStorage = true
        status.ttl = ttl
        var headers = proxy.storedFields(stored, status: 200, age: age, lengthKnown: true, cacheStatus: status)
        if let range {
            headers.removeAll { HTTPHeaderField(name: $0.0, value: "").hasName("content-range") }
            headers.append(("Content-Range", "bytes \(range.lowerBound)-\(range.upperBound - 1)/\(length)"))
        }
        let count = range.map { $0.upperBound - $0.lowerBound } ?? length
        return HTTPResponseWriter.encodedHead(status: range == nil ? 200 : 206, headers: headers, contentLength: count, chunked: false, closes: closes)
    }

    @Test("a quick hit's head is the handler's, byte for byte, for every kind of stored head, range and connection")
    func sameBytes() async throws {
        let rig = try await ScriptedProxy()
        let proxy = rig.proxy.proxy
        let storedHeads: [HTTPHeaders] = [
            HTTPHeaders([("Date", "Sat, 28 Nov 2026 14:10:23 GMT"), ("Server", "nginx"), ("Content-Type", "video/mp4"), ("ETag", "\"v1\"")]),
            HTTPHeaders([("Cache-Control", "max-age=60")]),
            HTTPHeaders([("Via", "1.1 edge"), ("Content-Type", "text/plain"), ("via", "1.0 other (comment)"), ("X-Odd", "a\u{7}b")]),
            HTTPHeaders([("Server", "origin"), ("Content-Length", "5"), ("Accept-Ranges", "bytes"), ("Last-Modified", "Fri, 27 Nov 2026 10:00:00 GMT")]),
        ]
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 4096, alignment: 16)
        defer { buffer.deallocate() }
        for stored in storedHeads {
            let head = try #require(QuickHead(stored, via: proxy.via.element))
            #expect(head.capacity <= buffer.count)
            for (range, closes) in [(nil, false), (0..<1, true), (100..<65636, false), (Int64(999_999)..<1_000_000, true)] as [(Range<Int64>?, Bool)] {
                for (ttl, age) in [(Int64(600), Int64(0)), (-3, 1_234_567)] {
                    // A Date written now may change second between the two: take both again.
                    for attempt in 1...3 {
                        let expected = Self.handlerHead(proxy, stored, ttl: ttl, age: age, range: range, of: 1_000_000, closes: closes)
                        let count = head.write(into: buffer, ttl: ttl, age: age, range: range, of: 1_000_000, closes: closes)
                        let got = Array(UnsafeRawBufferPointer(rebasing: buffer[..<count]))
                        if got == expected { break }
                        if attempt == 3 || stored.contains("date") {
                            Issue.record("\(stored), \(String(describing: range)), closes \(closes): \(String(decoding: got, as: UTF8.self)) against the handler's \(String(decoding: expected, as: UTF8.self))")
                            break
                        }
                    }
                }
            }
        }
        #expect(QuickHead(HTTPHeaders([("Content-Range", "bytes 0-1/2")]), via: proxy.via.element) == nil, "a stored Content-Range takes the handler's way")
        await rig.stop()
    }
}
