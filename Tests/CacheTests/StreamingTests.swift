// Adaptive streaming through the proxy with real parts: streams made by ffmpeg, served by
// nginx from a temporary directory, played by ffmpeg through the proxy (in process) in both
// modes; live playlists written by the test while the player plays; prefetch seen in the
// origin's log.
import Foundation
import LoopbackOrigins
import Testing

@testable import HTTPCache
@_spi(Locking) @testable import SparseCacheEngine
@testable import SparseCacheStore
@testable import SparseHTTP
import TestSupport

@Suite("Streaming through the proxy", .tags(.external, .slow), .unlessSkippingExternal, .unlessSkippingSlow, .serialized, .timeLimit(.minutes(8)))
struct StreamingTests {
    static func frames(_ result: ChildProcess.Result) -> [Substring] {
        result.text.split(separator: "\n").filter { !$0.hasPrefix("#") }
    }

    /// `<proxy>/<name>?url=<origin URL>` (URL mode) or `<proxy><path>` (reverse mode).
    static func proxied(_ proxy: ProxyFixture, _ origin: OriginServer, _ path: String, urlMode: Bool) -> String {
        guard urlMode else { return proxy.baseURL + path }
        let url = origin.baseURL.absoluteString + path
        return proxy.baseURL + "/" + (path.split(separator: "/").last ?? "x") + "?url=" + ProxyReferences.encode(url)
    }

    /// The playlist at `path` with every URL written absolute on `origin`.
    static func absolutePlaylist(root: String, _ path: String, as newPath: String, origin: OriginServer) throws {
        let text = try String(contentsOfFile: root + path, encoding: .utf8)
        let directory = origin.baseURL.absoluteString + (path as NSString).deletingLastPathComponent + "/"
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map { line -> String in
            if line.hasPrefix("#EXT-X-MAP:URI=\"") { return "#EXT-X-MAP:URI=\"" + directory + line.dropFirst("#EXT-X-MAP:URI=\"".count) }
            return line.isEmpty || line.hasPrefix("#") ? String(line) : directory + line
        }
        try lines.joined(separator: "\n").write(toFile: root + newPath, atomically: true, encoding: .utf8)
    }

    /// Requests that reached the origin for anything but playlists.
    static func segmentRequests(_ origin: OriginServer) -> Int {
        origin.requests().filter { !$0.path.hasSuffix(".m3u8") && !$0.path.hasSuffix(".mpd") }.count
    }

    /// Requests for segment bytes (revalidations answered 304 aside: nginx's Last-Modified
    /// of a file written a second ago gives no heuristic freshness).
    static func segmentFetches(_ origin: OriginServer) -> Int {
        origin.requests().filter { !$0.path.hasSuffix(".m3u8") && !$0.path.hasSuffix(".mpd") && $0.status != 304 }.count
    }

    @Test("VOD HLS, MPEG-TS and fMP4, relative and absolute URLs, both modes: played to the end, the second play fetches no segment, and plays with the origin stopped")
    func vod() async throws {
        let files = try TemporaryDirectory("hls-origin")
        defer { files.remove() }
        try await FFmpeg.hls(files.file("ts"), fmp4: false)
        try await FFmpeg.hls(files.file("fmp4"), fmp4: true)
        let origin = try await OriginServer.nginx(root: files.path)
        defer { origin.stop() }
        for kind in ["ts", "fmp4"] {
            try Self.absolutePlaylist(root: files.path, "/\(kind)/index.m3u8", as: "/\(kind)/absolute.m3u8", origin: origin)
        }
        let expected = try await FFmpeg.play(origin.baseURL.absoluteString + "/ts/index.m3u8")
        let expectedFMP4 = try await FFmpeg.play(origin.baseURL.absoluteString + "/fmp4/index.m3u8")
        #expect(expected.status == 0 && Self.frames(expected).count == 100, "\(expected.errorText)")
        #expect(expectedFMP4.status == 0 && Self.frames(expectedFMP4).count == 100, "\(expectedFMP4.errorText)")

        var last: (ProxyFixture, String)?
        for kind in ["ts", "fmp4"] {
            for playlist in ["index.m3u8", "absolute.m3u8"] {
                for urlMode in [false, true] {
                    let proxy = try await ProxyFixture(origin: urlMode ? nil : origin.baseURL)
                    let url = Self.proxied(proxy, origin, "/\(kind)/\(playlist)", urlMode: urlMode)
                    let what = "\(kind) \(playlist) \(urlMode ? "URL mode" : "reverse")"
                    let before = Self.segmentRequests(origin)
                    let played = try await FFmpeg.play(url)
                    let reference = kind == "ts" ? expected : expectedFMP4
                    #expect(played.status == 0, "\(what): \(played.errorText)")
                    #expect(Self.frames(played) == Self.frames(reference), "\(what): the frames differ from a direct play")
                    #expect(Self.segmentRequests(origin) > before, "\(what): the segments came through the proxy")
                    // Every segment is in the cache: a second play asks the origin for none.
                    let cached = Self.segmentFetches(origin)
                    let again = try await FFmpeg.play(url)
                    #expect(again.status == 0 && Self.frames(again) == Self.frames(reference), "\(what): \(again.errorText)")
                    #expect(Self.segmentFetches(origin) == cached, "\(what): the second play fetched segments again")
                    if let (previous, _) = last { await previous.stop() }
                    last = (proxy, url)
                }
            }
        }
        // The origin gone: the stale playlist and the cached segments still play.
        origin.stop()
        if let (proxy, url) = last {
            let offline = try await FFmpeg.play(url)
            #expect(offline.status == 0 && Self.frames(offline) == Self.frames(expectedFMP4), "\(offline.errorText)")
            await proxy.stop()
        }
    }

