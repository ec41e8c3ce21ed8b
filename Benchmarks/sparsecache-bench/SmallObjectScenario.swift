import Foundation
import LoopbackOrigins
import SeededRandom
import SparseCache

/// Scenario 13: many small answers (issue 21). N files of 4 KiB on an nginx origin; one
/// keep-alive client (curl reading a list of URLs) asks each cache for all of them (misses),
/// then for all of them again (hits); then the disk each cache took per body byte. Beside the
/// rates, the CPU time of the serving process per request: on a shared machine it moves far
/// less than the rates do.
///
/// Contenders, in one run, in front of the same origin: nginx `proxy_cache` (keep-alive
/// upstream, `proxy_cache_valid 200 1h`), sparsecache with small objects (the default 64 KiB
/// threshold) and sparsecache with every answer a sparse file and an index (threshold 0: the
/// small-object logs off). Each repetition uses fresh names (a query string the origin
/// ignores), so every miss is a first request for both caches.
enum SmallObjectScenario {
    static let number = 13
    static let name = "many small answers against nginx proxy_cache"

    static let contenders = ["nginx proxy_cache", "sparsecache, small objects", "sparsecache, sparse files"]
    static let bodySize = 4096

    static func run(_ context: BenchContext) async throws -> ScenarioResult {
        var result = ScenarioResult()
        guard NginxServer.binary != nil, let curl = Clients.installed("curl"), let du = Clients.installed("du") else {
            result.notes.append("scenario 13 skipped: nginx, curl or du is not installed (apt-get install nginx-light curl)")
            return result
        }
        let count = context.options.mode == .full ? 20_000 : context.options.mode == .quick ? 2_000 : 200
        // nginx proxy_cache's misses cost it 2-4 times the CPU when another run's files were
        // just made and removed (the file system's cached state; dropping the page cache
        // restores it, dropping dentries and inodes alone does not; docs/BENCHMARKS.md, scenario
        // 13). Dropped first, so every run starts from the same state. Not in a smoke run (the
        // test suite runs beside it).
        if context.options.mode != .smoke {
            if try await BlockingExecutor.shared.run({ Raw.dropKernelCaches() }) {
                result.notes.append("scenario 13: kernel caches dropped first (sync; echo 3 > /proc/sys/vm/drop_caches)")
            } else {
                result.notes.append(
                    "scenario 13: could not drop the kernel's caches (needs root): nginx's miss CPU grows 2-4x right after other runs")
            }
        }
        let root = try context.scratch.directory("small-origin")
        let work = try context.scratch.directory("small-work")
        defer {
            context.scratch.remove(root)
            context.scratch.remove(work)
        }
        var random = SplitMix64(seed: 13)
        for index in 0..<count {
            guard FileManager.default.createFile(atPath: root + "/f\(index).bin", contents: Data(random.bytes(bodySize))) else {
                throw BenchError("cannot write the origin's files in \(root)")
            }
        }
        let originPort = try Loopback.freePort()
        let originProcess = try NginxServer.process(
            root: root, work: work + "/origin", port: originPort, accessLog: nil, locations: "expires 1h;\n            tcp_nopush off;")
        try await BenchOrigin.launch(originProcess, port: originPort)
        defer { Loopback.kill(originProcess) }
        let nginx = try await startProxyCache(work: work + "/nginx", originPort: originPort)
        defer { Loopback.kill(nginx.process) }

        var small = FillOptions()
        small.smallObjectThreshold = 64 * 1024
        var sparse = FillOptions()
        sparse.smallObjectThreshold = 0
        let origin = URL(string: "http://127.0.0.1:\(originPort)")!
        let proxies = [
            try await InProcessProxy(directory: work + "/small-cache", origin: origin, options: small),
            try await InProcessProxy(directory: work + "/sparse-cache", origin: origin, options: sparse),
        ]
        let bases = [nginx.base] + proxies.map(\.base)
        // CPU of the serving process: nginx's (one process, `master_process off`), and this
        // process's for the proxies in it (the bench itself only waits for curl meanwhile).
        let nginxID = nginx.process.processIdentifier
        let serverCPU: @Sendable (Int) throws -> Double = { contender in
            guard contender == 0 else { return Probe.cpuSeconds() }
            guard let seconds = Probe.cpuSeconds(of: nginxID) else { throw BenchError("cannot read /proc/\(nginxID)/stat (nginx's CPU time)") }
            return seconds
        }
        // One pass of curl over a list: its rate, and the serving process's CPU per request.
        let measured: @Sendable (Int, String) async throws -> (rate: Sample, cpu: Sample) = { contender, list in
            let cpu = try serverCPU(contender)
            let seconds = try await fetchAll(curl, list: list, count: count, what: contenders[contender])
            return (Sample(value: Double(count) / seconds), Sample(value: (try serverCPU(contender) - cpu) / Double(count) * 1e6))
        }
        do {
            let repetitions = context.repetitions
            var hitLists: [[String]] = Array(repeating: [], count: contenders.count)
            var missCPU: [[Sample]] = Array(repeating: [], count: contenders.count)
            let misses = try await interleaved(contenders: contenders.count, repetitions: repetitions) { contender, repetition in
                let list = work + "/urls-\(contender)-\(repetition)"
                try (0..<count).map { "url = \"\(bases[contender])/f\($0).bin?r=\(contender)-\(repetition)\"\noutput = \"/dev/null\"\n" }
                    .joined().write(toFile: list, atomically: true, encoding: .utf8)
                hitLists[contender].append(list)
                let (rate, cpu) = try await measured(contender, list)
                missCPU[contender].append(cpu)
                return rate
            }
            result.measurements += compared(misses, workload: "\(count) x 4 KiB misses, one keep-alive client", unit: "req/s")
            var hitCPU: [[Sample]] = Array(repeating: [], count: contenders.count)
            let hits = try await interleaved(contenders: contenders.count, repetitions: repetitions) { contender, repetition in
                let (rate, cpu) = try await measured(contender, hitLists[contender][repetition])
                hitCPU[contender].append(cpu)
                return rate
            }
            result.measurements += compared(hits, workload: "\(count) x 4 KiB hits, one keep-alive client", unit: "req/s")
            // Steadier than the rates on a shared machine; nginx's deferred writeback of its
            // unsynced files runs in kernel threads and is not in its figure, sparsecache's
            // pwrite and fdatasync are in its own.
            result.measurements += compared(missCPU, workload: "CPU of the serving process per 4 KiB miss", unit: "µs", higherIsBetter: false)
            result.measurements += compared(hitCPU, workload: "CPU of the serving process per 4 KiB hit", unit: "µs", higherIsBetter: false)

            // Disk per body byte, everything the repetitions stored (the small objects' logs
            // are durable once their group commits ran: wait for the writes in flight).
            for proxy in proxies { await proxy.settle() }
            let bodies = Double(count * repetitions * bodySize)
            var disk: [[Sample]] = []
            for directory in [nginx.cacheDirectory, work + "/small-cache", work + "/sparse-cache"] {
                let output = try await Clients.run(du, ["-s", "-B1", directory])
                guard let bytes = Double(output.split(whereSeparator: { $0 == "\t" || $0 == " " }).first ?? "") else {
                    throw BenchError("du of \(directory) said: \(output)")
                }
                disk.append([Sample(value: bytes / bodies)])
            }
            result.measurements += compared(
                disk, workload: "disk per body byte, \(count * repetitions) x 4 KiB stored", unit: "x", higherIsBetter: false)

            // The same requests of nginx and of the small-object proxy in turn (after the disk
            // was measured: these store as many again).
            let turns = try await alternating(curl, bases: Array(bases.prefix(2)), work: work, count: count, repetitions: repetitions)
            result.measurements += comparedInTurn(turns.misses, workload: "latency of a 4 KiB miss, the two asked in turn (median)")
            result.measurements += comparedInTurn(
                turns.missRates, workload: "4 KiB misses per second, the two asked in turn", unit: "req/s", higherIsBetter: true)
            result.measurements += comparedInTurn(turns.hits, workload: "latency of a 4 KiB hit, the two asked in turn (median)")
        } catch {
            for proxy in proxies { await proxy.stop() }
            throw error
        }
        for proxy in proxies { await proxy.stop() }
        return result
    }

