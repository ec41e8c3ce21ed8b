import Foundation

/// One row of the results: one contender in one case of one scenario.
struct Measurement: Codable, Sendable {
    var scenario: Int
    var scenarioName: String
    /// The workload, e.g. "sequential 1 MiB, 8 readers".
    var workload: String
    var contender: String
    /// "MB/s", "GB/s", "ms", "bytes"...
    var unit: String
    var higherIsBetter: Bool
    /// One value per repetition, in run order.
    var samples: [Double]
    var min: Double
    var median: Double
    var max: Double
    /// Latency percentiles over every operation of every repetition, in microseconds.
    var p50Microseconds: Double?
    var p99Microseconds: Double?
    /// median / baseline median (for throughput), or baseline / median when lower is better.
    var ratio: Double?
    var baseline: String?
    var note: String?

    init(
        scenario: Int, scenarioName: String, workload: String, contender: String, unit: String,
        higherIsBetter: Bool = true, samples: [Sample], note: String? = nil
    ) {
        self.scenario = scenario
        self.scenarioName = scenarioName
        self.workload = workload
        self.contender = contender
        self.unit = unit
        self.higherIsBetter = higherIsBetter
        self.samples = samples.map(\.value)
        self.min = self.samples.min() ?? 0
        self.max = self.samples.max() ?? 0
        self.median = Statistics.median(self.samples)
        let latencies = samples.flatMap(\.latencies).map { Double($0) / 1000 }.sorted()
        if !latencies.isEmpty {
            p50Microseconds = Statistics.percentile(sorted: latencies, 50)
            p99Microseconds = Statistics.percentile(sorted: latencies, 99)
        }
        self.note = note
    }

    /// One row per contender of a workload, in order, each after the first compared to the
    /// first (the baseline).
    static func rows(
        scenario: Int, name: String, contenders: [String], _ samples: [[Sample]], workload: String, unit: String,
        higherIsBetter: Bool = true
    ) -> [Measurement] {
        var rows = contenders.enumerated().map { index, contender in
            Measurement(
                scenario: scenario, scenarioName: name, workload: workload, contender: contender, unit: unit,
                higherIsBetter: higherIsBetter, samples: samples[index])
        }
        for index in rows.indices.dropFirst() { rows[index].compare(to: rows[0]) }
        return rows
    }

    /// Sets the ratio to `baseline` (a measurement of the same workload).
    mutating func compare(to baseline: Measurement) {
        self.baseline = baseline.contender
        guard baseline.median > 0, median > 0 else { return }
        ratio = higherIsBetter ? median / baseline.median : baseline.median / median
    }
}

/// A target and what this run measured against it.
struct TargetCheck: Codable, Sendable {
    var name: String
    var target: String
    var measured: String
    var met: Bool
    /// The issue that set the goal: 4 (the engine's targets) or 18 (streaming at origin speed,
    /// against nginx's slice cache); the run prints one summary per issue.
    var issue: Int = 4
}

/// What one scenario produced.
struct ScenarioResult: Sendable {
    var measurements: [Measurement] = []
    var targets: [TargetCheck] = []
    var notes: [String] = []
}

/// The machine the run happened on.
struct MachineInfo: Codable, Sendable {
    var cpus: Int
    var cpuModel: String
    var memoryBytes: UInt64
    var kernel: String
    var scratchDirectory: String
    var scratchFileSystem: String
    var scratchDevice: String
    var build: String
    /// "static" when the Swift runtime is linked into the binary (`--static-swift-stdlib`, as
    /// docs/DEPLOY.md builds `sparsecache` for production), "shared" when it is loaded as a
    /// library.
    var swiftRuntime: String
    var crc32cHardware: Bool

    static func current(scratch: String) -> MachineInfo {
        let cpuModel = (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8))?
            .split(separator: "\n").first { $0.hasPrefix("model name") }
            .map { String($0.split(separator: ":", maxSplits: 1).last ?? "").trimmingCharacters(in: .whitespaces) } ?? "unknown"
        var name = utsname()
        uname(&name)
        let release = withUnsafeBytes(of: &name.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        let (fileSystem, device) = Scratch.mountInfo(of: scratch)
        #if DEBUG
        let build = "debug"
        #else
        let build = "release"
        #endif
        return MachineInfo(
            cpus: ProcessInfo.processInfo.activeProcessorCount, cpuModel: cpuModel,
            memoryBytes: ProcessInfo.processInfo.physicalMemory, kernel: "Linux \(release)",
            scratchDirectory: scratch, scratchFileSystem: fileSystem, scratchDevice: device, build: build,
            swiftRuntime: swiftRuntimeLinking(), crc32cHardware: Probe.crc32cHardwareAvailable)
    }

    /// Whether this process maps the Swift runtime from a shared library.
    private static func swiftRuntimeLinking() -> String {
        let maps = (try? String(contentsOfFile: "/proc/self/maps", encoding: .utf8)) ?? ""
        return maps.contains("libswiftCore.so") ? "shared" : "static"
    }
}

/// Everything a run produced, as written by `--json`.
struct Report: Codable, Sendable {
    var tool = "sparsecache-bench"
    var command: String
    var mode: BenchOptions.Mode
    var repetitions: Int
    var started: String
    var durationSeconds: Double
    var machine: MachineInfo
    var measurements: [Measurement]
    var targets: [TargetCheck]
    var notes: [String]

    func write(to path: String) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try encoder.encode(self).write(to: URL(fileURLWithPath: path))
    }
}
