import Foundation
import LoopbackOrigins
import SparseCache

/// Scenario 12: the caching proxy against the cache people pick for range requests, nginx's
/// `proxy_cache` with `slice 1m`, both in front of the same nginx origin in the same run (the
/// configuration of issue 18: cache key with the slice range, `proxy_cache_lock on`,
/// `sendfile on`, `tcp_nopush off`).
///
/// - time to first byte of a 1 MiB range, cold (a name neither has seen) and warm;
/// - a whole download, cold and warm;
/// - random cached 64 KiB ranges under wrk (-t2 -c32), with nginx serving the file itself as
///   a third row;
/// - origin bytes of two seek sessions: a client that reads 4 MiB at each of 7 points and
///   hangs up at once, and a player that reads 16 MiB at 10 MiB/s at each of 3 points;
/// - 16 clients downloading one cold file at once: wall time (and origin bytes in a note).
///
/// Every cold measurement uses a fresh name (a hard link of the origin's file), so neither
/// cache has seen it. Skipped with a note when nginx or curl is not installed.
enum SliceCacheScenario {
    static let number = 12
    static let name = "against nginx proxy_cache slice"

    static let contenders = ["nginx proxy_cache, slice 1m", "sparsecache proxy"]

    static func run(_ context: BenchContext) async throws -> ScenarioResult {
        var result = ScenarioResult()
        guard NginxServer.binary != nil, let curl = Clients.installed("curl") else {
            result.notes.append("scenario 12 skipped: nginx or curl is not installed (apt-get install nginx-light curl)")
            return result
        }
        let root = try context.scratch.directory("slice-origin")
        let work = try context.scratch.directory("slice-work")
        defer {
            context.scratch.remove(root)
            context.scratch.remove(work)
        }
        let length = context.sizes.fillThrough
        let originLog = work + "/origin/logs/access.log"
        let origin = try await BenchOrigin.start(
            root: root, work: work + "/origin", resource: "movie.bin", length: length, seed: 12, accessLog: originLog)
        defer { origin.stop() }
        let slice = try await startSliceCache(work: work + "/slice", origin: origin.baseURL)
        defer { Loopback.kill(slice.process) }

        let store = try await SparseStore.open(directory: work + "/cache", options: StoreOptions(budget: .max))
        let cache = ProgressiveCache(store: store)
        let proxy = CachingProxy(cache: cache, origin: URL(string: origin.baseURL)!)
        var serverOptions = HTTPServer.Options()
        serverOptions.port = 0
        let server = try HTTPServer.start(options: serverOptions, quick: { proxy.answerQuickly($0, &$1) }) { request, body, response in
            try await proxy.handle(request, body, response)
        }
        let bases = [slice.base, "http://127.0.0.1:\(server.port)"]

        /// A name for `label` the origin has and no cache has seen.
        func fresh(_ label: String) throws -> String {
            let name = "\(label).bin"
            try FileManager.default.linkItem(atPath: root + "/movie.bin", toPath: root + "/" + name)
            return name
        }

        do {
            let repetitions = context.repetitions
            // 1. Time to first byte of a 1 MiB range, cold then warm on the same name.
            var warmNames: [[String]] = Array(repeating: [], count: 2)
            let cold = try await interleaved(contenders: 2, repetitions: repetitions) { contender, repetition in
                let name = try fresh("ttfb-\(contender)-\(repetition)")
                warmNames[contender].append(name)
                let times = try await ProxyScenario.curlTimes(curl, bases[contender] + "/" + name, range: "0-1048575")
                guard times.bytes == 1 << 20 else { throw BenchError("\(contenders[contender]) sent \(times.bytes) of 1 MiB") }
                return Sample(value: times.firstByte * 1000)
            }
            result.measurements += compared(cold, workload: "time to first byte, cold 1 MiB range", unit: "ms", higherIsBetter: false)
            let warm = try await interleaved(contenders: 2, repetitions: repetitions) { contender, repetition in
                let times = try await ProxyScenario.curlTimes(curl, bases[contender] + "/" + warmNames[contender][repetition], range: "0-1048575")
                return Sample(value: times.firstByte * 1000)
            }
            result.measurements += compared(warm, workload: "time to first byte, warm 1 MiB range", unit: "ms", higherIsBetter: false)

            // 2. Whole downloads, cold then warm.
            let downloads = max(1, min(repetitions, 3))
            var downloaded: [[String]] = Array(repeating: [], count: 2)
            let coldDownload = try await interleaved(contenders: 2, repetitions: downloads) { contender, repetition in
                let name = try fresh("full-\(contender)-\(repetition)")
                downloaded[contender].append(name)
                let times = try await ProxyScenario.curlTimes(curl, bases[contender] + "/" + name)
                guard times.bytes == length else { throw BenchError("\(contenders[contender]) sent \(times.bytes) of \(length) bytes") }
                return Sample(value: Double(length) / times.total / 1e6)
            }
            result.measurements += compared(coldDownload, workload: "full download \(describeBytes(length)), cold", unit: "MB/s")
            let warmDownload = try await interleaved(contenders: 2, repetitions: downloads) { contender, repetition in
                let times = try await ProxyScenario.curlTimes(curl, bases[contender] + "/" + downloaded[contender][repetition])
                guard times.bytes == length else { throw BenchError("\(contenders[contender]) sent \(times.bytes) of \(length) bytes") }
                return Sample(value: Double(length) / times.total / 1e6)
            }
            result.measurements += compared(warmDownload, workload: "full download \(describeBytes(length)), warm", unit: "MB/s")

            // 3. Random cached 64 KiB ranges of a warm file (nginx serving the file as a third row).
            if let wrk = Clients.installed("wrk") {
                let script = work + "/random-ranges.lua"
                try randomRangesScript(length: length).write(toFile: script, atomically: true, encoding: .utf8)
                let seconds = context.options.mode == .full ? 5 : context.options.mode == .quick ? 3 : 1
                let urls = [bases[0] + "/" + downloaded[0][0], bases[1] + "/" + downloaded[1][0], origin.baseURL + "/movie.bin"]
                let rates = try await interleaved(contenders: 3, repetitions: repetitions) { contender, _ in
                    let output = try await Clients.run(wrk, ["-t", "2", "-c", "32", "-d", "\(seconds)s", "-s", script, urls[contender]])
                    guard !output.contains("Non-2xx"), !output.contains("Socket errors"),
                        let line = output.split(separator: "\n").first(where: { $0.hasPrefix("Requests/sec:") }),
                        let rate = Double(line.split(separator: " ").last ?? "")
                    else { throw BenchError("wrk against \(urls[contender]) failed: \(output)") }
                    return Sample(value: rate)
                }
                var rows = compared(Array(rates.prefix(2)), workload: "wrk -t2 -c32, random cached 64 KiB ranges", unit: "req/s")
                let direct = Measurement(
                    scenario: number, scenarioName: name, workload: "wrk -t2 -c32, random cached 64 KiB ranges",
                    contender: "nginx serving the file (no cache)", unit: "req/s", higherIsBetter: true, samples: rates[2])
                rows[1].compare(to: rows[0])
                if direct.median > 0 {
                    result.notes.append(
                        "scenario 12: random 64 KiB, sparsecache / nginx serving the file directly: "
                            + Table.format(rows[1].median / direct.median) + "x")
                }
                rows.append(direct)
                result.measurements += rows
            } else {
                result.notes.append("scenario 12: random 64 KiB ranges skipped, wrk is not installed (apt-get install wrk)")
            }

            // 4. Seek sessions: what each cache asks the origin for.
            let sessions = max(1, min(repetitions, 3))
            let step = length / 8
            let fastDrop = try await interleaved(contenders: 2, repetitions: sessions) { contender, repetition in
                let name = try fresh("drop-\(contender)-\(repetition)")
                for point in 0..<7 {
                    try await readAndHangUp(curl, bases[contender] + "/" + name, from: Int64(point) * step, bytes: 4 << 20)
                }
                return Sample(value: Double(try await settledOriginBytes(originLog, path: "/" + name)) / 1_048_576)
            }
            result.measurements += compared(
                fastDrop, workload: "seek session, 7 x 4 MiB read then hang up (28 MiB read): origin", unit: "MiB", higherIsBetter: false)
            let paced = try await interleaved(contenders: 2, repetitions: sessions) { contender, repetition in
                let name = try fresh("paced-\(contender)-\(repetition)")
                for point in 0..<3 {
                    try await readAndHangUp(curl, bases[contender] + "/" + name, from: Int64(point * 3) * step, bytes: 16 << 20, rate: "10M")
                }
                return Sample(value: Double(try await settledOriginBytes(originLog, path: "/" + name)) / 1_048_576)
            }
            result.measurements += compared(
                paced, workload: "player at 10 MiB/s, 3 x 16 MiB (48 MiB read): origin", unit: "MiB", higherIsBetter: false)

            // 5. A herd: 16 clients on one cold file.
            var herdBytes: [[Int64]] = [[], []]
            let herd = try await interleaved(contenders: 2, repetitions: sessions) { contender, repetition in
                let name = try fresh("herd-\(contender)-\(repetition)")
                let start = ContinuousClock.now
                try await withThrowingTaskGroup(of: Int64.self) { group in
                    for _ in 0..<16 { group.addTask { try await ProxyScenario.curlTimes(curl, bases[contender] + "/" + name).bytes } }
                    for try await bytes in group where bytes != length {
                        throw BenchError("\(contenders[contender]): a herd client got \(bytes) of \(length) bytes")
                    }
                }
                let seconds = Double((ContinuousClock.now - start).components.attoseconds) / 1e18
                    + Double((ContinuousClock.now - start).components.seconds)
                herdBytes[contender].append(try await settledOriginBytes(originLog, path: "/" + name))
                return Sample(value: seconds)
            }
            result.measurements += compared(herd, workload: "16 clients, one cold file: wall time", unit: "s", higherIsBetter: false)
            for (index, contender) in contenders.enumerated() {
                let ratios = herdBytes[index].map { Table.format(Double($0) / Double(length)) + "x" }
                result.notes.append("scenario 12: herd origin bytes per file byte, \(contender): \(ratios.joined(separator: ", "))")
            }
        } catch {
            await ProxyScenario.shutdown(server, cache, store)
            throw error
        }
        await ProxyScenario.shutdown(server, cache, store)
        result.targets += goals(result.measurements)
        return result
    }