    /// The latency of a miss (then of a hit) at nginx and at the small-object proxy, asked in
    /// turn by one curl: request i of one, then request i of the other, and so on, each on its
    /// own keep-alive connection. Separate runs of each (the rates above) see the host's load
    /// change between them, by ±10% here from one minute to the next; in turn, both see it
    /// alike, and a difference of 1% shows. Per repetition (fresh names; which contender asks
    /// first alternates), the median of curl's `time_total`: from the request's start to its
    /// answer's last byte, without the client's own work between requests. Work a server does
    /// after its answers (sparsecache's small-object writes, about 3% of a miss) may fall in
    /// the other's requests: the rates above are the measure of the whole; this one, of the
    /// request path. The misses per second in turn are the requests over the sum of their
    /// times: the rate of one keep-alive client without its own work between requests, with
    /// both servers seeing the same moments of the host.
    private static func alternating(
        _ curl: String, bases: [String], work: String, count: Int, repetitions: Int
    ) async throws -> (misses: [[Sample]], missRates: [[Sample]], hits: [[Sample]]) {
        var misses: [[Sample]] = [[], []], missRates: [[Sample]] = [[], []], hits: [[Sample]] = [[], []]
        let ports = bases.map { $0.split(separator: ":").last.map(String.init) ?? "" }
        for repetition in 0..<repetitions {
            let order = repetition % 2 == 0 ? [0, 1] : [1, 0]
            let list = work + "/urls-in-turn-\(repetition)"
            try (0..<count).map { index in
                order.map { "url = \"\(bases[$0])/f\(index).bin?r=turn-\(repetition)\"\noutput = \"/dev/null\"\n" }.joined()
            }.joined().write(toFile: list, atomically: true, encoding: .utf8)
            for pass in 0..<2 {
                let output = try await Clients.run(curl, ["-s", "-K", list, "-w", "%{remote_port} %{http_code} %{size_download} %{time_total}\\n"])
                var times: [[Double]] = [[], []]
                for line in output.split(separator: "\n") {
                    let fields = line.split(separator: " ")
                    guard fields.count == 4, let contender = ports.firstIndex(of: String(fields[0])), fields[1] == "200",
                        fields[2] == "\(bodySize)", let seconds = Double(fields[3])
                    else { throw BenchError("requests in turn: an answer other than 200 with 4 KiB: \(line)") }
                    times[contender].append(seconds * 1e6)
                }
                guard times.allSatisfy({ $0.count == count }) else {
                    throw BenchError("requests in turn: \(times.map(\.count)) answers, \(count) asked of each")
                }
                for contender in 0..<2 {
                    let sample = Sample(value: Statistics.median(times[contender]))
                    if pass == 0 {
                        misses[contender].append(sample)
                        missRates[contender].append(Sample(value: Double(count) / (times[contender].reduce(0, +) / 1e6)))
                    } else {
                        hits[contender].append(sample)
                    }
                }
            }
        }
        return (misses, missRates, hits)
    }

