// RFC 9111 as a pure value: every rule is a row of a table, with the section it comes from.
import Foundation
import Testing

@testable import HTTPCache
@_spi(Locking) @testable import SparseCacheEngine
@testable import SparseHTTP
import TestSupport

@Suite("caching rules (RFC 9111): Cache-Control, dates, storing, freshness, age, Vary, revalidation")
struct CachePolicyTests {
    static let date = "Mon, 23 Nov 2026 10:00:00 GMT"
    /// `date` in seconds since 1970.
    static let t0: Int64 = 1_795_428_000

    static func request(_ fields: [(String, String)] = [], method: HTTPMethod = .get) -> HTTPRequestHead {
        HTTPRequestHead(method: method, target: "/a", headers: HTTPHeaders([("Host", "origin")] + fields))
    }

    static func policy(
        status: Int = 200, _ fields: [(String, String)], request: HTTPRequestHead = request(), received: Int64 = t0
    ) -> CachePolicy {
        CachePolicy(
            request: request, response: HTTPResponseHead(status: status, headers: HTTPHeaders([("Date", date)] + fields)),
            requestTime: received, responseTime: received)
    }

    @Test("Cache-Control: tokens, quoted strings with commas and escapes, case, repeats, garbage skipped (5.2, RFC 9110 5.6)")
    func cacheControlParsing() {
        let parsed = CacheControl(fieldValues: [
            "Max-Age=60, no-cache=\"Set-Cookie, X-A\", private", "  ,, s-maxage=\"30\" , x-ext=\"a\\\"b\"", "bad=\"unclosed",
        ])
        #expect(parsed.directives.map(\.name) == ["max-age", "no-cache", "private", "s-maxage", "x-ext"])
        #expect(parsed.seconds("max-age") == .seconds(60) && parsed.seconds("s-maxage") == .seconds(30))
        #expect(parsed.fieldNames("no-cache") == ["set-cookie", "x-a"])
        #expect(parsed.argument("x-ext") == "a\"b" && parsed.argument("private") == "" && parsed.argument("public") == nil)
        let cases: [(String, CacheControl.Seconds?)] = [
            ("max-age=0", .seconds(0)), ("max-age=007", .seconds(7)), ("max-age=-1", .invalid), ("max-age=1.5", .invalid),
            ("max-age=", .invalid), ("max-age", .invalid), ("max-age=99999999999999999999", .seconds(1 << 31)),
            ("max-age=2147483647", .seconds((1 << 31) - 1)), ("max-age=2147483648", .seconds(1 << 31)), ("max-age=2147483649", .seconds(1 << 31)),
            ("max-age=000000000000000000003", .seconds(3)), ("max-age=3a", .invalid),
            ("max-age=10, max-age=10", .seconds(10)), ("max-age=10, max-age=20", .invalid),
            ("max-age=10, max-age=20, max-age=10", .invalid), ("max-age=x, max-age=x", .invalid), ("public", nil),
            ("max-age=5 garbage, public", nil),
        ]
        for (value, expected) in cases {
            #expect(CacheControl(fieldValues: [value]).seconds("max-age") == expected, "\(value)")
        }
    }

