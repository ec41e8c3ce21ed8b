// The benchmark suite cannot rot: every scenario runs once with tiny sizes on every test run.
// Nothing here judges the numbers (the machines are shared and noisy); it checks that each
// scenario ran, measured every contender, and wrote a report that parses.
import Foundation
import Testing
import TestSupport

@Suite("Benchmark smoke run", .tags(.external, .slow), .unlessSkippingExternal, .unlessSkippingSlow)
struct BenchSmokeTests {
    @Test("sparsecache-bench --smoke runs every scenario and writes its JSON report")
    func smoke() async throws {
        let cli = try #require(CLI.binary, "sparsecache not found next to the test bundle")
        let binary = URL(fileURLWithPath: cli).deletingLastPathComponent().appendingPathComponent("sparsecache-bench").path
        #expect(FileManager.default.isExecutableFile(atPath: binary), "no sparsecache-bench at \(binary)")
        let scratch = try CLIScratch("bench-smoke")
        defer { scratch.remove() }
        let json = scratch.file("report.json")
        let run = try await CLI.run(binary: binary, ["--smoke", "--json", json, "--dir", scratch.path])
        #expect(run.status == 0, "stderr: \(run.err)")
        for scenario in 1...16 {
            #expect(run.out.contains("\n## \(scenario). "), "scenario \(scenario) missing from the table")
        }
        #expect(run.out.contains("## targets"), "no target summary")

        let report = try #require(
            try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: json))) as? [String: Any])
        #expect(report["mode"] as? String == "smoke")
        let measurements = try #require(report["measurements"] as? [[String: Any]])
        let scenarios = Set(measurements.compactMap { $0["scenario"] as? Int })
        #expect(Set(1...15).isSubset(of: scenarios), "scenarios measured: \(scenarios.sorted())")
        for measurement in measurements {
            let samples = measurement["samples"] as? [Double] ?? []
            #expect(!samples.isEmpty && samples.allSatisfy { $0.isFinite && $0 >= 0 }, "\(measurement)")
        }
        // The scratch directory is removed at the end of the run.
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: scratch.path).filter { $0 != "report.json" }
        #expect(leftovers.isEmpty, "left behind: \(leftovers)")

        let usage = try await CLI.run(binary: binary, ["--only", "17"])
        #expect(usage.status == 64 && usage.err.contains("1 to 16"), "\(usage)")
    }
}