    /// Rows of nginx and the small-object proxy (the sparse-file contender is not asked in
    /// turn: at a fifth of their rate it would only slow the pairs down).
    private static func comparedInTurn(
        _ samples: [[Sample]], workload: String, unit: String = "µs", higherIsBetter: Bool = false
    ) -> [Measurement] {
        var rows = (0..<2).map { index in
            Measurement(
                scenario: number, scenarioName: name, workload: workload, contender: contenders[index], unit: unit,
                higherIsBetter: higherIsBetter, samples: samples[index])
        }
        rows[1].compare(to: rows[0])
        return rows
    }

    /// Runs curl over the URL list (one process, one keep-alive connection); returns the
    /// seconds it took. Every answer must be a 200 with 4 KiB.
    private static func fetchAll(_ curl: String, list: String, count: Int, what: String) async throws -> Double {
        let start = ContinuousClock.now
        let output = try await Clients.run(curl, ["-s", "-K", list, "-w", "%{http_code} %{size_download}\\n"])
        let elapsed = ContinuousClock.now - start
        let lines = output.split(separator: "\n")
        let wrong = lines.filter { $0 != "200 \(bodySize)" }
        guard lines.count == count, wrong.isEmpty else {
            throw BenchError("\(what): \(lines.count) answers of \(count), \(wrong.count) not 200 with 4 KiB: \(wrong.prefix(3))")
        }
        return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    }

    /// nginx `proxy_cache` in front of the origin, with a keep-alive upstream.
    private static func startProxyCache(work: String, originPort: Int) async throws -> (
        process: Process, base: String, cacheDirectory: String
    ) {
        let cache = work + "/cache"
        try FileManager.default.createDirectory(atPath: cache, withIntermediateDirectories: true)
        let port = try Loopback.freePort()
        let http = """
            proxy_cache_path \(cache) levels=1:2 keys_zone=small:64m max_size=64g inactive=1h use_temp_path=off;
                upstream origin { server 127.0.0.1:\(originPort); keepalive 16; }
            """
        let location = """
            location / {
                        proxy_cache small;
                        proxy_cache_valid 200 1h;
                        proxy_http_version 1.1;
                        proxy_set_header Connection "";
                        proxy_pass http://origin;
                    }
                    tcp_nopush off;
            """
        let process = try NginxServer.process(root: work, work: work, port: port, accessLog: nil, locations: location, http: http)
        try await BenchOrigin.launch(process, port: port)
        return (process, "http://127.0.0.1:\(port)", cache)
    }

    private static func compared(_ samples: [[Sample]], workload: String, unit: String, higherIsBetter: Bool = true) -> [Measurement] {
        Measurement.rows(
            scenario: number, name: name, contenders: contenders, samples, workload: workload, unit: unit, higherIsBetter: higherIsBetter)
    }
}
