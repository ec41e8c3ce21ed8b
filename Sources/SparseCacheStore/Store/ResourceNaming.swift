import SparseCacheEngine

/// How keys become file names: 16 hex digits of the key's FNV-1a hash, then "-1", "-2", ... when
/// another key already has that name. The full key is stored in the resource's metadata and
/// checked, so a collision costs a suffix, never a mix-up.
enum ResourceNaming {
    static func baseName(for key: String) -> String {
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        for byte in key.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01B3
        }
        let digits = String(hash, radix: 16)
        return String(repeating: "0", count: 16 - digits.count) + digits
    }

    static func candidate(for key: String, attempt: Int) -> String {
        attempt == 0 ? baseName(for: key) : baseName(for: key) + "-\(attempt)"
    }

    /// Whether `name` is a data file name this store creates.
    static func isResourceName(_ name: String) -> Bool {
        let parts = name.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard let hex = parts.first, hex.count == 16, hex.allSatisfy({ $0.isHexDigit && !$0.isUppercase }) else { return false }
        if parts.count == 2 { return !parts[1].isEmpty && parts[1].allSatisfy(\.isASCII) && Int(parts[1]) != nil }
        return true
    }
}
