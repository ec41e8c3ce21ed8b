import Foundation
import LoopbackOrigins
import SeededRandom
import SparseCache

/// Scenario 15: cached hits against nginx, everything cached first in both, one nginx origin.
/// nginx caches the large files with `proxy_cache` and `slice 1m`, the small objects with plain
/// `proxy_cache` (two locations of one nginx, one process: `master_process off`).
///
/// - warm time to first byte: a new curl (a new connection) per request, a 1 MiB range at an
///   unaligned offset, over 10 files;
/// - one keep-alive client asking for 1 KiB ranges (curl reading a list): requests per second,
///   and the CPU time of the serving process per hit (/proc, as scenario 13), with the context
///   switches of this process per hit beside it;
/// - 2,000 cached 4 KiB objects under wrk -t2 -c32 (random names).
///
/// The fourth hit workload of issue 42, random 64 KiB ranges under wrk, is scenario 12's.
enum HitScenario {
    static let number = 15
    static let name = "cached hits against nginx"
    static let contenders = ["nginx proxy_cache", "sparsecache proxy"]
    static let files = 10
    static let objectSize = 4096

    static func run(_ context: BenchContext) async throws -> ScenarioResult {
        var result = ScenarioResult()
        guard NginxServer.binary != nil, let curl = Clients.installed("curl") else {
            result.notes.append("scenario 15 skipped: nginx or curl is not installed (apt-get install nginx-light curl)")
            return result
        }
        let fileSize: Int64 = context.options.mode == .smoke ? 4 << 20 : 32 << 20
        let objects = context.options.mode == .smoke ? 200 : 2000
        let root = try context.scratch.directory("hit-origin")
        let work = try context.scratch.directory("hit-work")
        defer {
            context.scratch.remove(root)
            context.scratch.remove(work)
        }
        // The origin: 10 large files and 2,000 small ones, fresh for an hour.
        let origin = try await BenchOrigin.start(root: root, work: work + "/origin", resource: "f0.bin", length: fileSize, seed: 15)
        defer { origin.stop() }
        for index in 1..<files {
            try FileManager.default.linkItem(atPath: root + "/f0.bin", toPath: root + "/f\(index).bin")
        }
        try FileManager.default.createDirectory(atPath: root + "/small", withIntermediateDirectories: true)
        var random = SplitMix64(seed: 15)
        for index in 0..<objects {
            guard FileManager.default.createFile(atPath: root + "/small/o\(index).bin", contents: Data(random.bytes(objectSize))) else {
                throw BenchError("cannot write the origin's files in \(root)")
            }
        }
        let nginx = try await startNginx(work: work + "/nginx", origin: origin.baseURL)
        defer { Loopback.kill(nginx.process) }
        let proxy = try await InProcessProxy(directory: work + "/cache", origin: URL(string: origin.baseURL)!)
        let cache = proxy.cache
        let bases = [nginx.base, proxy.base]
        let nginxID = nginx.process.processIdentifier
        let serverCPU: @Sendable (Int) throws -> Double = { contender in
            guard contender == 0 else { return Probe.cpuSeconds() }
            guard let seconds = Probe.cpuSeconds(of: nginxID) else { throw BenchError("cannot read /proc/\(nginxID)/stat (nginx's CPU time)") }
            return seconds
        }
        do {
            // Everything cached first, in both: the large files whole, the small ones twice.
            for base in bases {
                for index in 0..<files {
                    let times = try await ProxyScenario.curlTimes(curl, base + "/f\(index).bin")
                    guard times.bytes == fileSize else { throw BenchError("\(base)/f\(index).bin: \(times.bytes) bytes of \(fileSize)") }
                }
                let list = work + "/fill-\(bases.firstIndex(of: base)!)"
                try (0..<objects).map { "url = \"\(base)/small/o\($0).bin\"\noutput = \"/dev/null\"\n" }.joined()
                    .write(toFile: list, atomically: true, encoding: .utf8)
                for _ in 0..<2 { _ = try await Clients.run(curl, ["-s", "-K", list]) }
            }
            await cache.settleAllSmall()
            let repetitions = context.repetitions

            // 1. Warm first byte: a new connection each, 1 MiB at an unaligned offset.
            let firstByte = try await interleaved(contenders: 2, repetitions: repetitions) { contender, repetition in
                var times: [Double] = []
                for index in 0..<files {
                    let start = Int64(12_345 + 1_048_573 * ((index + repetition) % 20)) % (fileSize - (2 << 20))
                    let got = try await ProxyScenario.curlTimes(curl, bases[contender] + "/f\(index).bin", range: "\(start)-\(start + (1 << 20) - 1)")
                    guard got.bytes == 1 << 20 else { throw BenchError("\(contenders[contender]) sent \(got.bytes) of 1 MiB") }
                    times.append(got.firstByte * 1000)
                }
                return Sample(value: times.sorted()[times.count / 2])
            }
            result.measurements += compared(firstByte, workload: "warm first byte, new connection, 1 MiB unaligned range (median of 10 files)", unit: "ms", higherIsBetter: false)

            // 2. One keep-alive client, 1 KiB ranges: rate, CPU and context switches per hit.
            let count = context.options.mode == .smoke ? 100 : 5000
            var cpu: [[Sample]] = [[], []]
            var switches: [Sample] = []
            let rates = try await interleaved(contenders: 2, repetitions: repetitions) { contender, repetition in
                let list = work + "/ranges-\(contender)-\(repetition)"
                var generator = SplitMix64(seed: UInt64(100 + repetition))
                try (0..<count).map { _ in
                    let file = Int(generator.next() % UInt64(files))
                    let start = Int64(generator.next() % UInt64(fileSize - 1024))
                    return "url = \"\(bases[contender])/f\(file).bin\"\nrange = \"\(start)-\(start + 1023)\"\noutput = \"/dev/null\"\n"
                }.joined().write(toFile: list, atomically: true, encoding: .utf8)
                let before = try serverCPU(contender)
                let switchesBefore = Self.contextSwitches()
                let clock = ContinuousClock.now
                let output = try await Clients.run(curl, ["-s", "-K", list, "-w", "%{http_code}\\n"])
                let elapsed = ContinuousClock.now - clock
                let answers = output.split(separator: "\n")
                guard answers.count == count, answers.allSatisfy({ $0 == "206" }) else {
                    throw BenchError("\(contenders[contender]): \(answers.count) answers of \(count), not all 206: \(answers.prefix(3))")
                }
                cpu[contender].append(Sample(value: (try serverCPU(contender) - before) / Double(count) * 1e6))
                if contender == 1 { switches.append(Sample(value: Double(Self.contextSwitches() - switchesBefore) / Double(count))) }
                let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
                return Sample(value: Double(count) / seconds)
            }
            result.measurements += compared(rates, workload: "one keep-alive client, 1 KiB ranges", unit: "req/s")
            result.measurements += compared(cpu, workload: "CPU of the serving process per 1 KiB hit", unit: "µs", higherIsBetter: false)
            result.measurements.append(
                Measurement(
                    scenario: number, scenarioName: name, workload: "context switches of the process per 1 KiB hit",
                    contender: contenders[1], unit: "", higherIsBetter: false, samples: switches))

            // 3. 2,000 cached 4 KiB objects under wrk.
            if let wrk = Clients.installed("wrk") {
                let script = work + "/objects.lua"
                try """
                math.randomseed(15)
                request = function()
                  return wrk.format("GET", "/small/o" .. math.random(0, \(objects - 1)) .. ".bin")
                end
                """.write(toFile: script, atomically: true, encoding: .utf8)
                let seconds = context.options.mode == .full ? 5 : context.options.mode == .quick ? 3 : 1
                let objectRates = try await interleaved(contenders: 2, repetitions: repetitions) { contender, _ in
                    let output = try await Clients.run(wrk, ["-t", "2", "-c", "32", "-d", "\(seconds)s", "-s", script, bases[contender]])
                    guard let line = output.split(separator: "\n").first(where: { $0.hasPrefix("Requests/sec:") }),
                        let rate = Double(line.split(separator: " ").last ?? ""), !output.contains("Non-2xx")
                    else { throw BenchError("wrk against \(bases[contender]) failed: \(output)") }
                    return Sample(value: rate)
                }
                result.measurements += compared(objectRates, workload: "wrk -t2 -c32, \(objects) cached 4 KiB objects", unit: "req/s")
            } else {
                result.notes.append("scenario 15: the 4 KiB objects under wrk skipped, wrk is not installed (apt-get install wrk)")
            }
            result.notes.append("scenario 15: hits answered on the event loop: \(cache.statistics.quickAnswers)")
        } catch {
            await proxy.stop()
            throw error
        }
        await proxy.stop()
        result.targets = goals(result.measurements)
        return result
    }

