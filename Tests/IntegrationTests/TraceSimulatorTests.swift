// The benchmark's trace simulator on a trace small enough to check by hand, through the
// built sparsecache-bench binary (the simulator lives in the benchmark executable).
import Foundation
import Testing
import TestSupport

@Suite("Trace simulator")
struct TraceSimulatorTests {
    /// The last five columns of the row for `policy`: origin/asked, x LRU, byte hits,
    /// object hits, peak disk/budget.
    private func row(_ output: String, _ policy: String) -> [String] {
        guard let line = output.split(separator: "\n").first(where: { $0.hasPrefix(policy + " ") }) else { return [] }
        return line.split(separator: " ").suffix(5).map(String.init)
    }

    @Test("a b c c c a b, room for two: MIN keeps c in place of b (four misses), LRU and sfifo miss five")
    func handChecked() async throws {
        let cli = try #require(CLI.binary, "sparsecache not found next to the test bundle")
        let binary = URL(fileURLWithPath: cli).deletingLastPathComponent().appendingPathComponent("sparsecache-bench").path
        let scratch = try CLIScratch("trace-sim")
        defer { scratch.remove() }
        let trace = scratch.file("abc.trace")
        // External form, whole objects of one 4 KiB segment each.
        try "1 a 4096\n2 b 4096\n3 c 4096\n4 c 4096\n5 c 4096\n6 a 4096\n7 b 4096\n".write(toFile: trace, atomically: true, encoding: .utf8)
        // Three distinct segments, a budget of two (12288 x 0.67 = 8232, two segments fit).
        let run = try await CLI.run(binary: binary, ["trace", "--file", trace, "--cache-share", "0.67", "--segment", "4096"])
        #expect(run.status == 0, "stderr: \(run.err)")
        // MIN: at c, b is asked again last, so c takes its place; c, c and a hit; b misses.
        #expect(row(run.out, "MIN") == ["0.571", "0.800", "0.429", "0.429", "0.995"], "\(run.out)")
        // LRU: c evicts a, a evicts b, b evicts c: a, b, c, a, b miss. Peak: three segments
        // before the eviction that follows a write.
        #expect(row(run.out, "lru") == ["0.714", "1.000", "0.286", "0.286", "1.493"], "\(run.out)")
        // sfifo: c evicts a (small queue, unused), a comes back through the ghost list and
        // evicts b, b comes back and evicts a from the main queue (c, used twice, moved there).
        #expect(row(run.out, "sfifo") == ["0.714", "1.000", "0.286", "0.286", "1.493"], "\(run.out)")
        let bad = scratch.file("bad.trace")
        try "1 a 4096 0-9999\n".write(toFile: bad, atomically: true, encoding: .utf8)
        let refused = try await CLI.run(binary: binary, ["trace", "--file", bad])
        #expect(refused.status == 64 && refused.err.contains("trace line 1") && refused.err.contains("0-9999"), "\(refused)")
    }
}
