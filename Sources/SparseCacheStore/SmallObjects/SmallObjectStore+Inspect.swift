import SparseCacheEngine

/// Reading a small-object directory without opening it (no lock, nothing changed on disk):
/// for `sparsecache ls` and `verify --cache-dir`.
extension SmallObjectStore {
    /// What one log file holds, checked record by record.
    public struct FileCheck: Sendable, Equatable {
        public var name: String
        public var size: Int64
        public var records = 0
        /// Bytes between valid records that hold none: damaged records, never served.
        public var damagedBytes: Int64 = 0
        /// Bytes after the last valid record: a torn tail (unsynced writes cut by a crash),
        /// cut at the next open.
        public var tornTailBytes: Int64 = 0
        /// Why the file header is unusable (the next open deletes the file), if it is.
        public var headerProblem: String?
    }

    /// Every log file of `directory`, checked (an empty list when there is no such directory).
    public static func checkFiles(directory: String) throws -> [FileCheck] {
        try readFiles(directory: directory).checks
    }

    /// The live objects of `directory` as store entries (last access 0: it is not kept on disk).
    public static func inspectEntries(directory: String) throws -> [StoreEntry] {
        let scans = try readFiles(directory: directory).scans
        return replay(scans).index.map { key, location in
            StoreEntry(
                key: key,
                name: SparseStore.objectsDirectoryName + "/" + SmallObjectFormat.fileName(id: location.file) + "@\(location.offset)",
                length: Int64(location.bodyCount), presentBytes: Int64(location.bodyCount), allocatedBytes: Int64(location.count),
                lastAccess: 0, pinnedPrefix: 0, isOpen: false)
        }
    }

    private static func readFiles(directory: String) throws -> (checks: [FileCheck], scans: [SmallObjectLogScan]) {
        guard try FileSystem.status(ofPath: directory)?.isDirectory == true else { return ([], []) }
        let ids = try FileSystem.listDirectory(directory).compactMap(SmallObjectFormat.fileID(fromName:)).sorted()
        var checks: [FileCheck] = []
        var scans: [SmallObjectLogScan] = []
        for id in ids {
            let name = SmallObjectFormat.fileName(id: id)
            let descriptor: FileDescriptor
            do {
                descriptor = try FileDescriptor.open(directory + "/" + name, access: .readOnly)
            } catch let error as SparseCacheError where error.code == .notFound {
                continue  // compacted since the listing
            }
            defer { descriptor.close() }
            let size = try descriptor.status().size
            let bytes = try descriptor.read(fromAbsoluteOffset: 0, count: Int(size))
            var check = FileCheck(name: name, size: size)
            switch SmallObjectLogScan.scan(bytes) {
            case .success(let scan) where scan.id == id:
                check.records = scan.records.count
                check.damagedBytes = scan.damaged.reduce(0) { $0 + Int64($1.count) }
                check.tornTailBytes = size - scan.validEnd
                scans.append(scan)
            case .success:
                check.headerProblem = "the header names another file"
            case .failure(let damage):
                check.headerProblem = "unusable header (\(damage))"
            }
            checks.append(check)
        }
        return (checks, scans)
    }
}
