// The playlist rewriters on their own: HLS (RFC 8216) and DASH (ISO/IEC 23009-1) texts as
// packagers write them, in reverse-proxy mode and URL mode; the live freshness limit; the
// connection limiter's priorities.
import Foundation
import SeededRandom
import Testing

@testable import HTTPCache
@_spi(Locking) @testable import SparseCacheEngine
@testable import SparseHTTP
import TestSupport
import StoreTestSupport

@Suite("Playlist rewriting")
struct PlaylistRewriteTests {
    static let origin = URL(string: "http://origin.test:8000")!
    static let reverse = ProxyReferences(origin: origin)
    static let urlMode = ProxyReferences(origin: nil)

    /// The absolute URL a URL-mode reference names (what the proxy decodes from it).
    static func decoded(_ reference: String) -> String? {
        guard let query = reference.split(separator: "?", maxSplits: 1).last,
            let parameter = query.split(separator: "&").first(where: { $0.hasPrefix("url=") })
        else { return nil }
        return String(parameter.dropFirst(4)).removingPercentEncoding
    }

    static let media = """
        #EXTM3U\r
        #EXT-X-VERSION:7\r
        #EXT-X-TARGETDURATION:2\r
        #EXT-X-KEY:METHOD=AES-128,URI="keys/k1.bin",IV=0x1\r
        #EXT-X-SESSION-KEY:METHOD=SAMPLE-AES,KEYFORMAT="com.apple.streamingkeydelivery",URI="skd://key-id"\r
        #EXT-X-MAP:URI="init.mp4"\r
        #EXTINF:2.0,\r
        seg0.m4s\r
        #EXTINF:2.0,\r
        http://origin.test:8000/live/seg1.m4s?token=a&b=1\r
        #EXTINF:2.0,\r
        https://cdn.test/live/seg2.m4s\r
        #EXT-X-PART:DURATION=0.5,URI="part3.0.m4s"\r
        #EXT-X-PRELOAD-HINT:TYPE=PART,URI="part3.1.m4s"\r
        #EXT-X-RENDITION-REPORT:URI="../low/index.m3u8",LAST-MSN=3\r
        # a comment with URI="not-a-tag.m4s"\r

        """

