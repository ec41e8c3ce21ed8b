// The shared HTTP cache: interim responses, client conditionals, Vary, Content-Encoding,
// forwarded fields, ranges, refresh and unsafe methods, bodies of any size. Part of the
// HTTPCachingTests suite (HTTPCachingTests.swift).
import Foundation
import HTTPCache
import Testing
import TestSupport

extension HTTPCachingTests {
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
