import CShim
import Dispatch
import Foundation
import SeededRandom
import SparseCache
import Synchronization

/// Scenario 3: reads of a resource whose pages are in the page cache, by 1, 8 and 64
/// concurrent readers: SparseFile.read (DispatchIO plus a CRC32C check of every segment
/// read) against raw pread from as many threads as readers, each into a reused buffer, and
/// the same preads plus a CRC32C per 64 KiB segment (the least a verified read can cost).
enum CachedReadScenario {
    static let number = 3
    static let name = "cached reads"

    enum Pattern: CaseIterable {
        /// Each reader reads its own contiguous slice front to back in 1 MiB reads.
        case sequential
        /// 64 KiB reads at segment-aligned offsets drawn from a seeded generator.
        case random

        var readLength: Int {
            switch self {
            case .sequential: 1 << 20
            case .random: 64 << 10
            }
        }

        var label: String {
            switch self {
            case .sequential: "sequential 1 MiB"
            case .random: "random 64 KiB"
            }
        }

        /// The offsets each of `readers` readers reads, in order.
        func jobs(readers: Int, resource: ReadResource, randomReads: Int) -> [[Int64]] {
            switch self {
            case .sequential:
                let reads = Int(resource.length / Int64(readLength))
                return (0..<readers).map { reader in
                    let range = (reads * reader / readers)..<(reads * (reader + 1) / readers)
                    return range.map { Int64($0) * Int64(readLength) }
                }
            case .random:
                var random = SplitMix64(seed: 4)
                let slots = Int(resource.length / Int64(readLength))
                var jobs = Array(repeating: [Int64](), count: readers)
                for read in 0..<randomReads {
                    jobs[read % readers].append(Int64(Int.random(in: 0..<slots, using: &random)) * Int64(readLength))
                }
                return jobs
            }
        }
    }

    static let readerCounts = [1, 8, 64]
    static let contenders = [
        "raw pread (1 thread per reader)", "raw pread + CRC32C per segment", "SparseFile.read", "SparseFile.read, verifyReads off",
    ]

    static func run(_ context: BenchContext) async throws -> ScenarioResult {
        guard let resource = context.readResource else { throw BenchError("no read resource") }
        let fd = try Raw.open(resource.path, flags: Int32(SC_O_RDONLY))
        defer { _ = sc_close(fd) }
        // Bring every page into the cache first.
        try await rawReaders(fd: fd, path: resource.path, jobs: Pattern.sequential.jobs(readers: 1, resource: resource, randomReads: 0), length: 1 << 20)
        let verified = try await resource.open(verifyReads: true)
        let unverified = try await resource.open(verifyReads: false)
        var result = ScenarioResult()
        var ratios: [Pattern: [String]] = [:]
        // Issue 18 judges verified reads against the least a verified read can cost.
        var floorRatios: [Double] = []
        for pattern in Pattern.allCases {
            for readers in readerCounts {
                let jobs = pattern.jobs(readers: readers, resource: resource, randomReads: context.sizes.randomReads)
                let length = pattern.readLength
                let samples = try await interleaved(contenders: contenders.count, repetitions: context.repetitions) { contender, _ in
                    switch contender {
                    case 0: try await rawReaders(fd: fd, path: resource.path, jobs: jobs, length: length)
                    case 1: try await rawReaders(fd: fd, path: resource.path, jobs: jobs, length: length, checksumSegment: resource.segmentSize)
                    case 2: try await sparseReaders(verified, jobs: jobs, length: length)
                    default: try await sparseReaders(unverified, jobs: jobs, length: length)
                    }
                }
                let reads = jobs.reduce(0) { $0 + $1.count }
                let workload = "\(pattern.label), \(readers) reader\(readers == 1 ? "" : "s") (\(reads) reads)"
                var measurements = contenders.enumerated().map { index, contender in
                    Measurement(
                        scenario: number, scenarioName: name, workload: workload, contender: contender, unit: "MB/s",
                        samples: samples[index])
                }
                for index in measurements.indices { measurements[index].compare(to: measurements[0]) }
                let ratio = measurements[2].ratio ?? 0
                ratios[pattern, default: []].append(Table.format(ratio, decimals: 2))
                if pattern == .random, measurements[1].median > 0 { floorRatios.append(measurements[2].median / measurements[1].median) }
                result.measurements += measurements
            }
        }
        try await verified.close()
        try await unverified.close()
        for pattern in Pattern.allCases {
            let measured = (ratios[pattern] ?? []).joined(separator: " / ") + "x"
            result.targets.append(TargetCheck(
                name: "cached reads vs raw, \(pattern.label) (1 / 8 / 64 readers)", target: ">= 0.9x", measured: measured,
                met: (ratios[pattern] ?? []).allSatisfy { (Double($0) ?? 0) >= 0.9 }))
        }
        result.targets.append(TargetCheck(
            name: "cached random 64 KiB reads vs raw pread + CRC32C (1 / 8 / 64 readers)", target: ">= 0.9x",
            measured: floorRatios.map { Table.format($0, decimals: 2) }.joined(separator: " / ") + "x",
            met: floorRatios.count == readerCounts.count && floorRatios.allSatisfy { $0 >= 0.9 }, issue: 18))
        return result
    }

