// Adaptive streaming through the proxy with real parts: streams made by ffmpeg, served by
// nginx from a temporary directory, played by ffmpeg through the proxy (in process) in both
// modes; live playlists written by the test while the player plays; prefetch seen in the
// origin's log.
import Foundation
import LoopbackOrigins
import Testing

@testable import HTTPCache
@testable import SparseCacheEngine
@testable import SparseCacheStore
@testable import SparseHTTP

@Suite("Streaming through the proxy", .serialized, .timeLimit(.minutes(4)))
struct StreamingTests {
    /// Encodes a short test picture (25 fps, a key frame every second) and writes it with
    /// ffmpeg's `muxer` arguments into `directory`.
    static func makeStream(_ directory: String, seconds: Int = 4, _ muxer: [String]) async throws {
        try ProxyCLITests.requireFFmpeg()
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let made = try await ChildProcess.run(
            "ffmpeg",
            [
                "-v", "error", "-nostdin", "-f", "lavfi", "-i", "testsrc=duration=\(seconds):size=320x180:rate=25", "-c:v", "libx264",
                "-preset", "ultrafast", "-g", "25", "-keyint_min", "25", "-sc_threshold", "0",
            ] + muxer)
        if made.status != 0 { throw OriginFailure("ffmpeg could not make the stream: \(made.errorText)") }
    }

    static func hls(_ directory: String, fmp4: Bool, seconds: Int = 4, live: Bool = false) async throws {
        var muxer = ["-f", "hls", "-hls_time", "1", "-hls_list_size", "0"]
        if !live { muxer += ["-hls_playlist_type", "vod"] }
        if fmp4 {
            muxer += ["-hls_segment_type", "fmp4", "-hls_fmp4_init_filename", "init.mp4", "-hls_segment_filename", directory + "/seg%d.m4s"]
        } else {
            muxer += ["-hls_segment_filename", directory + "/seg%d.ts"]
        }
        try await makeStream(directory, seconds: seconds, muxer + [directory + "/index.m3u8"])
    }

    /// Frame hashes of a whole play (ffmpeg as the player), with a deadline: a stalled live
    /// play fails instead of hanging.
    static func play(_ url: String, seconds: Int = 90) async throws -> ChildProcess.Result {
        try await ChildProcess.run(
            "/usr/bin/timeout", [String(seconds), "ffmpeg", "-v", "error", "-nostdin", "-i", url, "-f", "framemd5", "-"])
    }

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
        try await Self.hls(files.file("ts"), fmp4: false)
        try await Self.hls(files.file("fmp4"), fmp4: true)
        let origin = try await OriginServer.nginx(root: files.path)
        defer { origin.stop() }
        for kind in ["ts", "fmp4"] {
            try Self.absolutePlaylist(root: files.path, "/\(kind)/index.m3u8", as: "/\(kind)/absolute.m3u8", origin: origin)
        }
        let expected = try await Self.play(origin.baseURL.absoluteString + "/ts/index.m3u8")
        let expectedFMP4 = try await Self.play(origin.baseURL.absoluteString + "/fmp4/index.m3u8")
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
                    let played = try await Self.play(url)
                    let reference = kind == "ts" ? expected : expectedFMP4
                    #expect(played.status == 0, "\(what): \(played.errorText)")
                    #expect(Self.frames(played) == Self.frames(reference), "\(what): the frames differ from a direct play")
                    #expect(Self.segmentRequests(origin) > before, "\(what): the segments came through the proxy")
                    // Every segment is in the cache: a second play asks the origin for none.
                    let cached = Self.segmentFetches(origin)
                    let again = try await Self.play(url)
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
            let offline = try await Self.play(url)
            #expect(offline.status == 0 && Self.frames(offline) == Self.frames(expectedFMP4), "\(offline.errorText)")
            await proxy.stop()
        }
    }

    @Test("DASH VOD (ffmpeg -f dash) plays through the proxy in both modes; the second play fetches no segment")
    func dash() async throws {
        let files = try TemporaryDirectory("dash-origin")
        defer { files.remove() }
        try await Self.makeStream(files.file("dash"), ["-f", "dash", "-seg_duration", "1", files.file("dash/manifest.mpd")])
        let origin = try await OriginServer.nginx(root: files.path)
        defer { origin.stop() }
        let expected = try await Self.play(origin.baseURL.absoluteString + "/dash/manifest.mpd")
        #expect(expected.status == 0 && Self.frames(expected).count == 100, "\(expected.errorText)")
        for urlMode in [false, true] {
            let proxy = try await ProxyFixture(origin: urlMode ? nil : origin.baseURL)
            let url = Self.proxied(proxy, origin, "/dash/manifest.mpd", urlMode: urlMode)
            let before = Self.segmentRequests(origin)
            let played = try await Self.play(url)
            #expect(played.status == 0 && Self.frames(played) == Self.frames(expected), "\(urlMode): \(played.errorText)")
            #expect(Self.segmentRequests(origin) > before)
            let cached = Self.segmentFetches(origin)
            let again = try await Self.play(url)
            #expect(again.status == 0 && Self.frames(again) == Self.frames(expected), "\(again.errorText)")
            #expect(Self.segmentFetches(origin) == cached, "the second play fetched segments again")
            await proxy.stop()
        }
    }
}
