#if canImport(Glibc)
    import Glibc
#endif

extension FileDescriptor {
    /// Whether the flock(2) lock that kept ``tryLock(exclusive:)`` from succeeding is held by
    /// this process, through another descriptor of the same file: a second open in one process
    /// conflicts with the first as another process's would, and the error should say which.
    /// Reads /proc/locks (each flock lock with its owner's pid and the file's device and
    /// inode); false when it cannot tell.
    package func lockIsHeldByThisProcess() -> Bool {
        // Plain fstat(2), not the shim's: a diagnostic must not count among the calls that
        // fault-injection rules see.
        var status = stat()
        guard Glibc.fstat(rawValue, &status) == 0 else { return false }
        let device = UInt64(status.st_dev), inode = UInt64(status.st_ino)
        // glibc's gnu_dev_major / gnu_dev_minor; /proc/locks prints them in hex.
        let major = ((device >> 8) & 0xfff) | ((device >> 32) & ~UInt64(0xfff))
        let minor = (device & 0xff) | ((device >> 12) & ~UInt64(0xff))
        let pid = String(getpid())
        guard let text = Self.readSmallFile("/proc/locks") else { return false }
        for line in text.split(separator: "\n") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            // "1: FLOCK  ADVISORY  WRITE 4242 08:01:1234567 0 EOF"; waiters have "->" after the number.
            guard fields.count >= 6, fields[1] == "FLOCK", fields[4] == pid else { continue }
            let file = fields[5].split(separator: ":")
            guard file.count == 3, UInt64(file[0], radix: 16) == major, UInt64(file[1], radix: 16) == minor,
                UInt64(file[2]) == inode
            else { continue }
            return true
        }
        return false
    }

    /// A small text file of /proc, read whole (its size shows as 0, so read to the end).
    /// Plain open(2) and read(2), not the shim's, for the same reason.
    private static func readSmallFile(_ path: String) -> String? {
        let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { _ = Glibc.close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while bytes.count < 16 << 20 {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { break }
            bytes += chunk[0..<count]
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