    @Test("HTTP dates: IMF-fixdate, RFC 850 and asctime; anything else is not a date (RFC 9110 5.6.7)")
    func dates() {
        #expect(HTTPDate.parse("Sun, 06 Nov 1994 08:49:37 GMT") == 784_111_777)
        #expect(HTTPDate.parse("Sunday, 06-Nov-94 08:49:37 GMT") == 784_111_777)
        #expect(HTTPDate.parse("Sun Nov  6 08:49:37 1994") == 784_111_777)
        #expect(HTTPDate.parse(Self.date) == Self.t0)
        #expect(HTTPDate.parse("Thu, 29 Feb 2024 00:00:00 GMT") == 1_709_164_800)
        for bad in [
            "", "0", "-1", "Sun, 06 Nov 1994 08:49:37 PST", "Sun, 31 Nov 1994 08:49:37 GMT", "Thu, 29 Feb 2023 00:00:00 GMT",
            "Sun, 06 Nov 1994 25:49:37 GMT", "Sun, 6 Nov 1994 08:49:37 GMT", "Sun, 06 Foo 1994 08:49:37 GMT", "yesterday",
            // One space between words, exactly (asctime's one-digit day aside).
            "Thu, 18  Aug  2050 02:01:18 GMT", "Thu,  18 Aug 2050 02:01:18 GMT", "Thu, 18 Aug 2050 02:01:18 GMT ",
            " Thu, 18 Aug 2050 02:01:18 GMT", "Sun Nov   6 08:49:37 1994", "Sun  Nov 6 08:49:37 1994", "Sun Nov 06  08:49:37 1994",
        ] {
            #expect(HTTPDate.parse(bad) == nil, "\(bad)")
        }
        // Month and zone in another case: accepted, as most caches do.
        #expect(HTTPDate.parse("Sun, 06 NOV 1994 08:49:37 gmt") == 784_111_777)
        #expect(HTTPDate.parse("Sun Nov 06 08:49:37 1994") == 784_111_777)
        // Formatting and parsing agree.
        #expect(HTTPDate.parse(HTTPDate.format(Date(timeIntervalSince1970: 1_795_428_123))) == 1_795_428_123)
    }

    @Test("an IMF-fixdate read in place gives what reading it word by word gives, for every byte changed")
    func fixdateInPlace() {
        let valid = "Thu, 29 Feb 2024 23:59:60 GMT"
        #expect(HTTPDate.imfFixdate(valid) == HTTPDate.parseWords(valid) && HTTPDate.imfFixdate(valid) != nil)
        // Each byte of a few valid dates replaced by each of a set of bytes that matter to the
        // form (separators, digits at the edges of every range, letters in both cases, UTF-8).
        let replacements: [UInt8] = Array(" ,:-0123456789".utf8) + Array("aAgGmMtTnNvVzZ".utf8) + [0x09, 0x00, 0xC3, 0xFF]
        var checked = 0
        for date in [valid, "Sun, 06 Nov 1994 08:49:37 GMT", "Mon, 31 Dec 1900 00:00:00 gmt", "Sat, 01 Jan 2000 12:30:45 GMT"] {
            let bytes = Array(date.utf8)
            for index in bytes.indices {
                for byte in replacements {
                    var changed = bytes
                    changed[index] = byte
                    let text = String(decoding: changed, as: UTF8.self)
                    let inPlace = HTTPDate.imfFixdate(text)
                    #expect(inPlace == nil || inPlace == HTTPDate.parseWords(text), "\(text)")
                    #expect(HTTPDate.parse(text) == HTTPDate.parseWords(text), "\(text)")
                    checked += 1
                }
            }
        }
        #expect(checked > 3000)
    }

