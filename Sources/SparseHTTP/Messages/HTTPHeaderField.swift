/// One header field of a request or a response: the name as sent, the value without the
/// whitespace around it.
public struct HTTPHeaderField: Sendable, Equatable {
    public var name: String
    public var value: String

    public init(name: String, value: String) {
        self.name = name
        self.value = value
    }

    /// Whether the field's name is `name`, compared without regard to case (RFC 9110,
    /// section 5.1).
    /// Compares byte by byte, folding ASCII capitals on both sides: no lowercased copy per
    /// lookup (header lookups run several times per proxied request; `lowercased()` showed in
    /// its profile, and again as the callers' lowercasing of the name asked for).
    @inlinable
    package func hasName(_ name: String) -> Bool {
        let mine = self.name.utf8, theirs = name.utf8
        guard mine.count == theirs.count else { return false }
        @inline(__always) func folded(_ byte: UInt8) -> UInt8 { byte >= 0x41 && byte <= 0x5A ? byte | 0x20 : byte }
        let fast = mine.withContiguousStorageIfAvailable { left in
            theirs.withContiguousStorageIfAvailable { right in
                for index in 0..<left.count where folded(left[index]) != folded(right[index]) { return false }
                return true
            }
        }
        if let fast, let result = fast { return result }
        return mine.elementsEqual(theirs) { folded($0) == folded($1) }
    }
}
