import Foundation
import LoopbackOrigins
import SparseCache

#if canImport(Glibc)
import Glibc
#endif

/// Scenario 9: fill-through from an nginx origin on 127.0.0.1.
///
/// - throughput: the whole resource through a ``ProgressiveCache`` into a fresh cache
///   directory (read back by the reader, or only fetched by `prefetch`), against curl
///   downloading the same file to a file in the same directory (no fsync: curl's durability is
///   the page cache's), and curl followed by one fdatasync of the file (the same bytes made
///   durable: what the cache's durability costs by itself); the origin client alone, own and
///   URLSession, dropping the bytes;
/// - time to first byte: the first chunk of an uncached read through the cache (first contact,
///   range request, write, commit, read back) against the first body chunk of a direct request.
///
/// Skipped with a note when nginx or curl is not installed (`apt-get install nginx-light curl`).
enum FillThroughScenario {
    static let number = 9
    static let name = "fill-through from nginx"

    static func run(_ context: BenchContext) async throws -> ScenarioResult {
        var result = ScenarioResult()
        guard NginxServer.binary != nil, let curl = Clients.installed("curl") else {
            result.notes.append("scenario 9 skipped: nginx or curl is not installed (apt-get install nginx-light curl)")
            return result
        }
        let root = try context.scratch.directory("fill-origin")
        let work = try context.scratch.directory("fill-work")
        defer {
            context.scratch.remove(root)
            context.scratch.remove(work)
        }
        let length = context.sizes.fillThrough
        let origin = try await BenchOrigin.start(root: root, work: work, resource: "movie.bin", length: length, seed: 9)
        defer { origin.stop() }
        let url = URL(string: origin.baseURL + "/movie.bin")!
        let contenders = [
            "curl -o file", "curl -o file, then fdatasync", "HTTPRangeSource alone (own client, bytes dropped)",
            "HTTPRangeSource alone (URLSession, bytes dropped)", "ProgressiveCache.read (fill + read back)",
            "ProgressiveCache.prefetch (fill only)",
        ]
        let samples = try await interleaved(contenders: contenders.count, repetitions: context.repetitions) { contender, repetition in
            let target = work + "/run-\(repetition)-\(contender)"
            defer { context.scratch.remove(target) }
            let start = Monotonic.now()
            switch contender {
            case 0, 1:
                _ = try await Clients.run(curl, ["-s", "-f", "-o", target, url.absoluteString])
                guard Raw.fileSize(target) == length else { throw BenchError("curl wrote \(Raw.fileSize(target)) of \(length) bytes") }
                if contender == 1 {
                    // What the cache's durability costs by itself: the same bytes made durable.
                    try await BlockingExecutor.shared.run {
                        let fd = try Raw.open(target, flags: O_RDWR)
                        defer { _ = close(fd) }
                        try Raw.fdatasync(fd, path: target)
                    }
                }
            case 2, 3:
                let transport: HTTPRangeSource.Transport = contender == 2 ? .automatic : .urlSession
                let response = try await HTTPRangeSource(url: url, transport: transport).fetch(0..<length, validator: nil)
                var received: Int64 = 0
                for try await bytes in response.body { received += Int64(bytes.count) }
                guard received == length else { throw BenchError("received \(received) of \(length) bytes") }
            default:
                let store = try await SparseStore.open(directory: target, options: StoreOptions(budget: .max))
                let cache = ProgressiveCache(store: store)
                let source = try HTTPRangeSource(url: url)
                if contender == 4 {
                    var received: Int64 = 0
                    for try await bytes in cache.read(source) { received += Int64(bytes.count) }
                    guard received == length else { throw BenchError("read \(received) of \(length) bytes") }
                } else {
                    try await cache.prefetch(source)
                }
                try await store.close()
            }
            return Sample(value: Double(length) / Monotonic.seconds(since: start) / 1e6)
        }
        let workload = "\(describeBytes(length)) over loopback, fresh cache each time"
        var throughput = contenders.enumerated().map { index, contender in
            Measurement(
                scenario: number, scenarioName: name, workload: workload, contender: contender, unit: "MB/s", samples: samples[index])
        }
        for index in throughput.indices { throughput[index].compare(to: throughput[0]) }
        result.measurements += throughput
        // Issue 18: a reader filling through the cache against curl writing the file (the
        // prefetch, which hands nothing to a reader, is shown beside it).
        let readRatio = throughput[4].ratio ?? 0
        result.targets.append(TargetCheck(
            name: "fill-through (ProgressiveCache.read) vs curl -o file", target: ">= 0.9x",
            measured: Table.format(readRatio, decimals: 2) + "x (prefetch: " + Table.format(throughput[5].ratio ?? 0, decimals: 2) + "x)",
            met: readRatio >= 0.9, issue: 18))

        // Time to first byte, uncached.
        let firstByte = try await interleaved(contenders: 2, repetitions: context.repetitions) { contender, repetition in
            let source = try HTTPRangeSource(url: url)
            if contender == 0 {
                let start = Monotonic.now()
                let response = try await source.fetch(0..<length, validator: nil)
                var iterator = response.body.makeAsyncIterator()
                _ = try await iterator.next()
                let elapsed = Monotonic.now() - start
                response.cancel()
                return Sample(value: Double(elapsed) / 1e6)
            }
            let target = work + "/ttfb-\(repetition)"
            defer { context.scratch.remove(target) }
            let store = try await SparseStore.open(directory: target, options: StoreOptions(budget: .max))
            let cache = ProgressiveCache(store: store)
            let start = Monotonic.now()
            var iterator = cache.read(source).makeAsyncIterator()
            _ = try await iterator.next()
            let elapsed = Monotonic.now() - start
            try await store.close()
            return Sample(value: Double(elapsed) / 1e6)
        }
        var latency = [
            Measurement(
                scenario: number, scenarioName: name, workload: "time to first byte, uncached",
                contender: "direct request (HTTPRangeSource)",
                unit: "ms", higherIsBetter: false, samples: firstByte[0]),
            Measurement(
                scenario: number, scenarioName: name, workload: "time to first byte, uncached", contender: "ProgressiveCache.read",
                unit: "ms", higherIsBetter: false, samples: firstByte[1]),
        ]
        latency[1].compare(to: latency[0])
        result.measurements += latency
        return result
    }
}