    /// Issue 42's goals for hits, on the medians of this run (sparsecache / nginx); scenario
    /// 12 judges the random 64 KiB ranges.
    static func goals(_ rows: [Measurement]) -> [TargetCheck] {
        func ratio(_ workload: String) -> Double? {
            let ours = rows.first { $0.workload.hasPrefix(workload) && $0.contender == contenders[1] }?.median
            let theirs = rows.first { $0.workload.hasPrefix(workload) && $0.contender == contenders[0] }?.median
            guard let ours, let theirs, theirs > 0 else { return nil }
            return ours / theirs
        }
        func check(_ name: String, _ value: Double?, atMost: Double? = nil, atLeast: Double? = nil) -> TargetCheck {
            let goal = atMost.map { "<= \(Table.format($0, decimals: 1))x" } ?? ">= \(Table.format(atLeast ?? 0, decimals: 1))x"
            guard let value else { return TargetCheck(name: name, target: goal, measured: "not measured", met: false, issue: 42) }
            let met = atMost.map { value <= $0 } ?? (value >= (atLeast ?? 0))
            return TargetCheck(name: name, target: goal, measured: Table.format(value, decimals: 2) + "x", met: met, issue: 42)
        }
        return [
            check("warm first byte (sparsecache / nginx)", ratio("warm first byte, new connection, 1 MiB unaligned range (median of 10 files)"), atMost: 1.0),
            check("CPU per 1 KiB hit (sparsecache / nginx)", ratio("CPU of the serving process per 1 KiB hit"), atMost: 1.0),
            check("cached 4 KiB objects under wrk (sparsecache / nginx proxy_cache)", ratio("wrk -t2 -c32, "), atLeast: 1.0),
        ]
    }

