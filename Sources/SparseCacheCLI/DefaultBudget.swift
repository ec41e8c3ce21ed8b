import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The cache budget `serve` takes when none is given: a quarter of the free space of the cache
/// directory's file system at start.
///
/// Unlimited, a stream of distinct URLs (a crawler, a hostile client in URL mode) fills the disk.
/// Caches that size themselves do the same kind of thing: nginx's `proxy_cache_path` has
/// `min_free`, Squid and Traffic Server take a fixed size (Squid's `cache_dir` example is
/// 100 MB, Traffic Server's default storage 256 MB), Varnish a fixed 100 MB of memory. A share
/// of the free space suits a tool run on machines of every size; the operator sets `--max-size`
/// for anything else.
enum DefaultBudget {
    /// The share of the free space taken.
    static let fraction: Int64 = 4
    /// Never less than this (a nearly full disk still caches a little).
    static let minimum: Int64 = 64 << 20

    /// A quarter of the free bytes where `directory` is (or would be created), at least
    /// ``minimum``; nil when the file system cannot be asked.
    static func compute(directory: String) -> Int64? {
        var path = directory
        // The directory may not exist yet: ask about the nearest ancestor that does.
        while !FileManager.default.fileExists(atPath: path), path != "/", !path.isEmpty {
            path = (path as NSString).deletingLastPathComponent
            if path.isEmpty { path = "." }
        }
        var status = statvfs()
        guard statvfs(path, &status) == 0 else { return nil }
        let free = Int64(status.f_bavail) * Int64(status.f_frsize)
        return max(minimum, free / fraction)
    }
}
