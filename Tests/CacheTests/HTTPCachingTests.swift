// Issue 15: `serve` as a shared HTTP cache (RFC 9110, RFC 9111; Cache-Status is RFC 9211).
// Black-box: the proxy in process in front of the scripted origin (OriginServer.scripted),
// curl as the client. Every test asserts what the client got and what reached the origin
// (how many requests, which header fields). Short lifetimes (max-age=1) and a ~2 s wait are
// how staleness is reached; no test asserts a duration.
import Foundation
import HTTPCache
import Testing
import TestSupport

@Suite("HTTP caching (RFC 9111)", .tags(.external, .slow), .unlessSkippingExternal, .unlessSkippingSlow, .serialized, .timeLimit(.minutes(10)))
struct HTTPCachingTests {
    /// Waits until answers with `max-age=1` are stale.
    static func waitForExpiry() async throws { try await Task.sleep(for: .milliseconds(2100)) }

    // MARK: stored header fields, Via, Cache-Status, Age

    @Test(
        "a hit replays every end-to-end field and the origin's Date; hop-by-hop fields never reach the client; Via, Cache-Status, Age (RFC 9111 3.1, 4.2.3, 5.1; RFC 9110 7.6.1, 7.6.3; RFC 9211)"
    )
    func storedFieldsReplayed() async throws {
        let rig = try await ScriptedProxy()
        let endToEnd = [
            ("Cache-Control", "max-age=60"), ("Content-Disposition", "attachment; filename=\"report.txt\""), ("Vary", "Accept-Encoding"),
            ("X-Custom", "kept as sent"), ("Content-Type", "text/plain; charset=utf-8"), ("Content-Language", "en"), ("ETag", "\"e2e-1\""),
            ("Last-Modified", ScriptedProxy.httpDate(-3600)), ("Expires", ScriptedProxy.httpDate(120)),
        ]
        // Hop-by-hop (RFC 9110 7.6.1): Connection and the field it names, and the fixed list.
        let hopByHop = [
            ("Connection", "X-Hop-Secret"), ("X-Hop-Secret", "1"), ("Keep-Alive", "timeout=5"), ("Trailer", "X-Checksum"),
            ("Upgrade", "h2c"), ("Proxy-Authenticate", "Basic realm=\"origin\""), ("TE", "trailers"),
        ]
        let body = "the report body\n"
        try rig.script("report", endToEnd + hopByHop, body: body)

        let miss = try await rig.get("report")
        let originDate = rig.requests("report").first?.responseHeader("Date")
        #expect(originDate != nil, "the origin logged the Date it sent: \(rig.requests("report"))")
        let hit = try await rig.get("report")
        #expect(rig.count("report") == 1, "max-age=60: the second request is a hit, yet the origin saw \(rig.requests("report"))")
        for (label, answer) in [("miss", miss), ("hit", hit)] {
            #expect(answer.status == 200 && answer.text == body, "\(label): expected 200 with the origin's body, got \(answer)")
            for (name, value) in endToEnd {
                #expect(
                    answer.headers[name.lowercased()] == value,
                    "\(label): \(name) is \(answer.headers[name.lowercased()] ?? "missing"), the origin sent '\(value)'")
            }
            #expect(
                answer.headers["date"] == originDate,
                "\(label): Date is \(answer.headers["date"] ?? "missing"), the origin sent \(originDate ?? "-") (RFC 9110 6.6.1: kept)")
            for (name, _) in hopByHop where name != "Connection" {
                #expect(answer.headers[name.lowercased()] == nil, "\(label): hop-by-hop \(name) reached the client: \(answer.headers)")
            }
            #expect(
                !(answer.headers["connection"] ?? "").lowercased().contains("x-hop-secret"),
                "\(label): the origin's Connection field reached the client: \(answer.headers["connection"] ?? "")")
            #expect(
                (answer.headers["via"] ?? "").contains("1.1 sparsecache"),
                "\(label): Via should contain '1.1 sparsecache', got \(answer.headers["via"] ?? "none") (RFC 9110 7.6.3)")
            #expect(
                (answer.headers["cache-status"] ?? "").hasPrefix("sparsecache;"),
                "\(label): Cache-Status should start 'sparsecache;', got \(answer.headers["cache-status"] ?? "none") (RFC 9211)")
        }
        #expect(
            miss.cacheStatus.contains("fwd=uri-miss") && miss.cacheStatus.contains("stored"),
            "a stored miss is 'fwd=uri-miss; stored', got \(miss.headers["cache-status"] ?? "none")")
        #expect(hit.isHit, "a fresh hit is 'hit' with no fwd=, got \(hit.headers["cache-status"] ?? "none")")
        let firstAge = hit.headers["age"].flatMap { Int($0) }
        #expect((firstAge ?? -1) >= 0, "a hit carries Age, an integer >= 0 (RFC 9111 4.2.3, 5.1), got \(hit.headers["age"] ?? "none")")

        try await Self.waitForExpiry()
        let later = try await rig.get("report")
        #expect(later.isHit && later.text == body, "still fresh after 2 s of max-age=60: \(later)")
        let laterAge = later.headers["age"].flatMap { Int($0) }
        #expect((laterAge ?? -1) >= 1, "after waiting 2 s, Age is at least 1, got \(later.headers["age"] ?? "none")")
        #expect(later.headers["date"] == originDate, "Date stays the origin's on a later hit, got \(later.headers["date"] ?? "none")")

        // A 206 from the stored answer carries the stored fields too.
        let part = try await rig.get("report", ["-r", "4-9"])
        #expect(part.status == 206 && part.text == "report", "bytes 4-9 of the stored body: \(part)")
        for name in ["Cache-Control", "X-Custom", "Content-Disposition", "ETag", "Vary"] {
            #expect(part.headers[name.lowercased()] != nil, "the 206 from storage lacks \(name): \(part.headers)")
        }
        #expect(part.isHit && part.headers["age"] != nil, "a 206 from storage is a hit with Age: \(part.headers)")
        #expect(rig.count("report") == 1, "everything after the first request was a hit: \(rig.requests("report"))")
        await rig.stop()
    }

    // MARK: what is stored (RFC 9111 3)

    @Test(
        "no-store, private, Set-Cookie and answers to Authorization are not stored: every request reaches the origin; public, s-maxage, must-revalidate allow Authorization (RFC 9111 3, 3.5)"
    )
    func storability() async throws {
        let rig = try await ScriptedProxy()
        let token = ["-H", "Authorization: Bearer secret-token"]
        let unstorable: [(name: String, headers: [(String, String)], arguments: [String])] = [
            ("no-store", [("Cache-Control", "no-store")], []),
            ("private", [("Cache-Control", "private, max-age=60")], []),
            ("set-cookie", [("Cache-Control", "max-age=60"), ("Set-Cookie", "session=abc123; Path=/")], []),
            ("authorized", [("Cache-Control", "max-age=60")], token),
        ]
        for (name, headers, arguments) in unstorable {
            let body = "the body of \(name), for one client only"
            try rig.script(name, headers + [("ETag", "\"\(name)-1\"")], body: body)
            for round in 1...3 {
                let before = rig.count(name)
                let answer = try await rig.get(name, arguments)
                #expect(
                    answer.status == 200 && answer.text == body, "\(name) #\(round): the origin's body passes through unchanged: \(answer)")
                #expect(rig.count(name) > before, "\(name) #\(round): not storable, so it must reach the origin: \(rig.requests(name))")
                #expect(
                    answer.cacheStatus.contains("fwd=uri-miss") && !answer.cacheStatus.contains("stored"),
                    "\(name) #\(round): Cache-Status should be fwd=uri-miss without 'stored', got \(answer.headers["cache-status"] ?? "none")"
                )
                if name == "set-cookie" {
                    #expect(answer.headers["set-cookie"] == "session=abc123; Path=/", "Set-Cookie reaches its client: \(answer.headers)")
                }
            }
        }
        let authorized = rig.requests("authorized")
        #expect(
            !authorized.isEmpty && authorized.allSatisfy { $0.header("Authorization") == "Bearer secret-token" },
            "Authorization is forwarded to the origin: \(authorized)")
        // Another client, without credentials, is not served the authorized answer.
        let before = rig.count("authorized")
        let anonymous = try await rig.get("authorized")
        #expect(
            anonymous.status == 200 && rig.count("authorized") > before,
            "an anonymous request goes to the origin: \(rig.requests("authorized"))")
        #expect(rig.requests("authorized").last?.header("Authorization") == nil, "no credentials invented for the anonymous request")

        // RFC 9111 3.5: these directives allow storing an answer to an authorized request.
        for (name, cacheControl) in [
            ("public", "public, max-age=60"), ("s-maxage", "s-maxage=60"), ("must-revalidate", "must-revalidate, max-age=60"),
        ] {
            try rig.script("auth-\(name)", [("Cache-Control", cacheControl), ("ETag", "\"\(name)\"")], body: "shared \(name)")
            let first = try await rig.get("auth-\(name)", token)
            let second = try await rig.get("auth-\(name)", token)
            #expect(first.text == "shared \(name)" && second.text == "shared \(name)", "\(cacheControl): bodies \(first) / \(second)")
            #expect(
                first.cacheStatus.contains("stored"),
                "\(cacheControl) with Authorization is stored: \(first.headers["cache-status"] ?? "none")")
            #expect(
                second.isHit && rig.count("auth-\(name)") == 1,
                "\(cacheControl) with Authorization: the second request is a hit: \(second.headers["cache-status"] ?? "none"), origin \(rig.requests("auth-\(name)"))"
            )
        }
        await rig.stop()
    }

    @Test(
        "CDN-Cache-Control decides for this cache over Cache-Control and Expires, and is passed on; an invalid one is ignored (RFC 9213 2.2)"
    )
    func targetedCacheControl() async throws {
        let rig = try await ScriptedProxy()
        let cases: [(name: String, headers: [(String, String)], stored: Bool)] = [
            ("cdn-no-store", [("Cache-Control", "max-age=10000"), ("CDN-Cache-Control", "no-store")], false),
            ("cdn-private", [("Cache-Control", "max-age=10000"), ("CDN-Cache-Control", "private")], false),
            ("cdn-fresh", [("Cache-Control", "no-store"), ("CDN-Cache-Control", "max-age=10000")], true),
            ("cdn-invalid", [("Cache-Control", "no-store"), ("CDN-Cache-Control", "max-age=\"10000\"")], false),
        ]
        for (name, headers, stored) in cases {
            try rig.script(name, headers, body: "body of \(name)")
            let first = try await rig.get(name)
            let second = try await rig.get(name)
            #expect(first.text == "body of \(name)" && second.text == "body of \(name)", "\(name): \(first) / \(second)")
            #expect(
                second.isHit == stored && rig.count(name) == (stored ? 1 : 2), "\(name): stored \(stored)? \(second), \(rig.requests(name))"
            )
            #expect(first.headers["cdn-cache-control"] != nil, "\(name): the field goes on to the client: \(first.headers)")
        }
        // A 200's Content-Range is an end-to-end field like the rest (RFC 9111 3.1); a range
        // of the stored answer carries its own instead, once.
        // (Chunked, so the scripted origin ignores the proxy's Range, as the conformance suite's does.)
        try rig.script("odd-range", [("Cache-Control", "max-age=3600"), ("Content-Range", "ananananananana")], body: "0123456789") {
            $0.framing = "chunked"
        }
        _ = try await rig.get("odd-range")
        let replayed = try await rig.get("odd-range")
        #expect(replayed.isHit && replayed.headers["content-range"] == "ananananananana", "\(replayed)")
        let part = try await rig.get("odd-range", ["-r", "2-4"])
        #expect(part.status == 206 && part.text == "234" && part.headers["content-range"] == "bytes 2-4/10", "\(part)")
        await rig.stop()
    }

    @Test(
        "a range of a response not to store: the origin is asked once, with the client's range, and its part is passed on (RFC 9111 3, RFC 9110 15.3.7)"
    )
    func unstorableRange() async throws {
        let rig = try await ScriptedProxy()
        let body = OriginScript.pattern(count: 300_000, seed: 5)
        try rig.script("private-clip", [("Cache-Control", "no-store"), ("ETag", "\"p1\"")]) {
            $0.bodySize = 300_000
            $0.bodySeed = 5
        }
        let part = try await rig.get("private-clip", ["-r", "100000-100999"])
        #expect(part.status == 206 && part.body == Array(body[100_000..<101_000]), "\(part)")
        #expect(part.headers["content-range"] == "bytes 100000-100999/300000" && part.headers["etag"] == "\"p1\"", "\(part.headers)")
        #expect(rig.count("private-clip") == 1, "asked once: \(rig.requests("private-clip"))")
        #expect(part.cacheStatus.contains("fwd=uri-miss") && !part.cacheStatus.contains("stored"), "\(part.headers)")
        // Open-ended: the part from the client's first byte, as the origin sent it.
        let rest = try await rig.get("private-clip", ["-r", "250000-"])
        #expect(rest.status == 206 && rest.body == Array(body[250_000...]), "\(rest)")
        #expect(rest.headers["content-range"] == "bytes 250000-299999/300000", "\(rest.headers)")
        #expect(rig.count("private-clip") == 2, "asked once more: \(rig.requests("private-clip"))")
        #expect(await rig.proxy.store.entry(for: rig.origin.url("private-clip").absoluteString) == nil, "nothing stored")
        await rig.stop()
    }

    @Test(
        "parts are combined only under a strong validator: a part without one is passed on, a whole answer without one is stored from that one answer (RFC 9111 3.4)"
    )
    func strongValidatorForParts() async throws {
        let rig = try await ScriptedProxy()
        let body = OriginScript.pattern(count: 300_000, seed: 9)
        for (name, headers) in [
            ("weak-etag", [("Cache-Control", "max-age=600"), ("ETag", "W/\"w1\"")]), ("no-validator", [("Cache-Control", "max-age=600")]),
        ] {
            try rig.script(name, headers) {
                $0.bodySize = 300_000
                $0.bodySeed = 9
            }
            // A range first: the origin's part cannot be proven to belong with any other part,
            // so it goes to the client and is not stored; the next range asks again.
            for round in 1...2 {
                let part = try await rig.get(name, ["-r", "100000-100999"])
                #expect(part.status == 206 && part.body == Array(body[100_000..<101_000]), "\(name) #\(round): \(part)")
                #expect(
                    !part.cacheStatus.contains("stored") && rig.count(name) == round,
                    "\(name) #\(round): \(part.headers), \(rig.requests(name))")
            }
            // The whole, once: stored from that one answer, then ranges of it are hits.
            let whole = try await rig.get(name)
            #expect(whole.status == 200 && whole.body == body, "\(name): \(whole)")
            let part = try await Self.pollHit(rig, name, ["-r", "200000-200099"])
            #expect(part.status == 206 && part.body == Array(body[200_000..<200_100]) && part.isHit, "\(name): \(part)")
            #expect(rig.count(name) == 3, "\(name): no origin request for a range of the stored whole: \(rig.requests(name))")
        }
        await rig.stop()
    }

    @Test(
        "without a strong validator a stored part is never completed from another answer: a cut answer is not resumed, a later request refetches the whole, a seek far ahead of the answer being read is passed on (RFC 9111 3.4)"
    )
    func oneAnswerWithoutStrongValidator() async throws {
        // Spans of 256 KiB: the answer being read reaches bytes up to 1 MiB past it soon enough
        // to wait for; farther ones are asked for apart.
        var fill = FillOptions.testing
        fill.maximumFetch = 256 << 10
        let rig = try await ScriptedProxy(fill: fill)
        let size = 3_000_000
        let old = OriginScript.pattern(count: size, seed: 21), new = OriginScript.pattern(count: size, seed: 22)
        // The same length and the same weak entity tag for both versions: nothing tells them apart.
        let headers = [("Cache-Control", "max-age=600"), ("ETag", "W/\"same\"")]

        // 1. The answer is cut after 1 MB: the client gets what came, and the fill does not ask
        // for the rest by a range (another answer, maybe another version).
        try rig.script("cut", headers) {
            $0.bodySize = size
            $0.bodySeed = 21
            $0.cutAfter = 1_000_000
            $0.chunkSize = 100_000
        }
        let cut = try await rig.get("cut")
        #expect(cut.body.count < size && cut.body == Array(old.prefix(cut.body.count)), "\(cut)")
        #expect(rig.requests("cut").allSatisfy { $0.header("range") == nil }, "no resume by range: \(rig.requests("cut"))")
        let before = rig.count("cut")

        // 2. The origin changes, keeping the length and the weak tag. A request for the whole must
        // get the new version whole, not the stored first part with the new rest.
        try rig.script("cut", headers) {
            $0.bodySize = size
            $0.bodySeed = 22
        }
        let whole = try await rig.get("cut")
        #expect(whole.status == 200 && whole.body == new, "the stored part of the old version was not combined with the new: \(whole)")
        #expect(whole.cacheStatus.contains("fwd=partial") && whole.cacheStatus.contains("stored"), "\(whole.headers)")
        let refetch = rig.requests("cut").dropFirst(before)
        #expect(refetch.count == 1 && refetch.first?.header("range") == nil, "one request for the whole: \(refetch)")
        let part = try await Self.pollHit(rig, "cut", ["-r", "2000000-2000999"])
        #expect(part.isHit && part.body == Array(new[2_000_000..<2_001_000]), "\(part)")

        // 3. A client seeking far ahead of an answer still being read (it trickles in) is not
        // given a range fetch beside it: its request is passed on, nothing of it stored.
        let slow = 8_000_000
        let body = OriginScript.pattern(count: slow, seed: 23)
        // 1.3 MB/s: the whole in about 6 s, and the seek stays more than 1 MiB ahead of the
        // answer for over 4 s.
        try rig.script("slow", headers) {
            $0.bodySize = slow
            $0.bodySeed = 23
            $0.chunkSize = 131_072
            $0.chunkDelayMs = 100
        }
        // The first client stays to the end: one that gave up would leave the part without a
        // reader, and the seek would then refetch it (another rule, tested elsewhere).
        let reader = Task { try await rig.get("slow", timeout: 90) }
        let deadline = ContinuousClock.now + .seconds(30)
        // Wait for the proxy to have the answer's head (the resource's length comes with it),
        // not only for the origin to have the request: before the head nothing says the
        // validator is weak, and a seek is a range fill like any other. Not for a commit of its
        // first bytes either: under the suite's I/O load an fdatasync can take seconds.
        let slowKey = rig.origin.url("slow").absoluteString
        while try await rig.proxy.cache.progress(key: slowKey).length == nil, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        // The length is set a step before the validator is kept (`adopt`): past that step.
        try await Task.sleep(for: .milliseconds(100))
        let ahead = try await rig.get("slow", ["-r", "7000000-7000999"])
        #expect(ahead.status == 206 && ahead.body == Array(body[7_000_000..<7_001_000]), "\(ahead)")
        #expect(ahead.cacheStatus.contains("fwd=partial") && !ahead.cacheStatus.contains("stored"), "\(ahead.headers) \(rig.requests("slow"))")
        let requests = rig.requests("slow")
        #expect(
            requests.count == 2 && requests[1].header("range") == "bytes=7000000-7000999",
            "the seek went to the origin as the client asked it: \(requests)")
        let first = try await reader.value
        #expect(first.body == Array(body.prefix(first.body.count)), "the first client's bytes are the answer's own")
        await rig.stop()
    }

    /// Asks until the answer is a hit (an answer stored as it streamed is a hit once it has
    /// ended and been committed) or a deadline passes.
    static func pollHit(_ rig: ScriptedProxy, _ name: String, _ arguments: [String]) async throws -> CurlResult {
        let deadline = ContinuousClock.now + .seconds(30)
        var answer = try await rig.get(name, arguments)
        while !answer.isHit, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
            answer = try await rig.get(name, arguments)
        }
        return answer
    }

    // MARK: freshness (RFC 9111 4.2)

    @Test(
        "freshness lifetime: max-age, s-maxage over max-age, Expires in the past or invalid, heuristic from Last-Modified, max-age=0 and no-cache stored but revalidated (RFC 9111 4.2.1, 4.2.2, 4.2.4, 5.2.2.4, 5.3)"
    )
    func freshnessLifetime() async throws {
        let rig = try await ScriptedProxy()
        try rig.script("max-age-60", [("Cache-Control", "max-age=60"), ("ETag", "\"a\"")], body: "fresh for a minute")
        try rig.script("s-maxage-fresh", [("Cache-Control", "max-age=0, s-maxage=60"), ("ETag", "\"b\"")], body: "shared lifetime wins")
        try rig.script(
            "s-maxage-stale", [("Cache-Control", "max-age=60, s-maxage=1"), ("ETag", "\"c\"")], body: "shared lifetime is short")
        try rig.script("expires-past", [("ETag", "\"d\"")], body: "expired an hour ago") { $0.expiresOffset = -3600 }
        try rig.script("expires-invalid", [("Expires", "0"), ("ETag", "\"e\"")], body: "an invalid Expires is in the past")
        try rig.script("heuristic", [("ETag", "\"f\"")], body: "modified an hour ago") { $0.lastModifiedOffset = -3600 }
        try rig.script("max-age-0", [("Cache-Control", "max-age=0"), ("ETag", "\"g\"")], body: "stored, stale at once")
        try rig.script("no-cache", [("Cache-Control", "no-cache"), ("ETag", "\"h\"")], body: "stored, revalidated every time")

        // Fresh: the second request is a hit.
        for name in ["max-age-60", "s-maxage-fresh", "heuristic"] {
            let first = try await rig.get(name)
            let second = try await rig.get(name)
            #expect(first.status == 200 && second.status == 200 && first.body == second.body, "\(name): \(first) / \(second)")
            #expect(rig.count(name) == 1, "\(name) is fresh: the second request must not reach the origin: \(rig.requests(name))")
            #expect(second.isHit, "\(name): the second answer is a hit, Cache-Status \(second.headers["cache-status"] ?? "none")")
        }
        // Stale from the start: the second request reaches the origin.
        for name in ["expires-past", "expires-invalid"] {
            let first = try await rig.get(name)
            let second = try await rig.get(name)
            #expect(first.status == 200 && second.status == 200 && first.body == second.body, "\(name): \(first) / \(second)")
            #expect(rig.count(name) == 2, "\(name) is stale: the second request must reach the origin: \(rig.requests(name))")
            #expect(!second.isHit, "\(name): a stale answer is not a hit: \(second.headers["cache-status"] ?? "none")")
        }
        // max-age=0 is stored, then revalidated (RFC 9111 4.3.1) and answered from storage on 304.
        let zero = try await rig.get("max-age-0")
        #expect(zero.cacheStatus.contains("stored"), "max-age=0 is storable: Cache-Status \(zero.headers["cache-status"] ?? "none")")
        let zeroAgain = try await rig.get("max-age-0")
        let zeroCheck = rig.requests("max-age-0").last
        #expect(
            rig.count("max-age-0") == 2 && zeroCheck?.header("If-None-Match") == "\"g\"" && zeroCheck?.status == 304,
            "max-age=0: the second request revalidates with If-None-Match \"g\" and gets 304: \(rig.requests("max-age-0"))")
        #expect(zeroAgain.status == 200 && zeroAgain.text == "stored, stale at once", "after a 304 the stored body is served: \(zeroAgain)")
        #expect(
            zeroAgain.cacheStatus.contains("fwd=stale") && zeroAgain.cacheStatus.contains("fwd-status=304"),
            "a revalidation answered 304 is 'fwd=stale; fwd-status=304', got \(zeroAgain.headers["cache-status"] ?? "none")")
        // Response no-cache (RFC 9111 5.2.2.4): every request revalidates; the body comes from storage.
        for round in 1...3 {
            let answer = try await rig.get("no-cache")
            #expect(answer.status == 200 && answer.text == "stored, revalidated every time", "no-cache #\(round): \(answer)")
            #expect(rig.count("no-cache") == round, "no-cache #\(round): every request reaches the origin: \(rig.requests("no-cache"))")
        }
        let noCacheChecks = rig.requests("no-cache").dropFirst()
        #expect(
            noCacheChecks.count == 2
                && noCacheChecks.allSatisfy { $0.header("If-None-Match") == "\"h\"" && $0.status == 304 && $0.bytes == 0 },
            "no-cache: the later requests are conditional (If-None-Match \"h\") and answered 304: \(noCacheChecks)")
        // s-maxage=1 overrides max-age=60 for a shared cache (RFC 9111 5.2.2.10).
        _ = try await rig.get("s-maxage-stale")
        try await Self.waitForExpiry()
        let shared = try await rig.get("s-maxage-stale")
        #expect(shared.status == 200 && shared.text == "shared lifetime is short", "\(shared)")
        #expect(
            rig.count("s-maxage-stale") == 2 && rig.requests("s-maxage-stale").last?.header("If-None-Match") == "\"c\"",
            "s-maxage=1 wins over max-age=60: after 2 s the request revalidates: \(rig.requests("s-maxage-stale"))")
        await rig.stop()
    }

    // MARK: validation (RFC 9111 4.3)

    @Test(
        "a stale answer is revalidated with its validators: 304 freshens it and updates stored fields; 200 replaces it, at any length (RFC 9111 3.2, 4.3.1, 4.3.3, 4.3.4)"
    )
    func revalidation() async throws {
        let rig = try await ScriptedProxy()
        let lastModified = ScriptedProxy.httpDate(-3600)
        try rig.script(
            "same", [("Cache-Control", "max-age=1"), ("ETag", "\"same-1\""), ("Last-Modified", lastModified), ("X-Version", "1")],
            body: "version one of same")
        try rig.script("changed", [("Cache-Control", "max-age=1"), ("ETag", "\"changed-1\"")], body: "the old, short body")
        try rig.script("shrunk", [("Cache-Control", "max-age=1"), ("ETag", "\"shrunk-1\"")]) { $0.bodySize = 5000 }
        try rig.script("dated", [("Cache-Control", "max-age=1"), ("Last-Modified", lastModified)], body: "validated by date only")
        for name in ["same", "changed", "shrunk", "dated"] {
            let first = try await rig.get(name)
            #expect(first.status == 200 && rig.count(name) == 1, "\(name): first request: \(first)")
        }
        try await Self.waitForExpiry()

        // Same version: the origin answers 304 with new field values; they replace the stored ones.
        try rig.script(
            "same", [("Cache-Control", "max-age=60"), ("ETag", "\"same-1\""), ("Last-Modified", lastModified), ("X-Version", "2")],
            body: "version one of same")
        let same = try await rig.get("same")
        let check = rig.requests("same").last
        #expect(rig.count("same") == 2, "stale after 2 s: the request reaches the origin: \(rig.requests("same"))")
        #expect(
            check?.header("If-None-Match") == "\"same-1\"",
            "the revalidation carries If-None-Match with the stored ETag: \(String(describing: check))")
        #expect(check?.status == 304, "the origin answered the revalidation 304: \(String(describing: check))")
        #expect(same.status == 200 && same.text == "version one of same", "after a 304 the client gets 200 and the stored body: \(same)")
        #expect(same.headers["x-version"] == "2", "the 304's X-Version replaces the stored one (RFC 9111 3.2): \(same.headers)")
        #expect(same.headers["cache-control"] == "max-age=60", "the 304's Cache-Control replaces the stored one: \(same.headers)")
        #expect(
            same.cacheStatus.contains("fwd=stale") && same.cacheStatus.contains("fwd-status=304"),
            "Cache-Status for a 304 revalidation: \(same.headers["cache-status"] ?? "none")")
        let sameAgain = try await rig.get("same")
        #expect(
            sameAgain.isHit && rig.count("same") == 2, "freshened by the 304 (max-age=60): a hit: \(sameAgain), \(rig.requests("same"))")
        #expect(sameAgain.headers["x-version"] == "2", "the updated field was stored, not only sent once: \(sameAgain.headers)")

        // A new version, longer: the client gets it whole, and it replaces the stored one.
        try rig.script("changed", [("Cache-Control", "max-age=60"), ("ETag", "\"changed-2\"")]) { $0.bodySize = 70_000 }
        let newBody = OriginScript.pattern(count: 70_000)
        let changed = try await rig.get("changed")
        // The revalidation (the request after the first) carries the old ETag and asks for the
        // first segment only (little to waste when the version is the same and the origin has
        // no conditional requests). Answered with a part of the new version, the client's
        // whole is asked for once more; an origin that sends all of it anyway saves that
        // request (the conformance suite's origin does: one request there).
        let changedCheck = rig.requests("changed").dropFirst().first
        #expect(
            rig.count("changed") == 3 && changedCheck?.header("Range") == "bytes=0-65535",
            "the revalidation asks for the first segment: \(rig.requests("changed"))")
        #expect(
            changedCheck?.header("If-None-Match") == "\"changed-1\"" && changedCheck?.status != 304,
            "revalidated with the old ETag and answered with the new version: \(rig.requests("changed"))")
        let changedIsNew = changed.body == newBody
        #expect(changed.status == 200 && changedIsNew, "the new 70000-byte version reaches the client: \(changed)")
        #expect(changed.headers["etag"] == "\"changed-2\"", "with its new ETag: \(changed.headers)")
        #expect(
            changed.cacheStatus.contains("fwd=stale") && changed.cacheStatus.contains("fwd-status=200"),
            "Cache-Status for a revalidation answered with a new version: \(changed.headers["cache-status"] ?? "none")")
        let count = rig.count("changed")
        let tail = try await rig.get("changed", ["-r", "65000-65099"])
        let tailIsNew = tail.body == Array(newBody[65000..<65100])
        #expect(tail.status == 206 && tailIsNew, "a range past the old end has the new bytes: \(tail)")
        let whole = try await rig.get("changed")
        let wholeIsNew = whole.body == newBody
        #expect(whole.isHit && wholeIsNew, "the next request is a hit on the new version: \(whole)")
        #expect(rig.count("changed") == count, "no origin request for the new version once stored: \(rig.requests("changed"))")

        // A new version, shorter: a range past its end is 416, never old bytes.
        try rig.script("shrunk", [("Cache-Control", "max-age=60"), ("ETag", "\"shrunk-2\"")], body: "tiny")
        let beyond = try await rig.get("shrunk", ["-r", "4000-4099"])
        #expect(beyond.status == 416, "the version is now 4 bytes long: bytes 4000-4099 are unsatisfiable, got \(beyond)")
        let shrunk = try await rig.get("shrunk")
        #expect(shrunk.status == 200 && shrunk.text == "tiny", "the new short version: \(shrunk)")

        // No ETag: revalidated with If-Modified-Since (RFC 9111 4.3.1).
        let dated = try await rig.get("dated")
        let datedCheck = rig.requests("dated").last
        #expect(
            rig.count("dated") == 2 && datedCheck?.header("If-Modified-Since") == lastModified && datedCheck?.status == 304,
            "revalidated with If-Modified-Since \(lastModified) and answered 304: \(rig.requests("dated"))")
        #expect(dated.status == 200 && dated.text == "validated by date only", "the stored body after a 304: \(dated)")
        await rig.stop()
    }

    // MARK: request directives (RFC 9111 5.2.1, 5.4)

    @Test(
        "request max-age=0, min-fresh, no-cache and Pragma: no-cache go to the origin; only-if-cached answers from storage or 504; no-store stores nothing; max-stale takes a stale answer from storage (RFC 9111 5.2.1.1-5.2.1.5, 5.2.1.7, 5.4)"
    )
    func requestDirectives() async throws {
        let rig = try await ScriptedProxy()
        let body = "a fresh stored answer"
        try rig.script("stored", [("Cache-Control", "max-age=60"), ("ETag", "\"r1\"")], body: body)
        try rig.script("never-fetched", [("Cache-Control", "max-age=60")], body: "not in the cache")
        _ = try await rig.get("stored")
        let hit = try await rig.get("stored")
        #expect(hit.isHit && rig.count("stored") == 1, "fresh: a hit before the directives: \(hit)")

        let maxAgeZero = try await rig.get("stored", ["-H", "Cache-Control: max-age=0"])
        #expect(maxAgeZero.status == 200 && maxAgeZero.text == body, "\(maxAgeZero)")
        #expect(
            rig.count("stored") == 2 && rig.requests("stored").last?.header("If-None-Match") == "\"r1\"",
            "request max-age=0 forces a revalidation with the stored ETag: \(rig.requests("stored"))")

        for (label, field) in [("Cache-Control: no-cache", "Cache-Control: no-cache"), ("Pragma: no-cache", "Pragma: no-cache")] {
            let before = rig.count("stored")
            let answer = try await rig.get("stored", ["-H", field])
            #expect(answer.status == 200 && answer.text == body, "\(label): \(answer)")
            #expect(rig.count("stored") == before + 1, "\(label) must reach the origin: \(rig.requests("stored"))")
            #expect(
                answer.cacheStatus.contains("fwd=request"),
                "\(label): Cache-Status should say fwd=request, got \(answer.headers["cache-status"] ?? "none")")
        }

        let before = rig.count("stored")
        let cachedOnly = try await rig.get("stored", ["-H", "Cache-Control: only-if-cached"])
        #expect(
            cachedOnly.status == 200 && cachedOnly.text == body && rig.count("stored") == before,
            "only-if-cached on a stored URL: \(cachedOnly)")
        let notCached = try await rig.get("never-fetched", ["-H", "Cache-Control: only-if-cached"])
        #expect(notCached.status == 504, "only-if-cached on an uncached URL is 504 (RFC 9111 5.2.1.7), got \(notCached)")
        #expect(rig.count("never-fetched") == 0, "only-if-cached never reaches the origin: \(rig.requests("never-fetched"))")

        // min-fresh (5.2.1.3): 60 s of freshness left is less than the 120 asked for.
        let beforeMinFresh = rig.count("stored")
        let minFresh = try await rig.get("stored", ["-H", "Cache-Control: min-fresh=120"])
        #expect(minFresh.status == 200 && minFresh.text == body, "min-fresh: \(minFresh)")
        #expect(
            rig.count("stored") == beforeMinFresh + 1 && rig.requests("stored").last?.header("If-None-Match") == "\"r1\"",
            "min-fresh=120 on an answer fresh for 60 s revalidates: \(rig.requests("stored"))")

        // Request no-store (5.2.1.5): the answer reaches this client and is not stored.
        try rig.script("request-no-store", [("Cache-Control", "max-age=60"), ("ETag", "\"n1\"")], body: "for this client only")
        let unstored = try await rig.get("request-no-store", ["-H", "Cache-Control: no-store"])
        #expect(unstored.status == 200 && unstored.text == "for this client only", "\(unstored)")
        #expect(!unstored.cacheStatus.contains("stored"), "request no-store: not stored: \(unstored.headers["cache-status"] ?? "none")")
        let afterNoStore = try await rig.get("request-no-store")
        #expect(
            afterNoStore.text == "for this client only" && rig.count("request-no-store") == 2 && !afterNoStore.isHit,
            "nothing was stored, so the next request reaches the origin: \(rig.requests("request-no-store"))")

        // max-stale (5.2.1.2): a client that accepts staleness gets the stale answer from storage.
        try rig.script("short", [("Cache-Control", "max-age=1"), ("ETag", "\"s1\"")], body: "short-lived")
        _ = try await rig.get("short")
        try await Self.waitForExpiry()
        for field in ["Cache-Control: max-stale=600", "Cache-Control: max-stale"] {
            let accepted = try await rig.get("short", ["-H", field])
            #expect(accepted.status == 200 && accepted.text == "short-lived", "\(field): \(accepted)")
            #expect(
                accepted.isHit && rig.count("short") == 1,
                "\(field): the stale answer is served from storage, the origin not asked: \(accepted.headers), \(rig.requests("short"))")
        }
        let refused = try await rig.get("short")
        #expect(
            refused.status == 200 && rig.count("short") == 2 && rig.requests("short").last?.header("If-None-Match") == "\"s1\"",
            "without max-stale the stale answer is revalidated: \(rig.requests("short"))")
        await rig.stop()
    }

    // MARK: serving stale (RFC 5861; RFC 9111 4.2.4)

    @Test(
        "stale-while-revalidate serves the stale answer at once and revalidates once in the background; stale-if-error serves it when the origin answers 5xx, never past must-revalidate (RFC 5861 3, 4; RFC 9111 4.2.4)"
    )
    func staleExtensions() async throws {
        let rig = try await ScriptedProxy()
        try rig.script(
            "swr", [("Cache-Control", "max-age=1, stale-while-revalidate=60"), ("ETag", "\"w1\""), ("X-Version", "1")],
            body: "served while revalidating")
        try rig.script("sie", [("Cache-Control", "max-age=1, stale-if-error=60"), ("ETag", "\"e1\"")], body: "served on error")
        try rig.script(
            "sie-must", [("Cache-Control", "max-age=1, stale-if-error=60, must-revalidate"), ("ETag", "\"m1\"")],
            body: "never served stale")
        try rig.script("plain", [("Cache-Control", "max-age=1"), ("ETag", "\"p1\"")], body: "no stale extension")
        for name in ["swr", "sie", "sie-must", "plain"] {
            let first = try await rig.get(name)
            #expect(first.status == 200 && first.cacheStatus.contains("stored"), "\(name): stored at first: \(first)")
        }
        try await Self.waitForExpiry()

        // stale-while-revalidate (RFC 5861 section 3): the stale answer goes out without waiting
        // for the origin; one revalidation runs behind it and its 304 freshens what is stored.
        try rig.script(
            "swr", [("Cache-Control", "max-age=60, stale-while-revalidate=60"), ("ETag", "\"w1\""), ("X-Version", "2")],
            body: "served while revalidating")
        let stale = try await rig.get("swr")
        #expect(stale.status == 200 && stale.text == "served while revalidating", "\(stale)")
        #expect(stale.headers["x-version"] == "1", "the stale answer is the stored one, not the origin's: \(stale.headers)")
        #expect(
            stale.isHit && stale.cacheStatus.contains("detail=\"stale-while-revalidate\""),
            "served from storage while revalidating: Cache-Status \(stale.headers["cache-status"] ?? "none")")
        let deadline = ContinuousClock.now + .seconds(20)
        while rig.count("swr") < 2, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(50)) }
        var fresh = try await rig.get("swr")
        while fresh.headers["x-version"] != "2", ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
            fresh = try await rig.get("swr")
        }
        let checks = rig.requests("swr").dropFirst()
        #expect(
            checks.count == 1 && checks.first?.header("If-None-Match") == "\"w1\"" && checks.first?.status == 304,
            "exactly one background revalidation, conditional on the stored ETag, answered 304: \(rig.requests("swr"))")
        #expect(
            fresh.isHit && fresh.headers["x-version"] == "2" && fresh.text == "served while revalidating",
            "the 304 freshened the stored answer and updated its fields: \(fresh)")

        // stale-if-error (RFC 5861 section 4): a 5xx from the origin is replaced by the stale answer.
        try rig.script("sie", status: 500, [("Cache-Control", "no-store")], body: "the origin is broken")
        let rescued = try await rig.get("sie")
        #expect(rescued.status == 200 && rescued.text == "served on error", "stale-if-error: the stored answer, not the 500: \(rescued)")
        #expect(
            rescued.cacheStatus.contains("fwd=stale") && rescued.cacheStatus.contains("fwd-status=500")
                && rescued.cacheStatus.contains("detail=\"stale-if-error\""),
            "Cache-Status says what happened: \(rescued.headers["cache-status"] ?? "none")")
        #expect(rig.count("sie") == 2, "the origin was asked: \(rig.requests("sie"))")

        // must-revalidate forbids serving stale, stale-if-error or not (RFC 9111 4.2.4); without
        // the extension a 5xx is passed on as well.
        for name in ["sie-must", "plain"] {
            try rig.script(name, status: 500, [("Cache-Control", "no-store")], body: "the origin is broken")
            let broken = try await rig.get(name)
            #expect(broken.status == 500 && broken.text == "the origin is broken", "\(name): the origin's 500 passed on: \(broken)")
            #expect(rig.count(name) == 2, "\(name): \(rig.requests(name))")
        }
        await rig.stop()
    }

    // MARK: interim responses (RFC 9110 15.2)

    @Test(
        "interim responses (102, 103 Early Hints) reach an HTTP/1.1 client before the final answer, for GET and forwarded methods alike; never an HTTP/1.0 one; never stored or replayed (RFC 9110 15.2, RFC 9111 3)"
    )
    func interimResponses() async throws {
        let rig = try await ScriptedProxy()
        let hints = [
            OriginScript.Interim(status: 102, headers: []),
            OriginScript.Interim(status: 103, headers: [["Link", "</style.css>; rel=preload; as=style"], ["X-Hint", "early"]]),
        ]
        for name in ["hinted", "hinted-old", "hinted-post"] {
            var script = OriginScript(
                headers: [("Cache-Control", "max-age=60"), ("ETag", "\"i1\"")], body: "the final answer", conditional: true)
            script.interim = hints
            try rig.script(name, script)
        }
        let port = rig.proxy.server.port
        func get(_ name: String, version: String = "1.1", method: String = "GET") async -> RawHTTP.Exchange {
            let body = method == "POST" ? "Content-Length: 4\r\n\r\nping" : "\r\n"
            let request = "\(method) /\(name) HTTP/\(version)\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + body
            return await RawHTTP.exchange(port: port, [Array(request.utf8)], timeout: .seconds(30))
        }

        let first = await get("hinted")
        #expect(first.statuses == [102, 103, 200], "both interim responses, in order, then the answer: \(first.text)")
        let early = first.text.components(separatedBy: "HTTP/1.1 200").first ?? ""
        #expect(
            early.contains("Link: </style.css>; rel=preload; as=style") && early.contains("X-Hint: early"),
            "the 103 carries its fields: \(early)")
        let final = first.text.components(separatedBy: "HTTP/1.1 200").last ?? ""
        #expect(
            !final.contains("X-Hint") && final.hasSuffix("the final answer"),
            "the interim fields are not the final answer's: \(final)")

        // Stored without them (RFC 9111 section 3: only final responses are stored).
        let hit = await get("hinted")
        #expect(hit.statuses == [200] && hit.text.hasSuffix("the final answer"), "a hit has no interim response: \(hit.text)")
        #expect(rig.count("hinted") == 1 && !hit.text.contains("X-Hint"), "\(rig.requests("hinted"))")

        // HTTP/1.0 clients never get one (RFC 9110 section 15.2).
        let old = await get("hinted-old", version: "1.0")
        #expect(old.statuses == [200] && old.text.hasSuffix("the final answer"), "\(old.text)")
        #expect(!old.text.contains(" 103 ") && !old.text.contains(" 102 "), "no interim response to HTTP/1.0: \(old.text)")

        // A method forwarded with its body passes them on too.
        let posted = await get("hinted-post", method: "POST")
        #expect(posted.statuses == [102, 103, 200], "POST: \(posted.text)")
        #expect(rig.requests("hinted-post").first?.method == "POST", "\(rig.requests("hinted-post"))")
        await rig.stop()
    }

    @Test("a 206 whose Content-Range and Content-Length disagree is a 502 with the reason, never a part cut short (RFC 9110 14.4, 15.3.7)")
    func inconsistentPart() async throws {
        let rig = try await ScriptedProxy()
        // Six bytes claimed, five sent.
        try rig.script(
            "bad-part", status: 206, [("Cache-Control", "max-age=60"), ("Content-Range", "bytes 4-9/10")], body: "01234",
            conditional: false)
        let answer = try await rig.get("bad-part", ["-r", "-5"])
        #expect(answer.status == 502, "an origin's contradictory part is refused: \(answer)")
        #expect(answer.text.contains("Content-Range") && answer.text.contains("Content-Length"), "and says why: \(answer.text)")
        #expect(answer.exitCode == 0, "the answer is whole, not cut off: \(answer.stderr)")
        // A part that claims the whole: never handed on as a short 200 (the client would take
        // five bytes for the whole resource), with or without a Range, GET or HEAD.
        try rig.script(
            "bad-whole", status: 206, [("Cache-Control", "max-age=60"), ("Content-Range", "bytes 0-9/10")], body: "01234",
            conditional: false)
        for arguments in [[], ["-r", "0-"], ["-I"]] {
            let whole = try await rig.get("bad-whole", arguments)
            #expect(whole.status == 502, "\(arguments): a contradictory whole is refused: \(whole)")
        }
        await rig.stop()
    }

    // MARK: client conditionals (RFC 9110 13)

    @Test(
        "conditionals on a fresh stored answer are answered by the cache: If-None-Match (weak, list, *), If-Modified-Since, If-Match, If-Unmodified-Since, precedence, If-Range (RFC 9110 13.1, 13.2.2)"
    )
    func clientConditionals() async throws {
        let rig = try await ScriptedProxy()
        let lastModified = ScriptedProxy.httpDate(-3600)
        let before = ScriptedProxy.httpDate(-7200)
        let now = ScriptedProxy.httpDate(0)
        let body = "0123456789 a conditional body"
        try rig.script("doc", [("Cache-Control", "max-age=60"), ("ETag", "\"c1\""), ("Last-Modified", lastModified)], body: body)
        let first = try await rig.get("doc")
        #expect(first.status == 200 && first.text == body, "\(first)")

        // (fields, expected status). RFC 9110 13.1.2 If-None-Match uses weak comparison; 13.1.1
        // If-Match strong; 13.2.2: If-None-Match present means If-Modified-Since is ignored.
        let cases: [(fields: [String], status: Int)] = [
            (["If-None-Match: \"c1\""], 304),
            (["If-None-Match: W/\"c1\""], 304),
            (["If-None-Match: \"other\", \"c1\""], 304),
            (["If-None-Match: *"], 304),
            (["If-None-Match: \"other\""], 200),
            (["If-Modified-Since: \(lastModified)"], 304),
            (["If-Modified-Since: \(now)"], 304),
            (["If-Modified-Since: \(before)"], 200),
            (["If-Match: \"other\""], 412),
            (["If-Match: \"c1\""], 200),
            (["If-Unmodified-Since: \(before)"], 412),
            (["If-Unmodified-Since: \(now)"], 200),
            (["If-None-Match: \"other\"", "If-Modified-Since: \(now)"], 200),
            (["If-None-Match: \"c1\"", "If-Modified-Since: \(before)"], 304),
        ]
        for (fields, status) in cases {
            let answer = try await rig.get("doc", fields.flatMap { ["-H", $0] })
            #expect(answer.status == status, "\(fields): expected \(status), got \(answer)")
            switch status {
            case 304:
                #expect(answer.body.isEmpty && answer.headers["etag"] == "\"c1\"", "\(fields): a 304 has the ETag and no body: \(answer)")
            case 200:
                #expect(answer.text == body, "\(fields): the full stored body: \(answer)")
            default: break
            }
        }
        // If-Range (RFC 9110 13.1.5): a weak ETag or a date that is not Last-Modified means the whole body.
        let ranges: [(ifRange: String, status: Int)] = [
            ("\"c1\"", 206), (lastModified, 206), ("W/\"c1\"", 200), (before, 200), ("\"other\"", 200),
        ]
        for (ifRange, status) in ranges {
            let answer = try await rig.get("doc", ["-r", "0-9", "-H", "If-Range: \(ifRange)"])
            #expect(answer.status == status, "If-Range: \(ifRange): expected \(status), got \(answer)")
            #expect(answer.text == (status == 206 ? "0123456789" : body), "If-Range: \(ifRange): body \(answer.text.debugDescription)")
        }
        #expect(rig.count("doc") == 1, "every conditional was answered from storage: \(rig.requests("doc"))")
        await rig.stop()
    }

    // MARK: Vary (RFC 9111 4.1)

    @Test(
        "Vary: each Accept-Encoding gets its own variant, variants are stored side by side, whitespace is normalised, Vary: * never matches (RFC 9111 4.1)"
    )
    func vary() async throws {
        let rig = try await ScriptedProxy()
        let plain = OriginScript(
            headers: [("Cache-Control", "max-age=60"), ("Vary", "Accept-Encoding"), ("ETag", "\"plain\"")], body: "identity variant")
        var script = plain
        script.variants = [
            "gzip": OriginScript(
                headers: [("Cache-Control", "max-age=60"), ("Vary", "Accept-Encoding"), ("ETag", "\"gz\""), ("X-Variant", "gzip")],
                body: "gzip variant")
        ]
        try rig.script("page", script)
        let gzip = ["-H", "Accept-Encoding: gzip"]
        let identity = ["-H", "Accept-Encoding: identity"]

        let first = try await rig.get("page", gzip)
        #expect(first.text == "gzip variant" && rig.count("page") == 1, "gzip variant first: \(first)")
        let second = try await rig.get("page", identity)
        #expect(second.text == "identity variant", "identity gets its own variant, not the stored gzip one: \(second)")
        #expect(rig.count("page") == 2, "a Vary mismatch reaches the origin: \(rig.requests("page"))")
        #expect(
            second.cacheStatus.contains("fwd=vary-miss"),
            "a Vary mismatch is 'fwd=vary-miss', got \(second.headers["cache-status"] ?? "none")")
        #expect(
            rig.requests("page").map { $0.header("Accept-Encoding") ?? "-" } == ["gzip", "identity"],
            "each request's Accept-Encoding reached the origin: \(rig.requests("page"))")
        let third = try await rig.get("page", gzip)
        let fourth = try await rig.get("page", identity)
        #expect(third.isHit && third.text == "gzip variant", "repeating the first request is a hit on its variant: \(third)")
        #expect(fourth.isHit && fourth.text == "identity variant", "both variants are stored side by side: \(fourth)")
        #expect(rig.count("page") == 2, "the repeats were hits: \(rig.requests("page"))")

        // Whitespace in the listed field is normalised: "gzip,br" and "gzip, br" select the same variant.
        try rig.script("spaced", plain)
        _ = try await rig.get("spaced", ["-H", "Accept-Encoding: gzip,br"])
        let spaced = try await rig.get("spaced", ["-H", "Accept-Encoding: gzip, br"])
        #expect(spaced.isHit && rig.count("spaced") == 1, "'gzip,br' then 'gzip, br' is a hit: \(spaced), \(rig.requests("spaced"))")

        // Vary: * never matches.
        try rig.script("star", [("Cache-Control", "max-age=60"), ("Vary", "*")], body: "varies on everything")
        for round in 1...3 {
            let answer = try await rig.get("star")
            #expect(answer.text == "varies on everything" && !answer.isHit, "Vary: * #\(round): \(answer)")
            #expect(rig.count("star") == round, "Vary: * #\(round) reaches the origin: \(rig.requests("star"))")
        }
        await rig.stop()
    }

    // MARK: Content-Encoding (RFC 9110 8.4, 14.1)

    @Test(
        "Content-Encoding is stored and replayed as sent: --compressed decodes the original, a Range is of the encoded bytes, Accept-Encoding reaches the origin (RFC 9110 8.4, 14.1.1)"
    )
    func contentEncoding() async throws {
        let rig = try await ScriptedProxy()
        let original = (0..<400).map { "line \($0) of a compressible text\n" }.joined()
        var script = OriginScript(
            headers: [("Cache-Control", "max-age=60"), ("Vary", "Accept-Encoding"), ("Content-Type", "text/plain"), ("ETag", "\"text\"")],
            body: original)
        var encoded = script
        encoded.headers = [
            ("Cache-Control", "max-age=60"), ("Vary", "Accept-Encoding"), ("Content-Type", "text/plain"), ("ETag", "\"text-gz\""),
        ]
        encoded.gzip = true
        script.variants = ["gzip": encoded]
        try rig.script("text", script)
        // The same script under another name: what the origin itself sends, without the proxy.
        try rig.script("text-direct", script)
        let gzipBytes = try await rig.direct("text-direct", ["-H", "Accept-Encoding: gzip"]).body
        #expect(gzipBytes.starts(with: [0x1f, 0x8b]) && gzipBytes.count > 20, "the origin sends gzip bytes: \(gzipBytes.prefix(4))")

        let decoded = try await rig.get("text", ["--compressed", "-H", "Accept-Encoding: gzip"])
        let decodedIsOriginal = decoded.text == original
        #expect(decoded.exitCode == 0 && decodedIsOriginal, "curl --compressed decodes the original text: \(decoded)")
        #expect(decoded.headers["content-encoding"] == "gzip", "Content-Encoding reaches the client: \(decoded.headers)")
        #expect(
            rig.requests("text").first?.header("Accept-Encoding") == "gzip",
            "the client's Accept-Encoding reached the origin: \(rig.requests("text"))")

        let raw = try await rig.get("text", ["-H", "Accept-Encoding: gzip"])
        let rawIsEncoded = sameBytes(raw.body, gzipBytes[...])
        #expect(rawIsEncoded, "without --compressed the stored gzip bytes as sent: \(raw)")
        #expect(raw.isHit && rig.count("text") == 1, "the same Accept-Encoding is a hit: \(raw.headers), \(rig.requests("text"))")
        let part = try await rig.get("text", ["-r", "10-19", "-H", "Accept-Encoding: gzip"])
        #expect(
            part.status == 206 && part.body == Array(gzipBytes[10..<20]),
            "a Range is of the encoded bytes (RFC 9110 14.1.1): got \(part.body), the encoded bytes 10-19 are \(Array(gzipBytes[10..<20]))")
        #expect(part.headers["content-range"] == "bytes 10-19/\(gzipBytes.count)", "Content-Range of the encoded length: \(part.headers)")
        #expect(part.headers["content-encoding"] == "gzip", "the 206 keeps Content-Encoding: \(part.headers)")

        let plain = try await rig.get("text", ["-H", "Accept-Encoding: identity"])
        let plainIsOriginal = plain.text == original
        #expect(plainIsOriginal && plain.headers["content-encoding"] == nil, "identity gets the unencoded variant: \(plain)")
        await rig.stop()
    }

    // MARK: request fields forwarded (RFC 9110 7.6.1)

    @Test(
        "request fields reach the origin except hop-by-hop ones: Connection-named fields, Keep-Alive, Proxy-Authorization (RFC 9110 7.6.1, 11.7.2)"
    )
    func requestFieldsForwarded() async throws {
        let rig = try await ScriptedProxy()
        try rig.script("echo", [("Cache-Control", "no-store")], body: "fields seen")
        let forwarded = [
            ("Authorization", "Bearer token-1"), ("Cookie", "theme=dark; session=42"), ("Accept-Language", "fr-CH, fr;q=0.9"),
            ("User-Agent", "sparsecache-tests/1.0"), ("X-Header", "custom value"),
        ]
        let dropped = [
            ("Connection", "X-Secret"), ("X-Secret", "1"), ("Keep-Alive", "timeout=30"), ("Proxy-Authorization", "Basic cHJveHk6cGFzcw=="),
        ]
        let answer = try await rig.get("echo", (forwarded + dropped).flatMap { ["-H", "\($0.0): \($0.1)"] })
        #expect(answer.status == 200 && answer.text == "fields seen", "\(answer)")
        let seen = rig.requests("echo").last
        #expect(seen != nil, "the request reached the origin")
        for (name, value) in forwarded {
            #expect(seen?.header(name) == value, "\(name) should reach the origin as '\(value)', got \(seen?.header(name) ?? "nothing")")
        }
        for (name, _) in dropped where name != "Connection" {
            #expect(seen?.header(name) == nil, "hop-by-hop \(name) must not reach the origin: \(String(describing: seen))")
        }
        let connection = seen?.header("Connection")?.lowercased() ?? ""
        #expect(!connection.contains("x-secret"), "the client's Connection field must not be forwarded: \(String(describing: seen))")
        await rig.stop()
    }

    // MARK: the range machinery stays

    @Test("ranges on a stored answer: 206 with the right bytes and Content-Range, 416 past the end, no origin request")
    func rangesOnStoredAnswer() async throws {
        let rig = try await ScriptedProxy()
        try rig.script("clip", [("Cache-Control", "max-age=60"), ("ETag", "\"clip\""), ("Content-Type", "video/mp4")]) {
            $0.bodySize = 1000
        }
        let source = OriginScript.pattern(count: 1000)
        let whole = try await rig.get("clip")
        let wholeIsSource = whole.body == source
        #expect(whole.status == 200 && wholeIsSource, "the whole body first: \(whole)")
        let stored = rig.count("clip")
        let cases: [(range: String, status: Int, bytes: Range<Int>?, contentRange: String)] = [
            ("10-19", 206, 10..<20, "bytes 10-19/1000"), ("990-", 206, 990..<1000, "bytes 990-999/1000"),
            ("-5", 206, 995..<1000, "bytes 995-999/1000"), ("0-5000", 206, 0..<1000, "bytes 0-999/1000"),
            ("2000-", 416, nil, "bytes */1000"),
        ]
        for (range, status, bytes, contentRange) in cases {
            let answer = try await rig.get("clip", ["-r", range])
            #expect(answer.status == status, "range \(range): expected \(status), got \(answer)")
            #expect(
                answer.headers["content-range"] == contentRange,
                "range \(range): Content-Range \(answer.headers["content-range"] ?? "none")")
            if let bytes {
                let right = answer.body == Array(source[bytes])
                #expect(right, "range \(range): wrong bytes (\(answer.body.count) bytes)")
            }
        }
        #expect(rig.count("clip") == stored, "ranges of a stored answer never reach the origin: \(rig.requests("clip"))")
        await rig.stop()
    }

    // MARK: refresh while serving, unsafe methods

    @Test("PURGE from loopback evicts a stored URL while serving: the next GET reaches the origin; PURGE of an uncached URL is 404")
    func purge() async throws {
        let rig = try await ScriptedProxy()
        try rig.script("page", [("Cache-Control", "max-age=60"), ("ETag", "\"p1\"")], body: "purge me")
        _ = try await rig.get("page")
        let hit = try await rig.get("page")
        #expect(hit.text == "purge me" && rig.count("page") == 1, "stored before the purge: \(hit), \(rig.requests("page"))")

        let purged = try await rig.get("page", ["-X", "PURGE"])
        #expect(purged.status == 200 || purged.status == 204, "PURGE of a stored URL from loopback is 200 or 204, got \(purged)")
        #expect(rig.count("page") == 1, "PURGE is the cache's, not forwarded to the origin: \(rig.requests("page"))")
        let after = try await rig.get("page")
        #expect(after.status == 200 && after.text == "purge me", "\(after)")
        #expect(rig.count("page") == 2, "after PURGE the next GET reaches the origin: \(rig.requests("page"))")
        #expect(!after.isHit, "after PURGE the next GET is not a hit: \(after.headers["cache-status"] ?? "none")")

        try rig.script("untouched", [("Cache-Control", "max-age=60")], body: "never fetched")
        let unknown = try await rig.get("untouched", ["-X", "PURGE"])
        #expect(unknown.status == 404, "PURGE of an uncached URL is 404, got \(unknown)")
        await rig.stop()
    }

    @Test("an unsafe method goes to the origin and invalidates the stored answer: the next GET is a miss (RFC 9111 4.4)")
    func unsafeMethodsInvalidate() async throws {
        let rig = try await ScriptedProxy()
        try rig.script("item", [("Cache-Control", "max-age=60"), ("ETag", "\"i1\"")], body: "item version 1")
        _ = try await rig.get("item")
        let hit = try await rig.get("item")
        #expect(hit.isHit && rig.count("item") == 1, "stored before the POST: \(hit)")

        let post = try await rig.get("item", ["-d", "name=changed"])
        #expect((200..<300).contains(post.status), "the POST is forwarded and answered 2xx, got \(post)")
        #expect(rig.requests("item").last?.method == "POST", "the POST reached the origin: \(rig.requests("item"))")
        #expect(
            (post.headers["via"] ?? "").contains("1.1 sparsecache"), "a forwarded POST's answer carries Via too: \(post.headers)")
        #expect(
            post.cacheStatus.contains("fwd=method"),
            "a method served only by the origin is 'fwd=method', got \(post.headers["cache-status"] ?? "none")")
        let before = rig.count("item")
        let after = try await rig.get("item")
        #expect(after.status == 200 && after.text == "item version 1", "\(after)")
        #expect(rig.count("item") == before + 1, "after a POST the next GET is a miss: \(rig.requests("item"))")
        #expect(rig.requests("item").last?.method == "GET", "the GET after the POST reached the origin: \(rig.requests("item"))")
        await rig.stop()
    }

    // MARK: bodies of any size

    @Test("bodies of any size: an empty 200 is stored and hit with 0 bytes; a 404 page, a 301 and a small JSON pass through byte for byte")
    func bodiesOfAnySize() async throws {
        let rig = try await ScriptedProxy()
        try rig.script("empty", [("Cache-Control", "max-age=60"), ("ETag", "\"empty\"")], body: "")
        let empty = try await rig.get("empty")
        #expect(empty.status == 200 && empty.body.isEmpty && empty.headers["content-length"] == "0", "an empty 200: \(empty)")
        // (An origin may answer the first contact's range request 416 for an empty body, and
        // then be asked for the whole: count from after the first answer.)
        let emptyRequests = rig.count("empty")
        let emptyAgain = try await rig.get("empty")
        #expect(emptyAgain.status == 200 && emptyAgain.body.isEmpty && emptyAgain.headers["content-length"] == "0", "\(emptyAgain)")
        #expect(
            emptyAgain.isHit && rig.count("empty") == emptyRequests,
            "the empty body is stored: the second request is a hit: \(rig.requests("empty"))")

        let page = "<html><body><h1>Not here</h1><p>nothing at this address</p></body></html>\n"
        try rig.script("gone", status: 404, [("Content-Type", "text/html"), ("Cache-Control", "max-age=60")], body: page)
        for round in 1...2 {
            let answer = try await rig.get("gone")
            #expect(answer.status == 404 && answer.text == page, "404 #\(round): status and page byte for byte: \(answer)")
            #expect(
                (answer.headers["via"] ?? "").contains("1.1 sparsecache")
                    && (answer.headers["cache-status"] ?? "").hasPrefix("sparsecache;"),
                "404 #\(round): every answer carries Via and Cache-Status: \(answer.headers)")
        }

        try rig.script("moved", status: 301, [("Location", "/elsewhere"), ("Content-Type", "text/plain")], body: "moved to /elsewhere\n")
        let moved = try await rig.get("moved")
        #expect(moved.status == 301 && moved.headers["location"] == "/elsewhere", "a 301 keeps its status and Location: \(moved)")
        #expect(moved.text == "moved to /elsewhere\n", "a 301's small body byte for byte: \(moved.text.debugDescription)")

        let json = #"{"ok":true,"items":[1,2,3]}"#
        try rig.script("small.json", [("Content-Type", "application/json"), ("Cache-Control", "max-age=60")], body: json)
        let small = try await rig.get("small.json")
        let smallAgain = try await rig.get("small.json")
        #expect(small.status == 200 && small.text == json && smallAgain.text == json, "a small JSON: \(small) / \(smallAgain)")
        #expect(smallAgain.isHit && rig.count("small.json") == 1, "a small JSON is stored and hit: \(rig.requests("small.json"))")

        // A 204 has no content (RFC 9110 15.3.5) and is stored like any other answer; a status
        // this cache does not know (299) is stored with explicit freshness (RFC 9111 3).
        for (name, status) in [("nothing", 204), ("odd-status", 299)] {
            try rig.script(name, status: status, [("Cache-Control", "max-age=60")], body: status == 204 ? "" : "odd")
            let first = try await rig.get(name)
            let second = try await rig.get(name)
            #expect(first.status == status && second.status == status && second.text == first.text, "\(name): \(first) / \(second)")
            #expect(second.isHit && rig.count(name) == 1, "\(name) is stored: \(second), \(rig.requests(name))")
            if status == 204 { #expect(second.headers["content-length"] == nil, "a 204 carries no Content-Length: \(second.headers)") }
        }
        await rig.stop()
    }
}
