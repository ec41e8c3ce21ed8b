import Foundation
import SparseCacheStore

/// `sparsecache-bench trace`: generates or reads a trace and simulates the eviction
/// policies on it (no disk, no network: seconds).
enum TraceCommand {
    static let usage = """
        OVERVIEW: Replays a request trace against the store's eviction code (LRU, sfifo) and
        Belady's MIN, and reports origin bytes, byte and object hit ratios, peak disk.

        USAGE: sparsecache-bench trace [--file PATH] [--write PATH] [--cache-share F]
                                       [--segment BYTES] [generator options]

        OPTIONS:
          --file PATH       Read the trace from PATH: 'time key size first-last' or
                            'time key size' (whole object) per line
          --write PATH      Write the generated trace to PATH
          --cache-share F   Budget as a share of the distinct bytes asked (default 0.1)
          --segment BYTES   Segment size of the store (default 65536, serve's)
          -h, --help        Show this help

        GENERATOR OPTIONS (without --file):
          --seed N          (default 1)       --views N        (default 1500)
          --videos N        (default 400)     --zipf A         (default 0.9)
          --half-life N     popularity halves every N views; 0: no aging (default 300)
          --one-hit F       share of views of videos asked once (default 0.3)
          --median-size B   median video size (default 16777216)
          --watched F       mean share of a video watched (default 0.2)
          --seeks F         share of views with a seek (default 0.2)
        """

    static func run(_ arguments: [String]) -> Int32 {
        var generator = TraceGenerator()
        var file: String?
        var output: String?
        var share = 0.1
        var segment: Int64 = 65536
        do {
            var rest = try generator.apply(arguments)
            while !rest.isEmpty {
                let name = rest.removeFirst()
                if name == "-h" || name == "--help" {
                    print(usage)
                    return 0
                }
                guard !rest.isEmpty else { throw TraceGenerator.UsageError(description: "\(name) needs a value") }
                let value = rest.removeFirst()
                switch name {
                case "--file": file = value
                case "--write": output = value
                case "--cache-share":
                    guard let number = Double(value), number > 0 else { throw TraceGenerator.UsageError(description: "--cache-share needs a positive number") }
                    share = number
                case "--segment":
                    guard let number = Int64(value), number >= 4096, number.nonzeroBitCount == 1 else {
                        throw TraceGenerator.UsageError(description: "--segment needs a power of two of at least 4096")
                    }
                    segment = number
                default: throw TraceGenerator.UsageError(description: "unknown argument '\(name)'")
                }
            }
            let trace = try file.map { try Trace.load(path: $0) } ?? generator.generate()
            if let output { try trace.text.write(toFile: output, atomically: true, encoding: .utf8) }
            let rows = simulate(trace, share: share, segment: segment)
            say(file.map { "trace \($0)" } ?? "generated trace: \(generator.summary)")
            say(render(rows.results, trace: trace, budget: rows.budget, segment: segment))
            return 0
        } catch {
            FileHandle.standardError.write(Data("error: \(error)\nRun 'sparsecache-bench trace --help' for usage.\n".utf8))
            return 64
        }
    }

    /// LRU, sfifo and MIN on `trace` at a budget of `share` of its distinct bytes.
    static func simulate(_ trace: Trace, share: Double, segment: Int64) -> (results: [TraceSimulator.Result], budget: Int64) {
        let distinct = trace.totals(unit: segment).distinct
        let budget = max(segment, Int64(Double(distinct) * share))
        let simulator = TraceSimulator(budget: budget, segmentSize: segment)
        return ([simulator.run(trace, policy: .lru), simulator.run(trace, policy: .sfifo), simulator.belady(trace)], budget)
    }

    static func render(_ results: [TraceSimulator.Result], trace: Trace, budget: Int64, segment: Int64) -> String {
        let totals = trace.totals(unit: segment)
        var lines = [
            "\(trace.requests.count) requests, \(describeBytes(totals.asked)) asked, \(describeBytes(totals.distinct)) distinct, "
                + "budget \(describeBytes(budget)), segments \(describeBytes(segment))",
            "policy  origin bytes  origin/asked  x LRU  byte hits  object hits  peak disk/budget",
        ]
        let lru = results.first?.originBytes ?? 1
        for result in results {
            lines.append(
                result.policy.padding(toLength: 8, withPad: " ", startingAt: 0)
                    + describeBytes(result.originBytes).padding(toLength: 14, withPad: " ", startingAt: 0)
                    + String(format: "%-14.3f%-7.3f%-11.3f%-13.3f%.3f", result.originShare, Double(result.originBytes) / Double(max(1, lru)),
                        result.byteHitRatio, result.objectHitRatio, Double(result.peakBytes) / Double(budget)))
        }
        return lines.joined(separator: "\n")
    }
}
