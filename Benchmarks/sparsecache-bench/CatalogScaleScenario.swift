import CShim
import Foundation
import LoopbackOrigins
import SeededRandom
import SparseCache

#if canImport(Glibc)
    import Glibc
#endif

/// Scenario 14: the small-object catalog at scale (issue 21: restart to first hit <= 1 s with
/// 10^6 resources, <= 256 bytes of memory each).
///
/// For N small objects (4 KiB bodies, a ~250-byte head, URL keys of ~40 bytes), filled through
/// the library's put path with group commit (HTTP would take hours at 10^6), each repetition
/// starts a fresh child process (this binary with `--probe-small-objects`) that opens the
/// store and reads one stored object: the time from the start of open to that first hit, and
/// the memory the open added (heap bytes in use from mallinfo2 with one malloc arena, and
/// VmRSS). Contenders, in one
/// run over the same directory: open from the hint files, and open scanning every log whole
/// (hints off: what open did before them), each with the page cache warm and with the
/// directory's pages dropped (posix_fadvise DONTNEED on every file: a cold start without root).
enum CatalogScaleScenario {
    static let number = 14
    static let name = "small-object catalog at scale"

    static let contenders = [
        "every log scanned (before), page cache warm", "hint files, page cache warm",
        "every log scanned (before), page cache dropped", "hint files, page cache dropped",
    ]
    static let bodySize = 4096

    static func counts(_ options: BenchOptions) -> [Int] {
        var counts = options.mode == .smoke ? [500] : [10_000, 100_000]
        if let maximum = options.scaleMaximum {
            var count = 1_000_000
            while count <= maximum {
                counts.append(count)
                count *= 10
            }
            if counts.last != maximum, maximum > counts.last ?? 0 { counts.append(maximum) }
        }
        return counts
    }

    static func key(_ index: Int) -> String { "http://127.0.0.1:8080/objects/f\(index).bin" }

    static func run(_ context: BenchContext) async throws -> ScenarioResult {
        let root = try context.scratch.directory("catalog")
        defer { context.scratch.remove(root) }
        let executable = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let warm = root + "/warm"
        let warmStore = try await SmallObjectStore.open(directory: warm)
        try await warmStore.put(key: key(0), metadata: metadata(0), body: [1, 2, 3])
        await warmStore.close()
        var result = ScenarioResult()
        let counts = counts(context.options)
        for count in counts {
            let directory = root + "/objects-\(count)"
            let fill = try await self.fill(directory, count: count)
            let logBytes = try bytes(in: directory, suffix: ".sco"), hintBytes = try bytes(in: directory, suffix: ".sch")
            result.notes.append(
                "\(count) objects: filled through SmallObjectStore.put (group commit, 512 in flight) in "
                    + "\(Table.format(fill)) s (\(Int(Double(count) / fill)) objects/s); logs \(describeBytes(logBytes)), "
                    + "hints \(describeBytes(hintBytes)) (\(hintBytes / Int64(count)) bytes per object)")
            var random = SplitMix64(seed: UInt64(count))
            var heap = Array(repeating: [Sample](), count: contenders.count)
            var resident = Array(repeating: [Sample](), count: contenders.count)
            var openOnly = Array(repeating: [Sample](), count: contenders.count)
            let firstHit = try await interleaved(contenders: contenders.count, repetitions: context.repetitions) { contender, _ in
                if contender >= 2 { try dropPages(directory) }
                let index = Int(random.next() % UInt64(count))
                let probed = try await BlockingExecutor.shared.run {
                    try runProbe(executable: executable, warm: warm, directory: directory, key: key(index), hints: contender % 2 == 1)
                }
                heap[contender].append(Sample(value: Double(probed.heapBytes) / Double(count)))
                resident[contender].append(Sample(value: Double(probed.residentBytes) / Double(count)))
                openOnly[contender].append(Sample(value: Double(probed.openNanoseconds) / 1e6))
                return Sample(value: Double(probed.firstHitNanoseconds) / 1e6)
            }
            result.measurements += compared(firstHit, workload: "restart to first hit, \(count) small objects", unit: "ms")
            result.measurements += compared(openOnly, workload: "open alone, \(count) small objects", unit: "ms")
            result.measurements += compared(heap, workload: "heap in use per object after restart, \(count)", unit: "bytes")
            result.measurements += compared(resident, workload: "resident memory growth per object, \(count)", unit: "bytes")
            if count == counts.last {
                let cold = Statistics.median(firstHit[3].map(\.value))
                let memory = Statistics.median(heap[3].map(\.value))
                let scope = count >= 1_000_000 ? "" : " (10^6 with --scale-max 1000000)"
                result.targets.append(
                    TargetCheck(
                        name: "restart to first hit, \(count) small objects, page cache dropped\(scope)", target: "<= 1000 ms",
                        measured: Table.format(cold) + " ms", met: cold <= 1000))
                result.targets.append(
                    TargetCheck(
                        name: "memory per small object after restart (heap in use), \(count)\(scope)", target: "<= 256 bytes",
                        measured: Table.format(memory, decimals: 0) + " bytes", met: memory <= 256))
            }
            context.scratch.remove(directory)
        }
        return result
    }