    @Test("HLS media playlist, reverse-proxy mode: origin URLs become paths, others ?url=, line endings kept")
    func hlsReverse() throws {
        let playlist = try #require(HLSPlaylist(Array(Self.media.utf8), url: URL(string: "http://origin.test:8000/live/index.m3u8")!))
        #expect(playlist.targetDuration == 2 && !playlist.ended && !playlist.isMaster)
        #expect(playlist.segments.map(\.absoluteString) == [
            "http://origin.test:8000/live/seg0.m4s", "http://origin.test:8000/live/seg1.m4s?token=a&b=1", "https://cdn.test/live/seg2.m4s",
        ])
        let text = playlist.rewritten(Self.reverse)
        let lines = text.components(separatedBy: "\r\n")
        #expect(lines.contains("#EXT-X-KEY:METHOD=AES-128,URI=\"/live/keys/k1.bin\",IV=0x1"))
        #expect(lines.contains("#EXT-X-SESSION-KEY:METHOD=SAMPLE-AES,KEYFORMAT=\"com.apple.streamingkeydelivery\",URI=\"skd://key-id\""))
        #expect(lines.contains("#EXT-X-MAP:URI=\"/live/init.mp4\""))
        #expect(lines.contains("/live/seg0.m4s"))
        #expect(lines.contains("/live/seg1.m4s?token=a&b=1"))
        #expect(lines.contains("/seg2.m4s?url=https%3A%2F%2Fcdn.test%2Flive%2Fseg2.m4s"))
        #expect(lines.contains("#EXT-X-PART:DURATION=0.5,URI=\"/live/part3.0.m4s\""))
        #expect(lines.contains("#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"/live/part3.1.m4s\""))
        #expect(lines.contains("#EXT-X-RENDITION-REPORT:URI=\"/low/index.m3u8\",LAST-MSN=3"))
        #expect(lines.contains("# a comment with URI=\"not-a-tag.m4s\""))
        #expect(!text.contains("\n\n") && text.hasSuffix("\r\n"), "line endings as they came: \(text)")
    }

    @Test("Reverse mode: the origin's URL however written (default port, host case) becomes a path; its path prefix is kept out")
    func reverseOriginForms() {
        let plain = ProxyReferences(origin: URL(string: "http://Origin.test/base")!)
        let base = URL(string: "http://origin.test/base/hls/index.m3u8")!
        #expect(plain.reference(for: "http://origin.test:80/base/hls/a.ts?x=1", base: base) == "/hls/a.ts?x=1")
        #expect(plain.reference(for: "b.ts", base: base) == "/hls/b.ts")
        #expect(plain.reference(for: "/other/c.ts", base: base) == "/c.ts?url=http%3A%2F%2Forigin.test%2Fother%2Fc.ts", "outside the origin's path")
        #expect(plain.reference(for: "data:text/plain,abc", base: base) == nil)
    }

    @Test("HLS in URL mode: every URL, relative or absolute, becomes /<name>?url=<absolute URL>")
    func hlsURLMode() throws {
        let playlist = try #require(HLSPlaylist(Array(Self.media.utf8), url: URL(string: "http://origin.test:8000/live/index.m3u8")!))
        let lines = playlist.rewritten(Self.urlMode).components(separatedBy: "\r\n")
        let segment = try #require(lines.first { $0.hasPrefix("/seg0.m4s?url=") })
        #expect(Self.decoded(segment) == "http://origin.test:8000/live/seg0.m4s")
        let tokened = try #require(lines.first { $0.hasPrefix("/seg1.m4s?url=") })
        #expect(Self.decoded(tokened) == "http://origin.test:8000/live/seg1.m4s?token=a&b=1", "the origin's query survives whole")
        #expect(!tokened.contains("&"), "the URL's own & is encoded: \(tokened)")
        let map = try #require(lines.first { $0.hasPrefix("#EXT-X-MAP:") })
        #expect(map == "#EXT-X-MAP:URI=\"/init.mp4?url=http%3A%2F%2Forigin.test%3A8000%2Flive%2Finit.mp4\"")
        #expect(lines.contains { $0.contains("URI=\"skd://key-id\"") }, "non-http key URIs stay")
    }

    @Test("HLS master playlist: variants, renditions and I-frame playlists rewritten; ENDLIST seen")
    func hlsMaster() throws {
        let master = """
            #EXTM3U
            #EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID="aac",NAME="en",URI="audio/en.m3u8"
            #EXT-X-STREAM-INF:BANDWIDTH=800000,RESOLUTION=640x360,AUDIO="aac"
            low/index.m3u8
            #EXT-X-STREAM-INF:BANDWIDTH=2000000
            http://other.test/high/index.m3u8
            #EXT-X-I-FRAME-STREAM-INF:BANDWIDTH=90000,URI="low/iframes.m3u8"
            """
        let playlist = try #require(HLSPlaylist(Array(master.utf8), url: URL(string: "http://origin.test:8000/vod/master.m3u8")!))
        #expect(playlist.isMaster && playlist.variants.count == 3)
        let lines = playlist.rewritten(Self.reverse).components(separatedBy: "\n")
        #expect(lines == [
            "#EXTM3U",
            "#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"aac\",NAME=\"en\",URI=\"/vod/audio/en.m3u8\"",
            "#EXT-X-STREAM-INF:BANDWIDTH=800000,RESOLUTION=640x360,AUDIO=\"aac\"",
            "/vod/low/index.m3u8",
            "#EXT-X-STREAM-INF:BANDWIDTH=2000000",
            "/index.m3u8?url=http%3A%2F%2Fother.test%2Fhigh%2Findex.m3u8",
            "#EXT-X-I-FRAME-STREAM-INF:BANDWIDTH=90000,URI=\"/vod/low/iframes.m3u8\"",
        ])
        let vod = try #require(HLSPlaylist(Array("#EXTM3U\n#EXT-X-TARGETDURATION:4\n#EXTINF:4,\na.ts\n#EXT-X-ENDLIST\n".utf8), url: Self.origin))
        #expect(vod.ended && vod.targetDuration == 4)
        #expect(HLSPlaylist(Array("not a playlist".utf8), url: Self.origin) == nil)
    }

    /// An MPD as ffmpeg's dash muxer writes it, with a BaseURL cascade added and a
    /// SegmentList and a SegmentBase representation beside the template.
    static let mpd = """
        <?xml version="1.0" encoding="utf-8"?>
        <MPD xmlns="urn:mpeg:dash:schema:mpd:2011" type="static" mediaPresentationDuration="PT4.0S" minBufferTime="PT2.0S">
        \t<!-- <BaseURL>http://ignored.test/</BaseURL> -->
        \t<BaseURL>media/</BaseURL>
        \t<Period id="0" start="PT0.0S">
        \t\t<AdaptationSet id="0" contentType="video" segmentAlignment="true">
        \t\t\t<Representation id="0" mimeType="video/mp4" codecs="avc1.64001e" bandwidth="800000" width="640" height="360">
        \t\t\t\t<SegmentTemplate timescale="12800" initialization="init-stream$RepresentationID$.m4s" media="chunk-stream$RepresentationID$-$Number%05d$.m4s" startNumber="1">
        \t\t\t\t\t<SegmentTimeline><S t="0" d="25600" r="1" /></SegmentTimeline>
        \t\t\t\t</SegmentTemplate>
        \t\t\t</Representation>
        \t\t</AdaptationSet>
        \t\t<AdaptationSet id="1" contentType="audio">
        \t\t\t<BaseURL>http://cdn.test/audio/</BaseURL>
        \t\t\t<Representation id="1" mimeType="audio/mp4" bandwidth="64000">
        \t\t\t\t<SegmentList duration="2"><Initialization sourceURL="init.mp4"/><SegmentURL media="a1.m4s"/><SegmentURL media='a2.m4s?x=1&amp;y=2'/></SegmentList>
        \t\t\t</Representation>
        \t\t\t<Representation id="2" mimeType="audio/mp4" bandwidth="32000">
        \t\t\t\t<BaseURL>low.mp4</BaseURL>
        \t\t\t\t<SegmentBase indexRange="0-99"/>
        \t\t\t</Representation>
        \t\t</AdaptationSet>
        \t</Period>
        </MPD>
        """

    @Test("DASH MPD, reverse-proxy mode: BaseURL cascade resolved, templates keep their $identifiers$, comments untouched")
    func dashReverse() throws {
        let manifest = try #require(DASHManifest(Array(Self.mpd.utf8), url: URL(string: "http://origin.test:8000/vod/manifest.mpd")!))
        let text = manifest.rewritten(Self.reverse)
        #expect(text.contains("<!-- <BaseURL>http://ignored.test/</BaseURL> -->"))
        #expect(text.contains("<BaseURL>/vod/media/</BaseURL>"))
        #expect(text.contains("initialization=\"/vod/media/init-stream$RepresentationID$.m4s\""))
        #expect(text.contains("media=\"/vod/media/chunk-stream$RepresentationID$-$Number%05d$.m4s\""))
        #expect(text.contains("<SegmentTimeline><S t=\"0\" d=\"25600\" r=\"1\" /></SegmentTimeline>"))
        #expect(text.contains("<BaseURL>/audio?url=http%3A%2F%2Fcdn.test%2Faudio%2F</BaseURL>"), "\(text)")
        #expect(text.contains("<Initialization sourceURL=\"/init.mp4?url=http%3A%2F%2Fcdn.test%2Faudio%2Finit.mp4\"/>"))
        #expect(text.contains("<SegmentURL media='/a2.m4s?url=http%3A%2F%2Fcdn.test%2Faudio%2Fa2.m4s%3Fx%3D1%26y%3D2'/>"), "\(text)")
        #expect(text.contains("<BaseURL>/low.mp4?url=http%3A%2F%2Fcdn.test%2Faudio%2Flow.mp4</BaseURL>"))
        #expect(text.contains("<SegmentBase indexRange=\"0-99\"/>"))
    }

    @Test("DASH in URL mode: a template filled in by the player names the right origin URL")
    func dashURLModeTemplate() throws {
        let manifest = try #require(DASHManifest(Array(Self.mpd.utf8), url: URL(string: "http://origin.test:8000/vod/manifest.mpd")!))
        let text = manifest.rewritten(Self.urlMode)
        let media = try #require(text.components(separatedBy: "media=\"").dropFirst().first?.components(separatedBy: "\"").first)
        #expect(media.hasPrefix("/chunk-stream$RepresentationID$-$Number%05d$.m4s?url="), "\(media)")
        // What a player sends after filling in the template.
        let filled = media.replacingOccurrences(of: "$RepresentationID$", with: "0").replacingOccurrences(of: "$Number%05d$", with: "00007")
        #expect(Self.decoded(filled) == "http://origin.test:8000/vod/media/chunk-stream0-00007.m4s")
        #expect(DASHManifest(Array("<html></html>".utf8), url: Self.origin) == nil)
    }

    @Test("Playlists are recognised by media type, or by extension when the type is generic")
    func kinds() {
        #expect(CachingProxy.playlistKind(contentType: "application/vnd.apple.mpegurl", path: "/x") == .hls)
        #expect(CachingProxy.playlistKind(contentType: "application/x-mpegURL; charset=utf-8", path: "/x") == .hls)
        #expect(CachingProxy.playlistKind(contentType: "application/octet-stream", path: "/a/index.m3u8") == .hls)
        #expect(CachingProxy.playlistKind(contentType: "application/dash+xml", path: "/x") == .dash)
        #expect(CachingProxy.playlistKind(contentType: nil, path: "/a/manifest.mpd") == .dash)
        #expect(CachingProxy.playlistKind(contentType: "video/mp2t", path: "/a/seg.m3u8") == nil, "a specific type wins")
        #expect(CachingProxy.playlistKind(contentType: "application/octet-stream", path: "/a/seg.ts") == nil)
        // Parsed on bytes: spaces and tabs around the type, upper case, parameters.
        #expect(CachingProxy.playlistKind(contentType: " \tApplication/DASH+XML ; charset=utf-8", path: "/x") == .dash)
        #expect(CachingProxy.playlistKind(contentType: "Audio/MPEGURL", path: "/x") == .hls)
        #expect(CachingProxy.playlistKind(contentType: "TEXT/PLAIN", path: "/A/INDEX.M3U8") == .hls)
        #expect(CachingProxy.playlistKind(contentType: "", path: "/Live.M3U") == .hls)
        #expect(CachingProxy.playlistKind(contentType: nil, path: "/a.MPD") == .dash)
        #expect(CachingProxy.playlistKind(contentType: nil, path: "/mpd") == nil, "a name that is only the extension's letters")
        #expect(CachingProxy.playlistKind(contentType: "application/dash+xml2", path: "/x.mpd") == nil)
        #expect(CachingProxy.playlistKind(contentType: "  text/xml\t;q=1", path: "/a.mpd") == .dash, "a generic type, trimmed")
        #expect(CachingProxy.playlistKind(contentType: "\t ", path: "/a.m3u8") == .hls, "only spaces and tabs: no type")
    }

    @Test("Routes of request targets are remembered, but never one of a target naming a URL (a playlist may make its origin known later)")
    func routesRemembered() throws {
        let routes = ProxyRoutes()
        var made = 0
        let origin = try #require(URL(string: "http://user:secret@origin.test:8000/vod/a.bin"))
        func make() -> Result<URL, CachingProxy.TargetProblem> {
            made += 1
            return .success(origin)
        }
        for _ in 0..<3 { _ = routes.route(for: "/vod/a.bin", make: make) }
        #expect(made == 1, "a plain target was worked out \(made) times")
        let route = try routes.route(for: "/vod/a.bin", make: make).get()
        #expect(route.key == "http://origin.test:8000/vod/a.bin", "the key carries no credentials")
        #expect(route.path == "/vod/a.bin" && route.url == origin)
        let naming = "/s.ts?url=http%3A%2F%2Fother.test%2Fs.ts"
        _ = routes.route(for: naming, make: make)
        _ = routes.route(for: naming, make: make)
        #expect(made == 3, "a target naming a URL was remembered")
        var failures = 0
        for _ in 0..<2 {
            _ = routes.route(for: "bad") {
                failures += 1
                return .failure(CachingProxy.TargetProblem(message: "no"))
            }
        }
        #expect(failures == 2, "a refusal was remembered")
    }

    @Test("Live HLS freshness: the heuristic is capped (half the target duration), explicit max-age is not")
    func heuristicLimit() {
        let request = HTTPRequestHead(method: "GET", target: "/live.m3u8", headers: [])
        let heuristic = HTTPResponseHead(
            status: 200, headers: HTTPHeaders([("Date", "Mon, 23 Nov 2026 12:00:00 GMT"), ("Last-Modified", "Mon, 23 Nov 2026 11:00:00 GMT")]))
        let policy = CachePolicy(request: request, response: heuristic, requestTime: 0, responseTime: 0)
        #expect(policy.freshnessLifetime == 360, "10% of an hour")
        #expect(policy.limitingHeuristicFreshness(to: 1).freshnessLifetime == 1)
        for field in [("Cache-Control", "max-age=30"), ("Expires", "Mon, 23 Nov 2026 12:00:30 GMT")] {
            let explicit = HTTPResponseHead(
                status: 200, headers: HTTPHeaders([("Date", "Mon, 23 Nov 2026 12:00:00 GMT"), field]))
            let explicitPolicy = CachePolicy(request: request, response: explicit, requestTime: 0, responseTime: 0)
            #expect(explicitPolicy.limitingHeuristicFreshness(to: 1).freshnessLifetime == 30, "\(field)")
        }
    }
}