    @Test("DASH VOD (ffmpeg -f dash) plays through the proxy in both modes; the second play fetches no segment")
    func dash() async throws {
        let files = try TemporaryDirectory("dash-origin")
        defer { files.remove() }
        try await FFmpeg.makeStream(files.file("dash"), ["-f", "dash", "-seg_duration", "1", files.file("dash/manifest.mpd")])
        let origin = try await OriginServer.nginx(root: files.path)
        defer { origin.stop() }
        let expected = try await FFmpeg.play(origin.baseURL.absoluteString + "/dash/manifest.mpd")
        #expect(expected.status == 0 && Self.frames(expected).count == 100, "\(expected.errorText)")
        for urlMode in [false, true] {
            let proxy = try await ProxyFixture(origin: urlMode ? nil : origin.baseURL)
            let url = Self.proxied(proxy, origin, "/dash/manifest.mpd", urlMode: urlMode)
            let before = Self.segmentRequests(origin)
            let played = try await FFmpeg.play(url)
            #expect(played.status == 0 && Self.frames(played) == Self.frames(expected), "\(urlMode): \(played.errorText)")
            #expect(Self.segmentRequests(origin) > before)
            let cached = Self.segmentFetches(origin)
            let again = try await FFmpeg.play(url)
            #expect(again.status == 0 && Self.frames(again) == Self.frames(expected), "\(again.errorText)")
            #expect(Self.segmentFetches(origin) == cached, "the second play fetched segments again")
            await proxy.stop()
        }
    }

