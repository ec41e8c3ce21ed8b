import CShim

#if canImport(Glibc)
import Glibc
#endif

/// Path-level operations: the few the engine needs beyond an open descriptor.
package enum FileSystem {
    package static func status(ofPath path: String) throws -> FileDescriptor.Status? {
        var raw = sc_stat()
        if sc_stat_path(path, &raw) == 0 { return FileDescriptor.Status(raw) }
        if errno == ENOENT { return nil }
        throw SparseCacheError(.io, operation: "stat", path: path, errno: errno)
    }

    package static func exists(_ path: String) throws -> Bool { try status(ofPath: path) != nil }

    package static func rename(_ from: String, to: String) throws {
        try retryingSyscall("rename", path: from) { Int(sc_rename(from, to)) }
    }

    package static func unlink(_ path: String) throws {
        try retryingSyscall("unlink", path: path) { Int(sc_unlink(path)) }
    }

    /// fsync of the directory holding `path`: makes a create or rename in it durable.
    package static func syncParentDirectory(of path: String) throws {
        let directory = parentDirectory(of: path)
        let fd = try FileDescriptor.openDirectory(directory)
        defer { fd.close() }
        try fd.sync()
    }

    static func parentDirectory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        if slash == path.startIndex { return "/" }
        return String(path[..<slash])
    }

    static func fileName(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return path }
        return String(path[path.index(after: slash)...])
    }
}

extension FileSystem {
    /// The names in a directory, without "." and "..".
    package static func listDirectory(_ path: String) throws -> [String] {
        guard let directory = opendir(path) else {
            throw SparseCacheError(errno == ENOENT ? .notFound : .io, operation: "opendir", path: path, errno: errno)
        }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    /// Creates a directory (and its parents) when missing, each made durable in its parent;
    /// fails when the path is a file.
    package static func createDirectory(_ path: String) throws {
        if let status = try status(ofPath: path) {
            guard status.isDirectory else {
                throw SparseCacheError(.invalidArgument, operation: "create directory", path: path, detail: "exists and is not a directory")
            }
            // Found: synced all the same, in case the sync after its creation failed.
            try syncParentDirectory(of: path)
            return
        }
        let parent = parentDirectory(of: path)
        if parent != path, parent != ".", parent != "/" { try createDirectory(parent) }
        if mkdir(path, 0o755) != 0, errno != EEXIST {
            throw SparseCacheError(errno == ENOENT ? .notFound : .io, operation: "mkdir", path: path, errno: errno)
        }
        // A new directory's entry is durable only once its parent is synced (DURABILITY.md,
        // rule 6): files created in it could otherwise vanish with it in a power cut.
        try syncParentDirectory(of: path)
    }

    /// Bytes available to an unprivileged writer on the file system holding `path`.
    package static func availableBytes(at path: String) throws -> Int64 {
        var info = statvfs()
        guard statvfs(path, &info) == 0 else {
            throw SparseCacheError(.io, operation: "statvfs", path: path, errno: errno)
        }
        return Int64(info.f_bavail) * Int64(info.f_frsize)
    }
}
