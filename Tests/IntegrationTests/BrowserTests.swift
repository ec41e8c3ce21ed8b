// Real browser tests: Debian's chromium, headless, with no driver. The status page is
// rendered with `--dump-dom`; a small player of our own (fetch + MediaSource) plays a DASH
// stream through `serve --cors '*'` from a page on another port, as web players do, and
// reports what happened by asking its own server for `/result/<outcome>`. Skipped, saying
// so, where chromium is not installed (.ci/run installs it).
import Foundation
import LoopbackOrigins
import Testing
import TestSupport

enum Chromium {
    static let path = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].first { FileManager.default.isExecutableFile(atPath: $0) }
    static let skipped: Comment = "chromium is not installed (apt-get install chromium; .ci/run does this): browser tests skipped"

    /// Flags for a headless run in a test: its own profile, no sandbox (CI runs as root), no
    /// GPU, no first-run work, media that plays without a gesture.
    static func arguments(profile: String) -> [String] {
        [
            "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check", "--user-data-dir=" + profile,
            "--autoplay-policy=no-user-gesture-required", "--disable-background-networking",
        ]
    }

    /// The DOM of `url` once loaded, as chromium serialises it.
    static func dumpDOM(_ url: String) async throws -> String {
        let profile = try TemporaryDirectory("chromium-profile")
        defer { profile.remove() }
        let result = try await ChildProcess.run(
            "timeout", ["120", path ?? "chromium"] + arguments(profile: profile.path) + ["--dump-dom", url])
        if result.status != 0 { throw OriginFailure("chromium --dump-dom exited \(result.status): \(result.errorText.suffix(2000))") }
        return result.text
    }

    /// Opens `url` and waits until `done` answers something (polled), then closes the browser
    /// and waits for it to exit.
    static func open<T: Sendable>(_ url: String, until done: @escaping @Sendable () -> T?) async throws -> T? {
        let profile = try TemporaryDirectory("chromium-profile")
        defer { profile.remove() }
        // A child inherits the test process's blocked signals (SIGTERM among them): the browser
        // runs under a wrapper that unblocks them, so that stopping it stops it.
        let unblocked = "import os, signal, sys; signal.pthread_sigmask(signal.SIG_SETMASK, []); os.execvp(sys.argv[1], sys.argv[1:])"
        let browser = Task {
            try await ChildProcess.run(
                "python3", ["-c", unblocked, "timeout", "-k", "5", "120", path ?? "chromium"] + arguments(profile: profile.path) + [url])
        }
        var outcome: T?
        _ = try await eventually(timeout: .seconds(100), interval: .milliseconds(100)) {
            outcome = done()
            return outcome != nil
        }
        browser.cancel()
        _ = try? await browser.value
        return outcome
    }
}

@Suite("Real browser (headless Chromium)", .tags(.external, .slow), .unlessSkippingExternal, .unlessSkippingSlow, .serialized, .timeLimit(.minutes(6)), .enabled(if: Chromium.path != nil, Chromium.skipped))
struct BrowserTests {
    @Test("The status page renders in Chromium with a segment map per resource")
    func statusPage() async throws {
        try await StatusPageTests.knownCache("browser-status") { admin, _ in
            let dom = try await Chromium.dumpDOM(admin + "/")
            let rows = StatusPageTests.rows(dom)
            #expect(rows.count == 3, "\(dom.prefix(3000))")
            for (key, cells) in rows {
                #expect(cells.components(separatedBy: "<svg class=\"segment-map\"").count == 2, "one segment map for \(key)")
                #expect(cells.contains("<rect class=\"present\""), "present runs drawn for \(key)")
            }
            #expect(rows.contains { $0.cells.contains("data-runs=\"2\"") }, "the partial resource's two runs")
        }
    }