    /// Issue 18's goals, judged on the medians of this run: sparsecache against nginx's slice
    /// cache (and nginx serving the file itself), each as sparsecache / nginx for a time or
    /// origin bytes (lower is better) and for a rate (higher is better).
    static func goals(_ rows: [Measurement]) -> [TargetCheck] {
        func median(_ workloadPrefix: String, _ suffix: String, _ contender: String) -> Double? {
            rows.first { $0.workload.hasPrefix(workloadPrefix) && $0.workload.hasSuffix(suffix) && $0.contender == contender }?.median
        }
        func ratio(_ workloadPrefix: String, _ suffix: String = "", to baseline: String = contenders[0]) -> Double? {
            guard let ours = median(workloadPrefix, suffix, contenders[1]), let theirs = median(workloadPrefix, suffix, baseline), theirs > 0
            else { return nil }
            return ours / theirs
        }
        func check(_ name: String, _ value: Double?, atMost: Double? = nil, atLeast: Double? = nil, extra: String = "") -> TargetCheck {
            let goal = atMost.map { "<= \(Table.format($0, decimals: 1))x" } ?? ">= \(Table.format(atLeast ?? 0, decimals: 1))x"
            guard let value else { return TargetCheck(name: name, target: goal, measured: "not measured", met: false, issue: 18) }
            let met = atMost.map { value <= $0 } ?? (value >= (atLeast ?? 0))
            return TargetCheck(name: name, target: goal, measured: Table.format(value, decimals: 2) + "x" + extra, met: met, issue: 18)
        }
        let random = "wrk -t2 -c32, random cached 64 KiB ranges"
        let fastDrop = "seek session, 7 x 4 MiB"
        let clientMiB = 28.0
        var checks = [
            check("time to first byte, cold (sparsecache / nginx slice)", ratio("time to first byte, cold"), atMost: 1.0),
            check("time to first byte, warm (sparsecache / nginx slice)", ratio("time to first byte, warm"), atMost: 1.0),
            check("full download, cold (sparsecache / nginx slice)", ratio("full download", ", cold"), atLeast: 1.0),
            check("full download, warm (sparsecache / nginx slice)", ratio("full download", ", warm"), atLeast: 1.0),
            check("random cached 64 KiB req/s (sparsecache / nginx slice)", ratio(random), atLeast: 1.0),
            check("random cached 64 KiB req/s (sparsecache / nginx serving the file)", ratio(random, to: "nginx serving the file (no cache)"), atLeast: 0.9),
            check("fast-drop seek session, origin bytes (sparsecache / nginx slice)", ratio(fastDrop), atMost: 1.0),
        ]
        let dropped = median(fastDrop, "", contenders[1]).map { $0 / clientMiB }
        checks.append(check("fast-drop seek session, origin bytes / bytes the client read", dropped, atMost: 1.3))
        checks.append(check("paced player session, origin bytes (sparsecache / nginx slice)", ratio("player at 10 MiB/s"), atMost: 1.0))
        checks.append(check("16-client herd, wall time (sparsecache / nginx slice)", ratio("16 clients, one cold file"), atMost: 1.0))
        return checks
    }

