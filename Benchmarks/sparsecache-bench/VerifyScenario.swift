import CShim
import SeededRandom
import SparseCache

/// Scenario 4: Verifier.verify against a raw sequential read with a CRC32C per segment, with
/// the pages cached and with them dropped first (posix_fadvise DONTNEED), then CRC32C alone.
enum VerifyScenario {
    static let number = 4
    static let name = "verify and CRC32C"

    static func run(_ context: BenchContext) async throws -> ScenarioResult {
        guard let resource = context.readResource else { throw BenchError("no read resource") }
        var result = ScenarioResult()
        let contenders = ["raw pread 8 MiB + sc_crc32c per segment", "Verifier.verify"]
        var hotRatio = 0.0
        for cold in [false, true] {
            let samples = try await interleaved(contenders: 2, repetitions: context.repetitions) { contender, _ in
                if cold { try Raw.dropCache(resource.path) }
                let start = Monotonic.now()
                let bytes: Int64
                if contender == 0 {
                    bytes = try await BlockingExecutor.shared.run { try rawVerify(resource) }
                } else {
                    let report = try await Verifier.verify(path: resource.path)
                    guard report.isClean, report.bytesChecked == resource.length else {
                        throw BenchError("verify found damage or checked \(report.bytesChecked) of \(resource.length) bytes")
                    }
                    bytes = report.bytesChecked
                }
                return Sample(value: Double(bytes) / Monotonic.seconds(since: start) / 1e6)
            }
            let workload = "\(describeBytes(resource.length)), \(cold ? "cold (pages dropped)" : "page cache hot")"
            var measurements = contenders.enumerated().map { index, contender in
                Measurement(scenario: number, scenarioName: name, workload: workload, contender: contender, unit: "MB/s", samples: samples[index])
            }
            for index in measurements.indices { measurements[index].compare(to: measurements[0]) }
            if !cold { hotRatio = measurements[1].ratio ?? 0 }
            result.measurements += measurements
        }
        result.targets.append(TargetCheck(
            name: "verify vs raw read + CRC32C (page cache hot)", target: ">= 0.9x",
            measured: Table.format(hotRatio, decimals: 2) + "x", met: hotRatio >= 0.9))
        result.measurements += try await crcThroughput(context)
        return result
    }

    /// Reads the data file front to back in 8 MiB preads and checksums each segment: the
    /// least work verify can do.
    private static func rawVerify(_ resource: ReadResource) throws -> Int64 {
        let fd = try Raw.open(resource.path, flags: Int32(SC_O_RDONLY))
        defer { _ = sc_close(fd) }
        let batch = 8 << 20
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: batch, alignment: 4096)
        defer { buffer.deallocate() }
        var offset: Int64 = 0
        var combined: UInt32 = 0
        while offset < resource.length {
            let count = Int(min(Int64(batch), resource.length - offset))
            let got = try Raw.readAll(fd, UnsafeMutableRawBufferPointer(rebasing: buffer[0..<count]), at: offset, path: resource.path)
            guard got == count else { throw BenchError("short read at \(offset)") }
            var segment = 0
            while segment < count {
                let size = min(resource.segmentSize, count - segment)
                combined ^= sc_crc32c(0, buffer.baseAddress! + segment, size)
                segment += size
            }
            offset += Int64(count)
        }
        // Keep the checksums observable so no optimizer can drop them.
        if combined == 0x5eed_5eed { print("") }
        return offset
    }

    /// CRC32C GB/s over a 1 MiB buffer (it stays in the L2/L3 cache, so this is the
    /// instruction's speed, not memory's): the hardware path, the software fallback, and the
    /// dispatching sc_crc32c the engine calls.
    private static func crcThroughput(_ context: BenchContext) async throws -> [Measurement] {
        var random = SplitMix64(seed: 5)
        let buffer = random.bytes(1 << 20)
        let hardware = Probe.crc32cHardwareAvailable
        var contenders: [(String, Int, @Sendable (UInt32, UnsafeRawPointer?, Int) -> UInt32)] = []
        if hardware { contenders.append(("sc_crc32c_hardware (SSE4.2)", context.sizes.crcHardwareBytes, { sc_crc32c_hardware($0, $1, $2) })) }
        contenders.append(("sc_crc32c_software (slicing-by-8)", context.sizes.crcSoftwareBytes, { sc_crc32c_software($0, $1, $2) }))
        contenders.append(("sc_crc32c (what the engine calls)", context.sizes.crcHardwareBytes, { sc_crc32c($0, $1, $2) }))
        let samples = try await interleaved(contenders: contenders.count, repetitions: context.repetitions) { index, _ in
            let (_, total, function) = contenders[index]
            return try await BlockingExecutor.shared.run {
                var crc: UInt32 = 0
                let start = Monotonic.now()
                buffer.withUnsafeBytes { raw in
                    for _ in 0..<(total / raw.count) { crc = function(crc, raw.baseAddress, raw.count) }
                }
                let seconds = Monotonic.seconds(since: start)
                if crc == 0x5eed_5eed { print("") }
                return Sample(value: Double(total) / seconds / 1e9)
            }
        }
        var measurements = contenders.enumerated().map { index, contender in
            Measurement(
                scenario: number, scenarioName: name, workload: "CRC32C, 1 MiB buffer, one stream", contender: contender.0,
                unit: "GB/s", samples: samples[index])
        }
        for index in measurements.indices { measurements[index].compare(to: measurements[0]) }
        return measurements
    }
}
