import Foundation

/// The scratch directory on the real disk where every scenario writes, removed at the end.
struct Scratch: Sendable {
    let path: String

    /// Creates a fresh directory under `parent`, or under /var/tmp (falling back to
    /// ./.bench-tmp when /var/tmp is a tmpfs: a RAM disk would flatter every fsync).
    static func create(parent: String?) throws -> Scratch {
        var base = parent ?? "/var/tmp"
        if parent == nil, isTmpfs(base) {
            base = FileManager.default.currentDirectoryPath + "/.bench-tmp"
        }
        try FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true)
        var template = Array((base + "/sparsecache-bench.XXXXXX").utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw SyscallError(operation: "mkdtemp", path: base, code: errno)
        }
        return Scratch(path: String(cString: made))
    }

    static func isTmpfs(_ path: String) -> Bool {
        let resolved = (try? FileManager.default.destinationOfSymbolicLink(atPath: path)) ?? path
        return mountInfo(of: resolved).fileSystem == "tmpfs"
    }

    /// A new empty subdirectory for one run.
    func directory(_ name: String) throws -> String {
        let sub = path + "/" + name
        try? FileManager.default.removeItem(atPath: sub)
        try FileManager.default.createDirectory(atPath: sub, withIntermediateDirectories: true)
        return sub
    }

    func remove(_ subpath: String) {
        try? FileManager.default.removeItem(atPath: subpath)
    }

    func removeAll() {
        try? FileManager.default.removeItem(atPath: path)
    }

    /// The file system type and device of the mount holding `path`, from /proc/self/mounts
    /// (the longest mount point that prefixes the path).
    static func mountInfo(of path: String) -> (fileSystem: String, device: String) {
        guard let mounts = try? String(contentsOfFile: "/proc/self/mounts", encoding: .utf8) else { return ("unknown", "unknown") }
        var best: (point: String, fileSystem: String, device: String)?
        for line in mounts.split(separator: "\n") {
            let fields = line.split(separator: " ").map(String.init)
            guard fields.count >= 3 else { continue }
            let point = fields[1]
            let matches = path == point || path.hasPrefix(point == "/" ? "/" : point + "/")
            if matches, point.count > (best?.point.count ?? -1) { best = (point, fields[2], fields[0]) }
        }
        return (best?.fileSystem ?? "unknown", best?.device ?? "unknown")
    }
}
