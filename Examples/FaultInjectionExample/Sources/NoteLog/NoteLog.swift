import SparseCache

/// A log of notes of at most 4 KiB, one per segment of a sparse resource. `append` returns
/// once the note is durable; after a crash, `open` finds every note an append returned for.
public final class NoteLog: Sendable {
    public static let noteSize = 4096
    let file: SparseFile
    public let capacity: Int

    private init(file: SparseFile, capacity: Int) {
        self.file = file
        self.capacity = capacity
    }

    /// Opens (or creates) the log at `path` with room for `capacity` notes.
    public static func open(_ path: String, capacity: Int = 64) async throws -> NoteLog {
        var options = SparseFileOptions()
        options.segmentSize = noteSize
        options.length = Int64(capacity * noteSize)
        options.commitPolicy = .manual
        return NoteLog(file: try await SparseFile.open(path, options: options), capacity: capacity)
    }

    /// Writes note `index` and commits it.
    public func append(_ text: String, at index: Int) async throws {
        var bytes = Array(text.utf8.prefix(Self.noteSize - 2))
        bytes = [UInt8(bytes.count >> 8), UInt8(bytes.count & 0xff)] + bytes
        bytes += [UInt8](repeating: 0, count: Self.noteSize - bytes.count)
        _ = try await file.write(bytes, at: Int64(index * Self.noteSize))
        try await file.commit()
    }

    /// The notes present, by index: only committed notes whose bytes match their checksum (a
    /// damaged one is left out).
    public func notes() async throws -> [Int: String] {
        var result: [Int: String] = [:]
        for run in await file.presentSegments() {
            for index in run {
                let bytes: [UInt8]
                do {
                    bytes = try await file.read(offset: Int64(index * Self.noteSize), length: Self.noteSize)
                } catch let error as SparseCacheError where error.code == .corruptData {
                    continue
                }
                let count = Int(bytes[0]) << 8 | Int(bytes[1])
                result[index] = String(decoding: bytes[2..<(2 + count)], as: UTF8.self)
            }
        }
        return result
    }

    public func close() async throws { try await file.close() }
}
