// The proxy's own rules as pure values: client conditionals (RFC 9110 13), Cache-Status
// (RFC 9211), stored heads in an index's metadata, cache and variant keys, routes, forwarded fields.
import Foundation
import Testing

@testable import HTTPCache
@_spi(Locking) @testable import SparseCacheEngine
@testable import SparseCacheStore
@testable import SparseHTTP
import TestSupport
import StoreTestSupport

@Suite("proxy rules: conditionals (RFC 9110 13), Cache-Status (RFC 9211), stored heads, keys, forwarding")
struct ProxyRulesTests {
    static let lastModified = "Mon, 23 Nov 2026 10:00:00 GMT"
    static let earlier = "Mon, 23 Nov 2026 09:00:00 GMT"
    static let later = "Mon, 23 Nov 2026 11:00:00 GMT"

    static func request(_ fields: [(String, String)], method: HTTPMethod = .get) -> HTTPRequestHead {
        HTTPRequestHead(method: method, target: "/a", headers: HTTPHeaders(fields))
    }

    @Test("preconditions in the order of 13.2.2: If-Match, If-Unmodified-Since, If-None-Match, If-Modified-Since")
    func preconditions() {
        let etag = "\"v1\""
        let rows: [([(String, String)], String, Precondition)] = [
            ([], "GET", .proceed),
            ([("If-None-Match", "\"v1\"")], "GET", .notModified),
            ([("If-None-Match", "W/\"v1\"")], "GET", .notModified),  // weak comparison (13.1.2)
            ([("If-None-Match", "\"v0\", \"v1\"")], "HEAD", .notModified),
            ([("If-None-Match", "*")], "GET", .notModified),
            ([("If-None-Match", "\"v2\"")], "GET", .proceed),
            ([("If-None-Match", "\"v1\"")], "DELETE", .failed),
            ([("If-Modified-Since", Self.lastModified)], "GET", .notModified),
            ([("If-Modified-Since", Self.later)], "GET", .notModified),
            ([("If-Modified-Since", Self.earlier)], "GET", .proceed),
            ([("If-Modified-Since", "yesterday")], "GET", .proceed),  // not a date: ignored
            // If-None-Match present: If-Modified-Since is not looked at (13.1.3).
            ([("If-None-Match", "\"v2\""), ("If-Modified-Since", Self.later)], "GET", .proceed),
            ([("If-Match", "\"v1\"")], "GET", .proceed),
            ([("If-Match", "W/\"v1\"")], "GET", .failed),  // strong comparison (13.1.1)
            ([("If-Match", "\"v2\"")], "GET", .failed),
            ([("If-Match", "*")], "GET", .proceed),
            ([("If-Unmodified-Since", Self.earlier)], "GET", .failed),
            ([("If-Unmodified-Since", Self.lastModified)], "GET", .proceed),
            // If-Match present: If-Unmodified-Since is not looked at (13.1.4).
            ([("If-Match", "\"v1\""), ("If-Unmodified-Since", Self.earlier)], "GET", .proceed),
            // 412 before 304.
            ([("If-Match", "\"v2\""), ("If-None-Match", "\"v1\"")], "GET", .failed),
        ]
        for (fields, method, expected) in rows {
            let got = Precondition.evaluate(Self.request(fields, method: HTTPMethod(rawValue: method)), etag: etag, lastModified: Self.lastModified)
            #expect(got == expected, "\(method) \(fields): \(got), expected \(expected)")
        }
        #expect(Precondition.evaluate(Self.request([("If-Match", "*")]), etag: nil, lastModified: nil) == .failed)
        #expect(Precondition.evaluate(Self.request([("If-None-Match", "*")]), etag: nil, lastModified: nil) == .proceed)
        // Without Last-Modified, If-Modified-Since is judged by the stored Date (RFC 9111 4.3.2);
        // If-Unmodified-Since is not (13.1.4: no modification date, no condition met).
        let undated = Self.request([("If-Modified-Since", Self.later)])
        #expect(Precondition.evaluate(undated, etag: nil, lastModified: nil, date: Self.lastModified) == .notModified)
        #expect(Precondition.evaluate(undated, etag: nil, lastModified: nil) == .proceed)
        #expect(
            Precondition.evaluate(
                Self.request([("If-Modified-Since", Self.earlier)]), etag: nil, lastModified: nil, date: Self.lastModified) == .proceed)
        #expect(
            Precondition.evaluate(
                Self.request([("If-Unmodified-Since", Self.later)]), etag: nil, lastModified: nil, date: Self.lastModified) == .failed)
    }

    @Test("If-Range: a strong entity tag, or the Last-Modified date only when it is strong (13.1.5)")
    func ifRange() {
        let date = "Mon, 23 Nov 2026 10:00:05 GMT"
        #expect(Precondition.ifRangeMatches("\"v1\"", etag: "\"v1\"", lastModified: nil, date: date))
        #expect(!Precondition.ifRangeMatches("\"v1\"", etag: "W/\"v1\"", lastModified: nil, date: date))
        #expect(!Precondition.ifRangeMatches("W/\"v1\"", etag: "W/\"v1\"", lastModified: nil, date: date))
        #expect(Precondition.ifRangeMatches(Self.lastModified, etag: nil, lastModified: Self.lastModified, date: date))
        // Modified within the second the response was sent: a weak validator.
        #expect(!Precondition.ifRangeMatches(Self.lastModified, etag: nil, lastModified: Self.lastModified, date: Self.lastModified))
        #expect(!Precondition.ifRangeMatches(Self.lastModified, etag: nil, lastModified: Self.lastModified, date: nil))
        #expect(!Precondition.ifRangeMatches(Self.earlier, etag: nil, lastModified: Self.lastModified, date: date))
    }

    @Test("Cache-Status: the cache's name, then hit or fwd, fwd-status, ttl, stored, a quoted detail (RFC 9211 2)")
    func cacheStatus() {
        #expect(CacheStatus(hit: true, ttl: 30).value == "sparsecache; hit; ttl=30")
        #expect(
            CacheStatus(forward: "uri-miss", forwardStatus: 200, stored: true).value == "sparsecache; fwd=uri-miss; fwd-status=200; stored")
        #expect(CacheStatus(forward: "stale", forwardStatus: 304, ttl: -5).value == "sparsecache; fwd=stale; fwd-status=304; ttl=-5")
        #expect(CacheStatus(detail: "say \"no\"").value == "sparsecache; detail=\"say \\\"no\\\"\"")
        // The log's outcome is told by what the proxy did, never by the detail's words.
        #expect(CacheStatus(hit: true, detail: "stale-while-revalidate", fromStorage: true, stale: true).outcome == "stale")
        #expect(CacheStatus(detail: "stale answers are not stored here", fromStorage: true).outcome == "revalidated")
        #expect(CacheStatus(hit: true, fromStorage: true).outcome == "hit")
        let via = ProxyVia()
        let fields = proxyFields(
            HTTPHeaders([("Via", "1.0 upstream"), ("ETag", "\"a\"")]), status: CacheStatus(hit: true), via: via.element)
        #expect(fields.map(\.0) == ["ETag", "Via", "Cache-Status"])
        #expect(fields[1].1 == "1.0 upstream, 1.1 \(via.pseudonym)" && via.pseudonym.hasPrefix("sparsecache-"))
        // Loop detection (RFC 9110 7.6.3): our own received-by, not another sparsecache's.
        #expect(via.isLoop(HTTPHeaders([("Via", "1.0 upstream, 1.1 \(via.pseudonym) (note)")])))
        #expect(!via.isLoop(HTTPHeaders([("Via", "1.1 \(ProxyVia().pseudonym), 1.1 sparsecache")])))
    }

    @Test("the proxy's own error pages: 502 unreachable, 504 timeout, never the origin URL or a cache path (RFC 9110 15.6.3, 15.6.5)")
    func ownErrorPages() {
        let secret = "http://10.1.2.3:8081/internal/path.bin"
        func timedOut(_ detail: String) -> OriginError {
            OriginError(.timedOut, operation: "fetch", key: secret, detail: detail)
        }
        let cases: [(any Error, Int)] = [
            (OriginError(HTTPError(.connectFailed, operation: "connect", peer: "10.1.2.3", errno: 111, detail: "connection refused")), 502),
            (timedOut("timed out: no answer from the origin within 30 seconds"), 504),
            (timedOut("timed out waiting for the origin"), 504),
            // Told by its kind, not its words.
            (OriginError(.unavailable, operation: "fetch", key: secret, detail: "timed out, or so the text says"), 502),
            (OriginError(.badAnswer, operation: "fetch", key: secret, detail: "206 with a missing or malformed Content-Range ''"), 502),
            (SparseCacheError(.io, operation: "pwrite", path: "/var/cache/sparsecache/ab/cd.data", detail: "No space left on device"), 500),
        ]
        for (error, status) in cases {
            let (answered, message) = CachingProxy.status(for: error)
            #expect(answered == status, "\(error) -> \(answered) \(message)")
            #expect(!message.contains("10.1.2.3") && !message.contains("/internal/") && !message.contains("/var/cache"), "\(message)")
        }
    }

    @Test("a stored head survives the index metadata; a damaged one is refused; an old resource gets a stale one")
    func storedHeadInMetadata() {
        let head = StoredHead(
            status: 206,
            headers: HTTPHeaders([
                ("Content-Type", "text/plain"), ("ETag", "\"v1\""), ("Cache-Control", "max-age=60"), ("X-Empty", ""),
                ("Content-Length", "12"), ("Connection", "close, X-Hop"), ("X-Hop", "1"), ("Content-Range", "bytes 0-1/12"),
            ]), requestTime: 10, responseTime: 11, varyRequest: HTTPHeaders([("Accept-Encoding", "gzip, br")]))
        #expect(
            head.headers.map(\.name) == ["Content-Type", "ETag", "Cache-Control", "X-Empty"], "framing and hop-by-hop fields are not stored"
        )
        #expect(head.status == 200, "a 206 is stored as the 200 it is part of")
        // Another status's Content-Range is an end-to-end field of it: stored and replayed (RFC 9111 3.1).
        let odd = StoredHead(
            headers: HTTPHeaders([("Content-Range", "ananananananana"), ("Content-Length", "3")]), requestTime: 0, responseTime: 0)
        #expect(odd.headers.map(\.name) == ["Content-Range"])
        let metadata = head.stored(in: ResourceMetadata(key: "http://o/a"))
        #expect(metadata.contentType == "text/plain" && metadata.etag == "\"v1\"" && metadata.key == "http://o/a")
        #expect(StoredHead(metadata) == head)
        var damaged = metadata
        damaged.user["http.headers"] = "no colon here"
        #expect(StoredHead(damaged) == nil)
        damaged.user["http.headers"] = "bad name: x"
        #expect(StoredHead(damaged) == nil)
        let old = StoredHead(ResourceMetadata(key: "k", contentType: "video/mp4", etag: "\"e\"", lastModified: Self.lastModified))
        #expect(old?.headers["etag"] == "\"e\"" && old?.headers["content-type"] == "video/mp4" && old?.responseTime == 0)
        #expect(old.map { !$0.policy.isFresh(now: 1_795_428_000) } == true, "a head from before heads were stored is stale")
    }

    @Test("a head is too large to store past 32 KiB of stored text, the request fields its Vary names counted; control bytes the text drops are not")
    func storedHeadSizeLimit() {
        func head(_ value: String, vary: String = "") -> StoredHead {
            StoredHead(
                headers: HTTPHeaders([("X-Big", value)]), requestTime: 0, responseTime: 0,
                varyRequest: vary.isEmpty ? HTTPHeaders() : HTTPHeaders([("Cookie", vary)]))
        }
        let fits = StoredHead.maximumSize - "X-Big: ".utf8.count
        #expect(!head(String(repeating: "a", count: fits)).isTooLarge)
        #expect(head(String(repeating: "a", count: fits + 1)).isTooLarge)
        // Its length alone passes the limit, its stored text does not: the control bytes go.
        #expect(!head(String(repeating: "a", count: fits) + String(repeating: "\u{1}", count: 100)).isTooLarge)
        #expect(head(String(repeating: "a", count: fits - 100), vary: String(repeating: "c", count: 200)).isTooLarge)
    }

    @Test("a stored head read back from its policy keeps its status, also after a 304 freshened it")
    func storedHeadKeepsStatus() throws {
        let moved = StoredHead(
            status: 301, headers: HTTPHeaders([("Location", "/b"), ("ETag", "\"m\""), ("Cache-Control", "max-age=1")]),
            requestTime: 10, responseTime: 11)
        let policy = moved.policy
        #expect(policy.storedHead == moved)
        let notModified = HTTPResponseHead(status: 304, headers: HTTPHeaders([("ETag", "\"m\""), ("Cache-Control", "max-age=60")]))
        let fresh = try #require(policy.freshened(by: notModified, requestTime: 20, responseTime: 21))
        #expect(fresh.storedHead.status == 301 && fresh.storedHead.headers["cache-control"] == "max-age=60")
        #expect(fresh.storedHead.requestTime == 20 && fresh.storedHead.responseTime == 21)
    }

    @Test("cache keys carry no credentials; a variant key depends on the Vary fields' normalised values only")
    func keys() throws {
        let url = try #require(URL(string: "http://user:secret@origin:8080/a.mp4?x=1"))
        #expect(CachingProxy.cacheKey(url) == "http://origin:8080/a.mp4?x=1")
        #expect(CachingProxy.cacheKey(try #require(URL(string: "http://origin/a"))) == "http://origin/a")
        let head = StoredHead(headers: HTTPHeaders([("Vary", "Accept-Encoding, Accept-Language")]), requestTime: 0, responseTime: 0)
        let gzip = CachingProxy.variantKey("k", of: head, for: Self.request([("Accept-Encoding", "gzip,br"), ("Cookie", "a")]))
        let spaced = CachingProxy.variantKey("k", of: head, for: Self.request([("accept-encoding", "gzip, br")]))
        let other = CachingProxy.variantKey("k", of: head, for: Self.request([("Accept-Encoding", "identity")]))
        let language = CachingProxy.variantKey(
            "k", of: head, for: Self.request([("Accept-Encoding", "gzip,br"), ("Accept-Language", "de")]))
        #expect(gzip == spaced && gzip != other && gzip != language && gzip.hasPrefix("k#vary="))
        #expect(!gzip.contains("gzip"), "values are hashed, not written into the key")
    }

    @Test("A plain target on the configured origin is routed without parsing a URL, to what the parse gives: key, path, URL, request target, Host; any other target takes the parse")
    func plainRoutesMatchTheParse() async throws {
        let origins = ["http://origin.test:8000", "http://origin.test/", "http://[::1]:8080/media/", "https://origin.test/a/b", "http://o.test/pre%20fix"]
        let plain = [
            "/", "/f1.bin", "/f1.bin?r=abc&x=1", "/a/b/", "//x//", "/a;p=1/b", "/%41%2fb", "/seg.m3u8?token=a%2Bb==",
            "/~user/it's(1)*+,!$:@", "/x?a=/b?c", "/a%20b/c.M3U8",
        ]
        for originText in origins {
            let origin = try #require(URL(string: originText))
            var base = originText
            while base.hasSuffix("/") { base.removeLast() }
            let source = try HTTPRangeSource(url: origin)
            for target in plain {
                #expect(HTTPRangeSource.isPlainTarget(target), "\(target)")
                let fast = ProxyRoutes.Route(plain: target, base: base, on: source)
                let parsed = ProxyRoutes.Route(url: try #require(URL(string: base + target)))
                #expect(fast.key == parsed.key, "\(originText) \(target)")
                #expect(fast.path == parsed.path, "\(originText) \(target)")
                #expect(fast.url == parsed.url, "\(originText) \(target)")
                let made = try #require(fast.sourceOnOrigin())
                let expected = try #require(HTTPRangeSource.Endpoint(parsed.url))
                #expect(made.key == parsed.url.absoluteString)
                #expect(made.endpoint.target == expected.target, "\(originText) \(target)")
                #expect(made.endpoint.hostField == expected.hostField && made.endpoint.host == expected.host)
                #expect(made.endpoint.port == expected.port && made.isDirect == source.isDirect)
                #expect(made.limiter === source.limiter && made.shared === source.shared)
            }
        }
        // What a URL would encode, cut or reject is not plain.
        for target in ["/a|b", "/a%zz", "/a%2", "/a#f", "/ü", "/a b", "/a{b}", "/q?x=\"y\"", "/[v6]", "x", "", "http://o.test/a", "*"] {
            #expect(!HTTPRangeSource.isPlainTarget(target), "\(target)")
        }

        // The proxy takes the plain route on its origin only, and the parse for the rest.
        try await withTemporaryDirectory("plain-routes") { directory in
            let store = try await SparseStore.open(directory: directory.path, options: .testing(budget: 1 << 20))
            let cache = ProgressiveCache(store: store, options: .testing)
            let proxy = CachingProxy(cache: cache, origin: URL(string: "http://origin.test:8000/vod/"))
            let route = try proxy.route(for: "/a.ts?x=1").get()
            #expect(route.onOrigin != nil && route.key == "http://origin.test:8000/vod/a.ts?x=1" && route.path == "/vod/a.ts")
            for target in ["/a|b", "/s.ts?url=http%3A%2F%2Forigin.test%3A8000%2Fs.ts", "http://origin.test:8000/a.ts"] {
                #expect(try proxy.route(for: target).get().onOrigin == nil, "\(target)")
            }
            #expect(try proxy.route(for: "/a|b").get().key == "http://origin.test:8000/vod/a%7Cb")
            for origin in ["http://u:p@origin.test/", "http://origin.test/?q=1"] {
                let other = CachingProxy(cache: cache, origin: URL(string: origin))
                #expect(try other.route(for: "/a.ts").get().onOrigin == nil, "\(origin)")
            }
            #expect(try CachingProxy(cache: cache).route(for: "/a.ts?url=http%3A%2F%2Fo.test%2Fa.ts").get().onOrigin == nil)
            try await store.close()
        }
    }

    @Test("forwarded fields: end-to-end ones, without the range, the host and the conditionals the proxy writes")
    func forwarding() {
        let request = Self.request([
            ("Host", "proxy"), ("Authorization", "Basic eA=="), ("Cookie", "c=1"), ("Connection", "X-Secret"), ("X-Secret", "1"),
            ("Proxy-Authorization", "p"), ("Range", "bytes=0-1"), ("If-None-Match", "\"a\""), ("Accept-Encoding", "gzip"),
            ("Keep-Alive", "timeout=5"), ("TE", "trailers"),
        ])
        let forwarded = HTTPRangeSource.Forwarding(client: request).headers.map(\.name)
        #expect(forwarded == ["Authorization", "Cookie", "Accept-Encoding"], "\(forwarded)")
    }

    @Test("same version: an equal strong entity tag, or without tags an equal Last-Modified; nothing else proves it")
    func sameVersion() {
        func fields(_ pairs: [(String, String)]) -> HTTPHeaders { HTTPHeaders(pairs) }
        #expect(CachingProxy.sameVersion(fields([("ETag", "\"a\"")]), fields([("ETag", "\"a\"")])))
        #expect(!CachingProxy.sameVersion(fields([("ETag", "\"a\"")]), fields([("ETag", "\"b\"")])))
        #expect(!CachingProxy.sameVersion(fields([("ETag", "W/\"a\"")]), fields([("ETag", "W/\"a\"")])))
        #expect(CachingProxy.sameVersion(fields([("Last-Modified", Self.lastModified)]), fields([("Last-Modified", Self.lastModified)])))
        #expect(!CachingProxy.sameVersion(fields([("ETag", "\"a\"")]), fields([("Last-Modified", Self.lastModified)])))
        #expect(!CachingProxy.sameVersion(fields([]), fields([])), "without validators nothing proves the bytes are the same")
    }

    @Test("header storage text: fields round-trip in order with their case; control bytes never reach it")
    func storageText() {
        let headers = HTTPHeaders([("A", "1"), ("b-B", "two: with colon"), ("C", ""), ("D", "x\r\ny")])
        let text = headers.storageText
        #expect(!text.contains("\r"))
        let back = HTTPHeaders(storageText: text)
        #expect(back?.map(\.name) == ["A", "b-B", "C", "D"])
        #expect(back?["b-b"] == "two: with colon" && back?["c"] == "" && back?["d"] == "xy")
        #expect(HTTPHeaders(storageText: "") == HTTPHeaders())
        // Its length, counted without building it (the stored-size limit asks on every miss).
        for fields in [headers, HTTPHeaders(), HTTPHeaders([("X", "\u{7F}é\t")])] {
            #expect(fields.storageTextCount == fields.storageText.utf8.count, "\(fields)")
        }
    }
}
