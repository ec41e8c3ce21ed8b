import SeededRandom

/// Scenario 1: a resource filled front to back in 1 MiB writes, made durable every 8 MiB.
///
/// The same 1 MiB buffer of random bytes is written at every offset (the contents do not
/// matter to the disk; every contender gets the same bytes).
enum DurableFillScenario {
    static let number = 1
    static let name = "durable sequential fill"

    static func run(_ context: BenchContext) async throws -> ScenarioResult {
        let length = context.sizes.sequentialFill
        let writeSize = 1 << 20
        var random = SplitMix64(seed: 1)
        let buffer = random.bytes(writeSize)
        let writes = (0..<Int(length / Int64(writeSize))).map { FillPlan.Write(offset: Int64($0) * Int64(writeSize), buffer: 0) }
        let plan = FillPlan(length: length, writes: writes, buffers: [buffer], commitEvery: context.sizes.commitEvery)
        let workload = "\(describeBytes(length)), 1 MiB writes, commit every \(describeBytes(context.sizes.commitEvery))"
        let measurements = try await FillBench.measure(
            plan: plan, scenario: number, scenarioName: name, workload: workload, scratch: context.scratch,
            repetitions: context.repetitions)
        let ratio = measurements[FillContender.sparseFile.rawValue].ratio ?? 0
        return ScenarioResult(
            measurements: measurements,
            targets: [TargetCheck(name: "durable fill vs raw", target: ">= 0.95x", measured: Table.format(ratio, decimals: 2) + "x", met: ratio >= 0.95)])
    }
}
