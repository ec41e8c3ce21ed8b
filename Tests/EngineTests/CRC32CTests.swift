import CShim
import SeededRandom
import Testing

@_spi(Locking) @testable import SparseCacheEngine
import TestSupport

/// The three CRC32C entry points of the shim, with a name for messages. The hardware path is
/// only listed when the CPU has it.
private let implementations: [(name: String, crc: @Sendable (UInt32, UnsafeRawBufferPointer) -> UInt32)] = {
    var list: [(name: String, crc: @Sendable (UInt32, UnsafeRawBufferPointer) -> UInt32)] = [
        ("sc_crc32c", { sc_crc32c($0, $1.baseAddress, $1.count) }),
        ("sc_crc32c_software", { sc_crc32c_software($0, $1.baseAddress, $1.count) }),
    ]
    if sc_crc32c_hardware_available() == 1 {
        list.append(("sc_crc32c_hardware", { sc_crc32c_hardware($0, $1.baseAddress, $1.count) }))
    }
    return list
}()

private func crc(_ implementation: (UInt32, UnsafeRawBufferPointer) -> UInt32, _ bytes: [UInt8], seed: UInt32 = 0) -> UInt32 {
    bytes.withUnsafeBytes { implementation(seed, $0) }
}

@Suite("CRC-32C")
struct CRC32CTests {
    @Test("check value of \"123456789\" is 0xE3069283 on every path")
    func checkValue() {
        let input = Array("123456789".utf8)
        for implementation in implementations {
            #expect(crc(implementation.crc, input) == 0xE306_9283, "\(implementation.name)")
        }
        #expect(crc32c(input) == 0xE306_9283, "Swift wrapper")
    }

    @Test("RFC 3720 (iSCSI) test vectors")
    func iscsiVectors() {
        let vectors: [(String, [UInt8], UInt32)] = [
            ("32 zero bytes", [UInt8](repeating: 0, count: 32), 0x8A91_36AA),
            ("32 0xFF bytes", [UInt8](repeating: 0xFF, count: 32), 0x62A8_AB43),
            ("0...31 ascending", (0..<32).map { UInt8($0) }, 0x46DD_794E),
            ("31...0 descending", (0..<32).map { UInt8(31 - $0) }, 0x113F_DB5C),
        ]
        for (label, bytes, expected) in vectors {
            for implementation in implementations {
                #expect(crc(implementation.crc, bytes) == expected, "\(implementation.name): \(label)")
            }
        }
    }

    @Test("empty input leaves the running value unchanged")
    func emptyInput() {
        for implementation in implementations {
            #expect(crc(implementation.crc, []) == 0, "\(implementation.name)")
            #expect(crc(implementation.crc, [], seed: 0xDEAD_BEEF) == 0xDEAD_BEEF, "\(implementation.name)")
        }
    }

    @Test("the hardware path is available on x86-64 machines with SSE4.2")
    func hardwareAvailabilityIsConsistent() {
        // sc_crc32c must agree with whichever path it chose, on something long enough to use
        // the wide loops.
        var generator = SplitMix64(seed: 7)
        let bytes = generator.bytes(10_000)
        let chosen = crc(implementations[0].crc, bytes)
        let software = crc(implementations[1].crc, bytes)
        #expect(chosen == software)
        if sc_crc32c_hardware_available() == 1 {
            #expect(bytes.withUnsafeBytes { sc_crc32c_hardware(0, $0.baseAddress, $0.count) } == software)
        }
    }

    @Test("all paths agree on random buffers of many lengths and misalignments")
    func pathsAgree() {
        let seed = testSeed(0xC4C3_2C01)
        var generator = SplitMix64(seed: seed)
        // Every length up to 300 covers the head/tail byte loops and the 8-byte loop; lengths
        // around the three-stream block sizes (3 x 256 and 3 x 8192 bytes) cover each block
        // loop entered zero, one and more times; a few large ones cover long runs.
        let offsets: [Int] = [-9, -8, -1, 0, 1, 8, 13]
        let blockSizes: [Int] = [768, 1536, 24_576, 49_152]
        let blocks: [Int] = blockSizes.flatMap { size in offsets.map { size + $0 } }
        let large: [Int] = [511, 512, 513, 4095, 4096, 4097, 65_536, 65_536 + 7, 1 << 20]
        let lengths: [Int] = Array(0...300) + blocks + large
        let pool = generator.bytes((1 << 20) + 64)
        pool.withUnsafeBytes { raw in
            for length in lengths {
                for _ in 0..<3 {
                    let misalignment = Int.random(in: 0..<16, using: &generator)
                    let slice = UnsafeRawBufferPointer(rebasing: raw[misalignment..<(misalignment + length)])
                    let seedValue = Bool.random(using: &generator) ? 0 : UInt32.random(in: .min ... .max, using: &generator)
                    let expected = sc_crc32c_software(seedValue, slice.baseAddress, slice.count)
                    for implementation in implementations {
                        let got = implementation.crc(seedValue, slice)
                        #expect(
                            got == expected,
                            "seed \(seed): \(implementation.name) length \(length) misalignment \(misalignment) start value \(seedValue)")
                    }
                }
            }
        }
    }

    @Test("chaining: crc(a + b) == crc(b, starting from crc(a))")
    func chaining() {
        let seed = testSeed(0xC4A1_0001)
        var generator = SplitMix64(seed: seed)
        for _ in 0..<200 {
            let total = Int.random(in: 0...2048, using: &generator)
            let bytes = generator.bytes(total)
            let split = Int.random(in: 0...total, using: &generator)
            let a = Array(bytes[..<split])
            let b = Array(bytes[split...])
            for implementation in implementations {
                let whole = crc(implementation.crc, bytes)
                let chained = crc(implementation.crc, b, seed: crc(implementation.crc, a))
                #expect(chained == whole, "seed \(seed): \(implementation.name) total \(total) split \(split)")
            }
            #expect(crc32c(b, seed: crc32c(a)) == crc32c(bytes), "seed \(seed): Swift wrapper")
        }
    }

    @Test("every single-bit change changes the checksum")
    func detectsSingleBitErrors() {
        var generator = SplitMix64(seed: 99)
        let bytes = generator.bytes(512)
        let original = crc32c(bytes)
        var changed = bytes
        for bit in 0..<(bytes.count * 8) {
            changed[bit / 8] ^= 1 << UInt8(bit % 8)
            #expect(crc32c(changed) != original, "bit \(bit)")
            changed[bit / 8] ^= 1 << UInt8(bit % 8)
        }
    }
}
