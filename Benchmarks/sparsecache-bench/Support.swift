import CShim
import Foundation
import SparseCache

/// Monotonic time in nanoseconds (CLOCK_MONOTONIC): cheap enough to stamp every read.
enum Monotonic {
    @inline(__always)
    static func now() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }

    static func seconds(since start: UInt64) -> Double { Double(now() - start) / 1e9 }
}

extension BlockingExecutor {
    /// Blocking baseline work runs off the cooperative pool, through the engine's own bridge.
    static let shared = BlockingExecutor(label: "sparsecache-bench.blocking")
}

/// A failed syscall in a baseline.
struct SyscallError: Error, CustomStringConvertible {
    var operation: String
    var path: String
    var code: Int32

    var description: String { "\(operation) failed for '\(path)': \(String(cString: strerror(code))) (errno \(code))" }
}

/// Raw syscalls through the same shim the engine uses, with the loops every caller needs.
enum Raw {
    static func open(_ path: String, flags: Int32, mode: UInt32 = 0o644) throws -> Int32 {
        let fd = sc_open(path, flags, mode)
        if fd < 0 { throw SyscallError(operation: "open", path: path, code: errno) }
        return fd
    }

    static func check(_ result: Int32, _ operation: String, _ path: String) throws {
        if result < 0 { throw SyscallError(operation: operation, path: path, code: errno) }
    }

    /// pwrite until every byte is written.
    static func writeAll(_ fd: Int32, _ buffer: UnsafeRawBufferPointer, at offset: Int64, path: String) throws {
        var done = 0
        while done < buffer.count {
            let n = sc_pwrite(fd, buffer.baseAddress! + done, buffer.count - done, offset + Int64(done))
            if n < 0 {
                if errno == EINTR { continue }
                throw SyscallError(operation: "pwrite", path: path, code: errno)
            }
            done += n
        }
    }

    static func writeAll(_ fd: Int32, _ bytes: [UInt8], at offset: Int64, path: String) throws {
        try bytes.withUnsafeBytes { try writeAll(fd, $0, at: offset, path: path) }
    }

    /// pread until the buffer is full or the file ends; returns the bytes read.
    @discardableResult
    static func readAll(_ fd: Int32, _ buffer: UnsafeMutableRawBufferPointer, at offset: Int64, path: String) throws -> Int {
        var done = 0
        while done < buffer.count {
            let n = sc_pread(fd, buffer.baseAddress! + done, buffer.count - done, offset + Int64(done))
            if n < 0 {
                if errno == EINTR { continue }
                throw SyscallError(operation: "pread", path: path, code: errno)
            }
            if n == 0 { break }
            done += n
        }
        return done
    }

    static func fdatasync(_ fd: Int32, path: String) throws { try check(sc_fdatasync(fd), "fdatasync", path) }

    /// fsync of a directory: makes creates and renames in it durable.
    static func syncDirectory(_ path: String) throws {
        let fd = try open(path, flags: Int32(SC_O_RDONLY) | Int32(SC_O_DIRECTORY))
        defer { _ = sc_close(fd) }
        try check(sc_fsync(fd), "fsync", path)
    }

    /// Drops the file's clean pages from the page cache, so the next read goes to the disk.
    static func dropCache(_ path: String) throws {
        let fd = try open(path, flags: Int32(SC_O_RDONLY))
        defer { _ = sc_close(fd) }
        try check(sc_fdatasync(fd), "fdatasync", path)
        let result = posix_fadvise(fd, 0, 0, Int32(POSIX_FADV_DONTNEED))
        if result != 0 { throw SyscallError(operation: "posix_fadvise", path: path, code: result) }
    }

    /// Writes back every dirty page, then drops the kernel's clean caches: the page cache
    /// (the file system's own cached metadata with it), dentries and inodes (`sync; echo 3 >
    /// /proc/sys/vm/drop_caches`). Needs root: returns false without it. Blocking: call on an
    /// executor.
    static func dropKernelCaches() -> Bool {
        sync()
        let path = "/proc/sys/vm/drop_caches"
        guard let fd = try? open(path, flags: Int32(SC_O_WRONLY)) else { return false }
        defer { _ = sc_close(fd) }
        return (try? writeAll(fd, Array("3\n".utf8), at: 0, path: path)) != nil
    }

    static func fileSize(_ path: String) -> Int64 {
        var status = sc_stat()
        return sc_stat_path(path, &status) == 0 ? status.size : -1
    }
}

/// Process facts from /proc.
enum Probe {
    static var crc32cHardwareAvailable: Bool { sc_crc32c_hardware_available() == 1 }

    /// VmRSS of this process in bytes.
    static func residentBytes() -> Int64 {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") })
        else { return -1 }
        let kilobytes = line.split(separator: " ").compactMap { Int64($0) }.first ?? -1
        return kilobytes * 1024
    }

    /// User plus system CPU seconds this process has used (getrusage, microseconds).
    static func cpuSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
    }

    /// User plus system CPU seconds process `pid` has used (utime and stime of
    /// /proc/PID/stat, in clock ticks: 10 ms on Linux); nil when it cannot be read.
    static func cpuSeconds(of pid: Int32) -> Double? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let end = stat.lastIndex(of: ")")
        else { return nil }
        // After the command name: state, ppid, ... ; utime and stime are the 12th and 13th.
        let fields = stat[stat.index(after: end)...].split(separator: " ")
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// Bytes this process has passed to write-family syscalls (`wchar` of /proc/self/io).
    static func bytesWritten() -> Int64 {
        guard let io = try? String(contentsOfFile: "/proc/self/io", encoding: .utf8),
            let line = io.split(separator: "\n").first(where: { $0.hasPrefix("wchar:") })
        else { return -1 }
        return Int64(line.split(separator: " ").last ?? "") ?? -1
    }
}

/// Human-readable byte counts: 1 GiB, 64 KiB, 1 TiB.
func describeBytes(_ bytes: Int64) -> String {
    let units: [(Int64, String)] = [(1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")]
    for (size, name) in units where bytes >= size {
        let value = Double(bytes) / Double(size)
        return (value == value.rounded() ? String(Int64(value)) : Table.format(value, decimals: 1)) + " " + name
    }
    return "\(bytes) B"
}

/// sparsecache's proxy in this process, as `serve` runs it (the quick handler first), on a free
/// loopback port.
struct InProcessProxy {
    let store: SparseStore
    let cache: ProgressiveCache
    let server: HTTPServer

    init(directory: String, origin: URL, options: FillOptions = FillOptions()) async throws {
        store = try await SparseStore.open(directory: directory, options: StoreOptions(budget: .max))
        cache = ProgressiveCache(store: store, options: options)
        let proxy = CachingProxy(cache: cache, origin: origin)
        var serverOptions = HTTPServer.Options()
        serverOptions.port = 0
        server = try HTTPServer.start(options: serverOptions, quick: { proxy.answerQuickly($0, &$1) }) { request, body, response in
            try await proxy.handle(request, body, response)
        }
    }

    var base: String { "http://127.0.0.1:\(server.port)" }

    /// Waits for small objects still being written, and closes the resources kept open.
    func settle() async {
        await cache.closeIdle()
        await cache.settleAllSmall()
    }

    func stop() async {
        await ProxyScenario.shutdown(server, cache, store)
    }
}
