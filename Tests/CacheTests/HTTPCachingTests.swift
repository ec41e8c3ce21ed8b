// `serve` as a shared HTTP cache (RFC 9110, RFC 9111; Cache-Status is RFC 9211).
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
    /// Waits until answers with `max-age=1` are stale: time itself must pass (whole seconds).
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
        // Wait for the proxy to have the answer's head (the resource's length comes with it),
        // not only for the origin to have the request: before the head nothing says the
        // validator is weak, and a seek is a range fill like any other. Not for a commit of its
        // first bytes either: under the suite's I/O load an fdatasync can take seconds.
        // The length is set a step before the validator is kept (`adopt`): the resource is open
        // once both are.
        let slowKey = rig.origin.url("slow").absoluteString
        _ = try await eventually(interval: .milliseconds(20)) {
            guard try await rig.proxy.cache.progress(key: slowKey).length != nil else { return false }
            return await rig.proxy.cache.isOpen(key: slowKey)
        }
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
        var answer = try await rig.get(name, arguments)
        _ = try await eventually(interval: .milliseconds(50)) {
            if answer.isHit { return true }
            answer = try await rig.get(name, arguments)
            return answer.isHit
        }
        return answer
    }
}