    @Test("Automatic prefetch: the window follows the origin's speed over the stream's: 8 ahead from a fast origin, at most 2 from one that barely keeps up")
    func automaticPrefetch() async throws {
        let files = try TemporaryDirectory("auto-prefetch")
        defer { files.remove() }
        // Ten 4-second segments of 2 MiB (512 KiB/s): the prefetcher only looks at sizes and
        // EXTINF durations.
        var playlist = "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:4\n#EXT-X-PLAYLIST-TYPE:VOD\n"
        for index in 0..<10 { playlist += "#EXTINF:4.000,\nseg\(index).ts\n" }
        playlist += "#EXT-X-ENDLIST\n"
        for speed in ["fast", "slow"] {
            try FileManager.default.createDirectory(atPath: files.file(speed), withIntermediateDirectories: true)
            try playlist.write(toFile: files.file("\(speed)/index.m3u8"), atomically: true, encoding: .utf8)
            for index in 0..<10 { _ = try originFile(files.file(speed), "seg\(index).ts", count: 2 << 20, seed: 300 + UInt64(index)) }
        }
        // 600 KiB/s, 1.2 times what the stream needs. (nginx sends the first second's worth at
        // once, so a segment measures at about 1.6 times: still a window of 2.)
        let origin = try await OriginServer.nginx(root: files.path, locations: "location /slow/ { limit_rate 600k; }")
        defer { origin.stop() }
        let proxy = try await ProxyFixture(origin: origin.baseURL)
        let prefetcher = proxy.proxy.streaming.prefetcher
        func fetched(_ speed: String) -> Set<String> {
            Set(origin.requests().map(\.path).filter { $0.hasPrefix("/\(speed)/seg") })
        }
        func window(_ speed: String) -> Int? { prefetcher.windows.first { $0.key.hasSuffix("/\(speed)/index.m3u8") }?.value }
        // A window in which nothing new may be asked: settled is 1.5 s without a new request
        // (a check that no more than the window was prefetched, not a wait for one).
        func settle(_ speed: String) async throws {
            var last = -1
            while fetched(speed).count != last {
                last = fetched(speed).count
                try await Task.sleep(for: .milliseconds(1500))
            }
        }

        let fast = try await Curl.run(proxy.baseURL + "/fast/index.m3u8")
        #expect(fast.status == 200)
        #expect(try await eventually(interval: .milliseconds(50)) { window("fast") == 8 }, "a fast origin: \(prefetcher.windows)")
        try await settle("fast")
        #expect(fetched("fast") == Set((0..<8).map { "/fast/seg\($0).ts" }), "eight ahead of a player at the start: \(fetched("fast").sorted())")

        let slow = try await Curl.run(proxy.baseURL + "/slow/index.m3u8")
        #expect(slow.status == 200)
        // Measured once the first segment is in (3 until then).
        #expect(try await eventually(interval: .milliseconds(50)) { (window("slow") ?? 3) <= 2 }, "an origin that barely keeps up: \(prefetcher.windows)")
        try await settle("slow")
        #expect(fetched("slow").count <= 3, "no more than the first measurement allowed: \(fetched("slow").sorted())")
        await proxy.stop()
    }

    @Test("DASH prefetch: after the player's first segment of a Representation, the next N of that Representation; nothing past the window")
    func dashPrefetch() async throws {
        let files = try TemporaryDirectory("dash-prefetch")
        defer { files.remove() }
        try await FFmpeg.makeStream(files.file("dash"), seconds: 6, ["-f", "dash", "-seg_duration", "1", files.file("dash/manifest.mpd")])
        let origin = try await OriginServer.nginx(root: files.path)
        defer { origin.stop() }
        var streaming = StreamingOptions()
        streaming.prefetchSegments = 2
        let proxy = try await ProxyFixture(origin: origin.baseURL, streaming: streaming)
        func fetched(_ number: Int) -> Bool { origin.requests().contains { $0.path == "/dash/chunk-stream0-0000\(number).m4s" } }
        let manifest = try await Curl.run(proxy.baseURL + "/dash/manifest.mpd")
        #expect(manifest.status == 200 && manifest.text.contains("SegmentTemplate"), "\(manifest)")
        // Which Representation the player plays shows with its first segment: a window in
        // which no segment may be asked.
        try await Task.sleep(for: .milliseconds(300))
        #expect(!fetched(1), "nothing before the player picks a Representation")
        let first = try await Curl.run(proxy.baseURL + "/dash/chunk-stream0-00001.m4s")
        #expect(first.status == 200 && first.body.count > 0, "\(first)")
        #expect(try await eventually(interval: .milliseconds(50)) { fetched(2) && fetched(3) }, "the next two segments are prefetched")
        try await Task.sleep(for: .seconds(1))  // a window for a third one to be asked
        #expect(!fetched(4), "no more than two ahead")
        func bodies(_ number: Int) -> Int {
            origin.requests().filter { $0.path == "/dash/chunk-stream0-0000\(number).m4s" && $0.status != 304 }.count
        }
        let prefetched = bodies(3)
        let third = try await Curl.run(proxy.baseURL + "/dash/chunk-stream0-00003.m4s")
        #expect(third.status == 200)
        #expect(try await eventually(interval: .milliseconds(50)) { fetched(4) && fetched(5) }, "the window moves with the player")
        // At most revalidated (nginx's fresh Last-Modified gives no heuristic lifetime).
        #expect(bodies(3) == prefetched, "the player's segment came from the cache: \(origin.requests().map(\.path))")
        await proxy.stop()
    }