@Suite("Connection priority")
struct ConnectionPriorityTests {
    @Test("A waited-on request is let in before background ones queued earlier, and a background holder is asked to yield")
    func waitedFirst() async throws {
        let limiter = ConnectionLimiter(limit: 1)
        let record = Record()
        let background = try await limiter.acquire(priority: .background, onYield: { record.yielded.withLock { $0 += 1 } })
        let queuedBackground = Task {
            let ticket = try await limiter.acquire(priority: .background, onYield: nil)
            record.order.withLock { $0.append("background") }
            limiter.release(ticket: ticket)
        }
        // Let the background waiter queue first.
        try await waitUntil("only \(limiter.queued) of 1 waiters queued") { limiter.queued >= 1 }
        #expect(record.yielded.withLock { $0 } == 0, "a background waiter asks nobody to yield")
        let waited = Task {
            try await limiter.acquire()
            record.order.withLock { $0.append("waited") }
            limiter.release()
        }
        try await waitUntil("only \(limiter.queued) of 2 waiters queued") { limiter.queued >= 2 }
        #expect(record.yielded.withLock { $0 } == 1, "the waited-on request asked the background holder to yield")
        limiter.release(ticket: background)
        try await waited.value
        try await queuedBackground.value
        #expect(record.order.withLock { $0 } == ["waited", "background"])
        #expect(limiter.inUse == 0)
    }

