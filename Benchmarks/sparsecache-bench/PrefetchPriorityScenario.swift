import Foundation
import LoopbackOrigins
import SparseCache

/// Scenario 11: a player's seek while prefetch holds every connection to the origin.
///
/// Six background prefetches (``ConnectionLimiter/Priority/background``, as segment prefetch
/// and read-ahead run) of resources nginx sends slowly (`limit_rate`) take all six places of
/// the per-origin limit; then curl asks the proxy for a 64 KiB range in the middle of a
/// resource it has never seen (first contact, then the range). The same seek with no
/// prefetch running is the baseline; the ratio of the medians (with / without) is the cost
/// of prefetch to a player that waits. Issue 19's target: at most 1.2x.
enum PrefetchPriorityScenario {
    static let number = 11
    static let name = "seek under prefetch"

    static func run(_ context: BenchContext) async throws -> ScenarioResult {
        var result = ScenarioResult()
        guard NginxServer.binary != nil, let curl = Clients.installed("curl") else {
            result.notes.append("scenario 11 skipped: nginx or curl is not installed (apt-get install nginx-light curl)")
            return result
        }
        let root = try context.scratch.directory("prefetch-origin")
        let work = try context.scratch.directory("prefetch-work")
        defer {
            context.scratch.remove(root)
            context.scratch.remove(work)
        }
        let length = max(context.sizes.fillThrough, 4 << 20)
        // The seeks' resource at full speed; the prefetched ones at 512 KB/s each, so the six
        // keep their connections for the whole measurement.
        let nginx = try await BenchOrigin.start(
            root: root, work: work + "/nginx", resource: "movie.bin", length: length, seed: 11,
            locations: "expires 1h; location /slow/ { limit_rate 512k; }")
        defer { nginx.stop() }
        try FileManager.default.createDirectory(atPath: root + "/slow", withIntermediateDirectories: true)
        let prefetches = HTTPRangeSource.connectionsPerOrigin
        for repetition in 0..<context.repetitions {
            for contender in 0..<2 {
                try FileManager.default.linkItem(atPath: root + "/movie.bin", toPath: root + "/seek-\(repetition)-\(contender).bin")
            }
            for index in 0..<prefetches {
                try FileManager.default.linkItem(atPath: root + "/movie.bin", toPath: root + "/slow/p-\(repetition)-\(index).bin")
            }
        }

        let store = try await SparseStore.open(directory: work + "/cache", options: StoreOptions(budget: .max))
        let cache = ProgressiveCache(store: store)
        let origin = URL(string: nginx.baseURL)!
        let proxy = CachingProxy(cache: cache, origin: origin)
        var serverOptions = HTTPServer.Options()
        serverOptions.port = 0
        let server = try HTTPServer.start(options: serverOptions, quick: { proxy.answerQuickly($0, &$1) }) { request, body, response in
            try await proxy.handle(request, body, response)
        }
        let proxied = "http://127.0.0.1:\(server.port)"
        let limiter = HTTPRangeSource.limiter(for: origin)
        let middle = length / 2
        let range = "\(middle)-\(middle + 65535)"
        do {
            let samples = try await interleaved(contenders: 2, repetitions: context.repetitions) { contender, repetition in
                var running: [Task<Void, Never>] = []
                if contender == 1 {
                    for index in 0..<prefetches {
                        let source = try HTTPRangeSource(url: URL(string: nginx.baseURL + "/slow/p-\(repetition)-\(index).bin")!)
                        running.append(
                            Task {
                                await ConnectionLimiter.$priority.withValue(.background) { try? await cache.prefetch(source) }
                            })
                    }
                    // Every place taken by a transfer under way.
                    let deadline = ContinuousClock.now + .seconds(10)
                    while limiter.inUse < prefetches, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
                    try await Task.sleep(for: .milliseconds(200))
                }
                let times = try await curlTimes(curl, proxied + "/seek-\(repetition)-\(contender).bin", range: range)
                for task in running { task.cancel() }
                for task in running { await task.value }
                guard times.bytes == 65536 else { throw BenchError("the seek got \(times.bytes) of 65536 bytes") }
                return Sample(value: times.firstByte * 1000)
            }
            var rows = ["no prefetch", "\(prefetches) background prefetches"].enumerated().map { index, contender in
                Measurement(
                    scenario: number, scenarioName: name, workload: "time to first byte of a 64 KiB seek, uncached", contender: contender,
                    unit: "ms", higherIsBetter: false, samples: samples[index])
            }
            rows[1].compare(to: rows[0])
            result.measurements += rows
            let ratio = rows[0].median > 0 ? rows[1].median / rows[0].median : 0
            result.targets.append(
                TargetCheck(
                    name: "seek time to first byte with prefetch filling the per-origin limit vs none (issue 19)", target: "<= 1.2x",
                    measured: String(format: "%.2fx", ratio), met: ratio <= 1.2))
        } catch {
            await shutdown(server, proxy, cache, store)
            throw error
        }
        await shutdown(server, proxy, cache, store)
        return result
    }

    private static func shutdown(_ server: HTTPServer, _ proxy: CachingProxy, _ cache: ProgressiveCache, _ store: SparseStore) async {
        await server.shutdown(grace: .seconds(1))
        await proxy.shutdown()
        await cache.shutdown()
        try? await store.close()
    }

    /// Bytes, total seconds and seconds to the first byte of one curl download to /dev/null.
    private static func curlTimes(_ curl: String, _ url: String, range: String) async throws -> (bytes: Int64, firstByte: Double) {
        let output = try await Clients.run(curl, ["-s", "-f", "-o", "/dev/null", "-w", "%{size_download} %{time_starttransfer}", "-r", range, url])
        let fields = output.split(separator: " ")
        guard fields.count == 2, let bytes = Int64(fields[0]), let first = Double(fields[1]) else {
            throw BenchError("curl \(url): unexpected output '\(output)'")
        }
        return (bytes, first)
    }
}