    /// One thread per reader, each pread-ing its offsets into its own reused buffer. The
    /// clock starts when every thread is created and waiting.
    @discardableResult
    static func rawReaders(fd: Int32, path: String, jobs: [[Int64]], length: Int, checksumSegment: Int? = nil) async throws -> Sample {
        try await BlockingExecutor.shared.run {
            let collector = LatencyCollector()
            let ready = DispatchGroup()
            let done = DispatchGroup()
            let gate = DispatchSemaphore(value: 0)
            for job in jobs {
                ready.enter()
                done.enter()
                let thread = Thread {
                    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: length, alignment: 4096)
                    defer { buffer.deallocate() }
                    var latencies: [UInt64] = []
                    latencies.reserveCapacity(job.count)
                    ready.leave()
                    gate.wait()
                    for offset in job {
                        let start = Monotonic.now()
                        let got = (try? Raw.readAll(fd, buffer, at: offset, path: path)) ?? -1
                        if let segment = checksumSegment {
                            var position = 0
                            var combined: UInt32 = 0
                            while position < length {
                                combined ^= sc_crc32c(0, buffer.baseAddress! + position, min(segment, length - position))
                                position += segment
                            }
                            if combined == 0x5eed_5eed { collector.fail("unlikely checksum") }
                        }
                        latencies.append(Monotonic.now() - start)
                        if got != length { collector.fail("pread at \(offset) returned \(got) of \(length) bytes") }
                    }
                    collector.add(latencies)
                    done.leave()
                }
                thread.start()
            }
            ready.wait()
            let start = Monotonic.now()
            for _ in jobs { gate.signal() }
            done.wait()
            let seconds = Monotonic.seconds(since: start)
            let (latencies, failure) = collector.take()
            if let failure { throw BenchError(failure) }
            return Sample(value: Double(latencies.count * length) / seconds / 1e6, latencies: latencies)
        }
    }

    /// One task per reader, each awaiting SparseFile.read for its offsets in turn.
    static func sparseReaders(_ file: SparseFile, jobs: [[Int64]], length: Int) async throws -> Sample {
        let start = Monotonic.now()
        let latencies = try await withThrowingTaskGroup(of: [UInt64].self) { group in
            for job in jobs {
                group.addTask {
                    var latencies: [UInt64] = []
                    latencies.reserveCapacity(job.count)
                    for offset in job {
                        let begin = Monotonic.now()
                        let bytes = try await file.read(offset: offset, length: length)
                        latencies.append(Monotonic.now() - begin)
                        guard bytes.count == length else { throw BenchError("SparseFile.read returned \(bytes.count) of \(length) bytes") }
                    }
                    return latencies
                }
            }
            var all: [UInt64] = []
            for try await part in group { all += part }
            return all
        }
        let seconds = Monotonic.seconds(since: start)
        return Sample(value: Double(latencies.count * length) / seconds / 1e6, latencies: latencies)
    }
}

/// Gathers per-thread latencies and the first failure.
final class LatencyCollector: Sendable {
    private let state = Mutex<(latencies: [UInt64], failure: String?)>(([], nil))

    func add(_ latencies: [UInt64]) { state.withLock { $0.latencies += latencies } }

    func fail(_ message: String) { state.withLock { if $0.failure == nil { $0.failure = message } } }

    func take() -> ([UInt64], String?) { state.withLock { ($0.latencies, $0.failure) } }
}