    @Test("A holder asked to yield gives its place to the waited-on request that asked, even when it gives it up at once and asks again")
    func yieldedPlaceGoesToTheAsker() async throws {
        let limiter = ConnectionLimiter(limit: 1)
        let record = Record()
        let ticket = Lock<UInt64?>(nil)
        let again = Lock<Task<Void, Error>?>(nil)
        // The holder's transfer stops as soon as it is asked (its release runs inside onYield)
        // and its fetch asks for a place again at once, in the background.
        let held = try await limiter.acquire(
            priority: .background,
            onYield: {
                record.order.withLock { $0.append("yield, \(limiter.queued) queued") }
                if let held = ticket.withLock({ $0 }) { limiter.release(ticket: held) }
                again.withLock {
                    $0 = Task {
                        let ticket = try await limiter.acquire(priority: .background, onYield: nil)
                        record.order.withLock { $0.append("background") }
                        limiter.release(ticket: ticket)
                    }
                }
            })
        ticket.withLock { $0 = held }
        try await limiter.acquire()
        record.order.withLock { $0.append("waited") }
        #expect(limiter.inUse == 1)
        limiter.release()
        try await again.withLock { $0 }?.value
        #expect(record.order.withLock { $0 } == ["yield, 1 queued", "waited", "background"])
        #expect(limiter.inUse == 0)
    }