    /// Voluntary and involuntary context switches of every thread of this process.
    static func contextSwitches() -> Int {
        guard let tasks = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task") else { return 0 }
        return tasks.reduce(0) { total, task in
            guard let status = try? String(contentsOfFile: "/proc/self/task/\(task)/status", encoding: .utf8) else { return total }
            return total
                + status.split(separator: "\n").filter { $0.hasPrefix("voluntary_ctxt_switches:") || $0.hasPrefix("nonvoluntary_ctxt_switches:") }
                .compactMap { Int($0.split(separator: "\t").last ?? "") }.reduce(0, +)
        }
    }

    /// nginx with `proxy_cache` + `slice 1m` for the large files and plain `proxy_cache` for
    /// /small/, in front of `origin`, keep-alive upstream.
    private static func startNginx(work: String, origin: String) async throws -> (process: Process, base: String) {
        for folder in ["slice", "small"] { try FileManager.default.createDirectory(atPath: work + "/" + folder, withIntermediateDirectories: true) }
        let port = try Loopback.freePort()
        let upstream = origin.replacingOccurrences(of: "http://", with: "")
        let http = """
            proxy_cache_path \(work)/slice levels=1:2 keys_zone=slice:16m max_size=64g inactive=1h use_temp_path=off;
                proxy_cache_path \(work)/small levels=1:2 keys_zone=small:16m max_size=64g inactive=1h use_temp_path=off;
                upstream origin { server \(upstream); keepalive 16; }
            """
        let locations = """
            location /small/ {
                        proxy_cache small;
                        proxy_cache_valid 200 1h;
                        proxy_http_version 1.1;
                        proxy_set_header Connection "";
                        proxy_pass http://origin;
                    }
            """ + "\n        " + SliceCacheScenario.sliceLocation(path: "/", upstream: "origin") + "\n        tcp_nopush off;"
        let process = try NginxServer.process(root: work, work: work, port: port, accessLog: nil, locations: locations, http: http)
        try await BenchOrigin.launch(process, port: port)
        return (process, "http://127.0.0.1:\(port)")
    }

    private static func compared(_ samples: [[Sample]], workload: String, unit: String, higherIsBetter: Bool = true) -> [Measurement] {
        Measurement.rows(
            scenario: number, name: name, contenders: contenders, samples, workload: workload, unit: unit, higherIsBetter: higherIsBetter)
    }
}
