import SparseCacheEngine

#if canImport(Glibc)
    import Glibc
#endif

/// Checks a whole cache directory after a crash: every resource with ``Verifier`` (index
/// checksums, every present segment's CRC32C, the data file), the catalog against the
/// indexes, and the files no resource accounts for.
///
/// Locking: a plain check takes no lock and changes nothing, so it can run beside the
/// directory's owner (a `serve`): each resource is checked as its committed index stood when
/// it was opened, exactly as single-file `verify` does beside a writer. It only probes the
/// directory's lock to say whether an owner runs, because then a lagging catalog and
/// temporary files are normal. `repair` takes the directory's lock for the whole run (the
/// store's owner must be stopped: `.locked` otherwise), repairs damaged resources, removes
/// resources whose index is unusable and the leftovers of crashes, and rewrites the catalog
/// from the indexes.
package enum StoreVerifier {
    /// Progress: the resource being checked (from 1), how many there are, and its bytes
    /// checked so far of its total.
    package typealias Progress = @Sendable (_ resource: Int, _ resources: Int, _ checked: Int64, _ total: Int64) -> Void

    /// Verifies (and with `repair`, repairs) the cache directory `directory`.
    ///
    /// - Throws: `.notFound` when `directory` is not a cache directory; `.locked` when
    ///   repairing a directory another process owns; `.io`.
    package static func verify(directory: String, repair: Bool = false, progress: Progress? = nil) async throws -> StoreVerifyReport {
        let io = BlockingExecutor(label: "sparsecache.verify-store")
        let (lock, inUse) = try await io.run { try takeOrProbeLock(directory: directory, repair: repair) }
        defer { lock?.close() }
        var report = StoreVerifyReport(directory: directory, inUse: inUse)
        let resources = directory + "/resources"
        let (files, catalog, catalogExists) = try await io.run { () -> (ResourceFiles, [StoreEntry]?, Bool) in
            let catalogExists = try FileSystem.exists(directory + "/" + StoreCatalog.fileName)
            return (try ResourceFiles(directory: directory), try StoreCatalog.load(directory: directory), catalogExists)
        }
        if catalog == nil { report.catalogProblem = catalogExists ? "the catalog is damaged" : "there is no catalog" }
        let resourceNames = files.resources

        for (number, name) in resourceNames.enumerated() {
            let path = resources + "/" + name
            let resource = try await check(
                path: path, name: name, repair: repair, io: io,
                progress: progress.map { progress in { @Sendable in progress(number + 1, resourceNames.count, $0, $1) } })
            report.resources.append(resource)
        }

        // The small-object logs: every record's checksums (a damaged stretch is never served;
        // a torn tail is a crash's unsynced writes, cut at the next open).
        let objects = directory + "/" + SparseStore.objectsDirectoryName
        report.smallObjectLogs = try await io.run { try SmallObjectStore.checkFiles(directory: objects) }.map { check in
            var problems: [String] = []
            if let header = check.headerProblem { problems.append(header + "; the next open deletes the file") }
            if check.damagedBytes > 0 { problems.append("\(check.damagedBytes) damaged bytes between records (never served)") }
            if check.tornTailBytes > 0 { problems.append("torn tail of \(check.tornTailBytes) bytes (cut at the next open)") }
            return .init(
                name: SparseStore.objectsDirectoryName + "/" + check.name, size: check.size, records: check.records,
                status: check.headerProblem != nil ? "unusable" : check.damagedBytes > 0 ? "damaged" : "clean",
                problem: problems.isEmpty ? nil : problems.joined(separator: "; "))
        }

        report.foreignFiles = files.foreignFiles
        for (names, kind) in [
            (files.temporaryIndexes, StoreVerifyReport.temporaryFile), (files.indexesWithoutData, StoreVerifyReport.indexWithoutData),
            (files.dataWithoutIndex, StoreVerifyReport.dataWithoutIndex),
        ] {
            report.leftovers += names.map { .init(path: "resources/" + $0, kind: kind, allocatedBytes: 0) }
        }
        if try await io.run({ try FileSystem.exists(directory + "/" + StoreCatalog.fileName + ".tmp") }) {
            report.leftovers.append(.init(path: StoreCatalog.fileName + ".tmp", kind: StoreVerifyReport.temporaryFile, allocatedBytes: 0))
        }
        for index in report.leftovers.indices {
            let path = directory + "/" + report.leftovers[index].path
            report.leftovers[index].allocatedBytes = try await io.run { try FileSystem.status(ofPath: path)?.allocatedBytes ?? 0 }
        }

        report.catalogDifferences = differences(catalog: catalog ?? [], resources: report.resources)

        guard repair else { return report }
        let leftovers = report.leftovers
        report.leftovers = try await io.run { try removeLeftovers(leftovers, directory: directory) }
        if report.catalogProblem != nil || !report.catalogDifferences.isEmpty || report.resources.contains(where: { $0.removed })
            || report.resources.contains(where: { $0.report?.repaired == true })
        {
            let resources = report.resources
            try await io.run { try rewriteCatalog(resources: resources, catalog: catalog ?? [], directory: directory) }
            report.catalogRewritten = true
        }
        report.repaired = true
        return report
    }

    /// With `repair`: the directory's lock, held until the end (`.locked` when another
    /// process has it). Without: no lock, and whether another process holds it.
    private static func takeOrProbeLock(directory: String, repair: Bool) throws -> (FileDescriptor?, Bool) {
        try SparseStore.requireCacheDirectory(directory, operation: "verify cache directory")
        let lockPath = directory + "/lock"
        if repair {
            let lock = try FileDescriptor.open(lockPath, access: .readWrite, create: true)
            guard try lock.tryLock(exclusive: true, patience: FileDescriptor.lockPatience) else {
                lock.close()
                throw SparseCacheError(
                    .locked, operation: "repair cache directory", path: directory,
                    detail: "cache directory is in use by another process (a running serve or fetch?): stop it first, or verify without --repair")
            }
            return (lock, false)
        }
        guard try FileSystem.exists(lockPath) else { return (nil, false) }
        let probe = try FileDescriptor.open(lockPath, access: .readOnly)
        defer { probe.close() }
        // A shared lock conflicts only with an owner's exclusive one; released at once, so a
        // `serve` starting now is not refused because of this check.
        let free = try probe.tryLock(exclusive: false, patience: .zero)
        if free { probe.unlock() }
        return (nil, !free)
    }

    private static func check(
        path: String, name: String, repair: Bool, io: BlockingExecutor, progress: Verifier.Progress?
    ) async throws -> StoreVerifyReport.Resource {
        var resource = StoreVerifyReport.Resource(name: name, presentBytes: 0, allocatedBytes: 0, status: "clean")
        do {
            let stored = try await io.run { try SparseFile.storedSummary(path: path) }
            resource.key = stored.metadata.key
            resource.length = stored.length
            resource.presentBytes = stored.presentBytes
            let report = try await Verifier.verify(path: path, repair: repair, progress: progress)
            resource.report = report
            if !report.isClean { resource.status = "damaged" }
            if report.repaired {
                resource.presentBytes = try await io.run { try SparseFile.storedSummary(path: path).presentBytes }
            }
            if resource.key == nil {
                resource.status = "unusable"
                resource.problem = "the index names no key: the store cannot find this resource"
            }
        } catch let error as SparseCacheError where error.code == .corruptIndex || error.code == .unsupportedVersion {
            resource.status = "unusable"
            resource.problem = "\(error)"
        } catch let error as SparseCacheError where error.code == .notFound {
            resource.status = "vanished"
            resource.problem = "removed while being checked (evicted by the directory's owner?)"
            return resource
        }
        if repair, resource.status == "unusable" {
            // As the store's own start-up does: the index first, so a crash in between leaves
            // a data file that claims nothing.
            try await io.run {
                try FileSystem.unlink(SparseFile.indexPath(for: path))
                try FileSystem.syncParentDirectory(of: path)
                try FileSystem.unlink(path)
                try FileSystem.syncParentDirectory(of: path)
            }
            resource.removed = true
            return resource
        }
        resource.allocatedBytes = try await io.run { try SparseStore.allocatedBytes(path) }
        return resource
    }

    /// Where the catalog disagrees with the indexes, one line per difference.
    private static func differences(catalog: [StoreEntry], resources: [StoreVerifyReport.Resource]) -> [String] {
        var lines: [String] = []
        let checked = Dictionary(resources.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        var listed = Set<String>()
        func bytes(_ value: Int64?) -> String { value.map { "\($0)" } ?? "unknown" }
        for entry in catalog {
            listed.insert(entry.name)
            guard let resource = checked[entry.name], resource.status != "vanished" else {
                lines.append("\(entry.name): in the catalog (key '\(entry.key)') but its files are gone")
                continue
            }
            guard resource.status != "unusable" else { continue }
            if let key = resource.key, key != entry.key {
                lines.append("\(entry.name): key '\(entry.key)' in the catalog, '\(key)' in the index")
                continue
            }
            if entry.length != resource.length {
                lines.append("\(entry.name): length \(bytes(entry.length)) in the catalog, \(bytes(resource.length)) in the index")
            }
            if entry.presentBytes != resource.presentBytes {
                lines.append("\(entry.name): \(entry.presentBytes) bytes present in the catalog, \(resource.presentBytes) in the index")
            }
        }
        for resource in resources where !listed.contains(resource.name) && resource.status != "vanished" && resource.status != "unusable" {
            lines.append("\(resource.name): not in the catalog")
        }
        return lines
    }

    /// Deletes the leftovers (none of them claims a present byte), then syncs both
    /// directories so the deletions are durable.
    private static func removeLeftovers(
        _ leftovers: [StoreVerifyReport.Leftover], directory: String
    ) throws -> [StoreVerifyReport.Leftover] {
        guard !leftovers.isEmpty else { return leftovers }
        var removed = leftovers
        for index in removed.indices {
            do {
                try FileSystem.unlink(directory + "/" + removed[index].path)
            } catch let error as SparseCacheError where error.errno == ENOENT {}
            removed[index].removed = true
        }
        try FileSystem.syncParentDirectory(of: directory + "/resources/x")
        try FileSystem.syncParentDirectory(of: directory + "/x")
        return removed
    }

    /// The catalog rebuilt from the indexes, keeping the access times and pinned prefixes
    /// the old one held.
    private static func rewriteCatalog(resources: [StoreVerifyReport.Resource], catalog: [StoreEntry], directory: String) throws {
        let old = Dictionary(catalog.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        var entries: [StoreEntry] = []
        for resource in resources where !resource.removed && resource.status != "vanished" && resource.status != "unusable" {
            guard let key = resource.key else { continue }
            let known = old[resource.name].flatMap { $0.key == key ? $0 : nil }
            entries.append(
                StoreEntry(
                    key: key, name: resource.name, length: resource.length, presentBytes: resource.presentBytes,
                    allocatedBytes: resource.allocatedBytes, lastAccess: known?.lastAccess ?? 0,
                    pinnedPrefix: known?.pinnedPrefix ?? 0, isOpen: false))
        }
        try StoreCatalog.save(entries, directory: directory)
    }
}