    @Test("A yielder entry that holds the last reference to a fetch is dropped outside the lock: the fetch's end gives its place back")
    func yielderDroppedOutsideTheLock() async throws {
        let limiter = ConnectionLimiter(limit: 1)
        let promotion = ConnectionLimiter.Promotion()
        try await ReleasesWhenGone.hold(limiter, promotion: promotion)
        promotion.promote()
        // The waited-on request takes the promoted entry off (it is not asked) and drops it:
        // the fetch goes, and its place comes to the request (under the lock, a recursive
        // lock: a trap).
        try await limiter.acquire()
        #expect(limiter.inUse == 1)
        limiter.release()
        #expect(limiter.inUse == 0)
    }

    final class ReleasesWhenGone: Sendable {
        let limiter: ConnectionLimiter
        let ticket = Lock<UInt64?>(nil)
        let yields = Lock(0)

        init(_ limiter: ConnectionLimiter) { self.limiter = limiter }

        /// A place held by a fetch whose response was dropped: only its yield action (the
        /// yielder entry) keeps it once this returns, and its end releases the place.
        static func hold(_ limiter: ConnectionLimiter, promotion: ConnectionLimiter.Promotion) async throws {
            let fetch = ReleasesWhenGone(limiter)
            let ticket = try await ConnectionLimiter.$promotion.withValue(promotion) {
                try await limiter.acquire(priority: .background, onYield: { [fetch] in fetch.yields.withLock { $0 += 1 } })
            }
            fetch.ticket.withLock { $0 = ticket }
        }

