import CShim

#if canImport(Glibc)
import Glibc
#endif

/// Path-level operations: the few the engine needs beyond an open descriptor.
enum FileSystem {
    static func status(ofPath path: String) throws -> FileDescriptor.Status? {
        var raw = sc_stat()
        if sc_stat_path(path, &raw) == 0 { return FileDescriptor.Status(raw) }
        if errno == ENOENT { return nil }
        throw SparseCacheError(.io, operation: "stat", path: path, errno: errno)
    }

    static func exists(_ path: String) throws -> Bool { try status(ofPath: path) != nil }

    static func rename(_ from: String, to: String) throws {
        try retryingSyscall("rename", path: from) { Int(sc_rename(from, to)) }
    }

    static func unlink(_ path: String) throws {
        try retryingSyscall("unlink", path: path) { Int(sc_unlink(path)) }
    }

    /// fsync of the directory holding `path`: makes a create or rename in it durable.
    static func syncParentDirectory(of path: String) throws {
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
