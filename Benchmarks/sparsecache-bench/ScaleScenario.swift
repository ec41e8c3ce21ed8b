import Foundation
import LoopbackOrigins
import SeededRandom
import SparseCache

/// Scenario 5: how open time, memory and the cost of a commit grow with the logical length of
/// a sparse resource (1 GiB, 64 GiB, 1 TiB at 64 KiB segments) that holds a few segments.
///
/// - open: SparseFile.open of the existing resource (read-write), in this process.
/// - resident memory: VmRSS growth across one open in a fresh child process (this binary run
///   with `--probe-open`), after the child has opened and closed a tiny resource so the
///   runtime, libdispatch and the engine's code are already resident. A child is used because
///   in this process freed memory from earlier scenarios would hide the growth.
/// - index bytes per commit: `wchar` of /proc/self/io (bytes passed to write syscalls) across
///   each commit() of one new 64 KiB segment: only the commit writes during that window.
///   Checkpoints are included where they happen (every ~256 commits).
enum ScaleScenario {
    static let number = 5
    static let name = "scale"
    static let lengths: [Int64] = [1 << 30, 64 << 30, 1 << 40]
    static let segmentSize = 64 << 10
    static let initialSegments = 8

    static func run(_ context: BenchContext) async throws -> ScenarioResult {
        let directory = try context.scratch.directory("scale")
        defer { context.scratch.remove(directory) }
        let warm = directory + "/warm.bin"
        try await createWarmResource(warm)
        let executable = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        var result = ScenarioResult()
        var random = SplitMix64(seed: 6)
        let segmentBytes = random.bytes(segmentSize)
        for length in lengths {
            let path = directory + "/resource-\(describeBytes(length).replacingOccurrences(of: " ", with: "")).bin"
            let segments = Int(length / Int64(segmentSize))
            var options = SparseFileOptions()
            options.length = length
            options.segmentSize = segmentSize
            options.commitPolicy = .manual

            // Create with a few segments spread over the whole length, then commit one new
            // segment at a time.
            let file = try await SparseFile.open(path, options: options)
            var used = Set<Int>()
            for index in 0..<initialSegments {
                let segment = index * segments / initialSegments
                used.insert(segment)
                try await file.write(segmentBytes, at: Int64(segment) * Int64(segmentSize))
            }
            try await file.commit()
            var commitBytes: [Sample] = []
            var commitLatencies: [UInt64] = []
            let indexPath = SparseFile.indexPath(for: path)
            for _ in 0..<context.sizes.scaleCommits {
                var segment = Int.random(in: 0..<segments, using: &random)
                while used.contains(segment) { segment = Int.random(in: 0..<segments, using: &random) }
                used.insert(segment)
                try await file.write(segmentBytes, at: Int64(segment) * Int64(segmentSize))
                let sizeBefore = Raw.fileSize(indexPath)
                let writtenBefore = Probe.bytesWritten()
                let start = Monotonic.now()
                try await file.commit()
                commitLatencies.append(Monotonic.now() - start)
                let writtenAfter = Probe.bytesWritten()
                let bytes = writtenBefore >= 0 && writtenAfter >= 0
                    ? writtenAfter - writtenBefore : max(0, Raw.fileSize(indexPath) - sizeBefore)
                commitBytes.append(Sample(value: Double(bytes)))
            }
            let present = await file.presentSegments().reduce(0) { $0 + $1.count }
            try await file.close()
            let indexSize = Raw.fileSize(indexPath)

            var reopen = options
            reopen.create = false
            var openSamples: [Sample] = []
            var memorySamples: [Sample] = []
            var childOpenSamples: [Sample] = []
            for _ in 0..<context.repetitions {
                let start = Monotonic.now()
                let reopened = try await SparseFile.open(path, options: reopen)
                openSamples.append(Sample(value: Monotonic.seconds(since: start) * 1000))
                try await reopened.close()
                let probe = try await BlockingExecutor.shared.run { try runProbe(executable: executable, warm: warm, path: path) }
                memorySamples.append(Sample(value: Double(probe.residentBytes) / 1024))
                childOpenSamples.append(Sample(value: Double(probe.openNanoseconds) / 1e6))
            }

            let workload = "\(describeBytes(length)) (\(segments) segments, \(present) present)"
            func measurement(_ contender: String, _ unit: String, _ samples: [Sample], note: String? = nil) -> Measurement {
                Measurement(
                    scenario: number, scenarioName: name, workload: workload, contender: contender, unit: unit,
                    higherIsBetter: false, samples: samples, note: note)
            }
            let meanBytes = Statistics.mean(commitBytes.map(\.value))
            result.measurements += [
                measurement("open (read-write, warm process)", "ms", openSamples),
                measurement("open in a fresh child process", "ms", childOpenSamples),
                measurement("resident memory growth of one open (child)", "KiB", memorySamples),
                measurement(
                    "index bytes written per one-segment commit", "bytes", commitBytes,
                    note: "mean \(Table.format(meanBytes, decimals: 0)) bytes including checkpoints; index file \(indexSize) bytes after \(commitBytes.count) commits"),
                measurement("one-segment commit latency", "ms", [Sample(value: Statistics.median(commitLatencies.map { Double($0) / 1e6 }), latencies: commitLatencies)],
                    note: "value is the median over \(commitLatencies.count) commits; p50/p99 over all of them"),
            ]
            if length == lengths.last {
                let bytes = Statistics.median(commitBytes.map(\.value))
                let openMilliseconds = Statistics.median(openSamples.map(\.value))
                result.targets.append(TargetCheck(
                    name: "index bytes of a one-segment commit, 1 TiB (median; max incl. checkpoint)", target: "<= 8192 bytes",
                    measured: "\(Int(bytes)) bytes (max \(Int(commitBytes.map(\.value).max() ?? 0)))", met: bytes <= 8192))
                result.targets.append(TargetCheck(
                    name: "open of a 1 TiB resource (median)", target: "<= 100 ms",
                    measured: Table.format(openMilliseconds) + " ms", met: openMilliseconds <= 100))
            }
            try? FileManager.default.removeItem(atPath: path)
            try? FileManager.default.removeItem(atPath: indexPath)
        }
        return result
    }

