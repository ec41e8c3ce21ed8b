@_spi(Locking) import SparseCacheEngine

/// A resource opened through a ``SparseStore``. While any handle to it is unreleased the
/// resource is pinned: eviction never deletes it or its files.
///
/// Write and read through the handle so the store can account disk space and recency; the
/// ``file`` is there for queries (present ranges, length, metadata).
public final class ResourceHandle: Sendable {
    public let key: String
    public let file: SparseFile
    let store: SparseStore
    private let released = Lock(false)

    init(key: String, file: SparseFile, store: SparseStore) {
        self.key = key
        self.file = file
        self.store = store
    }

    /// Writes through to the resource (see ``SparseFile/write(_:at:)``) and accounts the space.
    @discardableResult
    public func write(_ bytes: [UInt8], at offset: Int64) async throws -> WriteResult {
        try await write(bytes, at: offset, applyingCommitPolicy: true)
    }

    /// Writes any contiguous bytes (`Data`, an `UnsafeRawBufferPointer`, an `ArraySlice`);
    /// see ``SparseFile/write(_:at:)``. A `[UInt8]` is not copied; other bytes are copied once.
    @discardableResult
    nonisolated(nonsending) public func write<Bytes: Collection<UInt8>>(_ bytes: Bytes, at offset: Int64) async throws -> WriteResult {
        let array = bytes as? [UInt8] ?? (bytes.withContiguousStorageIfAvailable { Array($0) } ?? Array(bytes))
        return try await write(array, at: offset, applyingCommitPolicy: true)
    }

    /// Makes everything written through the handle so far present (readable), durably: the
    /// data is fdatasync'ed, then the index that names it is committed and synced (see
    /// ``SparseFile/commit()``). The store's ``StoreOptions/commitPolicy`` also commits on its
    /// own (by default every 8 MiB or second), and the last ``release()`` commits; call this
    /// when the bytes must be readable, or survive a crash, now.
    ///
    /// - Throws: `.needsReopen` when a sync failed: the segments since the last good sync are
    ///   not claimed. `.io` for other write errors (the change stays pending for the next
    ///   commit); `.closed`.
    public func commit() async throws {
        try await file.commit()
    }

    /// See ``SparseFile/write(_:at:applyingCommitPolicy:)``.
    @discardableResult
    package func write(_ bytes: [UInt8], at offset: Int64, applyingCommitPolicy: Bool) async throws -> WriteResult {
        let result = try await file.write(bytes, at: offset, applyingCommitPolicy: applyingCommitPolicy)
        await store.noteWrite(key: key, result: result)
        return result
    }

    /// Reads through the resource (see ``SparseFile/read(offset:length:)``) and marks the
    /// segments recently used.
    public func read(offset: Int64, length: Int) async throws -> [UInt8] {
        let bytes = try await file.read(offset: offset, length: length)
        await store.noteRead(key: key, range: offset..<(offset + Int64(length)))
        return bytes
    }

    /// See ``SparseFile/readAvailable(from:maxLength:)``.
    public func readAvailable(from offset: Int64, maxLength: Int) async throws -> [UInt8] {
        let bytes = try await file.readAvailable(from: offset, maxLength: maxLength)
        await store.noteRead(key: key, range: offset..<(offset + Int64(bytes.count)))
        return bytes
    }

    /// Marks the resource recently used, for reads without the handle (a ``CommittedView`` of
    /// the file). Its segments' own recency, which eviction inside a resource larger than the
    /// budget uses, is left as the handle's reads set it.
    package func noteUse() async {
        await store.touch(key)
    }

    /// ``noteUse()`` for reads of `ranges` made without the handle: the segments count as read
    /// (their recency, and a use under ``EvictionPolicy/sfifo``).
    package func noteUse(reading ranges: [Range<Int64>]) async {
        guard !ranges.isEmpty else { return await store.touch(key) }
        for range in ranges { await store.noteRead(key: key, range: range) }
    }

    /// Unpins the resource. The last release commits and closes it, after which it may be
    /// evicted. Calling it again does nothing.
    public func release() async throws {
        let first = released.withLock { released in
            defer { released = true }
            return !released
        }
        if first { try await store.release(key: key) }
    }
}