    @Test("what a shared cache may store (3, 3.5), and why not")
    func storing() {
        let cases: [(Int, [(String, String)], HTTPRequestHead, String?)] = [
            (200, [], Self.request(), nil),
            (200, [("Cache-Control", "no-store")], Self.request(), "no-store"),
            (200, [("Cache-Control", "no-store, must-understand")], Self.request(), nil),  // 5.2.2.3
            (200, [("Cache-Control", "private")], Self.request(), "private"),
            (200, [("Cache-Control", "private=\"X-A\"")], Self.request(), "private"),
            (200, [], Self.request([("Cache-Control", "no-store")]), "request no-store"),
            (200, [], Self.request([("Authorization", "Basic eDp5")]), "request with Authorization"),
            (200, [("Cache-Control", "public")], Self.request([("Authorization", "Basic eDp5")]), nil),
            (200, [("Cache-Control", "s-maxage=5")], Self.request([("Authorization", "Basic eDp5")]), nil),
            (200, [("Cache-Control", "must-revalidate")], Self.request([("Authorization", "Basic eDp5")]), nil),
            (200, [("Cache-Control", "max-age=60")], Self.request([("Authorization", "Basic eDp5")]), "request with Authorization"),
            (200, [("Set-Cookie", "a=1")], Self.request(), "Set-Cookie"),
            (200, [("Vary", "Accept, *")], Self.request(), "Vary: *"),
            (200, [], Self.request(method: "POST"), "method POST"),
            (302, [], Self.request(), "status 302 without explicit freshness"),
            (302, [("Cache-Control", "max-age=60")], Self.request(), nil),
            (307, [("Expires", "Mon, 23 Nov 2026 11:00:00 GMT")], Self.request(), nil),
            (404, [], Self.request(), nil), (410, [], Self.request(), nil), (501, [], Self.request(), nil),
            (500, [], Self.request(), "status 500 without explicit freshness"),
            // Any final status with explicit freshness may be stored; must-understand asks for
            // a status the cache knows (3, 5.2.2.3).
            (299, [("Cache-Control", "max-age=60")], Self.request(), nil),
            (599, [("Cache-Control", "public"), ("Last-Modified", "Mon, 23 Nov 2026 09:00:00 GMT")], Self.request(), nil),
            (599, [], Self.request(), "status 599 without explicit freshness"),
            (299, [("Cache-Control", "max-age=60, must-understand")], Self.request(), "must-understand: status 299 not understood"),
            (299, [("Cache-Control", "no-store, must-understand")], Self.request(), "must-understand: status 299 not understood"),
            (204, [("Cache-Control", "max-age=60")], Self.request(), nil),
        ]
        for (status, fields, request, reason) in cases {
            let policy = Self.policy(status: status, fields, request: request)
            #expect(policy.storability.reason == reason && policy.isStorable == (reason == nil), "\(status) \(fields) \(request.headers)")
        }
        // Hop-by-hop fields are never stored (3.1).
        let stored = Self.policy([("Connection", "close, X-Hop"), ("X-Hop", "1"), ("Keep-Alive", "timeout=5"), ("X-End", "2")])
        #expect(stored.response.headers.map(\.name) == ["Date", "X-End"])
    }

    @Test("freshness lifetime: s-maxage, max-age, Expires minus Date, heuristic; invalid means stale (4.2.1, 4.2.2)")
    func freshnessLifetime() {
        let cases: [(Int, [(String, String)], Int64)] = [
            (200, [("Cache-Control", "max-age=60")], 60),
            (200, [("Cache-Control", "max-age=60, s-maxage=10")], 10),
            (200, [("Cache-Control", "s-maxage=abc, max-age=60")], 0),
            (200, [("Cache-Control", "max-age=60"), ("Expires", "Mon, 23 Nov 2026 12:00:00 GMT")], 60),
            (200, [("Expires", "Mon, 23 Nov 2026 10:05:00 GMT")], 300),
            (200, [("Expires", "Mon, 23 Nov 2026 09:00:00 GMT")], 0),
            (200, [("Expires", "0")], 0),
            (200, [("Expires", "Mon, 23 Nov 2026 10:05:00 GMT"), ("Expires", "Mon, 23 Nov 2026 10:09:00 GMT")], 0),
            (200, [("Last-Modified", "Mon, 23 Nov 2026 09:00:00 GMT")], 360),
            (200, [("Last-Modified", "Mon, 02 Nov 2026 10:00:00 GMT")], 86_400),
            (200, [("Last-Modified", "Mon, 23 Nov 2026 11:00:00 GMT")], 0),
            (200, [], 0),
            (302, [("Last-Modified", "Mon, 23 Nov 2026 09:00:00 GMT")], 0),
            (302, [("Cache-Control", "public"), ("Last-Modified", "Mon, 23 Nov 2026 09:00:00 GMT")], 360),
        ]
        for (status, fields, lifetime) in cases {
            #expect(Self.policy(status: status, fields).freshnessLifetime == lifetime, "\(status) \(fields)")
        }
    }

