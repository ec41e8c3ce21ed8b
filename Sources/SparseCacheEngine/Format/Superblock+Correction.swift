extension Superblock {
    /// A superblock slot with exactly one flipped bit, put right: the slot and where the bit
    /// was, or nil when the damage is anything else.
    ///
    /// A CRC locates a single-bit error. CRC32C is affine: for messages of one length,
    /// crc(m ⊕ e) = crc(m) ⊕ crc(e) ⊕ crc(0), so the stored and the computed checksum of a slot
    /// with bit p flipped differ by a syndrome that depends on p alone. The 32,736 syndromes of
    /// the 4,092 checked bytes are distinct (CRC32C's Hamming distance is at least 4 at this
    /// length), so one table lookup names the bit. A flip in the stored checksum itself leaves
    /// a syndrome of one set bit. The corrected slot must then pass every check of
    /// ``decode(_:)``, and the checkpoint it names must match its own checksum when opened, so
    /// random damage is practically never "corrected" into a state (two independent 32-bit
    /// checks).
    ///
    /// Without this, one flipped bit anywhere in the live copy sent recovery to the other copy,
    /// an older state: committed segments were silently lost.
    static func correctingOneBit(_ bytes: ArraySlice<UInt8>) -> (block: Superblock, byte: Int)? {
        guard bytes.count == IndexFormat.sectorSize else { return nil }
        let checked = bytes.dropLast(4)
        let stored = bytes.suffix(4).withUnsafeBytes { $0.loadUnaligned(as: UInt32.self) }.littleEndian
        let syndrome = crc32c(checked) ^ stored
        guard syndrome != 0 else { return nil }
        var repaired = Array(bytes)
        let byte: Int
        if syndrome.nonzeroBitCount == 1 {
            // The stored checksum took the flip; the bytes it covers are intact.
            byte = IndexFormat.sectorSize - 4 + syndrome.trailingZeroBitCount / 8
            repaired[byte] ^= UInt8(truncatingIfNeeded: syndrome >> UInt32(syndrome.trailingZeroBitCount / 8 * 8))
        } else {
            guard let bit = syndromeTable[syndrome] else { return nil }
            byte = bit / 8
            repaired[byte] ^= 1 << UInt8(bit % 8)
        }
        guard case .success(let block) = decode(repaired[...]) else { return nil }
        return (block, byte)
    }

    /// Syndrome -> bit position, over the 4,092 bytes a superblock checksum covers. Built on
    /// first use (about 33,000 CRCs of 4 KiB, a few milliseconds).
    private static let syndromeTable: [UInt32: Int] = {
        let count = IndexFormat.sectorSize - 4
        var message = [UInt8](repeating: 0, count: count)
        let zero = crc32c(message)
        var table: [UInt32: Int] = [:]
        table.reserveCapacity(count * 8)
        for bit in 0..<(count * 8) {
            message[bit / 8] = 1 << UInt8(bit % 8)
            table[crc32c(message) ^ zero] = bit
            message[bit / 8] = 0
        }
        return table
    }()
}
