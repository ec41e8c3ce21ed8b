// `sparsecache serve` as a real process between real players (ffmpeg, ffprobe, curl) and a real
// nginx origin on 127.0.0.1.
import Foundation
import LoopbackOrigins
import Testing

@testable import HTTPCache
@_spi(Locking) @testable import SparseCacheEngine
@testable import SparseCacheStore
@testable import SparseHTTP

#if canImport(Glibc)
import Glibc
#endif
import TestSupport

@Suite("sparsecache serve", .tags(.external, .slow), .unlessSkippingExternal, .unlessSkippingSlow, .serialized, .timeLimit(.minutes(8)))
struct ProxyCLITests {
    /// Frame hashes of a decode (ffmpeg's framemd5 muxer), optionally from a seek position.
    static func frameHashes(_ url: String, seek: String? = nil, frames: Int? = nil) async throws -> ChildProcess.Result {
        var arguments = ["-v", "error", "-nostdin"]
        if let seek { arguments += ["-ss", seek] }
        arguments += ["-i", url]
        if let frames { arguments += ["-frames:v", String(frames)] }
        return try await ChildProcess.run("ffmpeg", arguments + ["-f", "framemd5", "-"])
    }

    @Test("ffmpeg plays an MP4 through the proxy (probe, decode, seek) as from the origin; the second play needs no origin")
    func playback() async throws {
        try FFmpeg.require()
        let files = try TemporaryDirectory("serve-origin")
        // The index (moov) at the end, as cameras write it: the player must seek to the end
        // before the first frame, then back.
        let made = try await ChildProcess.run(
            "ffmpeg",
            [
                "-v", "error", "-nostdin", "-f", "lavfi", "-i", "testsrc=duration=10:size=640x360:rate=25", "-f", "lavfi",
                "-i", "sine=frequency=440:duration=10", "-c:v", "mpeg4", "-q:v", "2", "-c:a", "aac", "-shortest", files.file("movie.mp4"),
            ])
        #expect(made.status == 0, "\(made.errorText)")
        let size = try RawFile.size(files.file("movie.mp4"))
        let origin = try await OriginServer.nginx(root: files.path)
        defer { origin.stop() }
        let scratch = try CLIScratch("serve")
        let cacheDir = scratch.file("cache")
        let (server, base) = try await ServeProcess.start(cacheDir: cacheDir, origin: origin.baseURL)
        let direct = origin.url("movie.mp4").absoluteString
        let proxied = base + "/movie.mp4"

        // The origin's log counts the direct plays too: the proxy's share is what comes after.
        let probeArguments = [
            "-v", "error", "-show_entries", "format=duration,size:stream=codec_name,nb_frames,width,height", "-of", "json",
        ]
        let probeDirect = try await ChildProcess.run("ffprobe", probeArguments + [direct])
        let decodeDirect = try await Self.frameHashes(direct)
        let seekDirect = try await Self.frameHashes(direct, seek: "6.5", frames: 30)
        let directBytes = await origin.bytesSent("movie.mp4")

        let probeProxied = try await ChildProcess.run("ffprobe", probeArguments + [proxied])
        #expect(probeDirect.status == 0 && probeProxied.status == 0, "\(probeProxied.errorText)")
        #expect(
            probeProxied.text == probeDirect.text && probeDirect.text.contains("\"nb_frames\": \"250\""),
            "\(probeProxied.text) vs \(probeDirect.text)")
        let decodeProxied = try await Self.frameHashes(proxied)
        let seekProxied = try await Self.frameHashes(proxied, seek: "6.5", frames: 30)
        #expect(decodeDirect.status == 0 && decodeProxied.status == 0, "\(decodeProxied.errorText)")
        #expect(decodeProxied.text == decodeDirect.text && decodeDirect.text.split(separator: "\n").count > 500, "decoded frames differ")
        #expect(seekProxied.text == seekDirect.text && seekDirect.text.contains("0,"), "frames after the seek differ")
        let fetched = await origin.bytesSent("movie.mp4") - directBytes
        #expect(fetched == size, "the proxy fetched \(fetched) bytes for a \(size)-byte file")