    @Test("CDN-Cache-Control (RFC 9213): when valid it replaces Cache-Control and Expires for this cache; invalid, it is ignored")
    func targetedCacheControl() {
        let expiresLater = ("Expires", "Mon, 23 Nov 2026 12:46:40 GMT")
        let cases: [([(String, String)], Int64, Bool)] = [
            ([("CDN-Cache-Control", "max-age=3600")], 3600, true),
            ([("CDN-Cache-Control", "max-age=0"), expiresLater], 0, true),
            ([("Cache-Control", "max-age=3600"), ("CDN-Cache-Control", "max-age=1")], 1, true),
            ([("Cache-Control", "max-age=1"), ("CDN-Cache-Control", "max-age=3600")], 3600, true),
            ([("Cache-Control", "no-store"), ("CDN-Cache-Control", "max-age=10000")], 10_000, true),
            ([("Cache-Control", "max-age=10000"), ("CDN-Cache-Control", "no-store")], 0, false),
            ([("Cache-Control", "max-age=10000"), ("CDN-Cache-Control", "private")], 0, false),
            ([("CDN-Cache-Control", "max-age=99999999999")], CacheControl.maximumSeconds, true),
            ([("CDN-Cache-Control", "foobar, max-age=3600;x=1")], 3600, true),
            // Not a valid dictionary, or max-age of the wrong type: Cache-Control decides.
            ([("Cache-Control", "no-store"), ("CDN-Cache-Control", "max-age=10000, &&&&&")], 0, false),
            ([("Cache-Control", "no-store"), ("CDN-Cache-Control", "max-age=\"10000\"")], 0, false),
            ([("Cache-Control", "max-age=60"), ("CDN-Cache-Control", "MaX-aGe=3600")], 60, true),
            ([("Cache-Control", "max-age=60"), ("CDN-Cache-Control", "max-age=-1")], 60, true),
            ([("Cache-Control", "max-age=60"), ("CDN-Cache-Control", "")], 60, true),
            ([("Cache-Control", "max-age=60"), ("CDN-Cache-Control", "max-age=5,")], 60, true),
        ]
        for (fields, lifetime, storable) in cases {
            let policy = Self.policy(fields)
            #expect(policy.freshnessLifetime == lifetime && policy.isStorable == storable, "\(fields): \(policy.freshnessLifetime)")
        }
        let noCache = Self.policy([("Cache-Control", "max-age=10000"), ("CDN-Cache-Control", "no-cache")])
        #expect(noCache.alwaysRevalidates, "CDN-Cache-Control: no-cache means revalidate every time")
        // The dictionary syntax (RFC 8941 3.2): members, parameters, inner lists, the item types.
        for valid in ["a", "a=1, b=?0", "a=(1 2);q=1, b=\"x\\\"y\"", "a=:aGk=:, b=tok/en:x, c=-1.5", "a=1,\tb"] {
            #expect(CacheControl.targeted(fieldValues: [valid]) != nil, "\(valid)")
        }
        for invalid in ["A=1", "a=", "a=1 b=2", "a=\"unterminated", "a=1.2345", "a=1234567890123456", ",a", "a=?2", "a=(1 2"] {
            #expect(CacheControl.targeted(fieldValues: [invalid]) == nil, "\(invalid)")
        }
        #expect(CacheControl.targeted(fieldValues: ["max-age=5", "no-store"])?.contains("no-store") == true, "field lines combine")
    }

