import SparseCacheEngine

/// One log file of a ``SmallObjectStore``: its identity and where it is. Its descriptor comes
/// from the store's ``SmallObjectLogDescriptors`` (opened on demand, at most a few held), and
/// an operation keeps the ``OpenLogFile`` it took until it is done.
final class SmallObjectLog: Sendable {
    let id: UInt32
    let salt: UInt32
    let path: String
    let descriptors: SmallObjectLogDescriptors

    init(id: UInt32, salt: UInt32, path: String, descriptors: SmallObjectLogDescriptors) {
        self.id = id
        self.salt = salt
        self.path = path
        self.descriptors = descriptors
    }

    /// The log's descriptor, opened when not held. Blocking: call on an executor.
    func file() throws -> OpenLogFile {
        try descriptors.file(id: id, path: path)
    }

    /// Reads `count` bytes at `offset`: from the page cache on the calling task when the
    /// descriptor is held and every page is there (never waits for the disk or open(2)),
    /// otherwise on `io`.
    func read(offset: Int64, count: Int, io: BlockingExecutor) async throws -> [UInt8] {
        if let file = descriptors.cached(id), file.descriptor.isCached(offset: offset, length: count) {
            var got = 0
            let bytes = try [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
                got = try file.descriptor.readCached(fromAbsoluteOffset: offset, into: UnsafeMutableRawBufferPointer(buffer))
                initialized = got
            }
            if got == count { return bytes }
        }
        return try await io.run { try self.file().descriptor.read(fromAbsoluteOffset: offset, count: count) }
    }
}
