import CShim
import Foundation
import SparseCache
import SparseCacheTesting

/// Scenario 8: what the fault-injection seam costs. Every data and index syscall of the engine
/// goes through a shim wrapper that checks whether fault injection is armed. This measures
/// 4 KiB pwrites and preads into the page cache (the cheapest real calls there are, so the
/// check weighs the most) straight from glibc, through the disarmed shim, and through the shim
/// armed by a rule that matches no file (the slow path: the rule table is consulted and the
/// descriptor's path resolved on every call).
enum FaultHookScenario {
    static let number = 8
    static let name = "fault-injection hooks"

    static func run(_ context: BenchContext) async throws -> ScenarioResult {
        let directory = try context.scratch.directory("hooks")
        defer { context.scratch.remove(directory) }
        let path = directory + "/hooks.bin"
        let calls = context.sizes.hookCalls
        let contenders = ["glibc pwrite/pread", "shim, fault injection off", "shim, armed (a rule for another file)"]
        var result = ScenarioResult()
        for operation in ["pwrite 4 KiB", "pread 4 KiB"] {
            let samples = try await interleaved(contenders: contenders.count, repetitions: context.repetitions) { contender, _ in
                let rule: FaultInjection.RuleID? =
                    contender == 2 ? try FaultInjection.add(.fail([.pwrite, .pread], errno: EIO, pathContains: "/no/such/file/")) : nil
                defer { if let rule { FaultInjection.remove(rule) } }
                let nanoseconds = try await BlockingExecutor.shared.run {
                    try loop(path: path, calls: calls, write: operation.hasPrefix("pwrite"), throughShim: contender > 0)
                }
                return Sample(value: nanoseconds)
            }
            var measurements = contenders.enumerated().map { index, contender in
                Measurement(
                    scenario: number, scenarioName: name, workload: "\(operation), page cache, \(calls) calls",
                    contender: contender, unit: "ns/call", higherIsBetter: false, samples: samples[index])
            }
            for index in measurements.indices { measurements[index].compare(to: measurements[0]) }
            result.measurements += measurements
        }
        return result
    }

    /// Nanoseconds per call over `calls` 4 KiB calls cycling through the first 1 MiB.
    private static func loop(path: String, calls: Int, write: Bool, throughShim: Bool) throws -> Double {
        let fd = try Raw.open(path, flags: Int32(SC_O_RDWR) | Int32(SC_O_CREAT))
        defer { _ = sc_close(fd) }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 4096, alignment: 4096)
        defer { buffer.deallocate() }
        buffer.initializeMemory(as: UInt8.self, repeating: 0xA5)
        // Make the file 1 MiB so reads always find bytes.
        for block in 0..<256 { try Raw.writeAll(fd, UnsafeRawBufferPointer(buffer), at: Int64(block) * 4096, path: path) }
        let start = Monotonic.now()
        for call in 0..<calls {
            let offset = Int64(call & 255) * 4096
            let done: Int
            switch (write, throughShim) {
            case (true, true): done = sc_pwrite(fd, buffer.baseAddress, 4096, offset)
            case (true, false): done = Glibc.pwrite(fd, buffer.baseAddress, 4096, off_t(offset))
            case (false, true): done = sc_pread(fd, buffer.baseAddress, 4096, offset)
            case (false, false): done = Glibc.pread(fd, buffer.baseAddress, 4096, off_t(offset))
            }
            guard done == 4096 else { throw BenchError("\(write ? "pwrite" : "pread") returned \(done) at \(offset), errno \(errno)") }
        }
        return Double(Monotonic.now() - start) / Double(calls)
    }
}
