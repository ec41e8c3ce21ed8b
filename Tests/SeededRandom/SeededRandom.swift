/// SplitMix64: a small, fast generator fully determined by its seed, so a workload (a test's
/// random writes, a benchmark's data, the stress writer's actions) replays exactly, with a
/// failing test's seed. One definition for the tests, the benchmark suite and the stress writer.
public struct SplitMix64: RandomNumberGenerator, Sendable {
    @usableFromInline var state: UInt64

    public init(seed: UInt64) { state = seed }

    @inlinable
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// Moves past the next `count` values at once, as `count` calls of ``next()`` would (the
    /// state advances by a constant per value), so one step of a long seeded run replays
    /// without the steps before it.
    public mutating func skip(_ count: UInt64) {
        state &+= count &* 0x9E37_79B9_7F4A_7C15
    }

    /// `count` pseudo-random bytes, each word little-endian first (incompressible, so no layer
    /// can shortcut them).
    @inlinable
    public mutating func bytes(_ count: Int) -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            var index = 0
            while index < count {
                var word = next()
                for _ in 0..<Swift.min(8, count - index) {
                    buffer[index] = UInt8(truncatingIfNeeded: word)
                    word >>= 8
                    index += 1
                }
            }
            initialized = count
        }
    }
}

/// The byte every writer puts at `offset`: a pure function of the offset (and a salt per
/// resource), so any read that succeeds can be checked without remembering what was written.
/// The stress writer writes these bytes and the crash tests check them: one definition keeps
/// the two in step.
@inlinable @inline(__always)
public func sourceByte(at offset: Int64, salt: UInt64 = 0) -> UInt8 {
    var z = UInt64(bitPattern: offset) &+ salt &* 0x9E37_79B9_7F4A_7C15
    z = (z ^ (z >> 33)) &* 0xFF51_AFD7_ED55_8CCD
    z = (z ^ (z >> 33)) &* 0xC4CE_B9FE_1A85_EC53
    return UInt8(truncatingIfNeeded: z ^ (z >> 33))
}

/// ``sourceByte(at:salt:)`` for every offset of `range`.
@inlinable
public func sourceBytes(_ range: Range<Int64>, salt: UInt64 = 0) -> [UInt8] {
    var bytes = [UInt8](repeating: 0, count: Int(range.count))
    for index in bytes.indices { bytes[index] = sourceByte(at: range.lowerBound + Int64(index), salt: salt) }
    return bytes
}

/// The body the small-object stress writer stores for `key` at `version`: 1 byte to 12 KiB,
/// every byte determined by the three, so the kill tests check any object that survives.
public func smallObjectBody(key: String, version: Int, salt: UInt64 = 0) -> [UInt8] {
    var hash: UInt64 = salt ^ 0xCBF2_9CE4_8422_2325
    for byte in key.utf8 { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01B3 }
    var random = SplitMix64(seed: hash ^ UInt64(bitPattern: Int64(version)))
    return random.bytes(1 + Int(random.next() % 12_288))
}