    /// The nginx location that caches `path` in 1 MiB slices (zone `slice`) from `upstream`
    /// (`host:port`, or an upstream block's name): the configuration issue 18 compared with.
    static func sliceLocation(path: String, upstream: String) -> String {
        """
        location \(path) {
                    slice 1m;
                    proxy_cache slice;
                    proxy_cache_key $uri$is_args$args$slice_range;
                    proxy_set_header Range $slice_range;
                    proxy_cache_valid 200 206 1h;
                    proxy_cache_lock on;
                    proxy_http_version 1.1;
                    proxy_set_header Connection "";
                    proxy_pass http://\(upstream);
                }
        """
    }

    /// nginx with `proxy_cache` and `slice 1m` in front of `origin`.
    private static func startSliceCache(work: String, origin: String) async throws -> (process: Process, base: String) {
        try FileManager.default.createDirectory(atPath: work + "/cache", withIntermediateDirectories: true)
        let port = try Loopback.freePort()
        let upstream = origin.replacingOccurrences(of: "http://", with: "")
        let http = "proxy_cache_path \(work)/cache levels=1:2 keys_zone=slice:16m max_size=64g inactive=1h use_temp_path=off;"
        let location = sliceLocation(path: "/", upstream: upstream) + "\n        tcp_nopush off;"
        let process = try NginxServer.process(root: work, work: work, port: port, accessLog: nil, locations: location, http: http)
        try await BenchOrigin.launch(process, port: port)
        return (process, "http://127.0.0.1:\(port)")
    }