        deinit {
            if let ticket = ticket.withLock({ $0 }) { limiter.release(ticket: ticket) }
        }
    }

    @Test("A background fetch a client comes to wait on is promoted: not asked to yield, and let in with the waited-on requests")
    func promoted() async throws {
        let limiter = ConnectionLimiter(limit: 1)
        let record = Record()
        // A background holder, then promoted: a waited-on request asks nobody to yield.
        let holding = ConnectionLimiter.Promotion()
        let held = try await ConnectionLimiter.$promotion.withValue(holding) {
            try await limiter.acquire(priority: .background, onYield: { record.yielded.withLock { $0 += 1 } })
        }
        holding.promote()
        let waited = Task {
            try await limiter.acquire()
            record.order.withLock { $0.append("waited") }
            limiter.release()
        }
        try await waitUntil("only \(limiter.queued) of 1 waiters queued") { limiter.queued >= 1 }
        #expect(record.yielded.withLock { $0 } == 0, "a promoted holder is not asked to yield")
        // A background waiter promoted while queued goes before a background one queued earlier.
        let plain = Task {
            let ticket = try await limiter.acquire(priority: .background, onYield: nil)
            record.order.withLock { $0.append("background") }
            limiter.release(ticket: ticket)
        }
        try await waitUntil("only \(limiter.queued) of 2 waiters queued") { limiter.queued >= 2 }
        let queuedPromotion = ConnectionLimiter.Promotion()
        let promotedWaiter = Task {
            let ticket = try await ConnectionLimiter.$promotion.withValue(queuedPromotion) {
                try await limiter.acquire(priority: .background, onYield: nil)
            }
            record.order.withLock { $0.append("promoted") }
            limiter.release(ticket: ticket)
        }
        try await waitUntil("only \(limiter.queued) of 3 waiters queued") { limiter.queued >= 3 }
        queuedPromotion.promote()
        limiter.release(ticket: held)
        try await waited.value
        try await promotedWaiter.value
        try await plain.value
        #expect(record.order.withLock { $0 } == ["waited", "promoted", "background"])
        #expect(ConnectionLimiter.$promotion.withValue(queuedPromotion) { ConnectionLimiter.effectivePriority } == .waited)
        #expect(limiter.inUse == 0)
    }

    final class Record: Sendable {
        let yielded = Lock(0)
        let order = Lock<[String]>([])
    }

    @Test("Fetches started under background priority carry it (task-local)")
    func taskLocal() async {
        #expect(ConnectionLimiter.priority == .waited)
        let inner = await ConnectionLimiter.$priority.withValue(.background) {
            await Task { ConnectionLimiter.priority }.value
        }
        #expect(inner == .background)
    }
}

