import CShim
import Foundation
import SeededRandom
import SparseCache

/// Scenario 7: a cache directory with many resources.
///
/// - start-up: `SparseStore.open` of a directory of N resources whose catalog is current,
///   against the least work any LRU cache over files must do at start-up (readdir plus one
///   stat per file), and against a start-up that has lost its catalog and reads every index.
/// - eviction: `evict(toSize:)` of the least-recently-used resources, against the raw
///   syscalls the same durable removal needs (unlink the index, fsync the directory, unlink
///   the data file, fsync the directory).
enum StoreScenario {
    static let number = 7
    static let name = "cache directory"

    static func run(_ context: BenchContext) async throws -> ScenarioResult {
        let count = context.sizes.storeResources
        let evictions = context.sizes.storeEvictions
        let root = try context.scratch.directory("store")
        defer { context.scratch.remove(root) }
        let storePath = root + "/store"
        var result = ScenarioResult()

        let created = Monotonic.now()
        try await populate(storePath, count: count)
        let creationSeconds = Monotonic.seconds(since: created)
        result.notes.append(
            "created \(count) resources of 4 KiB through the store in \(Table.format(creationSeconds)) s "
                + "(\(Int(Double(count) / creationSeconds)) resources/s, each synced and committed)")

        // Start-up.
        let catalog = storePath + "/catalog"
        let savedCatalog = try Data(contentsOf: URL(fileURLWithPath: catalog))
        let contenders = ["raw readdir + stat of every file", "SparseStore.open (catalog current)", "SparseStore.open (no catalog: reads every index)"]
        let samples = try await interleaved(contenders: contenders.count, repetitions: context.repetitions) { contender, _ in
            switch contender {
            case 0:
                let start = Monotonic.now()
                let files = try await BlockingExecutor.shared.run { try statEveryFile(storePath + "/resources") }
                guard files == 2 * count else { throw BenchError("found \(files) files, expected \(2 * count)") }
                return Sample(value: Monotonic.seconds(since: start) * 1000)
            default:
                if contender == 2 { try FileManager.default.removeItem(atPath: catalog) }
                let start = Monotonic.now()
                let store = try await SparseStore.open(directory: storePath, options: options)
                let seconds = Monotonic.seconds(since: start)
                let found = await store.summary().entries.count
                try await store.close()
                if contender == 2 { try savedCatalog.write(to: URL(fileURLWithPath: catalog)) }
                guard found == count else { throw BenchError("start-up found \(found) resources, expected \(count)") }
                return Sample(value: seconds * 1000)
            }
        }
        let workload = "start-up with \(count) resources"
        var startup = contenders.enumerated().map { index, contender in
            Measurement(
                scenario: number, scenarioName: name, workload: workload, contender: contender, unit: "ms",
                higherIsBetter: false, samples: samples[index])
        }
        for index in startup.indices { startup[index].compare(to: startup[0]) }
        result.measurements += startup
        let startupMedian = startup[1].median
        result.targets.append(TargetCheck(
            name: "start-up with \(count) resources (catalog current)", target: "< 1000 ms",
            measured: Table.format(startupMedian) + " ms", met: startupMedian < 1000))

        // Eviction.
        let rawDirectory = root + "/raw"
        try FileManager.default.createDirectory(atPath: rawDirectory, withIntermediateDirectories: true)
        let evictionSamples = try await interleaved(contenders: 2, repetitions: context.repetitions) { contender, repetition in
            if contender == 0 {
                let names = (0..<evictions).map { "r\(repetition)-\($0)" }
                try await BlockingExecutor.shared.run { try createRawPairs(rawDirectory, names: names) }
                let start = Monotonic.now()
                try await BlockingExecutor.shared.run { try removeRawPairs(rawDirectory, names: names) }
                return Sample(value: Double(evictions) / Monotonic.seconds(since: start))
            }
            let store = try await SparseStore.open(directory: storePath, options: options)
            let summary = await store.summary()
            let victims = summary.entries.prefix(evictions)
            let target = summary.allocatedBytes - victims.reduce(0) { $0 + $1.allocatedBytes }
            let start = Monotonic.now()
            let evicted = try await store.evict(toSize: target)
            let seconds = Monotonic.seconds(since: start)
            try await store.close()
            guard evicted.count == evictions else { throw BenchError("evicted \(evicted.count), expected \(evictions)") }
            return Sample(value: Double(evictions) / seconds)
        }
        let evictionWorkload = "evict \(evictions) least-recently-used resources"
        var eviction = [
            Measurement(
                scenario: number, scenarioName: name, workload: evictionWorkload,
                contender: "raw unlink + fsync dir, twice per resource", unit: "resources/s", samples: evictionSamples[0]),
            Measurement(
                scenario: number, scenarioName: name, workload: evictionWorkload, contender: "SparseStore.evict(toSize:)",
                unit: "resources/s", samples: evictionSamples[1]),
        ]
        eviction[1].compare(to: eviction[0])
        result.measurements += eviction
        return result
    }

    /// Large enough never to evict while populating; a short catalog delay is irrelevant
    /// because close() saves it.
    static var options: StoreOptions {
        var options = StoreOptions(budget: 1 << 40)
        options.commitPolicy = .manual
        // The row measures removing least-recently-used resources.
        options.eviction = .lru
        return options
    }

    private static func populate(_ directory: String, count: Int) async throws {
        let store = try await SparseStore.open(directory: directory, options: options)
        var random = SplitMix64(seed: 7)
        let bytes = random.bytes(4096)
        // A few at a time: each open, write and release is a chain of syncs on its own queue.
        try await withThrowingTaskGroup(of: Void.self) { group in
            var next = 0
            func add() {
                let key = "https://origin.example/video-\(next).mp4"
                next += 1
                group.addTask {
                    let handle = try await store.open(key: key, length: 4096)
                    try await handle.write(bytes, at: 0)
                    try await handle.release()
                }
            }
            for _ in 0..<min(8, count) { add() }
            while try await group.next() != nil {
                if next < count { add() }
            }
        }
        try await store.close()
    }

    /// Lists a directory and stats every entry; returns how many entries it found.
    private static func statEveryFile(_ directory: String) throws -> Int {
        guard let handle = opendir(directory) else { throw BenchError("opendir '\(directory)' failed: errno \(errno)") }
        defer { closedir(handle) }
        var found = 0
        var status = stat()
        while let entry = readdir(handle) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if name == "." || name == ".." { continue }
            guard stat(directory + "/" + name, &status) == 0 else { throw BenchError("stat '\(name)' failed: errno \(errno)") }
            found += 1
        }
        return found
    }

    private static func createRawPairs(_ directory: String, names: [String]) throws {
        let block = [UInt8](repeating: 0x5A, count: 4096)
        for name in names {
            for path in [directory + "/" + name, directory + "/" + name + ".idx"] {
                let fd = try Raw.open(path, flags: Int32(SC_O_RDWR) | Int32(SC_O_CREAT))
                try Raw.writeAll(fd, block, at: 0, path: path)
                _ = sc_close(fd)
            }
        }
        try Raw.syncDirectory(directory)
    }

    private static func removeRawPairs(_ directory: String, names: [String]) throws {
        for name in names {
            for path in [directory + "/" + name + ".idx", directory + "/" + name] {
                guard unlink(path) == 0 else { throw BenchError("unlink '\(path)' failed: errno \(errno)") }
                try Raw.syncDirectory(directory)
            }
        }
    }
}