    @Test("age: apparent age, Age with the response delay, resident time (4.2.3)")
    func age() {
        // Date 10:00:00; sent 10:00:08, received 10:00:10 with Age: 5.
        let policy = CachePolicy(
            request: Self.request(), response: HTTPResponseHead(status: 200, headers: HTTPHeaders([("Date", Self.date), ("Age", "5")])),
            requestTime: Self.t0 + 8, responseTime: Self.t0 + 10)
        // apparent 10, corrected Age 5 + 2 = 7: initial age 10; 30 s resident.
        #expect(policy.currentAge(now: Self.t0 + 40) == 40)
        // A Date in the future (clock skew) gives no negative age; a received Age wins.
        let skewed = CachePolicy(
            request: Self.request(),
            response: HTTPResponseHead(status: 200, headers: HTTPHeaders([("Date", "Mon, 23 Nov 2026 10:10:00 GMT"), ("Age", "100")])),
            requestTime: Self.t0, responseTime: Self.t0)
        #expect(skewed.currentAge(now: Self.t0) == 100)
        // No Date: the receipt time stands in for it.
        let undated = CachePolicy(
            request: Self.request(), response: HTTPResponseHead(status: 200, headers: HTTPHeaders([("Cache-Control", "max-age=10")])),
            requestTime: Self.t0, responseTime: Self.t0)
        #expect(undated.isFresh(now: Self.t0 + 9) && !undated.isFresh(now: Self.t0 + 10))
        // A list-based Age: the first member counts; an invalid one is ignored (5.1).
        for (value, expected) in [("7200, 0", 7200), ("0, 7200", 0), ("old, 0", 0), (" 30 ,x", 30), ("-5", 0)] as [(String, Int64)] {
            let listed = CachePolicy(
                request: Self.request(),
                response: HTTPResponseHead(status: 200, headers: HTTPHeaders([("Date", Self.date), ("Age", value)])),
                requestTime: Self.t0, responseTime: Self.t0)
            #expect(listed.currentAge(now: Self.t0) == expected, "Age: \(value)")
        }
    }