    /// A client that asks for everything from `offset` (`Range: bytes=offset-`), reads `bytes`
    /// (at `rate`, when given) and closes the connection, as a player does at a seek.
    private static func readAndHangUp(_ curl: String, _ url: String, from offset: Int64, bytes: Int, rate: String? = nil) async throws {
        let limit = rate.map { " --limit-rate \($0)" } ?? ""
        _ = try await ChildProcess.run("/bin/sh", ["-c", "'\(curl)' -s\(limit) -r \(offset)- '\(url)' | head -c \(bytes) > /dev/null"])
    }

    /// The origin's body bytes for `path` once they stop growing (fetches a hang-up cancelled,
    /// or that a cache finishes on its own, have ended).
    private static func settledOriginBytes(_ log: String, path: String) async throws -> Int64 {
        var last = BenchOrigin.bodyBytes(in: log, path: path)
        for _ in 0..<40 {
            try await Task.sleep(for: .milliseconds(250))
            let now = BenchOrigin.bodyBytes(in: log, path: path)
            if now == last { return now }
            last = now
        }
        return last
    }

    /// A wrk script asking for random aligned 64 KiB ranges of a file of `length` bytes.
    private static func randomRangesScript(length: Int64) -> String {
        """
        math.randomseed(12)
        request = function()
          local s = math.random(0, \(length / 65_536 - 1)) * 65536
          return wrk.format("GET", nil, { ["Range"] = "bytes=" .. s .. "-" .. (s + 65535) })
        end
        """
    }

    private static func compared(_ samples: [[Sample]], workload: String, unit: String, higherIsBetter: Bool = true) -> [Measurement] {
        Measurement.rows(
            scenario: number, name: name, contenders: contenders, samples, workload: workload, unit: unit, higherIsBetter: higherIsBetter)
    }
}