    /// The player: fetches the manifest (for each Representation's type and codec) and, for
    /// each of its streams side by side (video and audio, as dash.js does), every segment with
    /// `fetch`, appends them to a MediaSource, plays to the end, and reports
    /// `played-<tenths of a second>` or `failed-<what>` to the server of the page.
    static func playerPage(proxy: String, streams: [[String]], header: Bool) -> String {
        let lists = streams.map { "[" + $0.map { "\"\($0)\"" }.joined(separator: ", ") + "]" }.joined(separator: ", ")
        return """
            <!DOCTYPE html><html><body><video id="video" muted></video><script>
            const base = "\(proxy)/dash/";
            const streams = [\(lists)];
            const headers = \(header ? "{ \"X-Player-Token\": \"secret\" }" : "{}");
            const report = (what) => fetch("/result/" + what.replace(/[^A-Za-z0-9.-]+/g, "_"));
            async function get(name) {
                const response = await fetch(base + name, { headers });
                if (!response.ok) throw new Error(name + " HTTP " + response.status);
                return response;
            }
            async function feed(buffer, names) {
                for (const name of names) {
                    const bytes = await (await get(name)).arrayBuffer();
                    buffer.appendBuffer(bytes);
                    await new Promise((resolve) => buffer.addEventListener("updateend", resolve, { once: true }));
                }
            }
            async function play() {
                const manifest = await (await get("manifest.mpd")).text();
                const types = [...manifest.matchAll(/<Representation[^>]*>/g)].map((element) =>
                    element[0].match(/mimeType="([^"]+)"/)[1] + '; codecs="' + element[0].match(/codecs="([^"]+)"/)[1] + '"');
                const video = document.getElementById("video");
                const source = new MediaSource();
                video.src = URL.createObjectURL(source);
                await new Promise((resolve) => source.addEventListener("sourceopen", resolve, { once: true }));
                const buffers = streams.map((names, index) => source.addSourceBuffer(types[index]));
                await Promise.all(streams.map((names, index) => feed(buffers[index], names)));
                source.endOfStream();
                video.playbackRate = 4;
                await video.play();
                await new Promise((resolve, reject) => {
                    video.addEventListener("ended", resolve, { once: true });
                    video.addEventListener("error", () => reject(new Error("media error " + video.error.code)), { once: true });
                });
                await report("played-" + Math.round(video.currentTime * 10));
            }
            play().catch((error) => report("failed-" + error));
            </script></body></html>
            """
    }

    @Test(
        "A web player on another port plays a DASH stream through serve --cors '*' from an origin that sends no CORS fields; a player that sends a custom header (preflighted) plays it with the origin down"
    )
    func playThroughCORS() async throws {
        let files = try TemporaryDirectory("browser-origin")
        defer { files.remove() }
        try await FFmpeg.makeStream(
            files.file("dash"), seconds: 3, audio: true,
            ["-pix_fmt", "yuv420p", "-profile:v", "baseline", "-f", "dash", "-seg_duration", "1", files.file("dash/manifest.mpd")])
        let listed = try FileManager.default.contentsOfDirectory(atPath: files.file("dash"))
        // Video and audio: init and segments of each.
        let streams = (0...1).map { stream in
            ["init-stream\(stream).m4s"] + listed.filter { $0.hasPrefix("chunk-stream\(stream)-") }.sorted()
        }
        let segmentBytes = try streams.joined().reduce(Int64(0)) { total, name in
            total + ((try FileManager.default.attributesOfItem(atPath: files.file("dash/" + name))[.size] as? Int64) ?? 0)
        }
        // nginx sends no Access-Control-* field: without the proxy's, the browser refuses.
        let origin = try await OriginServer.nginx(root: files.path, locations: "expires 1h;")
        defer { origin.stop() }
        let scratch = try CLIScratch("browser-cors")
        let (server, proxy) = try await ServeProcess.start(
            cacheDir: scratch.file("cache"), origin: origin.baseURL, extra: ["--cors", "*"])
        defer { server.kill() }
        // The pages come from another port: every request to the proxy is cross-origin.
        let pages = try TemporaryDirectory("browser-pages")
        defer { pages.remove() }
        try Self.playerPage(proxy: proxy, streams: streams, header: false).write(
            toFile: pages.file("plain.html"), atomically: true, encoding: .utf8)
        try Self.playerPage(proxy: proxy, streams: streams, header: true).write(
            toFile: pages.file("token.html"), atomically: true, encoding: .utf8)
        let pageServer = try await OriginServer.nginx(root: pages.path, locations: "types { text/html html; }")
        defer { pageServer.stop() }
        // The players' reports, in order.
        @Sendable func outcome(_ index: Int) -> String? {
            let reports = pageServer.requests().map(\.path).filter { $0.hasPrefix("/result/") }.map {
                String($0.dropFirst("/result/".count))
            }
            return reports.indices.contains(index) ? reports[index] : nil
        }

        let plain = try await Chromium.open(pageServer.baseURL.absoluteString + "/plain.html") { outcome(0) }
        #expect(plain?.hasPrefix("played-") == true, "the plain player: \(plain ?? "no result")")
        // A cold play, prefetch and player side by side: each segment byte once from the origin.
        let originBytes = origin.requests().filter { $0.path.hasSuffix(".m4s") }.reduce(Int64(0)) { $0 + $1.bytes }
        #expect(
            originBytes == segmentBytes, "origin bytes for segments \(originBytes), segment bytes \(segmentBytes): \(origin.requests())")

        origin.stop()
        let preflighted = try await Chromium.open(pageServer.baseURL.absoluteString + "/token.html") { outcome(1) }
        #expect(preflighted?.hasPrefix("played-") == true, "the preflighted player with the origin down: \(preflighted ?? "no result")")
    }
}
