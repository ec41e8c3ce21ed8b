// The proxy's request parser and Range interpretation: pure functions of bytes, checked case by
// case and then fuzzed (SPARSECACHE_PARSER_FUZZ sets the input count; CI runs 100,000).
import Foundation
import SeededRandom
import Testing

@_spi(Locking) @testable import SparseCacheEngine
@testable import SparseHTTP
import TestSupport

@Suite("HTTP request parser and Range")
struct HTTPParserTests {
    static func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    @Test("well-formed requests: fields, keep-alive, pipelining, incomplete heads")
    func wellFormed() throws {
        let text = "GET /v/movie.mp4?url=http%3A%2F%2Fo%2Fm.mp4 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nRange:  bytes=0-99 \r\nX-Empty:\r\n\r\n"
        guard case .request(let head, let consumed, .none) = HTTPRequestParser.parse(Self.bytes(text)) else {
            Issue.record("not parsed")
            return
        }
        #expect(consumed == text.utf8.count)
        #expect(head.method == "GET" && head.target == "/v/movie.mp4?url=http%3A%2F%2Fo%2Fm.mp4" && head.minorVersion == 1)
        #expect(head.header("range") == "bytes=0-99" && head.header("X-EMPTY") == "" && head.keepAlive)
        // Two pipelined requests: the first is consumed exactly.
        let two = Self.bytes("HEAD / HTTP/1.0\r\n\r\nGET /x HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
        guard case .request(let first, let used, _) = HTTPRequestParser.parse(two) else { Issue.record("first not parsed"); return }
        #expect(first.method == "HEAD" && !first.keepAlive && used == 19)
        guard case .request(let second, _, _) = HTTPRequestParser.parse(two[used...]) else { Issue.record("second not parsed"); return }
        #expect(second.target == "/x" && !second.keepAlive)
        #expect(HTTPRequestParser.parse(Self.bytes("GET / HTTP/1.1\r\nHost: h\r\n")) == .incomplete)
        #expect(HTTPRequestParser.parse(Self.bytes("")) == .incomplete)
        #expect(HTTPRequestParser.parse(Self.bytes("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n")).isRequest(keepAlive: true))
    }

    @Test("absolute-form targets (a client using this server as its HTTP proxy) are accepted for http:// only")
    func absoluteForm() {
        guard case .request(let head, _, _) = HTTPRequestParser.parse(Self.bytes("GET HTTP://o:81/m.mp4?x=1 HTTP/1.1\r\nHost: o:81\r\n\r\n")) else {
            Issue.record("refused an absolute-form target")
            return
        }
        #expect(head.target == "HTTP://o:81/m.mp4?x=1")
        #expect(!HTTPRequestParser.isAbsoluteHTTP(Array("https://o/m".utf8)))
        #expect(!HTTPRequestParser.isAbsoluteHTTP(Array("http://".utf8)))
        // Checked without allocating, on any collection of bytes: case of the scheme, the byte
        // after it, too short.
        for (target, absolute) in [
            ("http://o/", true), ("HtTp://o", true), ("http:///x", false), ("http:/", false), ("/http://o", false), ("", false),
            ("httpx://o", false), ("http://o"[...], true),
        ] as [(Substring, Bool)] {
            #expect(HTTPRequestParser.isAbsoluteHTTP(target.utf8) == absolute, "\(target)")
            #expect(HTTPRequestParser.isAbsoluteHTTP(Array(target.utf8)[...].dropFirst(0)) == absolute, "\(target)")
        }
    }

    @Test("header fields are found by name in any case, whatever case the caller asks in (RFC 9110, section 5.1)")
    func fieldNamesIgnoreCase() {
        var headers = HTTPHeaders([("Content-Type", "video/mp4"), ("X-a", "1"), ("x-A", "2"), ("ETag", "\"e\"")])
        #expect(headers["content-type"] == "video/mp4")
        #expect(headers["CONTENT-TYPE"] == "video/mp4")
        #expect(headers["Content-Typ"] == nil && headers["content-type2"] == nil)
        #expect(headers.values("X-A") == ["1", "2"])
        #expect(headers.contains("etag") && headers.contains("ETAG") && !headers.contains("tag"))
        headers.remove("X-a")
        #expect(headers.values("x-a").isEmpty && headers.count == 2)
        // Not a letter: the 0x20 bit of '@' / '`' and '[' / '{' must not make them equal.
        let odd = HTTPHeaders([("a@[", "v")])
        #expect(odd["a`{"] == nil && odd["A@["] == "v")
    }

    @Test("malformed requests are refused with the right status", arguments: [
        ("GET  / HTTP/1.1\r\nHost: h\r\n\r\n", 400), ("GET / HTTP/1.1 \r\nHost: h\r\n\r\n", 400), ("G@T / HTTP/1.1\r\nHost: h\r\n\r\n", 400),
        ("GET / HTTP/2.0\r\nHost: h\r\n\r\n", 505), ("GET / HTTQ/1.1\r\nHost: h\r\n\r\n", 400), ("GET / HTTP/1.1\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost : h\r\n\r\n", 400), ("GET / HTTP/1.1\r\nHost: h\r\n folded\r\n\r\n", 400),
        ("GET / HTTP/1.1\nHost: h\r\n\r\n", 400), ("GET / HTTP/1.1\rHost: h\r\n\r\n", 400), ("GET ftp://x/ HTTP/1.1\r\nHost: h\r\n\r\n", 400),
        ("GET http:///x HTTP/1.1\r\nHost: h\r\n\r\n", 400), ("GET x/ HTTP/1.1\r\nHost: h\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: h\r\nHost: h\r\n\r\n", 400), ("GET / HTTP/1.1\r\nHost: h\u{1}\r\n\r\n", 400),
        ("GET /\u{7F} HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    ])
    func malformed(text: String, status: Int) {
        guard case .invalid(let got, let reason) = HTTPRequestParser.parse(Self.bytes(text)) else {
            Issue.record("accepted: \(text.debugDescription)")
            return
        }
        #expect(got == status, "\(text.debugDescription): \(reason)")
    }

    @Test("Host must be host[:port] (RFC 9112 3.2, RFC 9110 7.2, RFC 3986 3.2.2); a path with %00 and an HTTP/0.9 line are 400")
    func hostTargetAndVersion() {
        let invalid = [
            "127.0.0.1:8080/x", "h/", "h:80x", "h:8:0", "user@h", "a b", "h?x", "h#f", "[::1", "[::1]x", "[]", "h%0", "h%zz", "h\\x",
            "\u{E9}.example",
        ]
        for host in invalid {
            let text = "GET / HTTP/1.1\r\nHost: \(host)\r\n\r\n"
            guard case .invalid(let status, let reason) = HTTPRequestParser.parse(Self.bytes(text)) else {
                Issue.record("accepted Host \(host.debugDescription)")
                continue
            }
            #expect(status == 400 && reason.hasPrefix("invalid Host"), "\(host.debugDescription): \(reason)")
        }
        for host in [
            "", "h", "H.Example.", "127.0.0.1:8080", "[::1]:8080", "[::ffff:127.0.0.1]", "[v1.x]", "a_b-c~d.example", "h:", "%41.example",
            "xn--bcher-kva.example:443", "sub!$&'()*+,;=.example",
        ] {
            #expect(HTTPRequestParser.parse(Self.bytes("GET / HTTP/1.1\r\nHost: \(host)\r\n\r\n")).isRequest(keepAlive: true), "\(host)")
        }
        // %00 in the path, also in an absolute-form target; not in the query.
        for target in ["/a%00b", "/%00", "/x/%00.css", "/a%000", "http://o/a%00"] {
            let text = "GET \(target) HTTP/1.1\r\nHost: o\r\n\r\n"
            #expect(HTTPRequestParser.parse(Self.bytes(text)).status == 400, "\(target)")
        }
        for target in ["/a?x=%00", "/%0a", "/a%2500", "/a%0"] {
            let text = "GET \(target) HTTP/1.1\r\nHost: o\r\n\r\n"
            #expect(HTTPRequestParser.parse(Self.bytes(text)).isRequest(keepAlive: true), "\(target)")
        }
        // An HTTP/0.9 request line is refused once it ends, without waiting for a head that never comes.
        for line in ["GET /\r\n", "GET /index.html\r\n", "GET /\r\nHost: h\r\n"] {
            guard case .invalid(let status, let reason) = HTTPRequestParser.parse(Self.bytes(line)) else {
                Issue.record("not refused at once: \(line.debugDescription)")
                continue
            }
            #expect(status == 400 && reason.contains("HTTP/0.9"), "\(reason)")
        }
        // A request line that has ended and is well formed still waits for the rest of the head.
        #expect(HTTPRequestParser.parse(Self.bytes("GET / HTTP/1.1\r\n")) == .incomplete)
        #expect(HTTPRequestParser.parse(Self.bytes("GET /")) == .incomplete)
        #expect(HTTPRequestParser.parse(Self.bytes("GET / HTTP/1.1\r\nHost: h\r\nX: 1\r\n")) == .incomplete)
        #expect(HTTPRequestParser.parse(Self.bytes("GET / HTTP/3.0\r\n")).status == 505)
    }

    @Test("limits: a long request line is 414, a long head or too many fields 431, even before the head ends")
    func limits() {
        var limits = HTTPRequestParser.Limits()
        limits.requestLine = 100
        limits.head = 1000
        limits.fields = 5
        let longTarget = "GET /" + String(repeating: "a", count: 200)
        #expect(HTTPRequestParser.parse(Self.bytes(longTarget), limits: limits).status == 414)
        #expect(HTTPRequestParser.parse(Self.bytes(longTarget + " HTTP/1.1\r\nHost: h\r\n\r\n"), limits: limits).status == 414)
        let manyFields = "GET / HTTP/1.1\r\nHost: h\r\n" + (0..<6).map { "X-\($0): v\r\n" }.joined() + "\r\n"
        #expect(HTTPRequestParser.parse(Self.bytes(manyFields), limits: limits).status == 431)
        let bigHead = "GET / HTTP/1.1\r\nHost: h\r\nX: " + String(repeating: "v", count: 2000)
        #expect(HTTPRequestParser.parse(Self.bytes(bigHead), limits: limits).status == 431)
    }

    @Test("Range: all three forms, clamping, unsatisfiable, ignored, several")
    func ranges() {
        #expect(RangeRequest.parse(nil, length: 1000) == .whole)
        #expect(RangeRequest.parse("bytes=0-99", length: 1000) == .single(0..<100))
        #expect(RangeRequest.parse("bytes=900-", length: 1000) == .single(900..<1000))
        #expect(RangeRequest.parse("bytes=-100", length: 1000) == .single(900..<1000))
        #expect(RangeRequest.parse("bytes=-5000", length: 1000) == .single(0..<1000))
        #expect(RangeRequest.parse("bytes=990-5000", length: 1000) == .single(990..<1000))
        #expect(RangeRequest.parse("BYTES= 10-19 ", length: 1000) == .single(10..<20))
        #expect(RangeRequest.parse("bytes=1000-", length: 1000) == .unsatisfiable)
        #expect(RangeRequest.parse("bytes=-0", length: 1000) == .unsatisfiable)
        #expect(RangeRequest.parse("bytes=0-0", length: 0) == .unsatisfiable)
        #expect(RangeRequest.parse("bytes=0-9,20-29", length: 1000) == .multiple([0..<10, 20..<30]))
        #expect(RangeRequest.parse("bytes=0-9,5000-", length: 1000) == .single(0..<10))
        for ignored in ["items=0-9", "bytes=", "bytes= , "] {
            #expect(RangeRequest.parse(ignored, length: 1000) == .whole, "\(ignored)")
        }
        // Malformed byte ranges are 416, as nginx answers them.
        for malformed in ["bytes=9-0", "bytes=a-b", "bytes=-", "bytes=1-2-3", "bytes=99999999999999999999-", "bytes=0-9,x"] {
            #expect(RangeRequest.parse(malformed, length: 1000) == .unsatisfiable, "\(malformed)")
        }
    }

    @Test("fuzz: mutated and random heads never trap; every acceptance is a well-formed head")
    func fuzz() async throws {
        try await offPool("request-fuzz") { await self.fuzzOnItsThread() }
    }

    /// The body of ``fuzz()``, on a thread of its own (OffPool.swift).
    private func fuzzOnItsThread() async {
        let seed = testSeed(0x4854_5450)
        let count = TestDepth.size(25_000, deep: 250_000, override: "SPARSECACHE_PARSER_FUZZ")
        var random = SplitMix64(seed: seed)
        let corpus = [
            "GET /movie.mp4 HTTP/1.1\r\nHost: 127.0.0.1\r\nRange: bytes=0-\r\n\r\n",
            "HEAD /a?url=http%3A%2F%2Fx HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: h\r\nUser-Agent: Lavf/59\r\nAccept: */*\r\nRange: bytes=100-200,300-\r\n\r\nGET /next HTTP/1.1\r\n",
            "GET http://127.0.0.1:8000/v.mp4 HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nProxy-Connection: Keep-Alive\r\n\r\n",
            "POST /form HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\nhello worldGET /next HTTP/1.1\r\nHost: h\r\n\r\n",
            "PUT /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n5;a=1\r\nhello\r\n6\r\n world\r\n0\r\nX-T: t\r\n\r\nGET / HTTP/1.1\r\n",
            "PATCH /y HTTP/1.1\r\nHost: h\r\nContent-Length: 3, 3\r\nTransfer-Encoding: gzip, chunked\r\n\r\nabc",
        ].map(Self.bytes)
        var bodies = (complete: 0, failed: 0)
        var accepted = 0, refused = 0, incomplete = 0, violations = 0
        for iteration in 0..<count {
            var input: [UInt8]
            if iteration % 10 == 0 {
                input = random.bytes(Int(random.next() % 300))
            } else {
                input = corpus[Int(random.next() % UInt64(corpus.count))]
                for _ in 0..<(1 + Int(random.next() % 4)) where !input.isEmpty {
                    let at = Int(random.next() % UInt64(input.count))
                    switch random.next() % 5 {
                    case 0: input[at] ^= 1 << UInt8(random.next() % 8)
                    case 1: input[at] = [0, 9, 10, 13, 32, 58, 127, 255][Int(random.next() % 8)]
                    case 2: input.remove(at: at)
                    case 3: input.insert(UInt8(truncatingIfNeeded: random.next()), at: at)
                    default: input = Array(input.prefix(at))
                    }
                }
            }
            switch HTTPRequestParser.parse(input) {
            case .incomplete:
                incomplete += 1
            case .invalid(let status, _):
                refused += 1
                if ![400, 414, 431, 501, 505].contains(status) {
                    violations += 1
                    Issue.record("iteration \(iteration) (seed \(seed)): status \(status)")
                }
            case .request(let head, let consumed, let framing):
                accepted += 1
                let used = Array(input.prefix(consumed))
                let wellFormed = consumed <= input.count && used.suffix(4) == [13, 10, 13, 10]
                    && !head.method.rawValue.isEmpty && head.method.rawValue.utf8.allSatisfy(HTTPSyntax.isTokenByte)
                    && (head.target.hasPrefix("/") || head.target == "*" || head.target.lowercased().hasPrefix("http://")
                        || (head.method == "CONNECT" && head.target.contains(":") && !head.target.contains("/")))
                let stable = HTTPRequestParser.parse(used) == .request(head, consumed: consumed, body: framing)
                // The framing is the one the fields name, never a guess (RFC 9112 6.3).
                let framed: Bool
                switch framing {
                case .none: framed = !head.headers.contains("transfer-encoding")
                case .length(let length): framed = length > 0 && !head.headers.contains("transfer-encoding")
                case .chunked: framed = head.minorVersion == 1 && !head.headers.contains("content-length")
                case .untilClose: framed = false
                }
                if !wellFormed || !stable || !framed {
                    violations += 1
                    Issue.record("iteration \(iteration) (seed \(seed)): accepted a malformed head \(String(decoding: used, as: UTF8.self).debugDescription)")
                }
                // Then its body, from what follows the head, with the server's decoder.
                if framing != .none {
                    switch await Self.readBody(framing, Array(input[consumed...]), maximum: 64) {
                    case .success: bodies.complete += 1
                    case .failure(let failure) where [400, 413].contains(failure.status): bodies.failed += 1
                    case .failure(let failure):
                        violations += 1
                        Issue.record("iteration \(iteration) (seed \(seed)): body failed with \(failure.status) \(failure.reason)")
                    }
                }
            }
        }
        reportCounts(
            "HTTP parser fuzz",
            [
                "inputs": count, "accepted": accepted, "refused": refused, "incomplete": incomplete, "bodies complete": bodies.complete,
                "bodies refused": bodies.failed, "violations": violations,
            ])
        #expect(violations == 0, "replay with SPARSECACHE_TEST_SEED=\(seed)")
    }

    @Test("request body framing (RFC 9112 6.3, 7.1): Content-Length, chunked, and the combinations refused against smuggling", arguments: [
        ("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\n", 0, HTTPBodyFraming.length(5)),
        ("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", 0, .length(5)),
        ("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5, 5\r\n\r\n", 0, .length(5)),
        ("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n", 0, .none),
        ("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n", 0, .chunked),
        ("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: Chunked\r\n\r\n", 0, .chunked),
        ("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", 400, .none),
        ("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5, 6\r\n\r\n", 400, .none),
        ("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +5\r\n\r\n", 400, .none),
        ("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0x5\r\n\r\n", 400, .none),
        ("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: \r\n\r\n", 400, .none),
        ("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999999999999\r\n\r\n", 400, .none),
        ("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", 400, .none),
        ("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 400, .none),
        ("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400, .none),
        ("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n", 400, .none),
        ("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", 400, .none),
        ("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", 400, .none),
        ("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501, .none),
        ("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n", 501, .none),
        ("POST / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, .none),
    ])
    func bodyFraming(text: String, status: Int, framing: HTTPBodyFraming) {
        switch HTTPRequestParser.parse(Self.bytes(text)) {
        case .request(_, let consumed, let found):
            #expect(status == 0 && found == framing && consumed == text.utf8.count, "\(text.debugDescription): \(found)")
        case .invalid(let got, let reason):
            #expect(got == status, "\(text.debugDescription): \(got) \(reason)")
        case .incomplete:
            Issue.record("incomplete: \(text.debugDescription)")
        }
    }

    @Test("request bodies decode from what follows the head: exact length, chunked with extensions and trailers, the rest kept for the next request; cut, malformed and oversized bodies fail with 400 and 413")
    func bodyDecoding() async throws {
        let next = Self.bytes("GET /next HTTP/1.1\r\nHost: h\r\n\r\n")
        let length = await Self.readBody(.length(5), Self.bytes("hello") + next, maximum: 100)
        #expect((try? length.get())?.body == Self.bytes("hello") && (try? length.get())?.rest == next, "\(length)")
        let chunked = await Self.readBody(.chunked, Self.bytes("5;x=\"1\"\r\nhello\r\n1\r\n!\r\n0\r\nX-A: b\r\n\r\n") + next, maximum: 100)
        #expect((try? chunked.get())?.body == Self.bytes("hello!") && (try? chunked.get())?.rest == next, "\(chunked)")
        for (framing, bytes, status) in [
            (HTTPBodyFraming.length(10), "hello", 400), (.chunked, "5\r\nhello\r\n", 400), (.chunked, "5\r\nhelloX\r\n0\r\n\r\n", 400),
            (.chunked, "g\r\n", 400), (.chunked, "5\r\nhello\r\n0\r\nbad trailer\r\n\r\n", 400), (.length(200), String(repeating: "a", count: 200), 413),
            (.chunked, "c8\r\n" + String(repeating: "a", count: 200) + "\r\n0\r\n\r\n", 413),
        ] {
            let result = await Self.readBody(framing, Self.bytes(bytes), maximum: 100)
            guard case .failure(let failure) = result else {
                Issue.record("\(framing) \(bytes.debugDescription): accepted")
                continue
            }
            #expect(failure.status == status, "\(framing) \(bytes.debugDescription): \(failure.status) \(failure.reason)")
        }
    }

    @Test("fuzz: the request body decoder (length and chunked framing) never traps; an intact body decodes exactly, the next request kept")
    func bodyFuzz() async throws {
        try await offPool("body-fuzz") { await self.bodyFuzzOnItsThread() }
    }

    /// The body of ``bodyFuzz()``, on a thread of its own (OffPool.swift).
    private func bodyFuzzOnItsThread() async {
        let seed = testSeed(0x424F_4459)
        let count = TestDepth.size(25_000, deep: 250_000, override: "SPARSECACHE_PARSER_FUZZ")
        var random = SplitMix64(seed: seed)
        let next = Self.bytes("GET /n HTTP/1.1\r\n\r\n")
        var intact = 0, mutated = 0, refused = 0, violations = 0
        for iteration in 0..<count {
            let body = random.bytes(Int(random.next() % 120))
            let chunked = random.next() % 4 != 0
            var input = (chunked ? Self.chunked(body, random: &random) : body) + next
            let framing: HTTPBodyFraming = chunked ? .chunked : .length(Int64(body.count))
            let damage = random.next() % 3 == 0 ? 0 : 1 + Int(random.next() % 3)
            for _ in 0..<damage where !input.isEmpty {
                let at = Int(random.next() % UInt64(input.count))
                switch random.next() % 4 {
                case 0: input[at] ^= 1 << UInt8(random.next() % 8)
                case 1: input[at] = [0, 10, 13, 48, 59, 65, 102, 255][Int(random.next() % 8)]
                case 2: input.remove(at: at)
                default: input.insert(UInt8(truncatingIfNeeded: random.next()), at: at)
                }
            }
            let maximum: Int64 = random.next() % 8 == 0 ? Int64(random.next() % 100) : 1000
            switch await Self.readBody(framing, input, maximum: maximum) {
            case .success(let (read, rest)):
                if damage == 0 { intact += 1 } else { mutated += 1 }
                // Intact: exactly the body, exactly the next request after it. Damaged or not:
                // never more than the maximum, never bytes that were not in the input.
                let exact = read == body && rest == next
                if (damage == 0 && Int64(body.count) <= maximum && !exact) || read.count + rest.count > input.count {
                    violations += 1
                    Issue.record("iteration \(iteration) (seed \(seed)): decoded \(read.count) bytes, rest \(rest.count)")
                }
            case .failure(let failure):
                refused += 1
                let tooLarge = Int64(body.count) > maximum
                if ![400, 413].contains(failure.status) || (damage == 0 && !tooLarge) {
                    violations += 1
                    Issue.record("iteration \(iteration) (seed \(seed)): \(failure.status) \(failure.reason)")
                }
            }
        }
        reportCounts("request body fuzz", ["inputs": count, "intact": intact, "damaged accepted": mutated, "refused": refused, "violations": violations])
        #expect(violations == 0, "replay with SPARSECACHE_TEST_SEED=\(seed)")
    }
}

extension HTTPParserTests {
    /// Reads a body framed as `framing` from `bytes` to its end with the server's decoder:
    /// the body and what follows it, or the failure.
    static func readBody(_ framing: HTTPBodyFraming, _ bytes: [UInt8], maximum: Int64) async -> Result<
        (body: [UInt8], rest: [UInt8]), HTTPRequestBodyError
    > {
        let body = HTTPRequestBody(framing: framing, buffered: bytes, maximum: maximum)
        var read: [UInt8] = []
        do {
            while let piece = try await body.next() {
                if piece.isEmpty { return .failure(HTTPRequestBodyError(status: 500, reason: "an empty piece before the end")) }
                read += piece
            }
        } catch let failure as HTTPRequestBodyError {
            return .failure(failure)
        } catch {
            return .failure(HTTPRequestBodyError(status: 500, reason: "\(error)"))
        }
        guard Int64(read.count) <= maximum, let rest = body.leftover else {
            return .failure(HTTPRequestBodyError(status: 500, reason: "past the maximum, or no leftover after the end"))
        }
        return .success((read, rest))
    }

    /// A body framed chunked: random pieces, random extensions and size padding, optional
    /// trailers.
    static func chunked(_ body: [UInt8], random: inout SplitMix64) -> [UInt8] {
        var framed: [UInt8] = []
        var offset = 0
        while offset < body.count {
            let count = min(body.count - offset, 1 + Int(random.next() % 40))
            var line = String(count, radix: 16, uppercase: random.next() % 2 == 0)
            if random.next() % 4 == 0 { line = "00" + line }
            if random.next() % 5 == 0 { line += ";name=\"v\(random.next() % 100)\"" }
            framed += Array((line + "\r\n").utf8) + body[offset..<(offset + count)] + [13, 10]
            offset += count
        }
        framed += Array("0\r\n".utf8)
        if random.next() % 3 == 0 { framed += Array("X-Checksum: \(random.next() % 1000)\r\n".utf8) }
        return framed + [13, 10]
    }
}

extension HTTPRequestParser.Result {
    var status: Int? {
        if case .invalid(let status, _) = self { return status }
        return nil
    }

    func isRequest(keepAlive: Bool) -> Bool {
        if case .request(let head, _, _) = self { return head.keepAlive == keepAlive }
        return false
    }
}

@Suite("HTTP response writer")
struct HTTPResponseWriterTests {
    @Test("response header values lose control characters: an origin's value cannot start another header")
    func headerValues() {
        #expect(HTTPSyntax.sanitizedFieldValue("\"abc-123\"") == "\"abc-123\"")
        #expect(HTTPSyntax.sanitizedFieldValue("video/mp4\r\nSet-Cookie: x=1") == "video/mp4Set-Cookie: x=1")
        #expect(HTTPSyntax.sanitizedFieldValue("a\tb\u{7F}\u{0}c") == "a\tbc")
    }

    @Test("a head held for its first body bytes is not sent until they come: a handler that fails before them answers with an error, never an empty reply")
    func heldHeadReplaced() async throws {
        struct ReadFailed: Error {}
        var options = HTTPServer.Options()
        options.port = 0
        let server = try HTTPServer.start(options: options, log: { _ in }) { request, _, response in
            try await response.writeHead(status: 200, headers: [("ETag", "\"held\"")], contentLength: 5, withFirstBody: true)
            #expect(!response.headSent, "a held head has not gone out")
            switch request.target {
            case "/throws":
                // The server answers for the failed handler.
                throw ReadFailed()
            case "/answers":
                // The handler answers the failure itself, in place of the held head.
                try await response.respond(status: 503, message: "the stored answer went away")
            default:
                try await response.writeBody(Array("hello".utf8))
                #expect(response.headSent)
            }
        }
        for (target, status) in [("/throws", 500), ("/answers", 503), ("/ok", 200)] {
            let answer = await RawHTTP.exchange(port: server.port, "GET \(target) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", timeout: .seconds(60))
            #expect(answer.statuses == [status], "\(target): \(answer.text)")
            #expect(answer.text.contains("\"held\"") == (status == 200), "\(target): the held head's fields go out only with it: \(answer.text)")
        }
        await server.shutdown(grace: .seconds(1))
    }

    @Test("a body of unknown length: chunked to HTTP/1.1 (the connection stays), until close to HTTP/1.0; 304 and 204 carry no length (RFC 9112 6, 7.1; RFC 9110 8.6)")
    func unannouncedBodies() async throws {
        var options = HTTPServer.Options()
        options.port = 0
        let server = try HTTPServer.start(options: options, log: { _ in }) { request, _, response in
            switch request.target {
            case "/304":
                try await response.writeHead(status: 304, headers: [("ETag", "\"a\"")], contentLength: 0)
            case "/204":
                try await response.writeHead(status: 204, contentLength: 0)
            default:
                try await response.writeHead(status: 200, headers: [("Date", "Mon, 23 Nov 2026 10:00:00 GMT")], contentLength: nil)
                try await response.writeBody(Array("hello, ".utf8))
                try await response.writeBody([])
                try await response.writeBody(Array("world".utf8))
                try await response.finishBody()
            }
        }
        // The second request of each pair asks to close: the exchange ends when the answers are
        // in, however slow a loaded machine is; two answers on one connection show it was kept.
        // The bound is liveness only: this test starts with the whole suite, when a full run's
        // start-up work fills both threads of the cooperative pool, and in every full run of
        // this session its server's first answer came after more than 60 s.
        let get = "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n"
        let last = "GET /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        let kept = await RawHTTP.exchange(port: server.port, get + last, timeout: .seconds(240))
        let chunks = "\r\n\r\n7\r\nhello, \r\n5\r\nworld\r\n0\r\n\r\n"
        #expect(kept.statuses == [200, 200] && kept.text.components(separatedBy: chunks).count == 3, "\(kept.text)")
        #expect(kept.text.components(separatedBy: "Transfer-Encoding: chunked\r\n").count == 3, "\(kept.text)")
        #expect(kept.text.contains("Date: Mon, 23 Nov 2026 10:00:00 GMT") && !kept.text.contains("Content-Length"), "\(kept.text)")
        let old = await RawHTTP.exchange(port: server.port, "GET /stream HTTP/1.0\r\n\r\n", timeout: .seconds(240))
        #expect(old.closedByServer && old.text.hasSuffix("\r\n\r\nhello, world") && old.text.contains("Connection: close"), "\(old.text)")
        #expect(!old.text.contains("chunked") && !old.text.contains("Content-Length"))
        for status in [304, 204] {
            let answer = await RawHTTP.exchange(
                port: server.port, "GET /\(status) HTTP/1.1\r\nHost: x\r\n\r\n" + last, timeout: .seconds(240))
            #expect(answer.statuses == [status, 200] && answer.text.components(separatedBy: "Content-Length").count == 1, "\(answer.text)")
        }
        await server.shutdown(grace: .seconds(1))
    }
}