    @Test("DASH with video and audio: a player plays one Representation of each AdaptationSet at once, and each is prefetched; neither stops the other's prefetch")
    func dashAudioAndVideo() async throws {
        let files = try TemporaryDirectory("dash-av")
        defer { files.remove() }
        try await FFmpeg.makeStream(files.file("dash"), seconds: 6, audio: true, ["-f", "dash", "-seg_duration", "1", files.file("dash/manifest.mpd")])
        let origin = try await OriginServer.nginx(root: files.path)
        defer { origin.stop() }
        var streaming = StreamingOptions()
        streaming.prefetchSegments = 2
        let proxy = try await ProxyFixture(origin: origin.baseURL, streaming: streaming)
        func fetched(_ stream: Int, _ number: Int) -> Bool {
            origin.requests().contains { $0.path == "/dash/chunk-stream\(stream)-0000\(number).m4s" }
        }
        let manifest = try await Curl.run(proxy.baseURL + "/dash/manifest.mpd")
        #expect(manifest.status == 200 && manifest.text.contains("AdaptationSet"), "\(manifest)")
        // As a player does: video and audio side by side.
        for stream in 0...1 {
            let first = try await Curl.run(proxy.baseURL + "/dash/chunk-stream\(stream)-00001.m4s")
            #expect(first.status == 200 && first.body.count > 0, "\(first)")
        }
        #expect(
            try await eventually(interval: .milliseconds(50)) { (0...1).allSatisfy { fetched($0, 2) && fetched($0, 3) } },
            "the next two segments of both streams are prefetched: \(origin.requests().map(\.path))")
        #expect(proxy.proxy.streaming.prefetcher.windows.count == 2, "one session per AdaptationSet: \(proxy.proxy.streaming.prefetcher.windows)")
        // The player goes on with video: the audio session stays.
        let third = try await Curl.run(proxy.baseURL + "/dash/chunk-stream0-00003.m4s")
        #expect(third.status == 200)
        #expect(try await eventually(interval: .milliseconds(50)) { fetched(0, 4) }, "the video window moves with the player")
        #expect(proxy.proxy.streaming.prefetcher.windows.count == 2, "\(proxy.proxy.streaming.prefetcher.windows)")
        await proxy.stop()
    }

    @Test("Prefetch: a playlist a page on another origin may not read (no Access-Control-Allow-Origin for it) starts no prefetch; the same playlist read by that page does")
    func refusedPlaylistPrefetchesNothing() async throws {
        let files = try TemporaryDirectory("prefetch-refused")
        defer { files.remove() }
        try await FFmpeg.hls(files.file("vod"), fmp4: false, seconds: 4)
        // nginx sends no CORS fields: a browser refuses the playlist to a page on another origin.
        let origin = try await OriginServer.nginx(root: files.path)
        defer { origin.stop() }
        var streaming = StreamingOptions()
        streaming.prefetchSegments = 2
        func fetched() -> [String] { origin.requests().map(\.path).filter { $0.hasSuffix(".ts") } }
        let refused = try await ProxyFixture(origin: origin.baseURL, streaming: streaming)
        let playlist = try await Curl.run(refused.baseURL + "/vod/index.m3u8", ["-H", "Origin: http://player.example"])
        #expect(playlist.status == 200 && playlist.headers["access-control-allow-origin"] == nil, "\(playlist)")
        // What the prefetch would have asked for by now (it starts at once), it has not.
        try await Task.sleep(for: .seconds(1))
        #expect(fetched().isEmpty, "nothing prefetched for a refused playlist: \(fetched())")
        #expect(refused.proxy.streaming.prefetcher.windows.isEmpty)
        await refused.stop()

        // The same page, listed with --cors: it reads the playlist, and its segments come.
        let allowed = try await ProxyFixture(origin: origin.baseURL, streaming: streaming, cors: CORSPolicy(origins: ["http://player.example"]))
        let read = try await Curl.run(allowed.baseURL + "/vod/index.m3u8", ["-H", "Origin: http://player.example"])
        #expect(read.status == 200 && read.headers["access-control-allow-origin"] == "http://player.example", "\(read)")
        #expect(try await eventually(interval: .milliseconds(50)) { fetched().count >= 2 }, "the first two segments are prefetched: \(fetched())")
        await allowed.stop()
    }

    /// A live playlist of `segments` 1-second segments, as a packager writes it.
    static func livePlaylist(_ segments: Int, ended: Bool) -> String {
        var text = "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:2\n#EXT-X-MEDIA-SEQUENCE:0\n"
        for index in 0..<segments { text += "#EXTINF:1.000000,\nseg\(index).ts\n" }
        return text + (ended ? "#EXT-X-ENDLIST\n" : "")
    }

    @Test(
        "Live HLS: a playlist that grows while ffmpeg plays it through the proxy plays through; the player gets segments that did not exist when it started",
        arguments: ["heuristic", "max-age"])
    func live(freshness: String) async throws {
        let staging = try TemporaryDirectory("live-staging")
        defer { staging.remove() }
        let count = 8
        try await FFmpeg.hls(staging.path, fmp4: false, seconds: count, live: true)
        let files = try TemporaryDirectory("live-origin")
        defer { files.remove() }
        try FileManager.default.createDirectory(atPath: files.file("live"), withIntermediateDirectories: true)
        // "heuristic": no freshness information, and a Last-Modified an hour old (a packager
        // that copies files keeps their times): 10% of the age would be 6 minutes of a
        // playlist that never changes. "max-age": the origin says 1 second.
        let locations = freshness == "max-age" ? #"location ~ \.m3u8$ { add_header Cache-Control "max-age=1"; }"# : ""
        let origin = try await OriginServer.nginx(root: files.path, locations: locations)
        defer { origin.stop() }
        @Sendable func publish(_ segments: Int, ended: Bool) throws {
            for index in 0..<segments where !FileManager.default.fileExists(atPath: files.file("live/seg\(index).ts")) {
                try FileManager.default.copyItem(atPath: staging.file("seg\(index).ts"), toPath: files.file("live/seg\(index).ts"))
            }
            try Self.livePlaylist(segments, ended: ended).write(toFile: files.file("live/index.m3u8"), atomically: true, encoding: .utf8)
            try FileManager.default.setAttributes([.modificationDate: Date(timeIntervalSinceNow: -3600)], ofItemAtPath: files.file("live/index.m3u8"))
        }
        try publish(3, ended: false)
        let proxy = try await ProxyFixture(origin: origin.baseURL)
        let player = Task { try await FFmpeg.play(proxy.baseURL + "/live/index.m3u8", seconds: 60) }
        // The packager: one more segment a second, then the end.
        try await waitUntil(timeout: .seconds(60), "the player never asked for the first segment") {
            origin.requests().contains(where: { $0.path == "/live/seg0.ts" })
        }
        for segments in 4...count {
            try await Task.sleep(for: .seconds(1))  // pacing: the packager's segment a second
            try publish(segments, ended: segments == count)
        }
        let played = try await player.value
        #expect(played.status == 0, "the player stalled or failed (124: killed at its deadline): \(played.errorText)")
        #expect(Self.frames(played).count == count * 25, "every segment played: \(Self.frames(played).count) frames")
        #expect(origin.requests().contains { $0.path == "/live/seg\(count - 1).ts" }, "the last segment came through the proxy")
        #expect(origin.requests().filter { $0.path == "/live/index.m3u8" }.count >= count - 3, "the playlist was fetched as it changed")
        await proxy.stop()
    }

    @Test("Live HLS written by ffmpeg into nginx's root as the player plays it through the proxy: played to the end, with segments that did not exist when it started")
    func livePackager() async throws {
        try FFmpeg.require()
        let files = try TemporaryDirectory("live-packager")
        defer { files.remove() }
        let live = files.file("live")
        try FileManager.default.createDirectory(atPath: live, withIntermediateDirectories: true)
        let origin = try await OriginServer.nginx(root: files.path)
        defer { origin.stop() }
        let proxy = try await ProxyFixture(origin: origin.baseURL)
        let seconds = 8
        // The packager: ffmpeg at real time (-re), a segment a second, each written to a
        // temporary name and renamed (nginx never serves half a segment), the playlist
        // rewritten as each segment ends and closed with EXT-X-ENDLIST at the end.
        let packager = Task {
            try await ChildProcess.run(
                "ffmpeg",
                [
                    "-v", "error", "-nostdin", "-re", "-f", "lavfi", "-i", "testsrc=duration=\(seconds):size=320x180:rate=25", "-c:v", "libx264",
                    "-preset", "ultrafast", "-g", "25", "-keyint_min", "25", "-sc_threshold", "0", "-f", "hls", "-hls_time", "1",
                    "-hls_list_size", "0", "-hls_flags", "temp_file", "-hls_segment_filename", live + "/seg%d.ts", live + "/index.m3u8",
                ])
        }
        func published() -> Int {
            let text = (try? String(contentsOfFile: live + "/index.m3u8", encoding: .utf8)) ?? ""
            return text.split(separator: "\n").filter { $0.hasSuffix(".ts") }.count
        }
        #expect(try await eventually(interval: .milliseconds(50)) { published() >= 1 }, "the packager published a first segment")
        let atStart = published()
        // From the first segment (a live player otherwise starts three from the end).
        let played = try await FFmpeg.play(proxy.baseURL + "/live/index.m3u8", seconds: 60, input: ["-live_start_index", "0"])
        let packaged = try await packager.value
        #expect(packaged.status == 0, "ffmpeg as the packager failed: \(packaged.errorText)")
        #expect(played.status == 0, "the player stalled or failed (124: killed at its deadline): \(played.errorText)")
        #expect(Self.frames(played).count == seconds * 25, "every frame played: \(Self.frames(played).count)")
        let fetched = Set(origin.requests().map(\.path).filter { $0.hasSuffix(".ts") })
        let later = fetched.filter { path in Int(path.dropFirst("/live/seg".count).dropLast(3)).map { $0 >= atStart } ?? false }
        #expect(!later.isEmpty && fetched.count == published(), "\(atStart) segments at the start; through the proxy: \(fetched.sorted())")
        await proxy.stop()
    }

    @Test("Prefetch: the next N segments after a media playlist and after each segment; a variant switch stops the old variant's; nothing past the window")
    func prefetch() async throws {
        let staging = try TemporaryDirectory("prefetch-staging")
        defer { staging.remove() }
        try await FFmpeg.hls(staging.path, fmp4: false, seconds: 8)
        let files = try TemporaryDirectory("prefetch-origin")
        defer { files.remove() }
        for variant in ["low", "high"] { try FileManager.default.copyItem(atPath: staging.path, toPath: files.file(variant)) }
        try "#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=400000\nlow/index.m3u8\n#EXT-X-STREAM-INF:BANDWIDTH=800000\nhigh/index.m3u8\n"
            .write(toFile: files.file("master.m3u8"), atomically: true, encoding: .utf8)
        let origin = try await OriginServer.nginx(root: files.path)
        defer { origin.stop() }
        var streaming = StreamingOptions()
        streaming.prefetchSegments = 2
        let proxy = try await ProxyFixture(origin: origin.baseURL, streaming: streaming)
        func fetched(_ path: String) -> Bool { origin.requests().contains { $0.path == path } }
        func settle() async throws -> Int {
            // Nothing in flight: the origin's log stops growing (for 0.7 s: a window in which
            // nothing new may be asked, checked after it).
            var last = -1
            while origin.requests().count != last {
                last = origin.requests().count
                try await Task.sleep(for: .milliseconds(700))
            }
            return last
        }

        let master = try await Curl.run(proxy.baseURL + "/master.m3u8")
        #expect(master.status == 200 && master.text.contains("/low/index.m3u8"), "\(master)")
        let low = try await Curl.run(proxy.baseURL + "/low/index.m3u8")
        #expect(low.status == 200 && low.text.contains("/low/seg0.ts"))
        #expect(try await eventually(interval: .milliseconds(50)) { fetched("/low/seg0.ts") && fetched("/low/seg1.ts") }, "the first two segments are prefetched")
        _ = try await settle()
        #expect(!fetched("/low/seg2.ts"), "no more than two ahead")
        #expect(proxy.proxy.streaming.prefetcher.pinnedSegments.values.first == [0, 1], "prefetched segments are pinned")

        let first = try await Curl.run(proxy.baseURL + "/low/seg0.ts")
        #expect(first.status == 200 && first.body.count > 0)
        // Only revalidated (nginx's fresh Last-Modified gives no heuristic lifetime), not fetched again.
        #expect(origin.requests().filter { $0.path == "/low/seg0.ts" && $0.status != 304 }.count == 1, "the player's segment was in the cache")
        #expect(try await eventually(interval: .milliseconds(50)) { fetched("/low/seg2.ts") }, "the window moves with the player")
        _ = try await settle()
        #expect(!fetched("/low/seg3.ts"))
        #expect(proxy.proxy.streaming.prefetcher.pinnedSegments.values.first == [1, 2], "the segment the player has is unpinned")

        // The player switches to the other variant at segment 3.
        _ = try await Curl.run(proxy.baseURL + "/high/index.m3u8")
        let switched = try await Curl.run(proxy.baseURL + "/high/seg3.ts")
        #expect(switched.status == 200)
        #expect(try await eventually(interval: .milliseconds(50)) { fetched("/high/seg4.ts") && fetched("/high/seg5.ts") })
        let quiet = try await settle()
        #expect(!fetched("/low/seg3.ts") && !fetched("/high/seg0.ts") && !fetched("/high/seg6.ts"), "\(origin.requests().map(\.path))")
        #expect(proxy.proxy.streaming.prefetcher.pinnedSegments.values.sorted { $0.count < $1.count } == [[4, 5]], "the old variant's pins are gone")
        // The player stops: nothing more is fetched (a window for a request to come).
        try await Task.sleep(for: .seconds(1))
        #expect(origin.requests().count == quiet)
        await proxy.stop()
    }

    @Test("Priority: a player's request is not queued behind background prefetches holding every connection to the origin")
    func waitedBeforePrefetch() async throws {
        let files = try TemporaryDirectory("priority-origin")
        defer { files.remove() }
        let length = 8 << 20
        let bytes = try originFile(files.path, "seek.bin", count: length, seed: 19)
        try FileManager.default.createDirectory(atPath: files.file("slow"), withIntermediateDirectories: true)
        let prefetches = HTTPRangeSource.connectionsPerOrigin
        for index in 0..<prefetches { try FileManager.default.linkItem(atPath: files.file("seek.bin"), toPath: files.file("slow/p\(index).bin")) }
        // 8 MiB at 128 KiB/s: each prefetch would hold its connection for a minute.
        let origin = try await OriginServer.nginx(root: files.path, locations: "location /slow/ { limit_rate 128k; }")
        defer { origin.stop() }
        let proxy = try await ProxyFixture(origin: origin.baseURL)
        let limiter = HTTPRangeSource.limiter(for: origin.baseURL)
        var running: [Task<Void, Never>] = []
        for index in 0..<prefetches {
            let source = try HTTPRangeSource(url: origin.url("slow/p\(index).bin"))
            let cache = proxy.cache
            running.append(Task { await ConnectionLimiter.$priority.withValue(.background) { try? await cache.prefetch(source) } })
        }
        // Every place taken by a transfer under way (nginx logs a request only when it ends).
        _ = try await eventually(timeout: .seconds(30), interval: .milliseconds(20)) { limiter.inUse >= prefetches }
        #expect(limiter.inUse == prefetches, "the prefetches hold every connection")
        // A seek into a resource the cache has never seen: first contact, then the range.
        // Queued behind the prefetches it would wait about a minute (curl gives up at 30 s).
        let middle = length / 2
        let seek = try await Curl.run(proxy.baseURL + "/seek.bin", ["-r", "\(middle)-\(middle + 65535)"], timeout: 30)
        #expect(seek.status == 206 && sameBytes(seek.body, bytes[middle..<(middle + 65536)]), "\(seek)")
        // The prefetch that yielded ended its request and asks again: back to every place taken.
        #expect(try await eventually(interval: .milliseconds(50)) { origin.requests().contains { $0.path.hasPrefix("/slow/") } }, "a prefetch yielded its connection")
        _ = try await eventually(interval: .milliseconds(20)) { limiter.inUse >= prefetches }
        #expect(limiter.inUse == prefetches, "the yielded prefetch resumed")
        for task in running { task.cancel() }
        for task in running { await task.value }
        await proxy.stop()
    }

    @Test("Priority: a prefetch the player comes to wait on is promoted; it keeps its connection when every other one is wanted")
    func promotedPrefetch() async throws {
        let files = try TemporaryDirectory("promotion-origin")
        defer { files.remove() }
        let length = 2 << 20
        let segment = try originFile(files.path, "segment.bin", count: length, seed: 23)
        try FileManager.default.createDirectory(atPath: files.file("slow"), withIntermediateDirectories: true)
        try FileManager.default.linkItem(atPath: files.file("segment.bin"), toPath: files.file("slow/segment.bin"))
        let others = HTTPRangeSource.connectionsPerOrigin - 1
        for index in 0...others { try FileManager.default.linkItem(atPath: files.file("segment.bin"), toPath: files.file("slow/o\(index).bin")) }
        let origin = try await OriginServer.nginx(root: files.path, locations: "location /slow/ { limit_rate 1m; }")
        defer { origin.stop() }
        let proxy = try await ProxyFixture(origin: origin.baseURL)
        let limiter = HTTPRangeSource.limiter(for: origin.baseURL)
        // The segment is being prefetched (in the background) when the player asks for it.
        let source = try HTTPRangeSource(url: origin.url("slow/segment.bin"))
        let cache = proxy.cache
        let prefetch = Task { await ConnectionLimiter.$priority.withValue(.background) { try? await cache.prefetch(source) } }
        // First contact asks for the whole segment (no range): its answer is arriving.
        #expect(try await eventually(interval: .milliseconds(50)) { cache.statistics.bytesReceived > 0 }, "first contact of the prefetch")
        let middle = length / 2
        async let player = Curl.run(proxy.baseURL + "/slow/segment.bin", ["-r", "\(middle)-\(middle + 99)"], timeout: 60)
        // The player waits on the prefetch's fetch (and so has promoted it) beside the prefetch.
        try await waitUntil("the player never waited on the prefetch") { await cache.mostInterest(key: source.key) >= 2 }
        // Then clients want every other connection, and one more: only a background holder
        // could give its place up, and the promoted prefetch is not one any more.
        let rivals = (0...others).map { index in
            Task { try await Curl.run(proxy.baseURL + "/slow/o\(index).bin", ["-r", "0-99"], timeout: 60) }
        }
        let answer = try await player
        #expect(answer.status == 206 && sameBytes(answer.body, segment[middle..<(middle + 100)]), "\(answer)")
        for rival in rivals {
            let result = try await rival.value
            #expect(result.status == 206 && sameBytes(result.body, segment[0..<100]), "\(result)")
        }
        await prefetch.value
        #expect(proxy.cache.statistics.yields == 0, "the promoted prefetch yielded: \(proxy.cache.statistics)")
        #expect(limiter.inUse == 0)
        await proxy.stop()
    }

    @Test("Reverse mode, segments on another origin: played through the proxy; ?url= is honoured only for origins a playlist named")
    func reverseOtherOrigin() async throws {
        let segments = try TemporaryDirectory("hls-cdn")
        defer { segments.remove() }
        try await FFmpeg.hls(segments.file("ts"), fmp4: false)
        let cdn = try await OriginServer.nginx(root: segments.path)
        defer { cdn.stop() }
        let playlists = try TemporaryDirectory("hls-playlists")
        defer { playlists.remove() }
        try FileManager.default.createDirectory(atPath: playlists.file("ts"), withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: segments.file("ts/index.m3u8"), toPath: playlists.file("ts/index.m3u8"))
        try Self.absolutePlaylist(root: playlists.path, "/ts/index.m3u8", as: "/ts/index.m3u8", origin: cdn)
        let origin = try await OriginServer.nginx(root: playlists.path)
        defer { origin.stop() }
        let proxy = try await ProxyFixture(origin: origin.baseURL)
        let direct = try await FFmpeg.play(cdn.baseURL.absoluteString + "/ts/index.m3u8")
        let before = Self.segmentRequests(cdn)
        // Before any playlist named it, the other origin is not reachable through the proxy:
        // the target maps onto the origin (which has no such file).
        let early = try await Curl.run(proxy.baseURL + "/seg0.ts?url=" + ProxyReferences.encode(cdn.url("ts/seg0.ts").absoluteString))
        #expect(early.status == 404, "\(early)")
        #expect(Self.segmentRequests(cdn) == before)
        let played = try await FFmpeg.play(proxy.baseURL + "/ts/index.m3u8")
        #expect(played.status == 0 && Self.frames(played) == Self.frames(direct) && !Self.frames(direct).isEmpty, "\(played.errorText)")
        #expect(Self.segmentRequests(cdn) > before, "the segments came from the other origin")
        let throughProxy = proxy.log.all.filter { $0.target.hasPrefix("/seg") && $0.target.contains("?url=") && $0.status < 300 }
        #expect(throughProxy.count >= 4, "the player asked the proxy for every segment: \(proxy.log.all.map(\.target))")
        let cached = Self.segmentFetches(cdn)
        let again = try await FFmpeg.play(proxy.baseURL + "/ts/index.m3u8")
        #expect(again.status == 0 && Self.segmentFetches(cdn) == cached, "the second play is served from the cache")
        await proxy.stop()
    }
}