@Suite("DASH segments for prefetch")
struct DASHSegmentTests {
    static func segments(_ mpd: String, url: String = "http://origin.test/vod/manifest.mpd") throws -> [(id: String, segments: [String])] {
        let manifest = try #require(DASHManifest(Array(mpd.utf8), url: URL(string: url)!))
        return DASHSegments(manifest).representations.map { ($0.id, $0.segments.map(\.absoluteString)) }
    }

    @Test("ffmpeg's manifest: a SegmentTimeline with repeats, $RepresentationID$ and $Number%05d$ from startNumber")
    func ffmpegTimeline() throws {
        let mpd = """
            <?xml version="1.0" encoding="utf-8"?>
            <MPD xmlns="urn:mpeg:dash:schema:mpd:2011" type="static" mediaPresentationDuration="PT4.0S">
            \t<Period id="0" start="PT0.0S">
            \t\t<AdaptationSet id="0" contentType="video">
            \t\t\t<Representation id="0" mimeType="video/mp4" bandwidth="203312">
            \t\t\t\t<SegmentTemplate timescale="12800" initialization="init-stream$RepresentationID$.m4s" media="chunk-stream$RepresentationID$-$Number%05d$.m4s" startNumber="1">
            \t\t\t\t\t<SegmentTimeline>
            \t\t\t\t\t\t<S t="0" d="12800" r="3" />
            \t\t\t\t\t</SegmentTimeline>
            \t\t\t\t</SegmentTemplate>
            \t\t\t</Representation>
            \t\t</AdaptationSet>
            \t</Period>
            </MPD>
            """
        let found = try Self.segments(mpd)
        #expect(found.map(\.id) == ["0"])
        #expect(found.first?.segments == (1...4).map { "http://origin.test/vod/chunk-stream0-0000\($0).m4s" })
    }