    private static func createWarmResource(_ path: String) async throws {
        var options = SparseFileOptions()
        options.length = Int64(segmentSize)
        options.commitPolicy = .manual
        let file = try await SparseFile.open(path, options: options)
        try await file.write([UInt8](repeating: 1, count: segmentSize), at: 0)
        try await file.close()
    }

    struct ProbeResult: Sendable {
        var residentBytes: Int64
        var openNanoseconds: UInt64
    }

    /// Runs this binary with `--probe-open WARM PATH` and parses what it prints.
    private static func runProbe(executable: String, warm: String, path: String) throws -> ProbeResult {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = ["--probe-open", warm, path]
        let output = Pipe()
        process.standardOutput = output
        try ProcessLaunch.runBlocking(process)
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let fields = String(decoding: data, as: UTF8.self).split(whereSeparator: \.isWhitespace)
        guard process.terminationStatus == 0, fields.count == 2, let resident = Int64(fields[0]), let nanoseconds = UInt64(fields[1]) else {
            throw BenchError("the open probe failed (status \(process.terminationStatus), output '\(String(decoding: data, as: UTF8.self))')")
        }
        return ProbeResult(residentBytes: resident, openNanoseconds: nanoseconds)
    }

    /// The child side: open and close `warm` (and read it), then report the VmRSS growth and
    /// the time of opening `path`.
    static func probe(_ arguments: [String]) async -> Int32 {
        guard arguments.count == 2 else {
            FileHandle.standardError.write(Data("usage: sparsecache-bench --probe-open WARM PATH\n".utf8))
            return 64
        }
        do {
            var options = SparseFileOptions()
            options.create = false
            let warm = try await SparseFile.open(arguments[0], options: options)
            _ = try await warm.read(offset: 0, length: 1)
            try await warm.close()
            let before = Probe.residentBytes()
            let start = Monotonic.now()
            let file = try await SparseFile.open(arguments[1], options: options)
            let nanoseconds = Monotonic.now() - start
            let after = Probe.residentBytes()
            print("\(after - before) \(nanoseconds)")
            try await file.close()
            return 0
        } catch {
            FileHandle.standardError.write(Data("probe failed: \(error)\n".utf8))
            return 1
        }
    }
}
