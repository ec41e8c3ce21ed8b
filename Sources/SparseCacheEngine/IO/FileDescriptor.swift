import CShim
import SparseCacheBase

#if canImport(Glibc)
import Glibc
#endif

/// An open file descriptor plus the path it was opened from (for error messages).
///
/// Methods mirror the shim's syscalls one to one; each retries EINTR and turns failures into
/// ``SparseCacheError`` carrying the operation, path, offset, length and errno. Blocking: call
/// these only from a ``BlockingExecutor`` queue, never from the cooperative pool.
package struct FileDescriptor: Sendable, Hashable {
    let rawValue: Int32
    let path: String

    package enum Access: Sendable {
        case readOnly, readWrite
    }

    /// Opens `path`; `create` adds O_CREAT, `exclusive` O_EXCL. Refuses directories.
    package static func open(
        _ path: String, access: Access, create: Bool = false, exclusive: Bool = false,
        permissions: UInt32 = 0o644
    ) throws -> FileDescriptor {
        var flags: Int32 = access == .readOnly ? Int32(SC_O_RDONLY) : Int32(SC_O_RDWR)
        if create { flags |= Int32(SC_O_CREAT) }
        if exclusive { flags |= Int32(SC_O_EXCL) }
        let fd: Int
        do {
            fd = try retryingSyscall("open", path: path) { Int(sc_open(path, flags, permissions)) }
        } catch let error as SparseCacheError where error.errno == EISDIR {
            // open(2) refuses a directory for writing before the status check below can run.
            throw SparseCacheError(
                .invalidArgument, operation: "open", path: path, errno: EISDIR, detail: "is a directory, expected a file")
        }
        let descriptor = FileDescriptor(rawValue: Int32(fd), path: path)
        let status = try descriptor.status()
        guard status.isRegular else {
            descriptor.close()
            throw SparseCacheError(
                .invalidArgument, operation: "open", path: path,
                detail: status.isDirectory ? "is a directory, expected a file" : "not a regular file")
        }
        return descriptor
    }

    /// Opens a directory read-only, for fsync after creating or renaming an entry in it.
    static func openDirectory(_ path: String) throws -> FileDescriptor {
        let flags = Int32(SC_O_RDONLY) | Int32(SC_O_DIRECTORY)
        let fd = try retryingSyscall("open directory", path: path) { Int(sc_open(path, flags, 0)) }
        return FileDescriptor(rawValue: Int32(fd), path: path)
    }

    package func close() {
        // Linux closes the descriptor even when close reports EINTR: never retry.
        _ = sc_close(rawValue)
    }

    /// Reads until `buffer` is full or end of file; returns the bytes read.
    package func read(fromAbsoluteOffset offset: Int64, into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        var done = 0
        while done < buffer.count {
            let n = try retryingSyscall("pread", path: path, offset: offset + Int64(done), length: buffer.count - done) {
                sc_pread(rawValue, buffer.baseAddress! + done, buffer.count - done, offset + Int64(done))
            }
            if n == 0 { break }
            done += n
        }
        return done
    }

    /// Whether every page of the range is in the page cache (cachestat(2), which starts no
    /// I/O); false where the kernel cannot tell.
    package func isCached(offset: Int64, length: Int) -> Bool {
        let pageSize = Int64(FileDescriptor.pageSize)
        let pages = (offset + Int64(length) + pageSize - 1) / pageSize - offset / pageSize
        return sc_cached_pages(rawValue, offset, Int64(length)) >= pages
    }

    static let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))

    /// Reads what the page cache holds, from `offset` until `buffer` is full, end of file, or
    /// the first byte that would have to come from the device; returns the bytes read.
    ///
    /// Never waits for the disk (preadv2 with RWF_NOWAIT), so unlike every other method here it
    /// may run on the cooperative pool. Returns 0 where the file system does not support it.
    /// Call it only after ``isCached(offset:length:)``: on pages that are not cached, the
    /// kernel may start readahead inside the call, and submitting that I/O can block.
    package func readCached(fromAbsoluteOffset offset: Int64, into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        var done = 0
        while done < buffer.count {
            let n = sc_pread_nowait(rawValue, buffer.baseAddress! + done, buffer.count - done, offset + Int64(done))
            if n > 0 {
                done += n
                continue
            }
            if n == 0 { break }
            switch errno {
            case EINTR: continue
            case EAGAIN, EOPNOTSUPP, EINVAL, ENOSYS: return done
            case let code:
                throw SparseCacheError(
                    .io, operation: "pread", path: path, offset: offset + Int64(done), length: Int64(buffer.count - done),
                    errno: code)
            }
        }
        return done
    }

    /// Asks the kernel to read the whole file into the page cache in the background
    /// (posix_fadvise WILLNEED), so reads of it later find it there. Advisory: failures are
    /// ignored.
    package func adviseWillNeed() {
        _ = sc_advise_will_need(rawValue)
    }

    /// Reads `count` bytes at `offset`, fewer only at end of file.
    package func read(fromAbsoluteOffset offset: Int64, count: Int) throws -> [UInt8] {
        var got = 0
        let bytes = try [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            got = try read(fromAbsoluteOffset: offset, into: UnsafeMutableRawBufferPointer(buffer))
            initialized = got
        }
        return bytes
    }

    /// Writes all of `buffer` at `offset`, looping over short writes.
    func write(toAbsoluteOffset offset: Int64, _ buffer: UnsafeRawBufferPointer) throws {
        var done = 0
        while done < buffer.count {
            let n = try retryingSyscall("pwrite", path: path, offset: offset + Int64(done), length: buffer.count - done) {
                sc_pwrite(rawValue, buffer.baseAddress! + done, buffer.count - done, offset + Int64(done))
            }
            if n == 0 {
                throw SparseCacheError(
                    .io, operation: "pwrite", path: path, offset: offset + Int64(done),
                    length: Int64(buffer.count - done), detail: "wrote 0 bytes")
            }
            done += n
        }
    }

    package func write(toAbsoluteOffset offset: Int64, _ bytes: [UInt8]) throws {
        try bytes.withUnsafeBytes { try write(toAbsoluteOffset: offset, $0) }
    }

    /// fdatasync(2). Not retried on EIO: after a failed sync the caller must not trust the pages.
    package func dataSync() throws {
        try markingSyncFailure {
            _ = try EngineMetrics.dataSyncSeconds.time { try retryingSyscall("fdatasync", path: path) { Int(sc_fdatasync(rawValue)) } }
        }
    }

    /// fsync(2), for directories and for metadata (size) changes.
    package func sync() throws {
        try markingSyncFailure { _ = try retryingSyscall("fsync", path: path) { Int(sc_fsync(rawValue)) } }
    }

    private func markingSyncFailure(_ call: () throws -> Void) throws {
        do {
            try call()
        } catch var error as SparseCacheError {
            error.isSyncFailure = true
            throw error
        }
    }

    package func truncate(to length: Int64) throws {
        _ = try retryingSyscall("ftruncate", path: path, offset: length) { Int(sc_ftruncate(rawValue, length)) }
    }

    /// Reserves blocks for the range (fallocate mode 0), growing the file if needed.
    func allocate(offset: Int64, length: Int64) throws {
        _ = try retryingSyscall("fallocate", path: path, offset: offset, length: Int(length)) {
            Int(sc_fallocate(rawValue, offset, length))
        }
    }

    /// Reserves blocks for the range without changing the file size or any byte (fallocate
    /// with FALLOC_FL_KEEP_SIZE): later writes there, past the end included, need no new blocks.
    func reserve(offset: Int64, length: Int64) throws {
        _ = try retryingSyscall("fallocate", path: path, offset: offset, length: Int(length)) {
            Int(sc_reserve(rawValue, offset, length))
        }
    }

    /// Frees the blocks of the range and keeps the file size (reads of it return zeros).
    func punchHole(offset: Int64, length: Int64) throws {
        _ = try retryingSyscall("punch hole", path: path, offset: offset, length: Int(length)) {
            Int(sc_punch_hole(rawValue, offset, length))
        }
    }

    /// The first offset at or after `offset` that holds data, or nil when only holes follow.
    func seekData(from offset: Int64) throws -> Int64? {
        let result = sc_seek_data(rawValue, offset)
        if result >= 0 { return result }
        if errno == ENXIO { return nil }
        throw SparseCacheError(.io, operation: "lseek SEEK_DATA", path: path, offset: offset, errno: errno)
    }

    /// The first hole at or after `offset` (end of file counts as a hole).
    func seekHole(from offset: Int64) throws -> Int64? {
        let result = sc_seek_hole(rawValue, offset)
        if result >= 0 { return result }
        if errno == ENXIO { return nil }
        throw SparseCacheError(.io, operation: "lseek SEEK_HOLE", path: path, offset: offset, errno: errno)
    }

    /// Takes an advisory lock without waiting; returns false when another open file holds it.
    func tryLock(exclusive: Bool) throws -> Bool {
        let operation = (exclusive ? Int32(SC_LOCK_EXCLUSIVE) : Int32(SC_LOCK_SHARED)) | Int32(SC_LOCK_NONBLOCKING)
        while true {
            if sc_flock(rawValue, operation) == 0 { return true }
            switch errno {
            case EINTR: continue
            case EWOULDBLOCK: return false
            case let code: throw SparseCacheError(.io, operation: "flock", path: path, errno: code)
            }
        }
    }

    /// Like ``tryLock(exclusive:)``, but tries again for up to `patience` before giving up.
    ///
    /// A lock this process just released can still be held for an instant by a child being
    /// spawned on another thread: between fork and exec the child shares every open file
    /// description, close-on-exec ones included. Giving up at once would report "locked by
    /// another process" for a file nobody else has open.
    package func tryLock(exclusive: Bool, patience: Duration) throws -> Bool {
        var waited = Duration.zero
        var pause = Duration.microseconds(200)
        while true {
            if try tryLock(exclusive: exclusive) { return true }
            if waited >= patience { return false }
            let (seconds, attoseconds) = pause.components
            usleep(UInt32(seconds * 1_000_000 + attoseconds / 1_000_000_000_000))
            waited += pause
            pause = min(pause * 2, .milliseconds(20))
        }
    }

    /// How long an open waits for a lock that may be held only by a spawning child.
    package static let lockPatience = Duration.milliseconds(100)

    /// Releases an advisory lock taken with ``tryLock(exclusive:)``.
    package func unlock() {
        _ = sc_flock(rawValue, Int32(SC_LOCK_UNLOCK))
    }

    package struct Status: Sendable {
        package var size: Int64
        package var allocatedBytes: Int64
        var isRegular: Bool
        package var isDirectory: Bool
    }

    package func status() throws -> Status {
        var raw = sc_stat()
        _ = try retryingSyscall("fstat", path: path) { Int(sc_fstat(rawValue, &raw)) }
        return Status(raw)
    }
}

extension FileDescriptor.Status {
    init(_ raw: sc_stat) {
        self.init(
            size: raw.size, allocatedBytes: raw.blocks512 * 512, isRegular: raw.is_regular == 1,
            isDirectory: raw.is_directory == 1)
    }
}

/// Runs a syscall that returns -1 with errno on failure, retrying EINTR, and maps errors.
///
/// The single place where EINTR is retried; every wrapper above goes through it.
@discardableResult
func retryingSyscall(
    _ operation: String, path: String?, offset: Int64? = nil, length: Int? = nil,
    _ call: () -> Int
) throws -> Int {
    while true {
        let result = call()
        if result >= 0 { return result }
        let code = errno
        if code == EINTR { continue }
        throw SparseCacheError(
            code == ENOENT ? .notFound : .io, operation: operation, path: path, offset: offset,
            length: length.map(Int64.init), errno: code)
    }
}