    @Test("a template inherited from the AdaptationSet, duration-numbered $Time$ and $Bandwidth$, BaseURLs at every level, two Representations")
    func inheritedDurationTemplate() throws {
        let mpd = """
            <MPD type="static" mediaPresentationDuration="PT0H0M5.5S"><BaseURL>http://cdn.test/a/</BaseURL>
            <Period><BaseURL>p1/</BaseURL>
            <AdaptationSet><SegmentTemplate timescale="1000" duration="2000" startNumber="0" media="$RepresentationID$/$Bandwidth$/t$Time$-n$Number$.mp4?x=1&amp;y=$$"/>
            <Representation id="low" bandwidth="100"/>
            <Representation id="high" bandwidth="900"><BaseURL>hi/</BaseURL><SegmentTemplate startNumber="7"/></Representation>
            </AdaptationSet></Period></MPD>
            """
        let found = try Self.segments(mpd)
        #expect(found.map(\.id) == ["low", "high"])
        #expect(
            found.first?.segments == [
                "http://cdn.test/a/p1/low/100/t0-n0.mp4?x=1&y=$", "http://cdn.test/a/p1/low/100/t2000-n1.mp4?x=1&y=$",
                "http://cdn.test/a/p1/low/100/t4000-n2.mp4?x=1&y=$",
            ])
        #expect(found.last?.segments.first == "http://cdn.test/a/p1/hi/high/900/t0-n7.mp4?x=1&y=$")
        #expect(found.last?.segments.count == 3)
    }

    @Test("SegmentList URLs in order; r=-1 repeats to the end of the Period; a timeline of millions is cut; live duration-only templates and SegmentBase give none")
    func listsRepeatsAndLimits() throws {
        let list = try Self.segments(
            """
            <MPD><Period><AdaptationSet><Representation id="r"><SegmentList><Initialization sourceURL="i.mp4"/>
            <SegmentURL media="s1.mp4"/><SegmentURL media='s2.mp4'/><!-- <SegmentURL media="no.mp4"/> --></SegmentList>
            </Representation></AdaptationSet></Period></MPD>
            """)
        #expect(list.first?.segments == ["http://origin.test/vod/s1.mp4", "http://origin.test/vod/s2.mp4"])
        let toEnd = try Self.segments(
            """
            <MPD mediaPresentationDuration="PT10S"><Period><AdaptationSet><Representation id="v">
            <SegmentTemplate timescale="10" media="$Number$.m4s"><SegmentTimeline><S t="0" d="30" r="-1"/></SegmentTimeline></SegmentTemplate>
            </Representation></AdaptationSet></Period></MPD>
            """)
        #expect(toEnd.first?.segments.count == 4, "10 s of 3 s segments")
        let huge = try Self.segments(
            """
            <MPD><Period><AdaptationSet><Representation id="v">
            <SegmentTemplate media="$Number$.m4s"><SegmentTimeline><S d="1" r="99999999"/></SegmentTimeline></SegmentTemplate>
            </Representation></AdaptationSet></Period></MPD>
            """)
        #expect(huge.first?.segments.count == DASHSegments.maximumSegments)
        let live = try Self.segments(
            """
            <MPD type="dynamic" mediaPresentationDuration="PT60S"><Period><AdaptationSet><Representation id="v">
            <SegmentTemplate duration="2" media="$Number$.m4s"/></Representation>
            <Representation id="b"><SegmentBase indexRange="0-99"/><BaseURL>whole.mp4</BaseURL></Representation></AdaptationSet></Period></MPD>
            """)
        #expect(live.isEmpty)
    }

    @Test("hostile manifests never trap: cut at every byte, and bytes replaced at random")
    func hostileManifests() {
        let mpd = """
            <MPD type="static" mediaPresentationDuration="PT4S"><!-- c --><![CDATA[x]]><Period><BaseURL>b/</BaseURL><AdaptationSet>
            <Representation id="0" bandwidth="1"><SegmentTemplate timescale="10" media="$Number%05d$-$Time$.m4s">
            <SegmentTimeline><S t="0" d="10" r="3"/><S d="5" r="-1"/></SegmentTimeline></SegmentTemplate></Representation>
            <Representation id="1"><SegmentList><SegmentURL media="x.mp4"/></SegmentList></Representation></AdaptationSet></Period></MPD>
            """
        let scalars = Array(mpd.unicodeScalars)
        let url = URL(string: "http://origin.test/m.mpd")!
        var total = 0
        for cut in 0...scalars.count {
            let text = String(String.UnicodeScalarView(scalars[..<cut])) + "<MPD>"
            total += DASHManifest(Array(text.utf8), url: url).map { DASHSegments($0).representations.count } ?? 0
        }
        var random = SplitMix64(seed: testSeed(0xDA5))
        let alphabet = Array("<>/\"'=$%0123456789 rStdPTMBaseURL-!?[]".unicodeScalars)
        for _ in 0..<2_000 {
            var mutated = scalars
            for _ in 0..<(1 + Int(random.next() % 6)) {
                mutated[Int(random.next() % UInt64(mutated.count))] = alphabet[Int(random.next() % UInt64(alphabet.count))]
            }
            let text = String(String.UnicodeScalarView(mutated))
            total += DASHManifest(Array(text.utf8), url: url).map { DASHSegments($0).representations.count } ?? 0
        }
        #expect(total > 0, "some of them still name segments")
        let whole = DASHManifest(Array(mpd.utf8), url: url).map { DASHSegments($0).representations } ?? []
        #expect(whole.map(\.id) == ["0", "1"] && whole.first?.segments.count == 4, "\(whole)")
    }

    @Test("identifiers: widths, unknown ones kept, $$ and an unclosed $ as written; xs:duration forms")
    func identifiersAndDurations() {
        #expect(DASHSegments.fill("$Number%03d$-$Time%02d$", representation: "r", number: 7, time: 123, bandwidth: "") == "007-123")
        #expect(DASHSegments.fill("a$Unknown$b$$c$Number", representation: "r", number: 1, time: 0, bandwidth: "") == "a$Unknown$b$c$Number")
        #expect(DASHSegments.seconds("PT4.0S") == 4)
        #expect(DASHSegments.seconds("P1DT1H2M3.5S") == 86_400 + 3_600 + 120 + 3.5)
        #expect(DASHSegments.seconds("PT") == 0)
        #expect(DASHSegments.seconds("4S") == nil && DASHSegments.seconds("PT4X") == nil && DASHSegments.seconds("PT4") == nil)
    }
}