    @Test("using a stored response: fresh, stale, client directives, no-cache, must-revalidate, stale-while-revalidate (4, 5.2)")
    func use() {
        typealias Use = CachePolicy.Use
        let cases: [([(String, String)], [(String, String)], Int64, Use)] = [
            ([("Cache-Control", "max-age=60")], [], 30, .fresh(age: 30)),
            ([("Cache-Control", "max-age=60")], [], 60, .revalidate),
            ([("Cache-Control", "max-age=60, no-cache")], [], 1, .revalidate),  // 5.2.2.4
            ([("Cache-Control", "max-age=60")], [("Cache-Control", "no-cache")], 1, .revalidate),  // 5.2.1.4
            ([("Cache-Control", "max-age=60")], [("Pragma", "no-cache")], 1, .revalidate),  // 5.4
            ([("Cache-Control", "max-age=60")], [("Pragma", "no-cache"), ("Cache-Control", "max-age=100")], 1, .fresh(age: 1)),
            ([("Cache-Control", "max-age=60")], [("Cache-Control", "max-age=10")], 20, .revalidate),  // 5.2.1.1
            ([("Cache-Control", "max-age=60")], [("Cache-Control", "max-age=30")], 20, .fresh(age: 20)),
            ([("Cache-Control", "max-age=60")], [("Cache-Control", "min-fresh=50")], 20, .revalidate),  // 5.2.1.3
            ([("Cache-Control", "max-age=60")], [("Cache-Control", "max-stale")], 500, .staleAllowed(age: 500)),  // 5.2.1.2
            ([("Cache-Control", "max-age=60")], [("Cache-Control", "max-stale=10")], 65, .staleAllowed(age: 65)),
            ([("Cache-Control", "max-age=60")], [("Cache-Control", "max-stale=10")], 75, .revalidate),
            ([("Cache-Control", "max-age=60, must-revalidate")], [("Cache-Control", "max-stale")], 65, .revalidate),  // 4.2.4
            ([("Cache-Control", "s-maxage=60")], [("Cache-Control", "max-stale")], 65, .revalidate),  // 5.2.2.10
            ([("Cache-Control", "max-age=60, stale-while-revalidate=30")], [], 80, .staleWhileRevalidate(age: 80)),  // RFC 5861
            ([("Cache-Control", "max-age=60, stale-while-revalidate=30")], [], 95, .revalidate),
        ]
        for (stored, asked, elapsed, expected) in cases {
            let use = Self.policy(stored).use(for: Self.request(asked), now: Self.t0 + elapsed)
            #expect(use == expected, "stored \(stored), request \(asked), after \(elapsed) s")
        }
        #expect(Self.policy([("Cache-Control", "max-age=60")]).use(for: Self.request(method: "POST"), now: Self.t0) == .mismatch)
        let onError = Self.policy([("Cache-Control", "max-age=60, stale-if-error=100")])
        #expect(onError.mayServeStaleOnError(now: Self.t0 + 150) && !onError.mayServeStaleOnError(now: Self.t0 + 170))
        #expect(
            !Self.policy([("Cache-Control", "max-age=60, stale-if-error=100, must-revalidate")]).mayServeStaleOnError(now: Self.t0 + 70))
    }

    @Test("Vary: the listed request fields must match, whitespace and case of names aside; * never matches (4.1)")
    func vary() {
        let stored = Self.policy(
            [("Cache-Control", "max-age=60"), ("Vary", "Accept-Encoding, accept-language")],
            request: Self.request([("Accept-Encoding", "gzip,  br"), ("Accept-Language", "en")]))
        #expect(stored.varyMatches(Self.request([("accept-encoding", "gzip, br"), ("Accept-Language", "en")])))
        #expect(stored.varyMatches(Self.request([("Accept-Encoding", "gzip"), ("Accept-Encoding", "br"), ("Accept-Language", "en")])))
        #expect(!stored.varyMatches(Self.request([("Accept-Encoding", "gzip"), ("Accept-Language", "en")])))
        #expect(!stored.varyMatches(Self.request([("Accept-Encoding", "gzip, br")])))
        #expect(stored.use(for: Self.request([("Accept-Language", "fr")]), now: Self.t0) == .mismatch)
        let star = CachePolicy(
            request: Self.request(), response: HTTPResponseHead(status: 200, headers: HTTPHeaders([("Vary", "*")])), requestTime: 0,
            responseTime: 0)
        #expect(!star.varyMatches(Self.request()))
    }

    @Test("revalidation: conditional fields from the validators; a 304 freshens the stored fields, a mismatched one does not (4.3, 3.2)")
    func revalidation() throws {
        let stored = Self.policy([
            ("Cache-Control", "max-age=60"), ("ETag", "\"v1\""), ("Last-Modified", "Mon, 23 Nov 2026 09:00:00 GMT"),
            ("Content-Length", "1000"), ("X-Old", "1"),
        ])
        #expect(
            stored.revalidationHeaders
                == HTTPHeaders([("If-None-Match", "\"v1\""), ("If-Modified-Since", "Mon, 23 Nov 2026 09:00:00 GMT")]))
        let notModified = HTTPResponseHead(
            status: 304,
            headers: HTTPHeaders([
                ("Date", "Mon, 23 Nov 2026 10:02:00 GMT"), ("Cache-Control", "max-age=600"), ("ETag", "W/\"v1\""),
                ("Content-Length", "0"), ("Connection", "close"), ("X-New", "2"),
            ]))
        let freshened = try #require(stored.freshened(by: notModified, requestTime: Self.t0 + 120, responseTime: Self.t0 + 120))
        #expect(freshened.response.headers["content-length"] == "1000" && freshened.response.headers["x-old"] == "1")
        #expect(freshened.response.headers["x-new"] == "2" && freshened.response.headers["cache-control"] == "max-age=600")
        #expect(!freshened.response.headers.contains("connection"))
        #expect(freshened.use(for: Self.request(), now: Self.t0 + 300) == .fresh(age: 180))
        let other = HTTPResponseHead(status: 304, headers: HTTPHeaders([("ETag", "\"v2\"")]))
        #expect(stored.freshened(by: other, requestTime: Self.t0, responseTime: Self.t0) == nil)
        #expect(stored.freshened(by: HTTPResponseHead(status: 200), requestTime: Self.t0, responseTime: Self.t0) == nil)
    }

    @Test("request max-age=0 revalidates even a response received this second (5.2.1.1, as Squid)")
    func requestMaxAgeZero() {
        let stored = Self.policy([("Cache-Control", "max-age=60")])
        #expect(stored.use(for: Self.request([("Cache-Control", "max-age=0")]), now: Self.t0) == .revalidate)
        #expect(stored.use(for: Self.request([("Cache-Control", "max-age=5")]), now: Self.t0 + 3) == .fresh(age: 3))
        #expect(stored.use(for: Self.request(), now: Self.t0) == .fresh(age: 0))
    }

    @Test("a request with Cookie: no heuristic freshness; stored only with max-age, s-maxage, Expires or public (nginx, Varnish)")
    func cookieRequests() throws {
        let cookie = Self.request([("Cookie", "session=victim")])
        let yearOld = ("Last-Modified", "Sun, 23 Nov 2025 10:00:00 GMT")
        // (response fields, storable, freshness lifetime)
        let cases: [([(String, String)], Bool, Int64)] = [
            ([yearOld], false, 0),
            ([yearOld, ("ETag", "\"v1\"")], false, 0),
            ([yearOld, ("Cache-Control", "no-cache")], false, 0),
            ([yearOld, ("Cache-Control", "max-age=60")], true, 60),
            ([yearOld, ("Cache-Control", "s-maxage=30")], true, 30),
            ([yearOld, ("Expires", "Mon, 23 Nov 2026 10:05:00 GMT")], true, 300),
            // `public` stores it, but never heuristically fresh: revalidated on every use.
            ([yearOld, ("Cache-Control", "public")], true, 0),
        ]
        for (fields, storable, lifetime) in cases {
            let policy = Self.policy(fields, request: cookie)
            #expect(policy.isStorable == storable, "\(fields): \(policy.storability.reason ?? "storable")")
            #expect(policy.freshnessLifetime == lifetime, "\(fields)")
        }
        #expect(Self.policy([yearOld], request: cookie).storability.reason == "request with Cookie without explicit freshness or public")
        let publicOnly = Self.policy([yearOld, ("Cache-Control", "public")], request: cookie)
        #expect(publicOnly.use(for: Self.request([("Cookie", "session=attacker")]), now: Self.t0) == .revalidate)
        // Without Cookie the same response is heuristically fresh (4.2.2: 10%, at most a day).
        let plain = Self.policy([yearOld])
        #expect(plain.isStorable && plain.freshnessLifetime == CachePolicy.heuristicCap)
        // The storability of an answer is asked for the request that brought it.
        #expect(!plain.answering(cookie).isStorable)

        // What is decided when the response comes stays with the stored head: its request fields
        // keep no Cookie (Vary names none), so the head carries it, through the index metadata
        // and through a 304 that freshens it.
        let head = HTTPRangeSource.storedHead(
            status: 200, headers: HTTPHeaders([("Date", Self.date), yearOld, ("Cache-Control", "public")]), times: (Self.t0, Self.t0),
            forwarding: HTTPRangeSource.Forwarding(client: cookie))
        #expect(!head.heuristicFreshness && head.policy.freshnessLifetime == 0)
        let metadata = head.stored(in: ResourceMetadata(key: "k"))
        let reread = try #require(StoredHead(metadata))
        #expect(reread == head && !reread.heuristicFreshness && reread.policy.freshnessLifetime == 0)
        let notModified = HTTPResponseHead(status: 304, headers: HTTPHeaders([("Date", Self.date)]))
        let freshened = try #require(head.policy.freshened(by: notModified, requestTime: Self.t0, responseTime: Self.t0))
        #expect(freshened.freshnessLifetime == 0 && !freshened.storedHead.heuristicFreshness)
        let withoutCookie = HTTPRangeSource.storedHead(
            status: 200, headers: HTTPHeaders([("Date", Self.date), yearOld]), times: (Self.t0, Self.t0),
            forwarding: HTTPRangeSource.Forwarding(client: Self.request()))
        #expect(withoutCookie.heuristicFreshness && withoutCookie.policy.freshnessLifetime == CachePolicy.heuristicCap)
        #expect(StoredHead(withoutCookie.stored(in: ResourceMetadata(key: "k")))?.heuristicFreshness == true)
    }
}
