// `sparsecache fetch` as a real process against real origins on 127.0.0.1.
import Foundation
import Testing

@testable import HTTPCache
@_spi(Locking) @testable import SparseCacheEngine
@testable import SparseCacheStore
@testable import SparseHTTP

#if canImport(Glibc)
import Glibc
#endif
import TestSupport

@Suite("sparsecache fetch", .tags(.external), .unlessSkippingExternal, .serialized, .timeLimit(.minutes(8)))
struct FetchCLITests {
    @Test("fetch a URL into the cache and to --output; ls lists it by URL; a range; errors")
    func fetchAndRange() async throws {
        let files = try TemporaryDirectory("fetch-files")
        let source = try originFile(files.path, "clip.mp4", count: 1_234_567, seed: 7)
        let origin = try await OriginServer.nginx(root: files.path)
        defer { origin.stop() }
        let scratch = try CLIScratch("fetch")
        let cacheDir = scratch.file("cache")
        let url = origin.url("clip.mp4").absoluteString

        let whole = try await CLI.run(["fetch", url, "--cache-dir", cacheDir, "--output", scratch.file("out.mp4")])
        #expect(whole.status == 0, "\(whole)")
        #expect(try scratch.read("out.mp4") == source)
        #expect(whole.err.contains("fetch: "), "plain progress lines when stderr is not a terminal: \(whole.err)")
        #expect(whole.err.contains("fetched"), "\(whole)")

        let listed = try await CLI.run(["ls", "--cache-dir", cacheDir])
        #expect(listed.status == 0 && listed.out.contains(url), "\(listed)")
        #expect(listed.out.contains("100.0"), "fully cached: \(listed)")

        // From the cache now: the origin sees nothing new.
        let before = await origin.bytesSent("clip.mp4")
        let part = try await CLI.run(["fetch", url, "--cache-dir", cacheDir, "--range", "1000-1999", "--output", "-"])
        #expect(part.status == 0, "\(part)")
        #expect(part.stdout == Array(source[1000..<2000]))
        #expect(await origin.bytesSent("clip.mp4") == before)

        let usage = try await CLI.run(["fetch", "not a url", "--cache-dir", cacheDir])
        #expect(usage.status == 64, "\(usage)")
        let badRange = try await CLI.run(["fetch", url, "--cache-dir", cacheDir, "--range", "9-3"])
        #expect(badRange.status == 64 && badRange.err.contains("range"), "\(badRange)")
        let missing = try await CLI.run(["fetch", origin.url("nope.mp4").absoluteString, "--cache-dir", cacheDir])
        #expect(missing.status == 76 && missing.err.contains("404"), "\(missing)")
        let past = try await CLI.run(["fetch", url, "--cache-dir", cacheDir, "--range", "2000000-2000010"])
        #expect(past.status == 64 && past.err.contains("past"), "\(past)")
    }

    @Test("a fetch killed midway resumes where it stopped: the second run fetches only the rest")
    func resumeAfterKill() async throws {
        let files = try TemporaryDirectory("fetch-files")
        let source = try originFile(files.path, "slow.bin", count: 3_000_000, seed: 8)
        // About 2 s for the whole file: 16 KiB chunks 10 ms apart.
        try "delay_ms=10".write(toFile: files.path + "/slow.bin.faults", atomically: true, encoding: .utf8)
        let origin = try await OriginServer.faulty(root: files.path)
        defer { origin.stop() }
        let scratch = try CLIScratch("fetch-resume")
        let cacheDir = scratch.file("cache")
        let url = origin.url("slow.bin").absoluteString

        let running = try await CLI.start(["fetch", url, "--cache-dir", cacheDir])
        // Kill it once the cache holds some of the file, but well before the end.
        var present: Int64 = 0
        _ = try await eventually(interval: .milliseconds(25)) {
            let summary = try? await SparseStore.inspect(directory: cacheDir)
            present = summary?.entries.first?.presentBytes ?? 0
            return present >= 600_000
        }
        running.kill()
        _ = try await running.finish()
        #expect(present > 0 && present < Int64(source.count), "killed with \(present) bytes present")
        let firstRun = await origin.bytesSent("slow.bin")

        try FileManager.default.removeItem(atPath: files.path + "/slow.bin.faults")
        let resumed = try await CLI.run(["fetch", url, "--cache-dir", cacheDir, "--output", scratch.file("out.bin")])
        #expect(resumed.status == 0, "\(resumed)")
        #expect(try scratch.read("out.bin") == source, "the resumed download differs from the source")
        let secondRun = await origin.bytesSent("slow.bin") - firstRun
        reportCounts("fetch resume", ["first run bytes": Int(firstRun), "second run bytes": Int(secondRun), "resource bytes": source.count])
        #expect(secondRun <= Int64(source.count) - present + 1, "the second run fetched \(secondRun) bytes; \(present) were cached")
    }
}
