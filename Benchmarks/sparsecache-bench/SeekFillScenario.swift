import SeededRandom

/// Scenario 2: a resource filled in chunks of 48 to 80 KiB with unaligned boundaries,
/// delivered in a seeded random order (a player that seeks everywhere), made durable every
/// 8 MiB of writes.
///
/// Every chunk has its own buffer, prepared before the clock starts.
enum SeekFillScenario {
    static let number = 2
    static let name = "seek-heavy fill"

    static func run(_ context: BenchContext) async throws -> ScenarioResult {
        let length = context.sizes.randomFill
        var random = SplitMix64(seed: 2)
        var writes: [FillPlan.Write] = []
        var buffers: [[UInt8]] = []
        var offset: Int64 = 0
        while offset < length {
            let size = Int(min(Int64(Int.random(in: (48 << 10)...(80 << 10), using: &random)), length - offset))
            writes.append(FillPlan.Write(offset: offset, buffer: buffers.count))
            buffers.append(random.bytes(size))
            offset += Int64(size)
        }
        writes.shuffle(using: &random)
        let plan = FillPlan(length: length, writes: writes, buffers: buffers, commitEvery: context.sizes.commitEvery)
        let workload = "\(describeBytes(length)), \(writes.count) chunks of 48-80 KiB, random order"
        let measurements = try await FillBench.measure(
            plan: plan, scenario: number, scenarioName: name, workload: workload, scratch: context.scratch,
            repetitions: context.repetitions)
        // Issue 4 sets no target here; the ratio is in the table.
        return ScenarioResult(measurements: measurements)
    }
}
