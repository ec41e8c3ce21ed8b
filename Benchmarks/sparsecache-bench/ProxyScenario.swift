import Foundation
import LoopbackOrigins
import SparseCache

/// Scenario 10: the local caching proxy (`sparsecache serve`'s server, in process) against
/// nginx serving the same file on 127.0.0.1, with the same clients in the same run:
///
/// - cached throughput: curl downloads the whole (cached) resource, to /dev/null;
/// - request rate: wrk, 2 threads and 16 connections, 64 KiB ranges of the cached resource;
/// - time to first byte, uncached: a resource the proxy has never seen (first contact, range
///   request, write, commit, send) against the same request straight to nginx.
///
/// Skipped with a note when nginx or curl is not installed; the wrk rows when wrk is not.
enum ProxyScenario {
    static let number = 10
    static let name = "local proxy vs nginx"

    static func run(_ context: BenchContext) async throws -> ScenarioResult {
        var result = ScenarioResult()
        guard NginxServer.binary != nil, let curl = Clients.installed("curl") else {
            result.notes.append("scenario 10 skipped: nginx or curl is not installed (apt-get install nginx-light curl)")
            return result
        }
        let root = try context.scratch.directory("proxy-origin")
        let work = try context.scratch.directory("proxy-work")
        defer {
            context.scratch.remove(root)
            context.scratch.remove(work)
        }
        let length = context.sizes.fillThrough
        let nginx = try await BenchOrigin.start(root: root, work: work + "/nginx", resource: "movie.bin", length: length, seed: 10)
        defer { nginx.stop() }
        let origin = nginx.baseURL
        // Names the proxy has never seen, for the uncached first byte (hard links: no copies).
        for repetition in 0..<context.repetitions {
            try FileManager.default.linkItem(atPath: root + "/movie.bin", toPath: root + "/fresh-\(repetition).bin")
        }

        let store = try await SparseStore.open(directory: work + "/cache", options: StoreOptions(budget: .max))
        let cache = ProgressiveCache(store: store)
        let proxy = CachingProxy(cache: cache, origin: URL(string: origin)!)
        var serverOptions = HTTPServer.Options()
        serverOptions.port = 0
        let server = try HTTPServer.start(options: serverOptions, quick: { proxy.answerQuickly($0, &$1) }) { request, body, response in
            try await proxy.handle(request, body, response)
        }
        let proxied = "http://127.0.0.1:\(server.port)"
        do {
            // Fill the cache once: the rows below measure serving, not filling (scenario 9 does).
            let warm = try await curlTimes(curl, proxied + "/movie.bin")
            guard warm.bytes == length else { throw BenchError("the proxy sent \(warm.bytes) of \(length) bytes") }

            let bases = [origin, proxied]
            let contenders = ["nginx (sendfile)", "sparsecache proxy (verified reads)"]
            let throughput = try await interleaved(contenders: 2, repetitions: context.repetitions) { contender, _ in
                let times = try await curlTimes(curl, bases[contender] + "/movie.bin")
                guard times.bytes == length else { throw BenchError("\(contenders[contender]) sent \(times.bytes) of \(length) bytes") }
                return Sample(value: Double(length) / times.total / 1e6)
            }
            result.measurements += compared(
                throughput, contenders: contenders, workload: "curl, \(describeBytes(length)) cached, one client", unit: "MB/s")

            if let wrk = Clients.installed("wrk") {
                let seconds = context.options.mode == .full ? 5 : context.options.mode == .quick ? 3 : 1
                let rates = try await interleaved(contenders: 2, repetitions: context.repetitions) { contender, _ in
                    let output = try await Clients.run(
                        wrk,
                        [
                            "-t", "2", "-c", "16", "-d", "\(seconds)s", "-H", "Range: bytes=65536-131071", bases[contender] + "/movie.bin",
                        ])
                    guard !output.contains("Non-2xx"), !output.contains("Socket errors"),
                        let line = output.split(separator: "\n").first(where: { $0.hasPrefix("Requests/sec:") }),
                        let rate = Double(line.split(separator: " ").last ?? "")
                    else { throw BenchError("wrk against \(contenders[contender]) failed: \(output)") }
                    return Sample(value: rate)
                }
                result.measurements += compared(
                    rates, contenders: contenders, workload: "wrk -t2 -c16, 64 KiB cached ranges", unit: "req/s")
            } else {
                result.notes.append("scenario 10: request rate skipped, wrk is not installed (apt-get install wrk)")
            }

            let firstByte = try await interleaved(contenders: 2, repetitions: context.repetitions) { contender, repetition in
                let times = try await curlTimes(curl, bases[contender] + "/fresh-\(repetition).bin", range: "0-65535")
                return Sample(value: times.firstByte * 1000)
            }
            result.measurements += compared(
                firstByte, contenders: ["nginx", "sparsecache proxy, uncached"], workload: "time to first byte, 64 KiB range", unit: "ms",
                higherIsBetter: false)
        } catch {
            await shutdown(server, cache, store)
            throw error
        }
        await shutdown(server, cache, store)
        return result
    }

    static func shutdown(_ server: HTTPServer, _ cache: ProgressiveCache, _ store: SparseStore) async {
        await server.shutdown(grace: .seconds(1))
        await cache.shutdown()
        try? await store.close()
    }

    private static func compared(
        _ samples: [[Sample]], contenders: [String], workload: String, unit: String, higherIsBetter: Bool = true
    ) -> [Measurement] {
        var rows = contenders.enumerated().map { index, contender in
            Measurement(
                scenario: number, scenarioName: name, workload: workload, contender: contender, unit: unit, higherIsBetter: higherIsBetter,
                samples: samples[index])
        }
        rows[1].compare(to: rows[0])
        return rows
    }

    /// Bytes, total seconds and seconds to the first byte of one curl download to /dev/null.
    static func curlTimes(_ curl: String, _ url: String, range: String? = nil) async throws -> (
        bytes: Int64, total: Double, firstByte: Double
    ) {
        var arguments = ["-s", "-f", "-o", "/dev/null", "-w", "%{size_download} %{time_total} %{time_starttransfer}"]
        if let range { arguments += ["-r", range] }
        let output = try await Clients.run(curl, arguments + [url])
        let fields = output.split(separator: " ")
        guard fields.count == 3, let bytes = Int64(fields[0]), let total = Double(fields[1]), let first = Double(fields[2]) else {
            throw BenchError("curl \(url): unexpected output '\(output)'")
        }
        return (bytes, total, first)
    }
}
