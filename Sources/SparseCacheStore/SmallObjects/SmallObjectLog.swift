import SparseCacheEngine

/// One open log file of a ``SmallObjectStore``. A reader takes a reference before it reads
/// outside the store's actor, so a compaction that drops the file meanwhile cannot close the
/// descriptor under the read (the number could name another file by then): the descriptor
/// closes when the last reference goes.
final class SmallObjectLog: Sendable {
    let id: UInt32
    let salt: UInt32
    let path: String
    let descriptor: FileDescriptor

    init(id: UInt32, salt: UInt32, path: String, descriptor: FileDescriptor) {
        self.id = id
        self.salt = salt
        self.path = path
        self.descriptor = descriptor
    }

    deinit {
        descriptor.close()
    }

    /// Reads `count` bytes at `offset`: from the page cache on the calling task when every
    /// page is there (never waits for the disk), otherwise on `io`.
    func read(offset: Int64, count: Int, io: BlockingExecutor) async throws -> [UInt8] {
        let descriptor = self.descriptor
        if descriptor.isCached(offset: offset, length: count) {
            var got = 0
            let bytes = try [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
                got = try descriptor.readCached(fromAbsoluteOffset: offset, into: UnsafeMutableRawBufferPointer(buffer))
                initialized = got
            }
            if got == count { return bytes }
        }
        return try await io.run { try descriptor.read(fromAbsoluteOffset: offset, count: count) }
    }
}