        // Second play, origin gone: everything comes from the cache.
        origin.stop()
        let again = try await Self.frameHashes(proxied)
        let seekAgain = try await Self.frameHashes(proxied, seek: "6.5", frames: 30)
        let probeAgain = try await ChildProcess.run("ffprobe", probeArguments + [proxied])
        #expect(again.status == 0 && again.text == decodeDirect.text, "\(again.errorText)")
        #expect(seekAgain.text == seekDirect.text)
        #expect(probeAgain.text == probeDirect.text)

        // SIGTERM: a clean stop, with the request log on stdout.
        server.kill()
        let result = try await server.finish()
        #expect(result.status == 0 && result.err.contains("stopped"), "\(result)")
        let logLines = result.out.split(separator: "\n")
        #expect(logLines.contains { $0.contains("GET /movie.mp4") && $0.contains(" 206 ") }, "\(result.out.prefix(2000))")
        #expect(logLines.contains { $0.contains("miss=0") && $0.contains("hit=") })
        let listed = try await CLI.run(["ls", "--cache-dir", cacheDir])
        #expect(listed.out.contains("100.0") && listed.out.contains(direct), "\(listed)")
    }

    @Test("SIGTERM during a transfer: exits 0 and keeps what arrived; the next run fetches only the rest")
    func gracefulShutdown() async throws {
        let files = try TemporaryDirectory("serve-origin")
        let length = 3_000_000
        let source = try originFile(files.path, "slow.bin", count: length, seed: 81)
        // About 5.5 s for the whole file (16 KiB chunks 30 ms apart): longer than the 2 s the
        // shutdown grants responses in progress.
        try "delay_ms=30".write(toFile: files.path + "/slow.bin.faults", atomically: true, encoding: .utf8)
        let origin = try await OriginServer.faulty(root: files.path)
        defer { origin.stop() }
        let scratch = try CLIScratch("serve-stop")
        let cacheDir = scratch.file("cache")
        let (server, base) = try await ServeProcess.start(cacheDir: cacheDir, origin: origin.baseURL)
        let download = Task { try await Curl.run(base + "/slow.bin") }
        // Stopped once some of it is committed (about 0.8 s on an idle machine; under a loaded
        // full run a fixed wait could stop it before its first commit, and then nothing is kept).
        let key = origin.baseURL.absoluteString + "/slow.bin"
        _ = try await eventually(interval: .milliseconds(50)) {
            try await SparseStore.inspect(directory: cacheDir).entries.first(where: { $0.key == key }).map({ $0.presentBytes > 0 }) == true
        }
        let stopping = ContinuousClock.now
        server.kill()
        let result = try await server.finish()
        #expect(result.status == 0 && result.err.contains("SIGTERM") && result.err.contains("stopped"), "\(result)")
        #expect(ContinuousClock.now - stopping < .seconds(5), "the stop waits at most the grace period")
        let cut = try await download.value
        #expect(cut.exitCode != 0 && cut.body.count < length, "the client saw the response end early: \(cut)")
        #expect(sameBytes(cut.body, source.prefix(cut.body.count)))

        let listed = try await CLI.run(["ls", "--cache-dir", cacheDir])
        #expect(listed.status == 0 && !listed.out.contains("0 B         2.9 MiB"), "something was committed: \(listed)")
        let kept = try await SparseStore.inspect(directory: cacheDir).entries.first { $0.key == key }
        #expect((kept?.presentBytes ?? 0) > 0, "something was committed: \(String(describing: kept))")
        let firstRun = await origin.bytesSent("slow.bin")

        try "".write(toFile: files.path + "/slow.bin.faults", atomically: true, encoding: .utf8)
        let (second, secondBase) = try await ServeProcess.start(cacheDir: cacheDir, origin: origin.baseURL)
        let whole = try await Curl.run(secondBase + "/slow.bin")
        #expect(whole.status == 200 && whole.body == source, "\(whole)")
        second.kill()
        _ = try await second.finish()
        let total = await origin.bytesSent("slow.bin")
        #expect(
            total - firstRun < Int64(length) - Int64(cut.body.count) / 2,
            "the second run fetched only what was missing: \(total - firstRun) after \(firstRun)")
    }

    @Test("32 readers at once and 8 slow ones: correct bytes, one fetch per byte, memory stays bounded")
    func boundedMemory() async throws {
        let files = try TemporaryDirectory("serve-origin")
        let length = 32 << 20
        let source = try originFile(files.path, "large.bin", count: length, seed: 82)
        let origin = try await OriginServer.nginx(root: files.path)
        defer { origin.stop() }
        let scratch = try CLIScratch("serve-load")
        let (server, base) = try await ServeProcess.start(cacheDir: scratch.file("cache"), origin: origin.baseURL, extra: ["--quiet"])
        let url = base + "/large.bin"
        // Slow readers of the whole file: back-pressure must keep the proxy from buffering it
        // (without it, each would hold most of the 32 MiB within milliseconds).
        let slowReaders = (0..<8).map { _ in Task { try await Curl.run(url, ["--limit-rate", "1M"], timeout: 4) } }
        let readers = (0..<32).map { index in
            Task {
                let start = (index * 1_500_000) % (length - 4_000_000)
                return (start, try await Curl.run(url, ["-r", "\(start)-\(start + 3_999_999)"], timeout: 90))
            }
        }
        for reader in readers {
            let (start, result) = try await reader.value
            #expect(result.status == 206 && sameBytes(result.body, source[start..<(start + 4_000_000)]), "from \(start): \(result)")
        }
        for slow in slowReaders {
            let slowResult = try await slow.value
            #expect(slowResult.body.count > 0 && sameBytes(slowResult.body, source.prefix(slowResult.body.count)), "\(slowResult)")
        }
        let status = try String(contentsOfFile: "/proc/\(server.pid)/status", encoding: .utf8)
        let peak = status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") }.flatMap { Int($0.split(separator: " ")[1]) } ?? 0
        print("[proxy-memory] 32 concurrent 4 MB readers + 8 readers at 1 MB/s of a \(length >> 20) MiB file: peak RSS \(peak / 1024) MiB")
        #expect(peak > 0 && peak < 200 * 1024, "peak RSS \(peak) KiB")
        let sent = await origin.bytesSent("large.bin")
        #expect(sent <= Int64(length), "one fetch per byte: the origin sent \(sent) \(origin.requests().map { "\($0.range)=\($0.bytes)" })")
        server.kill()
        _ = try await server.finish()
    }

    @Test("evict while serve runs: --key goes through the server (PURGE over loopback), the next request goes to the origin; a prefix with *; --to-size through the admin listener")
    func evictThroughServer() async throws {
        let scratch = try CLIScratch("serve-evict")
        let files = try TemporaryDirectory("serve-evict-origin")
        defer { files.remove() }
        for name in ["a.bin", "b.bin"] { _ = try originFile(files.path, name, count: 10_000, seed: 3) }
        let origin = try await OriginServer.nginx(root: files.path, locations: "expires 1h;")
        defer { origin.stop() }
        let cacheDir = scratch.file("cache")
        let (server, base) = try await ServeProcess.start(cacheDir: cacheDir, origin: origin.baseURL)
        for name in ["a.bin", "b.bin", "a.bin"] { _ = try await Curl.run(base + "/" + name) }
        let hit = try await Curl.run(base + "/a.bin")
        #expect(hit.headers["cache-status"]?.contains("hit") == true, "stored before the evict: \(hit)")
        let before = origin.requests().count

        let key = origin.url("a.bin").absoluteString
        let evicted = try await CLI.run(["evict", "--cache-dir", cacheDir, "--key", key])
        #expect(evicted.status == 0 && evicted.out.contains("purged"), "evict beside a running serve goes through it: \(evicted)")
        let again = try await Curl.run(base + "/a.bin")
        #expect(again.status == 200 && again.headers["cache-status"]?.contains("fwd=uri-miss") == true, "\(again)")
        #expect(origin.requests().count > before, "the evicted key is fetched again")
        let unknown = try await CLI.run(["evict", "--cache-dir", cacheDir, "--key", origin.url("nope.bin").absoluteString])
        #expect(unknown.status == 66 && unknown.err.contains("404"), "an unknown key is an error through the server too: \(unknown)")
        let prefix = try await CLI.run(["evict", "--cache-dir", cacheDir, "--key", origin.baseURL.absoluteString + "/*"])
        #expect(prefix.status == 0 && prefix.out.contains("2 stored responses"), "a prefix drops both: \(prefix)")
        _ = try await Curl.run(base + "/b.bin")
        let bySize = try await CLI.run(["evict", "--cache-dir", cacheDir, "--to-size", "0"])
        #expect(
            bySize.status == 0 && bySize.out.contains("1 evicted through the running server; 0 resources remain"),
            "--to-size goes through the server's admin listener: \(bySize)")
        server.kill()
        _ = try await server.finish()
    }

    @Test("serve: usage errors name the problem (exit 64); a port in use is an I/O error (74), a cache directory in use 75; --help")
    func serveErrors() async throws {
        let scratch = try CLIScratch("serve-errors")
        let cacheDir = scratch.file("cache")
        for (arguments, words) in [
            (["--listen", "localhost:80"], "must be numeric"), (["--listen", "127.0.0.1:99999"], "--listen"),
            (["--origin", "ftp://example.com"], "--origin"), (["--origin", "http://x/?q=1"], "without a query"),
            (["--max-connections", "0"], "--max-connections"), (["--bogus"], "--bogus"), (["--max-body-size", "lots"], "--max-body-size"),
        ] {
            let result = try await CLI.run(["serve", "--cache-dir", cacheDir] + arguments)
            #expect(result.status == 64 && result.err.contains(words), "\(arguments): \(result)")
        }
        let (first, _) = try await ServeProcess.start(cacheDir: cacheDir, origin: nil)
        let port = first.arguments[first.arguments.firstIndex(of: "--listen")! + 1]
        let taken = try await CLI.run(["serve", "--cache-dir", scratch.file("other"), "--listen", port])
        #expect(taken.status == 74 && taken.err.contains("Address already in use"), "\(taken)")
        let locked = try await CLI.run(["serve", "--cache-dir", cacheDir, "--listen", "127.0.0.1:0"])
        #expect(locked.status == 75, "a second server on the same cache directory: \(locked)")
        first.kill()
        _ = try await first.finish()
        let help = try await CLI.run(["serve", "--help"])
        #expect(help.status == 0 && help.out.contains("USAGE: sparsecache serve") && help.out.contains("--origin"), "\(help)")
    }

    @Test("SIGTERM or SIGINT right after serving: exit 0, and the cache directory lists every resource with its length")
    func catalogAfterStop() async throws {
        let files = try TemporaryDirectory("serve-origin")
        let length = 24_000_000
        _ = try originFile(files.path, "one.bin", count: length, seed: 83)
        _ = try originFile(files.path, "two.bin", count: length / 2, seed: 84)
        let origin = try await OriginServer.nginx(root: files.path)
        defer { origin.stop() }
        let scratch = try CLIScratch("serve-catalog")
        let cacheDir = scratch.file("cache")
        // End to end, for a race that left a resource without its length in the catalog (saved
        // before a release finished): seen by hand one stop in three; FillUnitTests
        // shutdownReleases checks the cause deterministically.
        for round in 0..<4 {
            let cacheDir = cacheDir + "-\(round)"
            let (server, base) = try await ServeProcess.start(cacheDir: cacheDir, origin: origin.baseURL, extra: ["--quiet"])
            for name in ["one.bin", "two.bin"] {
                let result = try await Curl.run(base + "/" + name)
                #expect(result.status == 200, "\(result)")
            }
            // Stopped while both resources are still held open for reuse, by SIGTERM or by
            // SIGINT (Ctrl-C) in turn: both stop gracefully.
            if round % 2 == 0 { server.kill() } else { Glibc.kill(server.pid, SIGINT) }
            let stopped = try await server.finish()
            #expect(stopped.status == 0 && stopped.err.contains(round % 2 == 0 ? "SIGTERM" : "SIGINT"), "\(stopped)")
            let listed = try await CLI.run(["ls", "--cache-dir", cacheDir, "--json"])
            let resources = try listed.json()["entries"] as? [[String: Any]] ?? []
            #expect(resources.count == 2, "round \(round): \(listed)")
            for resource in resources {
                #expect(resource["length"] as? Int != nil && resource["presentBytes"] as? Int == resource["length"] as? Int, "round \(round): \(resource)")
            }
        }
    }
}
