import Foundation
import HTTPCache
import LoopbackOrigins
import SparseCacheEngine
import SparseCacheStore
import SparseHTTP

/// Scenario 16: the eviction policies on synthetic video traces. First the simulator
/// (``TraceSimulator``: the store's own eviction code, no disk) on the default trace and on
/// variants nobody tuned on; then a real replay of a smaller trace through the caching proxy
/// from an nginx origin, once per policy, checked against the simulator's origin bytes.
enum EvictionScenario {
    static let number = 16
    static let name = "eviction on a video trace: LRU, sfifo, Belady's MIN"

    static func run(_ context: BenchContext) async throws -> ScenarioResult {
        var result = ScenarioResult()
        let segment = Int64(SparseFileOptions.defaultSegmentSize)
        var base = TraceGenerator()
        if context.options.mode == .smoke { base.views = 200 }
        let variants: [(String, TraceGenerator, Double)] = [
            ("default", base, 0.1),
            ("seed 2", with(base) { $0.seed = 2 }, 0.1),
            ("seed 3", with(base) { $0.seed = 3 }, 0.1),
            ("zipf 0.7", with(base) { $0.zipf = 0.7 }, 0.1),
            ("zipf 1.2", with(base) { $0.zipf = 1.2 }, 0.1),
            ("no aging", with(base) { $0.halfLife = 0 }, 0.1),
            ("one-hit 0.1", with(base) { $0.oneHitWonders = 0.1 }, 0.1),
            ("cache 5%", base, 0.05),
        ]
        say("simulated, \(describeBytes(segment)) segments (sparsecache-bench trace --help):")
        say("trace         LRU    sfifo  MIN    sfifo/LRU  MIN/LRU  peak/budget")
        for (label, generator, share) in variants {
            let trace = generator.generate()
            let (rows, budget) = TraceCommand.simulate(trace, share: share, segment: segment)
            let (lru, sfifo, min) = (rows[0], rows[1], rows[2])
            let sfifoToLRU = Double(sfifo.originBytes) / Double(lru.originBytes)
            let minToLRU = Double(min.originBytes) / Double(lru.originBytes)
            let peak = Double(Swift.max(lru.peakBytes, sfifo.peakBytes)) / Double(budget)
            let numbers = String(
                format: "%.3f  %.3f  %.3f  %.3f      %.3f    %.3f", lru.originShare, sfifo.originShare, min.originShare, sfifoToLRU, minToLRU, peak)
            let line = label.padding(toLength: 14, withPad: " ", startingAt: 0) + numbers
            say(line)
            result.notes.append("scenario 16 simulated, origin/asked of LRU sfifo MIN, sfifo/LRU, MIN/LRU, peak/budget: " + line)
            if label == "default" {
                result.targets.append(
                    TargetCheck(
                        name: "origin bytes, sfifo / LRU (simulated, default trace, cache 10%)", target: "<= 0.90",
                        measured: Table.format(Double(sfifo.originBytes) / Double(lru.originBytes)),
                        met: Double(sfifo.originBytes) <= 0.9 * Double(lru.originBytes), issue: 45))
            }
            if label != "default" {
                result.targets.append(
                    TargetCheck(
                        name: "sfifo never worse than LRU: \(label)", target: "<= 1.00",
                        measured: Table.format(Double(sfifo.originBytes) / Double(lru.originBytes)),
                        met: sfifo.originBytes <= lru.originBytes, issue: 45))
            }
        }
        try await replay(context, segment: segment, into: &result)
        return result
    }

    private static func with(_ generator: TraceGenerator, _ change: (inout TraceGenerator) -> Void) -> TraceGenerator {
        var generator = generator
        change(&generator)
        return generator
    }

