// The shared HTTP cache: freshness, validation, request directives, serving stale (RFC 9111
// 4.2, 4.3, 5.2.1; RFC 5861). Part of the HTTPCachingTests suite (HTTPCachingTests.swift).
import Foundation
import HTTPCache
import Testing
import TestSupport

extension HTTPCachingTests {
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
        _ = try await eventually(timeout: .seconds(20), interval: .milliseconds(50)) { rig.count("swr") >= 2 }
        var fresh = try await rig.get("swr")
        _ = try await eventually(timeout: .seconds(20), interval: .milliseconds(50)) {
            if fresh.headers["x-version"] == "2" { return true }
            fresh = try await rig.get("swr")
            return fresh.headers["x-version"] == "2"
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
}
