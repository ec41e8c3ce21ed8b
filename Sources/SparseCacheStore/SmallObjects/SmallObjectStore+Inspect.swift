import SparseCacheEngine

/// Reading a small-object directory without opening it (no lock, nothing changed on disk):
/// for `sparsecache ls` and `verify --cache-dir`.
extension SmallObjectStore {
    /// What one log file holds, checked record by record.
    struct FileCheck: Sendable, Equatable {
        package var name: String
        package var size: Int64
        package var records = 0
        /// Bytes between valid records that hold none: damaged records, never served.
        package var damagedBytes: Int64 = 0
        /// Bytes after the last valid record: a torn tail (unsynced writes cut by a crash),
        /// cut at the next open.
        package var tornTailBytes: Int64 = 0
        /// Why the file header is unusable (the next open deletes the file), if it is.
        var headerProblem: String?
    }

    /// Every log file of `directory`, checked (an empty list when there is no such directory).
    static func checkFiles(directory: String) throws -> [FileCheck] {
        try readFiles(directory: directory).checks
    }

    /// The live objects of `directory` as store entries (last access 0: it is not kept on disk).
    package static func inspectEntries(directory: String) throws -> [StoreEntry] {
        var entries: [StoreEntry] = []
        try forEachEntry(directory: directory) { entries.append($0) }
        return entries
    }

    /// Calls `body` with each live object of `directory` as a store entry (last access 0),
    /// in no particular order, without building a list of them: for `ls` over a million
    /// objects. Sealed logs are read through their hints (no bodies); the others whole.
    package static func forEachEntry(directory: String, _ body: (StoreEntry) throws -> Void) throws {
        for (key, location) in try replayFiles(directory: directory).index {
            try body(entry(key: key, location: location))
        }
    }

    /// A live object as a store entry: its name is `objects/<log file>@<offset>`, its length and
    /// present bytes the body's, its allocated bytes the record's.
    static func entry(key: String, location: Location) -> StoreEntry {
        StoreEntry(
            key: key, name: SparseStore.objectsDirectoryName + "/" + SmallObjectFormat.fileName(id: location.file) + "@\(location.offset)",
            length: Int64(location.bodyCount), presentBytes: Int64(location.bodyCount), allocatedBytes: Int64(location.count),
            lastAccess: location.lastAccess, pinnedPrefix: 0, isOpen: false)
    }

    /// Replays the logs of `directory` read-only, through the hints where they are usable.
    static func replayFiles(directory: String) throws -> SmallObjectReplay {
        var replay = SmallObjectReplay()
        guard try FileSystem.status(ofPath: directory)?.isDirectory == true else { return replay }
        let ids = try FileSystem.listDirectory(directory).compactMap(SmallObjectFormat.fileID(fromName:)).sorted()
        for id in ids {
            let descriptor: FileDescriptor
            do {
                descriptor = try FileDescriptor.open(directory + "/" + SmallObjectFormat.fileName(id: id), access: .readOnly)
            } catch let error as SparseCacheError where error.code == .notFound {
                continue  // compacted since the listing
            }
            defer { descriptor.close() }
            let size = try descriptor.status().size
            if let header = try? descriptor.read(fromAbsoluteOffset: 0, count: SmallObjectFormat.headerSize),
                case .success(let found) = SmallObjectFormat.decodeFileHeader(header), found.id == id,
                let scan = SmallObjectHint.load(directory: directory, id: id, salt: found.salt, size: size)
            {
                replay.add(scan)
                continue
            }
            let bytes = try descriptor.read(fromAbsoluteOffset: 0, count: Int(size))
            if case .success(let scan) = SmallObjectLogScan.scan(bytes), scan.id == id { replay.add(scan) }
        }
        return replay
    }

    private static func readFiles(directory: String) throws -> (checks: [FileCheck], scans: [SmallObjectLogScan]) {
        // verify reads every log whole whatever its hint says: it is the check of the bytes.
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
                check.damagedBytes = scan.damagedBytes
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

    /// The live objects now, shared copy-on-write with the store (no copy unless the store
    /// changes while it is held): a listing made entry by entry outside the actor.
    struct EntrySnapshot: Sendable, Sequence {
        let index: [String: Location]

        package var count: Int { index.count }

        package func makeIterator() -> Iterator { Iterator(base: index.makeIterator()) }

        package struct Iterator: IteratorProtocol {
            var base: Dictionary<String, Location>.Iterator

            package mutating func next() -> StoreEntry? {
                base.next().map { SmallObjectStore.entry(key: $0.key, location: $0.value) }
            }
        }
    }

    /// See ``EntrySnapshot``.
    func entrySnapshot() -> EntrySnapshot { EntrySnapshot(index: index) }
}