    static func metadata(_ index: Int) -> ResourceMetadata {
        ResourceMetadata(
            key: key(index), contentType: "application/octet-stream", etag: "\"5f3e-\(index)\"",
            user: [
                "http.status": "200",
                "http.headers":
                    "cache-control: max-age=3600\r\ndate: Thu, 26 Nov 2026 12:00:00 GMT\r\nlast-modified: Wed, 25 Nov 2026 09:30:00 GMT\r\nserver: nginx",
                "http.times": "1795694400 1795694400",
            ])
    }

    /// Puts `count` objects through the library, 512 at a time (one or two group commits
    /// each), and closes the store (hints of sealed logs written). Returns the seconds taken.
    private static func fill(_ directory: String, count: Int) async throws -> Double {
        var random = SplitMix64(seed: 14)
        let body = random.bytes(bodySize)
        let start = Monotonic.now()
        let store = try await SmallObjectStore.open(directory: directory)
        var next = 0
        while next < count {
            let range = next..<min(count, next + 512)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in range {
                    group.addTask { try await store.put(key: key(index), metadata: metadata(index), body: body) }
                }
                try await group.waitForAll()
            }
            next = range.upperBound
        }
        await store.close()
        return Monotonic.seconds(since: start)
    }

    private static func bytes(in directory: String, suffix: String) throws -> Int64 {
        try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasSuffix(suffix) }
            .reduce(0) { $0 + Raw.fileSize(directory + "/" + $1) }
    }

    /// Drops the page-cache pages of every file of `directory` (clean pages only: the store is
    /// closed and synced), so the next open reads from the disk.
    private static func dropPages(_ directory: String) throws {
        for name in try FileManager.default.contentsOfDirectory(atPath: directory) {
            let descriptor = Glibc.open(directory + "/" + name, O_RDONLY)
            guard descriptor >= 0 else { continue }
            _ = posix_fadvise(descriptor, 0, 0, Int32(POSIX_FADV_DONTNEED))
            Glibc.close(descriptor)
        }
    }

    private static func compared(_ samples: [[Sample]], workload: String, unit: String) -> [Measurement] {
        var rows = contenders.enumerated().map { index, contender in
            Measurement(
                scenario: number, scenarioName: name, workload: workload, contender: contender, unit: unit, higherIsBetter: false,
                samples: samples[index])
        }
        // Each way of opening against the scan with the same page cache.
        rows[1].compare(to: rows[0])
        rows[3].compare(to: rows[2])
        return rows
    }

    struct ProbeResult: Sendable {
        var heapBytes: Int64
        var residentBytes: Int64
        var openNanoseconds: UInt64
        var firstHitNanoseconds: UInt64
    }

    private static func runProbe(executable: String, warm: String, directory: String, key: String, hints: Bool) throws -> ProbeResult {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = ["--probe-small-objects", warm, directory, key, hints ? "hints" : "scan"]
        // One malloc arena: mallinfo2 counts only the main one, and open builds the index on a
        // dispatch thread.
        var environment = ProcessInfo.processInfo.environment
        environment["MALLOC_ARENA_MAX"] = "1"
        process.environment = environment
        let output = Pipe()
        process.standardOutput = output
        try ProcessLaunch.runBlocking(process)
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let fields = String(decoding: data, as: UTF8.self).split(whereSeparator: \.isWhitespace)
        guard process.terminationStatus == 0, fields.count == 4, let heap = Int64(fields[0]), let resident = Int64(fields[1]),
            let open = UInt64(fields[2]), let hit = UInt64(fields[3])
        else {
            throw BenchError(
                "the small-object probe failed (status \(process.terminationStatus), output '\(String(decoding: data, as: UTF8.self))')")
        }
        return ProbeResult(heapBytes: heap, residentBytes: resident, openNanoseconds: open, firstHitNanoseconds: hit)
    }

    /// The child side: opens and closes `warm` (code and runtime resident), then opens
    /// `directory` (hints or full scans), reads `key`, and prints the heap and VmRSS growth
    /// and the nanoseconds of open and of open plus the first hit.
    static func probe(_ arguments: [String]) async -> Int32 {
        guard arguments.count == 4 else {
            FileHandle.standardError.write(Data("usage: sparsecache-bench --probe-small-objects WARM DIR KEY hints|scan\n".utf8))
            return 64
        }
        do {
            var options = SmallObjectOptions()
            options.useHints = arguments[3] == "hints"
            let warm = try await SmallObjectStore.open(directory: arguments[0], options: options)
            _ = try await warm.object(for: key(0))
            await warm.close()
            let heapBefore = heapInUse(), residentBefore = Probe.residentBytes()
            let start = Monotonic.now()
            let store = try await SmallObjectStore.open(directory: arguments[1], options: options)
            let opened = Monotonic.now() - start
            guard try await store.object(for: arguments[2]) != nil else {
                FileHandle.standardError.write(Data("probe: \(arguments[2]) not found\n".utf8))
                return 1
            }
            let hit = Monotonic.now() - start
            let heap = heapInUse() - heapBefore, resident = Probe.residentBytes() - residentBefore
            print("\(heap) \(resident) \(opened) \(hit)")
            await store.close()
            return 0
        } catch {
            FileHandle.standardError.write(Data("probe failed: \(error)\n".utf8))
            return 1
        }
    }

    /// Bytes the allocator has handed out and not had back (small chunks and mmapped ones).
    private static func heapInUse() -> Int64 { Int64(sc_heap_in_use()) }
}
