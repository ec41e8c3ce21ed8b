import CShim

/// Appends little-endian fields to a byte buffer.
package struct ByteWriter {
    package private(set) var bytes: [UInt8]

    package init(capacity: Int = 0) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    package mutating func append<T: FixedWidthInteger>(_ value: T) {
        withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
    }

    package mutating func append(bytes other: some Sequence<UInt8>) {
        bytes.append(contentsOf: other)
    }

    /// A u32 byte count followed by the UTF-8 bytes.
    package mutating func append(string: String) {
        append(UInt32(string.utf8.count))
        bytes.append(contentsOf: string.utf8)
    }

    mutating func pad(toMultipleOf alignment: Int) {
        let remainder = bytes.count % alignment
        if remainder != 0 { bytes.append(contentsOf: repeatElement(0, count: alignment - remainder)) }
    }

    /// Overwrites a u32 already written at `offset`.
    mutating func set(_ value: UInt32, at offset: Int) {
        withUnsafeBytes(of: value.littleEndian) { raw in
            for i in 0..<4 { bytes[offset + i] = raw[i] }
        }
    }
}

/// Reads little-endian fields from a byte buffer, throwing (never trapping) when the buffer ends
/// early; `failure` builds the error so each caller names what it was reading.
package struct ByteReader {
    let bytes: ArraySlice<UInt8>
    private(set) var position: Int
    let failure: @Sendable (String) -> SparseCacheError

    package init(_ bytes: ArraySlice<UInt8>, failure: @escaping @Sendable (String) -> SparseCacheError) {
        self.bytes = bytes
        self.position = bytes.startIndex
        self.failure = failure
    }

    package var remaining: Int { bytes.endIndex - position }

    package mutating func read<T: FixedWidthInteger>(_: T.Type, _ field: String) throws -> T {
        let size = MemoryLayout<T>.size
        guard remaining >= size else { throw failure("truncated at \(field)") }
        var value: T = 0
        withUnsafeMutableBytes(of: &value) { raw in
            for i in 0..<size { raw[i] = bytes[position + i] }
        }
        position += size
        return T(littleEndian: value)
    }

    mutating func readBytes(_ count: Int, _ field: String) throws -> ArraySlice<UInt8> {
        guard count >= 0, remaining >= count else { throw failure("truncated at \(field)") }
        defer { position += count }
        return bytes[position..<(position + count)]
    }

    package mutating func readString(_ field: String, limit: Int) throws -> String {
        let count = Int(try read(UInt32.self, "\(field) length"))
        guard count <= limit else { throw failure("\(field) is \(count) bytes, over the limit of \(limit)") }
        let raw = try readBytes(count, field)
        guard let text = String(validating: raw, as: UTF8.self) else { throw failure("\(field) is not valid UTF-8") }
        return text
    }
}

/// CRC-32C of a byte sequence, continuing from `seed` (0 to start).
@inline(__always)
package func crc32c(_ bytes: some BorrowedBytes, seed: UInt32 = 0) -> UInt32 {
    bytes.withUnsafeBytes { sc_crc32c(seed, $0.baseAddress, $0.count) }
}

/// Whether every byte is zero (padding checks in the decoders).
@inline(__always)
package func allZero(_ bytes: some BorrowedBytes) -> Bool {
    bytes.withUnsafeBytes { sc_all_zero($0.baseAddress, $0.count) == 1 }
}

/// Anything whose bytes can be borrowed contiguously.
package protocol BorrowedBytes {
    func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R
}

extension Array: BorrowedBytes where Element == UInt8 {}
extension ArraySlice: BorrowedBytes where Element == UInt8 {}
extension UnsafeRawBufferPointer: BorrowedBytes {
    package func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R { try body(self) }
}
