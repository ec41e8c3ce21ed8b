import Foundation

/// The nonisolated entry point: main.swift only calls `run`, so every dispatch handler the
/// engine creates is created off the main actor.
enum BenchMain {
    typealias Scenario = (number: Int, name: String, run: @Sendable (BenchContext) async throws -> ScenarioResult)

    static let scenarios: [Scenario] = [
        (DurableFillScenario.number, DurableFillScenario.name, DurableFillScenario.run),
        (SeekFillScenario.number, SeekFillScenario.name, SeekFillScenario.run),
        (CachedReadScenario.number, CachedReadScenario.name, CachedReadScenario.run),
        (VerifyScenario.number, VerifyScenario.name, VerifyScenario.run),
        (ScaleScenario.number, ScaleScenario.name, ScaleScenario.run),
        (CooperativePoolScenario.number, CooperativePoolScenario.name, CooperativePoolScenario.run),
        (StoreScenario.number, StoreScenario.name, StoreScenario.run),
        (FaultHookScenario.number, FaultHookScenario.name, FaultHookScenario.run),
        (FillThroughScenario.number, FillThroughScenario.name, FillThroughScenario.run),
        (ProxyScenario.number, ProxyScenario.name, ProxyScenario.run),
        (PrefetchPriorityScenario.number, PrefetchPriorityScenario.name, PrefetchPriorityScenario.run),
        (SliceCacheScenario.number, SliceCacheScenario.name, SliceCacheScenario.run),
        (SmallObjectScenario.number, SmallObjectScenario.name, SmallObjectScenario.run),
        (CatalogScaleScenario.number, CatalogScaleScenario.name, CatalogScaleScenario.run),
        (HitScenario.number, HitScenario.name, HitScenario.run),
        (EvictionScenario.number, EvictionScenario.name, EvictionScenario.run),
    ]

    static func run(_ arguments: [String]) async -> Int32 {
        if arguments.first == "trace" { return TraceCommand.run(Array(arguments.dropFirst())) }
        if arguments.first == "--probe-open" { return await ScaleScenario.probe(Array(arguments.dropFirst())) }
        if arguments.first == "--probe-small-objects" { return await CatalogScaleScenario.probe(Array(arguments.dropFirst())) }
        let options: BenchOptions
        do {
            guard let parsed = try BenchOptions.parse(arguments) else {
                print(BenchOptions.usage)
                return 0
            }
            options = parsed
        } catch {
            FileHandle.standardError.write(Data("error: \(error)\nRun 'sparsecache-bench --help' for usage.\n".utf8))
            return 64
        }
        let scratch: Scratch
        do {
            scratch = try Scratch.create(parent: options.directory)
        } catch {
            FileHandle.standardError.write(Data("error: cannot create the scratch directory: \(error)\n".utf8))
            return 1
        }
        defer {
            if options.keep { say("kept scratch directory \(scratch.path)") } else { scratch.removeAll() }
        }
        do {
            return try await runScenarios(options, scratch: scratch, arguments: arguments)
        } catch {
            FileHandle.standardError.write(Data("error: \(error)\n".utf8))
            return 1
        }
    }

    private static func runScenarios(_ options: BenchOptions, scratch: Scratch, arguments: [String]) async throws -> Int32 {
        let started = Monotonic.now()
        let startedDate = ISO8601DateFormatter().string(from: Date())
        let machine = MachineInfo.current(scratch: scratch.path)
        say(
            "sparsecache-bench: \(options.mode) mode, \(options.repetitions) repetition\(options.repetitions == 1 ? "" : "s"), "
                + "\(machine.build) build, Swift runtime \(machine.swiftRuntime == "static" ? "linked in" : "shared")")
        say("machine: \(machine.cpus) CPUs (\(machine.cpuModel)), \(describeBytes(Int64(machine.memoryBytes))) RAM, \(machine.kernel)")
        say("scratch: \(scratch.path) (\(machine.scratchFileSystem) on \(machine.scratchDevice))")
        if Scratch.isTmpfs(scratch.path) { say("warning: the scratch directory is on a tmpfs; fsync costs nothing there") }
        #if DEBUG
        say("warning: debug build; run 'swift run -c release --static-swift-stdlib sparsecache-bench' for numbers")
        #else
        if machine.swiftRuntime == "shared" {
            say(
                "note: the Swift runtime is a shared library in this build; production builds link it in "
                    + "(--static-swift-stdlib, docs/DEPLOY.md), about 3% faster on the proxy's misses")
        }
        #endif

        var context = BenchContext(options: options, scratch: scratch, readResource: nil)
        if [3, 4, 6].contains(where: options.runs) {
            let start = Monotonic.now()
            context.readResource = try await ReadResource.prepare(in: scratch, length: options.sizes.readResource)
            say("prepared a \(describeBytes(options.sizes.readResource)) resource for the read scenarios in \(Table.format(Monotonic.seconds(since: start))) s")
        }
        var measurements: [Measurement] = []
        var targets: [TargetCheck] = []
        var notes: [String] = []
        for scenario in scenarios where options.runs(scenario.number) {
            say("\n## \(scenario.number). \(scenario.name)\n")
            let start = Monotonic.now()
            let result = try await scenario.run(context)
            say(Table.render(result.measurements))
            for note in result.notes { say("note: \(note)") }
            say("(\(Table.format(Monotonic.seconds(since: start))) s)")
            measurements += result.measurements
            targets += result.targets
            notes += result.notes
        }
        for issue in Set(targets.map(\.issue)).sorted() {
            say(issue == 4 ? "\n## targets (issue 4)\n" : "\n## goals of issue \(issue)\n")
            say(Table.render(targets.filter { $0.issue == issue }))
        }
        let seconds = Monotonic.seconds(since: started)
        say("\ntotal: \(Table.format(seconds)) s")
        if let jsonPath = options.jsonPath {
            let report = Report(
                command: (["sparsecache-bench"] + arguments).joined(separator: " "), mode: options.mode,
                repetitions: options.repetitions, started: startedDate, durationSeconds: seconds, machine: machine,
                measurements: measurements, targets: targets, notes: notes)
            try report.write(to: jsonPath)
            say("wrote \(jsonPath)")
        }
        return 0
    }
}

/// Prints a line and flushes, so progress shows when stdout is a pipe.
func say(_ line: String) {
    print(line)
    fflush(nil)
}