    /// The real replay: the trace's requests one after another through the proxy (curl, one
    /// connection), the origin's body bytes from its access log, the store's allocated bytes
    /// sampled every 5 ms.
    private static func replay(_ context: BenchContext, segment: Int64, into result: inout ScenarioResult) async throws {
        guard NginxServer.binary != nil, let curl = Clients.installed("curl") else {
            result.notes.append("scenario 16: real replay skipped: nginx or curl is not installed (apt-get install nginx-light curl)")
            return
        }
        var generator = TraceGenerator()
        generator.views = context.options.traceViews ?? (context.options.mode == .smoke ? 30 : 300)
        let trace = generator.generate()
        let (simulated, budget) = TraceCommand.simulate(trace, share: 0.1, segment: segment)
        let totals = trace.totals(unit: segment)
        say(
            "\nreal replay through the proxy: \(generator.views) views (--trace-views), \(trace.requests.count) requests, "
                + "\(describeBytes(totals.asked)) asked, \(describeBytes(totals.distinct)) distinct, budget \(describeBytes(budget))")
        say("policy  origin/asked real  simulated  real/simulated  peak disk/budget")
        let root = try context.scratch.directory("trace-origin")
        let work = try context.scratch.directory("trace-work")
        defer {
            context.scratch.remove(root)
            context.scratch.remove(work)
        }
        // The origin's files: holes of each video's size (nginx sends their zeros).
        var sizes: [String: Int64] = [:]
        for request in trace.requests { sizes[request.key] = request.size }
        for (key, size) in sizes {
            guard FileManager.default.createFile(atPath: root + "/" + key, contents: nil) else { throw BenchError("cannot create \(key)") }
            guard truncate(root + "/" + key, off_t(size)) == 0 else { throw BenchError("cannot size \(key)") }
        }
        let originLog = work + "/origin/logs/access.log"
        let origin = try await BenchOrigin.start(
            root: root, work: work + "/origin", resource: "unused.bin", length: 1, seed: 16, accessLog: originLog)
        defer { origin.stop() }
        // One curl for the whole trace: a config with a block per request, on one connection.
        let config = trace.requests.map { request in
            // The origin's address is replaced by each proxy's below.
            "url = \"\(origin.baseURL)/\(request.key)\"\nrange = \"\(request.range.lowerBound)-\(request.range.upperBound - 1)\"\n"
                + "output = \"/dev/null\"\nfail\n"
        }.joined(separator: "next\n")
        for (index, policy) in [EvictionPolicy.lru, .sfifo].enumerated() {
            var options = StoreOptions(budget: budget)
            options.eviction = policy
            let store = try await SparseStore.open(directory: work + "/cache-\(policy.rawValue)", options: options)
            var fill = FillOptions()
            // The replay packs views that are seconds apart into milliseconds: resources kept
            // open for the next range would be held from eviction for whole views.
            fill.keepOpen = .milliseconds(1)
            fill.quickHits = false
            let cache = ProgressiveCache(store: store, options: fill)
            let proxy = CachingProxy(cache: cache, origin: URL(string: origin.baseURL)!)
            var serverOptions = HTTPServer.Options()
            serverOptions.port = 0
            let server = try HTTPServer.start(options: serverOptions, quick: { proxy.answerQuickly($0, &$1) }) { request, body, response in
                try await proxy.handle(request, body, response)
            }
            let before = BenchOrigin.totalBodyBytes(in: originLog)
            let sampler = Task {
                var peak: Int64 = 0
                while !Task.isCancelled {
                    peak = max(peak, await store.allocatedBytes)
                    try? await Task.sleep(for: .milliseconds(5))
                }
                return peak
            }
            let file = work + "/requests-\(policy.rawValue).curl"
            try config.replacingOccurrences(of: origin.baseURL, with: "http://127.0.0.1:\(server.port)")
                .write(toFile: file, atomically: true, encoding: .utf8)
            do {
                _ = try await Clients.run(curl, ["-s", "-K", file])
            } catch {
                sampler.cancel()
                await ProxyScenario.shutdown(server, cache, store)
                throw error
            }
            sampler.cancel()
            let peak = max(await sampler.value, await store.allocatedBytes)
            await ProxyScenario.shutdown(server, cache, store)
            try await Task.sleep(for: .milliseconds(300))
            let real = BenchOrigin.totalBodyBytes(in: originLog) - before
            let sim = simulated[index]
            let agreement = Double(real) / Double(max(1, sim.originBytes))
            let line =
                policy.rawValue.padding(toLength: 8, withPad: " ", startingAt: 0)
                + String(
                    format: "%.3f              %.3f      %.3f           %.3f", Double(real) / Double(totals.asked), sim.originShare, agreement,
                    Double(peak) / Double(budget))
            say(line)
            result.notes.append("scenario 16 replay of \(generator.views) views, policy, origin/asked real and simulated, real/simulated, peak/budget: " + line)
            result.targets.append(
                TargetCheck(
                    name: "real replay / simulator, origin bytes, \(policy.rawValue)", target: "0.95-1.05", measured: Table.format(agreement),
                    met: abs(agreement - 1) <= 0.05, issue: 45))
            result.targets.append(
                TargetCheck(
                    name: "peak disk / budget, real replay, \(policy.rawValue)", target: "<= 1.10", measured: Table.format(Double(peak) / Double(budget)),
                    met: Double(peak) <= 1.1 * Double(budget), issue: 45))
        }
    }
}
