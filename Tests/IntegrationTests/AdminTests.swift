// The admin listener of `sparsecache serve` as operators use it: a known workload through the
// proxy, then the Prometheus metrics checked for exact counts against what curl received and
// what the nginx origin logged; status, live purge, budget and prefetch; the JSON request log.
import Foundation
import LoopbackOrigins
import Testing
import TestSupport

@Suite("serve: metrics and live administration", .tags(.external), .unlessSkippingExternal, .serialized, .timeLimit(.minutes(8)))
struct AdminTests {
    /// The admin listener's base URL, once serve has published it in the cache directory.
    static func adminBase(_ cacheDir: String) async throws -> String {
        var base: String?
        _ = try await eventually(timeout: .seconds(60), interval: .milliseconds(50)) {
            let text = (try? String(contentsOfFile: cacheDir + "/serve.admin", encoding: .utf8)) ?? ""
            let parts = text.split(whereSeparator: \.isWhitespace)
            if parts.count == 2 { base = "http://\(parts[0]):\(parts[1])" }
            return base != nil
        }
        guard let base else { throw OriginFailure("serve published no admin address in \(cacheDir)") }
        return base
    }

    /// The samples of a Prometheus text exposition, by name with labels as written.
    static func samples(_ text: String) -> [String: Double] {
        var samples: [String: Double] = [:]
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            guard let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else { continue }
            samples[String(line[..<space])] = value
        }
        return samples
    }

    /// Scrapes until `done` holds (a request is counted when its log line is written, just
    /// after its last byte went out), or a generous deadline passes.
    static func scrape(_ admin: String, until done: ([String: Double]) -> Bool) async throws -> [String: Double] {
        var last: [String: Double] = [:]
        _ = try await eventually(interval: .milliseconds(50)) {
            let result = try await Curl.run(admin + "/metrics")
            last = samples(String(decoding: result.body, as: UTF8.self))
            return result.status == 200 && done(last)
        }
        return last
    }

    /// Waits until serve runs no fetch (and stores `bytes` in all, when given): every fill it
    /// started has committed and let its resource go, so the next request of a resource it
    /// stored whole is a hit, and an eviction finds no resource still being filled.
    static func settled(_ admin: String, storing bytes: Int? = nil) async throws {
        var last: [String: Any] = [:]
        let settled = try await eventually {
            let status = try await Curl.run(admin + "/status")
            last = try JSONSerialization.jsonObject(with: Data(status.body)) as? [String: Any] ?? [:]
            return last["fetchesInFlight"] as? Int == 0 && (bytes == nil || last["presentBytes"] as? Int == bytes)
        }
        guard settled else { throw WaitFailure("serve's fills did not settle (\(bytes.map { "\($0) stored bytes" } ?? "any size")): \(last)") }
    }

    @Test(
        "a known workload: requests by status and outcome, body bytes and origin requests are exact; status, purge, budget, prefetch, pin, evict; JSON log"
    )
    func exactCounters() async throws {
        let scratch = try CLIScratch("serve-admin")
        let files = try TemporaryDirectory("serve-admin-origin")
        defer { files.remove() }
        let a = try originFile(files.path, "a.bin", count: 300_000, seed: 1)
        let b = try originFile(files.path, "b.bin", count: 10_000, seed: 2)
        let c = try originFile(files.path, "c.bin", count: 200_000, seed: 3)
        let origin = try await OriginServer.nginx(root: files.path, locations: "expires 1h;")
        defer { origin.stop() }
        let cacheDir = scratch.file("cache")
        let (server, base) = try await ServeProcess.start(cacheDir: cacheDir, origin: origin.baseURL, extra: ["--log-format", "json"])
        let admin = try await Self.adminBase(cacheDir)

        // The workload: 2 misses, 3 hits of the whole file (one a HEAD), 2 range hits, a 404.
        // Each request starts once the fills before it have committed: a request that came
        // while its resource was still being filled would join that fill instead of hitting.
        var received = 0
        var stored: [String: Int] = [:]
        for (path, arguments, expected) in [
            ("/a.bin", [], a), ("/a.bin", [], a), ("/a.bin", ["-r", "0-999"], Array(a[0..<1000])), ("/b.bin", [], b),
            ("/a.bin", ["-r", "1000-1999"], Array(a[1000..<2000])), ("/a.bin", [], a),
        ] as [(String, [String], [UInt8])] {
            let result = try await Curl.run(base + path, arguments)
            #expect(result.body == expected, "\(path) \(arguments): \(result)")
            received += result.body.count
            stored[path] = path == "/a.bin" ? a.count : b.count
            try await Self.settled(admin, storing: stored.values.reduce(0, +))
        }
        let head = try await Curl.run(base + "/a.bin", ["-I"])
        #expect(head.status == 200)
        let missing = try await Curl.run(base + "/missing.bin")
        #expect(missing.status == 404)
        received += missing.body.count

        let metrics = try await Self.scrape(admin) {
            $0.filter { $0.key.hasPrefix("sparsecache_requests_total{") }.values.reduce(0, +) >= 8
        }
        let expected: [String: Double] = [
            "sparsecache_requests_total{cache=\"miss\",status=\"200\"}": 2, "sparsecache_requests_total{cache=\"hit\",status=\"200\"}": 3,
            "sparsecache_requests_total{cache=\"hit\",status=\"206\"}": 2, "sparsecache_requests_total{cache=\"pass\",status=\"404\"}": 1,
        ]
        let requests = metrics.filter { $0.key.hasPrefix("sparsecache_requests_total{") }
        #expect(requests == expected, "requests by status and outcome: \(requests)")
        let fromCache = metrics["sparsecache_response_body_bytes_total{source=\"cache\"}"] ?? -1
        let fromOrigin = metrics["sparsecache_response_body_bytes_total{source=\"origin\"}"] ?? -1
        #expect(
            fromCache + fromOrigin == Double(received), "every body byte sent is counted once: \(fromCache) + \(fromOrigin) vs \(received)")
        // The hits alone (two whole files and two ranges) came from the cache.
        #expect(fromCache >= Double(2 * a.count + 2000), "hits are cache bytes: \(fromCache)")
        #expect(
            metrics["sparsecache_origin_requests_total"] == Double(origin.requests().count),
            "origin requests as nginx logged them: \(metrics)")
        #expect(metrics["sparsecache_store_resources"] == 2 && metrics["sparsecache_corrupt_segments_total"] == 0)
        #expect(
            (metrics["sparsecache_commit_duration_seconds_count"] ?? 0) > 0
                && metrics["sparsecache_fdatasync_duration_seconds_bucket{le=\"+Inf\"}"] != nil)

        // Status as JSON and through `sparsecache stats`.
        let status = try await Curl.run(admin + "/status")
        let json = try JSONSerialization.jsonObject(with: Data(status.body)) as? [String: Any] ?? [:]
        #expect(json["requests"] as? Int == 8 && json["hits"] as? Int == 5 && json["resources"] as? Int == 2, "\(json)")
        let stats = try await CLI.run(["stats", "--cache-dir", cacheDir])
        #expect(stats.status == 0 && stats.out.contains("8, 5 hits"), "\(stats)")
        let statsMetrics = try await CLI.run(["stats", "--cache-dir", cacheDir, "--metrics"])
        #expect(statsMetrics.status == 0 && statsMetrics.out.contains("# TYPE sparsecache_requests_total counter"), "\(statsMetrics)")
        // `ls` beside the server asks it: both resources, each with the access it just had
        // (the catalog file on disk may not have it yet).
        let ls = try await CLI.run(["ls", "--cache-dir", cacheDir])
        let listed = ls.out.split(separator: "\n").filter { $0.contains(origin.baseURL.absoluteString) }
        #expect(ls.status == 0 && ls.out.contains("(from the running server at ") && listed.count == 2, "\(ls)")
        #expect(listed.allSatisfy { !$0.contains("never") }, "live last accesses: \(ls.out)")
        let resources = try await Curl.run(admin + "/resources")
        let catalog = try JSONSerialization.jsonObject(with: Data(resources.body)) as? [String: Any] ?? [:]
        #expect(resources.status == 200 && (catalog["entries"] as? [Any])?.count == 2, "\(catalog)")
        // Streamed as it is made (issue 21): no length known up front.
        #expect(resources.headers["transfer-encoding"] == "chunked" && resources.headers["content-length"] == nil, "\(resources.headers)")

        // Prefetch: the whole of c.bin is stored, and a GET of it is then a hit.
        let prefetch = try await Curl.run(admin + "/prefetch?url=" + origin.url("c.bin").absoluteString, ["-X", "POST"])
        #expect(prefetch.status == 202, "\(prefetch) \(String(decoding: prefetch.body, as: UTF8.self))")
        _ = try await eventually(timeout: .seconds(60), interval: .milliseconds(100)) {
            let ls = try await CLI.run(["ls", "--cache-dir", cacheDir, "--json"])
            return ls.out.contains("c.bin") && ls.out.contains("\"presentBytes\" : \(c.count)")
                || ls.out.contains("\"presentBytes\":\(c.count)")
        }
        let originBefore = origin.requests().count
        let prefetched = try await Curl.run(base + "/c.bin")
        #expect(prefetched.body == c && prefetched.headers["cache-status"]?.contains("hit") == true, "\(prefetched)")
        #expect(origin.requests().count == originBefore, "a prefetched resource needs no origin")
        // serve answers a hit whose bytes are in memory on its event loop (docs/ARCHITECTURE.md,
        // "Quick hits") while the resource is open. Two requests pipelined in one write: the
        // second arrives while the first has the resource open, however slow this machine is.
        let quickBefore = try await Self.scrape(admin) { _ in true }["sparsecache_quick_hits_total"] ?? 0
        let pair = "GET /c.bin HTTP/1.1\r\nHost: 127.0.0.1\r\nRange: bytes=0-99\r\n\r\n"
            + "GET /c.bin HTTP/1.1\r\nHost: 127.0.0.1\r\nRange: bytes=100-199\r\nConnection: close\r\n\r\n"
        let pipelined = await RawHTTP.exchange(port: URL(string: base)!.port!, pair, timeout: .seconds(60))
        #expect(pipelined.statuses == [206, 206], "\(pipelined.text.prefix(600))")
        let quick = try await Self.scrape(admin) { ($0["sparsecache_quick_hits_total"] ?? 0) > quickBefore }
        #expect((quick["sparsecache_quick_hits_total"] ?? 0) > quickBefore, "no hit was answered on the event loop: \(quick)")

        // Purge and budget, live.
        let purge = try await Curl.run(admin + "/purge?key=" + origin.url("b.bin").absoluteString, ["-X", "POST"])
        #expect(purge.status == 200, "\(purge)")
        let again = try await Curl.run(admin + "/purge?key=" + origin.url("b.bin").absoluteString, ["-X", "POST"])
        #expect(again.status == 404, "a second purge finds nothing: \(again)")
        let budget = try await Curl.run(admin + "/budget?bytes=1048576", ["-X", "POST"])
        let budgetJSON = try JSONSerialization.jsonObject(with: Data(budget.body)) as? [String: Any] ?? [:]
        #expect(budget.status == 200 && budgetJSON["budgetBytes"] as? Int == 1_048_576, "\(budget)")
        let tooSmall = try await Curl.run(admin + "/budget?bytes=10", ["-X", "POST"])
        #expect(tooSmall.status == 400 && String(decoding: tooSmall.body, as: UTF8.self).contains("smaller than one segment"))
        // A pinned resource survives an eviction down to nothing; unpinned, it goes. The
        // prefetch's fill may still be ending (its bytes are all committed): an eviction skips
        // a resource being filled.
        try await Self.settled(admin)
        let aKey = origin.url("a.bin").absoluteString
        #expect(try await Curl.run(admin + "/pin?key=" + aKey, ["-X", "POST"]).status == 200)
        #expect(try await Curl.run(admin + "/pin?key=" + origin.url("never.bin").absoluteString, ["-X", "POST"]).status == 404)
        let evictAll = try await Curl.run(admin + "/evict?bytes=0", ["-X", "POST"])
        let left = try JSONSerialization.jsonObject(with: Data(evictAll.body)) as? [String: Any] ?? [:]
        #expect(evictAll.status == 200 && left["resources"] as? Int == 1, "only the pinned one is left: \(left)")
        #expect(try await Curl.run(admin + "/unpin?key=" + aKey, ["-X", "POST"]).status == 200)
        let evictRest = try await Curl.run(admin + "/evict?bytes=0", ["-X", "POST"])
        let none = try JSONSerialization.jsonObject(with: Data(evictRest.body)) as? [String: Any] ?? [:]
        #expect(none["resources"] as? Int == 0, "unpinned, it goes too: \(none)")
        let unknown = try await Curl.run(admin + "/nothing")
        #expect(unknown.status == 404)

        server.kill()
        let result = try await server.finish()
        // The JSON log: one object per request, numbered, with the cache outcome.
        let lines = result.out.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        #expect(lines.count >= 9, "\(result.out)")
        let ids = lines.compactMap { $0["id"] as? Int }
        #expect(Set(ids).count == lines.count && ids.min() == 1, "request ids are unique from 1: \(ids)")
        #expect(lines.first?["cache"] as? String == "miss" && lines.first?["target"] as? String == "/a.bin", "\(lines.first ?? [:])")
        #expect(!FileManager.default.fileExists(atPath: cacheDir + "/serve.admin"), "the admin address goes with the server")
    }

    @Test("stats without a running server exits 69 and says why; --admin-listen is checked; off means no admin listener")
    func statsWithoutServer() async throws {
        let scratch = try CLIScratch("serve-admin-off")
        let cacheDir = scratch.file("cache")
        let none = try await CLI.run(["stats", "--cache-dir", cacheDir])
        #expect(none.status == 69 && none.err.contains("no running server"), "\(none)")
        let bad = try await CLI.run(["serve", "--cache-dir", cacheDir, "--admin-listen", "nowhere"])
        #expect(bad.status == 64 && bad.err.contains("--admin-listen"), "\(bad)")
        let format = try await CLI.run(["serve", "--cache-dir", cacheDir, "--log-format", "xml"])
        #expect(format.status == 64 && format.err.contains("--log-format"), "\(format)")
        let (server, _) = try await ServeProcess.start(cacheDir: cacheDir, origin: nil, extra: ["--admin-listen", "off"])
        let stats = try await CLI.run(["stats", "--cache-dir", cacheDir])
        #expect(stats.status == 69, "\(stats)")
        server.kill()
        _ = try await server.finish()
    }

    @Test("--access-log: the request log goes to a file; after a rotation SIGHUP reopens it and no line is lost; serve keeps serving")
    func accessLogRotation() async throws {
        let scratch = try CLIScratch("serve-access-log")
        let files = try TemporaryDirectory("serve-access-log-origin")
        defer { files.remove() }
        let body = try originFile(files.path, "a.bin", count: 5_000, seed: 4)
        let origin = try await OriginServer.nginx(root: files.path, locations: "expires 1h;")
        defer { origin.stop() }
        let log = scratch.file("access.log")
        let (server, base) = try await ServeProcess.start(
            cacheDir: scratch.file("cache"), origin: origin.baseURL, extra: ["--access-log", log])
        func lines(_ path: String) -> [Substring] { ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n") }
        func waitFor(_ path: String, count: Int) async throws {
            _ = try await eventually(interval: .milliseconds(20)) { lines(path).count >= count }
        }
        #expect(try await Curl.run(base + "/a.bin").body == body)
        try await waitFor(log, count: 1)
        try FileManager.default.moveItem(atPath: log, toPath: log + ".1")
        #expect(try await Curl.run(base + "/a.bin?second").body == body)
        kill(server.process.processIdentifier, SIGHUP)
        // The reopen is queued behind the lines before it: wait for the new file.
        _ = try await eventually(timeout: .seconds(30), interval: .milliseconds(20)) { FileManager.default.fileExists(atPath: log) }
        #expect(try await Curl.run(base + "/a.bin?third").body == body)
        try await waitFor(log, count: 1)
        let rotated = lines(log + ".1"), current = lines(log)
        #expect(rotated.count == 2 && rotated[0].contains("GET /a.bin ") && rotated[1].contains("/a.bin?second"), "\(rotated)")
        #expect(current.count == 1 && current[0].contains("/a.bin?third"), "\(current)")
        #expect(server.process.isRunning, "SIGHUP does not stop serve")
        server.kill()
        let result = try await server.finish()
        #expect(!result.out.contains("GET /a.bin"), "nothing of the log on stdout: \(result.out)")
    }

    @Test(
        "--config: options from a file under the command line's; SIGHUP applies a new budget and log format, names what needs a restart, and keeps everything on a broken file"
    )
    func configReload() async throws {
        let scratch = try CLIScratch("serve-config")
        let files = try TemporaryDirectory("serve-config-origin")
        defer { files.remove() }
        let body = try originFile(files.path, "a.bin", count: 5_000, seed: 5)
        let origin = try await OriginServer.nginx(root: files.path, locations: "expires 1h;")
        defer { origin.stop() }
        let config = scratch.file("serve.conf")
        try "# the budget and the log\nmax-size 64M\nlog-format text\n".write(toFile: config, atomically: true, encoding: .utf8)
        let cacheDir = scratch.file("cache")

        let broken = scratch.file("broken.conf")
        try "max-size 64M\nno-such-option 1\n".write(toFile: broken, atomically: true, encoding: .utf8)
        let refused = try await CLI.run(["serve", "--cache-dir", cacheDir, "--config", broken])
        #expect(refused.status == 64 && refused.err.contains("broken.conf:2: unknown option 'no-such-option'"), "\(refused)")

        let (server, base) = try await ServeProcess.start(cacheDir: cacheDir, origin: origin.baseURL, extra: ["--config", config])
        let admin = try await Self.adminBase(cacheDir)
        func budget() async throws -> Int? {
            let status = try await Curl.run(admin + "/status")
            return (try JSONSerialization.jsonObject(with: Data(status.body)) as? [String: Any])?["budgetBytes"] as? Int
        }
        #expect(try await budget() == 64 << 20)
        #expect(try await Curl.run(base + "/a.bin").body == body)

        try "max-size 32M\nlog-format json\nprefetch 5\n".write(toFile: config, atomically: true, encoding: .utf8)
        kill(server.process.processIdentifier, SIGHUP)
        _ = try await eventually(timeout: .seconds(30), interval: .milliseconds(50)) { try await budget() == 32 << 20 }
        #expect(try await budget() == 32 << 20, "SIGHUP applied the new budget")
        #expect(try await Curl.run(base + "/a.bin?json").body == body)

        try "max-size lots\n".write(toFile: config, atomically: true, encoding: .utf8)
        kill(server.process.processIdentifier, SIGHUP)
        try await Task.sleep(for: .milliseconds(500))  // a window for the broken file to change something
        #expect(try await budget() == 32 << 20, "a broken file changes nothing")
        #expect(server.process.isRunning)
        server.kill()
        let result = try await server.finish()
        let lines = result.out.split(separator: "\n")
        #expect(lines.contains { $0.contains("GET /a.bin ") && !$0.hasPrefix("{") }, "text before the SIGHUP: \(result.out)")
        #expect(lines.contains { $0.hasPrefix("{") && $0.contains("/a.bin?json") }, "JSON after it: \(result.out)")
        #expect(result.err.contains("needs a restart to change: --prefetch"), "\(result.err)")
        #expect(result.err.contains("invalid size 'lots'") && result.err.contains("nothing changed"), "\(result.err)")
    }
}
